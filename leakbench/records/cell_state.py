"""A cell's leakage state (issue 43): one word for what its attack got out of the batch, shown everywhere a
cell is, so that a failed attack is never read as "nothing leaks".

Each cell has exactly one state (`cell_state`), from its status, its failure kind and its images:

    exact                  every image exact (status ok)
    re-identified          an answer where some images leak but not every one is exact: shown "k of n"
    not recovered          the attack answered, and no image leaks
    failed (verification)  the attack's own checks rejected its answer (failure "verification")
    failed (budget)        it ran out of draws, seconds or iterations, or its worker was killed at its time
                           limit (failure "budget")
    failed (error)         it raised, or its reply was refused (failure "error")
    failed                 a failed cell stored without a failure kind (before issue 43; a plugin that does not
                           say): unknown
    not applicable         the attack's assumptions do not hold for this victim or update (failure
                           "not-applicable")

An image leaks (`leaked_images`) when it is exact, or, where the records rank it among distractors
(`reid_rank`, metrics.reid), when its true image ranks first (re-identified top-1); where they do not (runs
without re-identification), when its PSNR is at least `RECOGNISABLE_PSNR`. A cell's `leaked` count k is
counted from its records when they are read (`with_states`, called by `records.runs.read_run`, so runs stored
before issue 43 get states too); a row without it falls back to its exact fraction and `reid_top1`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from leakbench.core.reconstruction import FAILURES

State = Literal["exact", "re-identified", "not recovered", "failed (verification)", "failed (budget)",
                "failed (error)", "failed", "not applicable"]
STATES: tuple[State, ...] = ("exact", "re-identified", "not recovered", "failed (verification)", "failed (budget)",
                             "failed (error)", "failed", "not applicable")
"""Every state, from the most leakage to none, then the failed ones and not applicable (the order of tables)."""
ANSWERED_STATES: tuple[State, ...] = ("exact", "re-identified", "not recovered")
"""The states of a cell whose attack answered: only these say how much leaks."""
FAILED_STATES: tuple[State, ...] = ("failed (verification)", "failed (budget)", "failed (error)", "failed")
"""The states of a cell whose attack gave no answer where it applies: its leakage is unknown, never zero."""
FAILURE_STATES: dict[str, State] = {"verification": "failed (verification)", "budget": "failed (budget)",
                                        "error": "failed (error)", "not-applicable": "not applicable"}
"""The state of a failed cell by its failure kind (`core.reconstruction.Failure`); unknown: "failed"."""
assert set(FAILURE_STATES) == set(FAILURES)

RECOGNISABLE_PSNR = 25.0
"""PSNR (dB) from which an image counts as leaked where no re-identification rank was recorded: 25 dB is an
RMS error of 0.056 on [0, 1] (about 14 of 255 levels), an image whose content reads at a glance. A stated
convention, used only as the fallback of `leaked_images`."""

Row = Mapping[str, Any] | pd.Series
"""One cell: a cells.parquet row, or a summary.json read as a dict."""

STATE_COLUMNS = ("leaked", "state")
"""The columns `with_states` adds to cells when they are read (never stored): k, the images that leak, and the
cell's state."""


def leaked_images(records: pd.DataFrame) -> pd.Series:
    """Per record (one image of a cell), whether it leaks: exact; else re-identified top-1 where its `reid_rank`
    is recorded; else PSNR ≥ `RECOGNISABLE_PSNR` (missing values: no)."""
    exact = records["exact"].astype(bool) if "exact" in records else pd.Series(False, index=records.index)
    psnr = pd.to_numeric(records["psnr"], errors="coerce") if "psnr" in records else pd.Series(
        np.nan, index=records.index)
    by_psnr = psnr.fillna(-math.inf) >= RECOGNISABLE_PSNR
    if "reid_rank" in records:
        rank = pd.to_numeric(records["reid_rank"], errors="coerce")
        by_psnr = by_psnr.where(rank.isna(), rank == 1)
    return exact | by_psnr


def leaked_count(row: Row) -> int:
    """k, the images of a cell that leak: its `leaked` column where it has one (`with_states`), else the larger
    of its exact images and its re-identified ones (`reid_top1` × n, where recorded)."""
    stored = _number(row.get("leaked"))
    if not math.isnan(stored):
        return int(stored)
    n = images_of(row)
    if math.isnan(n):
        return 0
    exact = _number(row.get("exact_fraction"))
    reid = _number(row.get("reid_top1"))
    return max(round((0.0 if math.isnan(exact) else exact) * n), round((0.0 if math.isnan(reid) else reid) * n))


def cell_state(row: Row) -> State:
    """The one state of a cell (a cells.parquet row or a summary.json): failed by its `failure` kind ("failed"
    when it has none: unknown), not applicable, or for an answer exact (every image exact), re-identified
    (some images leak: `leaked_count`) or not recovered."""
    if row.get("status") not in ("ok", "partial"):
        failure = row.get("failure")
        return FAILURE_STATES.get(failure, "failed") if isinstance(failure, str) else "failed"
    n = images_of(row)
    if row.get("status") == "ok" and _number(row.get("exact_fraction")) == 1.0 and n > 0:
        return "exact"
    return "re-identified" if leaked_count(row) > 0 else "not recovered"


def state_text(row: Row) -> str:
    """A cell's state as tables show it: 're-identified (2 of 32)' for a partial leak, else the state itself
    ('exact', 'not recovered', 'failed (budget)', …)."""
    state = cell_state(row)
    if state != "re-identified":
        return state
    n = images_of(row)
    return f"re-identified ({leaked_count(row)} of {'?' if math.isnan(n) else int(n)})"


def with_states(cells: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """`cells` with a `failure` column (None where a cell was stored without one: unknown), `leaked` (k, counted
    from `records` per cell id: `leaked_images`; cells without records fall back to `leaked_count`) and `state`
    (`cell_state`)."""
    if cells.empty:
        return cells.assign(**{c: pd.Series(dtype=object) for c in ("failure", *STATE_COLUMNS) if c not in cells})
    cells = cells.assign(failure=cells["failure"].astype(object).where(cells["failure"].notna(), None)
                         if "failure" in cells else None)
    counts: dict[Any, int] = {}
    if {"cell_id", "exact"} <= set(records.columns) and len(records):
        counts = {k: int(v) for k, v in leaked_images(records).groupby(records["cell_id"]).sum().items()}
    leaked = [counts[cid] if cid in counts else leaked_count(row)
              for cid, (_, row) in zip(cells.get("cell_id", pd.Series(None, index=cells.index)), cells.iterrows(),
                                       strict=True)]
    cells = cells.assign(leaked=leaked)
    return cells.assign(state=[cell_state(row) for _, row in cells.iterrows()])


def state_counts(states: Iterable[str]) -> dict[str, int]:
    """How many cells are in each state, in `STATES` order (states with no cell left out)."""
    found = list(states)
    return {s: found.count(s) for s in STATES if s in found}


def states_text(counts: Mapping[str, int], leaked: int | None = None, n: int | None = None) -> str:
    """A group's states in words: the state alone when every cell is in it ('failed (budget)'), else each with its
    count ('2 exact, 1 failed (budget)'); a re-identified group says 'k of n' when `leaked` and `n` are given."""
    def word(state: str) -> str:
        if state == "re-identified" and leaked is not None and n is not None:
            return f"re-identified ({leaked} of {n})"
        return state
    if len(counts) == 1:
        return word(next(iter(counts)))
    return ", ".join(f"{count} {word(state)}" for state, count in counts.items())


def answered_any(counts: Mapping[str, int]) -> bool:
    """Whether any cell of a group answered (a state in `ANSWERED_STATES`): only then do its numbers say anything."""
    return any(counts.get(s, 0) for s in ANSWERED_STATES)


def images_of(row: Row) -> float:
    """A cell's images n: its `n_images`, else its `batch_size` (NaN when it has neither)."""
    n = _number(row.get("n_images"))
    return _number(row.get("batch_size")) if math.isnan(n) else n


def _number(value: object) -> float:
    """A stored number as a float (NaN when missing or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return math.nan
    return float(value)
