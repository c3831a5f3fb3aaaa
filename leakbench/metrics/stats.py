"""One definition of every statistic over per-image values (PSNR, SSIM, LPIPS, feature error).

A value is missing (NaN: a failed image, or a metric not computed), infinite (+∞: the PSNR of a
bit-identical reconstruction) or finite. Everywhere in leakbench — cell summaries, `cells.parquet`,
reports and the leaderboard — the statistics of a set of values mean the same thing:

* `mean`, `std` (population, ddof 0): over the finite values only;
* `median`, `min`, `max`: over the present values, ∞ included (a batch of bit-identical images has
  median ∞);
* `n_inf`: how many values are infinite (so a mean over finite values never hides them);
* `n_missing`: how many are missing.

A statistic with no value to be taken over is NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Stats:
    """Statistics of one set of values (see the module docstring for what each one is over)."""

    n: int
    n_missing: int
    n_inf: int
    mean: float
    std: float
    median: float
    min: float
    max: float


def describe(values: np.ndarray | list[float]) -> Stats:
    """The statistics of `values` (NaN missing, ±∞ infinite)."""
    arr = np.asarray(values, dtype=float).ravel()
    present = arr[~np.isnan(arr)]
    finite = present[np.isfinite(present)]
    nan = math.nan
    return Stats(n=int(arr.size), n_missing=int(arr.size - present.size), n_inf=int(np.isinf(present).sum()),
                 mean=float(finite.mean()) if finite.size else nan, std=float(finite.std()) if finite.size else nan,
                 median=float(np.median(present)) if present.size else nan,
                 min=float(present.min()) if present.size else nan, max=float(present.max()) if present.size else nan)


def or_none(value: float) -> float | None:
    """NaN → None (for JSON summaries); every other value as it is."""
    return None if math.isnan(value) else value
