"""How much a group of records leaks, as the leaderboard shows and ranks it: exact %, PSNR median with exact
images counted as exact (not as whatever finite PSNR they scored), LPIPS; rounded as shown before ranking.
Over a setting's seeds (`SeedLeakage`): the value, its seed spread and the one rule for a failed seed (never no
leakage, never tighter or safer: `leaks_less`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from leakbench.core.reconstruction import ANSWERED
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


WORST: Leakage = (100.0, 100.0, EXACT_DB)
"""The most a seed can leak, as shown: every image re-identified and exact (`SeedLeakage.bound`)."""


@dataclass(frozen=True)
class SeedLeakage:
    """One group's leakage over its seeds (one cell per seed of a setting), for ranking and for showing it.

    The rule for a failed seed (a cell with no answer, e.g. an adaptive attack whose checks failed) is here,
    and only here:
    - it is an unknown, never no leakage: `value` and `spread` are over the answered seeds only (the board
      shows them with 'k of n seeds');
    - it never makes the group look tighter or safer: `leaks_less` judges the group to leak less than another
      only as if each failed seed had leaked the most a seed can (`WORST`: `bound`), while the group is
      judged to leak more on its answered seeds as measured."""

    value: Leakage
    """`leakage_vector` of the answered seeds pooled (the group's stats)."""
    seeds: tuple[Leakage, ...]
    """`leakage_vector` of each answered seed alone."""
    failed: int
    """Seeds (cells) of the group that failed."""

    @property
    def answered(self) -> int:
        return len(self.seeds)

    @property
    def total(self) -> int:
        return self.answered + self.failed

    @property
    def spread(self) -> Leakage:
        """Each component's sample standard deviation over the answered seeds (0 with fewer than two; NaN
        components left out)."""
        return _std(self.seeds)

    def bound(self) -> tuple[Leakage, Leakage]:
        """(value, spread) with each failed seed counted as `WORST` (mean and standard deviation over every
        seed); the measured `value` and `spread` when no seed failed. A component no answered seed knows
        (re-identification not scored) stays NaN."""
        if not self.failed:
            return self.value, self.spread
        known = [not all(math.isnan(s[i]) for s in self.seeds) for i in range(3)]
        worst = tuple(w if k else math.nan for w, k in zip(WORST, known, strict=True))
        every = (*self.seeds, *[worst] * self.failed)
        mean = [float(np.nanmean(column)) if k else math.nan
                for column, k in zip(np.array(every, dtype=float).T, known, strict=True)]
        return (mean[0], mean[1], mean[2]), _std(every)


def _std(seeds: Sequence[Sequence[float]]) -> Leakage:
    """Each component's sample standard deviation over `seeds` (0 with fewer than two known values)."""
    out = []
    for column in np.array(seeds, dtype=float).reshape(-1, 3).T:
        known = column[~np.isnan(column)]
        out.append(float(np.std(known, ddof=1)) if known.size > 1 else 0.0)
    return out[0], out[1], out[2]


def seed_leakage(records: pd.DataFrame, cells: pd.DataFrame) -> SeedLeakage:
    """`SeedLeakage` of a group's `cells` (one per seed) and their `records`: cells whose status is not
    answered (`core.reconstruction.ANSWERED`) count as failed seeds."""
    answered = cells[cells["status"].isin(ANSWERED)]
    mine = records[records["cell_id"].isin(set(answered["cell_id"]))]
    seeds = tuple(leakage_vector(leakage_stats(mine[mine["cell_id"] == cid], answered.iloc[[i]]))
                  for i, cid in enumerate(answered["cell_id"]))
    value = leakage_vector(leakage_stats(mine, answered)) if len(answered) else (math.nan, 0.0, 0.0)
    return SeedLeakage(value, seeds, len(cells) - len(answered))


def seed_spread(records: pd.DataFrame, cells: pd.DataFrame) -> Leakage:
    """The spread of `leakage_vector` over the answered `cells` (one per seed of a setting):
    `SeedLeakage.spread`."""
    return seed_leakage(records, cells).spread


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


def leaks_less(a: SeedLeakage, b: SeedLeakage) -> bool:
    """`a` leaks less than `b` beyond the seed spread (`compare_leakage`), `a` counted with its failed seeds
    leaking the most they can (`SeedLeakage.bound`), `b` as measured on its answered seeds: a failed seed
    never helps its own group (the class's rule)."""
    value, spread = a.bound()
    return compare_leakage(value, spread, b.value, b.spread) < 0
