"""How much a group of records leaks, as the leaderboard shows and ranks it: exact %, PSNR median with exact
images counted as exact (not as whatever finite PSNR they scored), LPIPS; rounded as shown before ranking."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from leakbench.reporting.aggregate import group_stats
from leakbench.reporting.pivot import shown_psnr

EXACT_DB = 1000.0
"""The PSNR an exact median counts as when ranking (above any finite PSNR leakbench scores)."""


def psnr_median(records: pd.DataFrame) -> float:
    """Median PSNR over the images with a reconstruction, an exact image counting as +∞ (so 'exact' reads
    the same whatever finite PSNR an attack's exact image scored): +∞ only when more than half of them are
    exact (of an even count with exactly half exact, the lower middle value); NaN when none has one."""
    if "psnr" not in records or not len(records):
        return math.nan
    values = records["psnr"].to_numpy(dtype=float).copy()
    values[records["exact"].to_numpy(dtype=bool) & ~np.isnan(values)] = math.inf
    present = np.sort(values[~np.isnan(values)])
    n = present.size
    if n == 0:
        return math.nan
    if n % 2:
        return float(present[n // 2])
    low, high = float(present[n // 2 - 1]), float(present[n // 2])
    return low if math.isinf(high) else (low + high) / 2


def leakage_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """`aggregate.group_stats` plus `psnr_exact_median` (`psnr_median`)."""
    return {**group_stats(records, cells), "psnr_exact_median": psnr_median(records)}


def shown_exact(s: dict[str, Any] | None) -> float:
    """Exact % as shown (whole percent); 0 for none."""
    return float(round(s["exact_pct"])) if s and not math.isnan(s["exact_pct"]) else 0.0


def shown_median(s: dict[str, Any] | None) -> float:
    """The PSNR median as the leaderboard shows it: `pivot.shown_psnr` (0.1 dB, capped at
    `aggregate.PSNR_CAP`, none = 0 dB), an exact median as `EXACT_DB`."""
    if not s:
        return 0.0
    value = float(s["psnr_exact_median"])
    return EXACT_DB if math.isinf(value) else shown_psnr(value)


def leakage_key(s: dict[str, Any] | None) -> tuple[float, float]:
    """Larger is more leakage: exact % as shown, then PSNR median as shown."""
    return shown_exact(s), shown_median(s)
