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


# --------------------------------------------------------------------------- leakage of answered attacks, with seeds

Leakage = tuple[float, float, float]
"""How much a group leaks, larger is more, each as shown: re-identification % (NaN where the records carry none),
exact %, PSNR median (`shown_median`). Compared component by component, in that order."""


def leakage_vector(s: dict[str, Any]) -> Leakage:
    """`Leakage` of stats (`leakage_stats`) of answered cells: reid % (`reid_pct` when the stats hold one,
    whole percent), exact %, PSNR median, each as shown."""
    reid = s.get("reid_pct", math.nan)
    reid = float(round(reid)) if reid is not None and not math.isnan(reid) else math.nan
    return reid, shown_exact(s), shown_median(s)


def seed_spread(records: pd.DataFrame, cells: pd.DataFrame) -> Leakage:
    """The spread of `leakage_vector` over `cells` (one per seed of a setting): each component's sample
    standard deviation over the cells (0 with fewer than two; NaN components left out)."""
    if len(cells) < 2:
        return 0.0, 0.0, 0.0
    per_cell = np.array([leakage_vector(leakage_stats(records[records["cell_id"] == cells["cell_id"].iloc[i]],
                                                      cells.iloc[[i]])) for i in range(len(cells))], dtype=float)
    spread = []
    for column in per_cell.T:
        known = column[~np.isnan(column)]
        spread.append(float(np.std(known, ddof=1)) if known.size > 1 else 0.0)
    return spread[0], spread[1], spread[2]


def compare_leakage(a: Leakage, a_spread: Leakage, b: Leakage, b_spread: Leakage) -> int:
    """-1 when `a` leaks less than `b`, 1 when more, 0 when they tie: the first component (reid %, exact %,
    PSNR median) known on both sides whose difference exceeds the larger of the two seed spreads decides;
    a difference within the spread is no difference (the next component is looked at)."""
    for x, sx, y, sy in zip(a, a_spread, b, b_spread, strict=True):
        if math.isnan(x) or math.isnan(y):
            continue
        if abs(x - y) > max(sx, sy):
            return -1 if x < y else 1
    return 0
