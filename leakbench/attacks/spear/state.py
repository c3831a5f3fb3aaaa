"""What both searches share: the run's settings, the budget, and the progress bar."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.stall import StallRule
from leakbench.attacks.spear.tolerances import TOLERANCES, Tolerances
from leakbench.core.reconstruction import Failure
from leakbench.progress import Tally, tally

NOT_APPLICABLE = "not applicable"
"""How a refusal's reason starts (the cell's state reads "not applicable": `records.cell_state`): the pre-search
refusal (applicability.py) and a stalled search that found nothing (stall.py)."""


@dataclass(frozen=True)
class SearchSettings:
    """One run's budget (`attack.SearchBudget`'s fields, `chunk` resolved by `attack.auto_chunk`), the
    fixed tolerances (tolerances.py), the column search's options (`paper.SpearPaperConfig`; the
    deflated search never reads them; `next_weight_check`, leakbench's next-layer weight check of a column,
    next_weight.py, is set by the deflated search's fallback only) and the progress bar's `label`."""

    max_draws: int
    max_seconds: float
    chunk: int
    tolerances: Tolerances = TOLERANCES
    last_column: bool = False
    lp_check: bool = False
    second_stage: bool = False
    next_weight_check: bool = False
    label: str = "spear"
    stall: StallRule | None = None
    """Stop early when the draws stop finding samples on an update that shows a defence (stall.py); None: off."""
    spent: float = 0.0
    """Seconds of `max_seconds` spent before the search began (spear-guided: its guide's, `charge_before`): the cap
    bounds the guide and the search together."""

    @property
    def search_seconds(self) -> float:
        """The seconds the search itself may take: `max_seconds` less what was `spent` before it (never below 0)."""
        return max(self.max_seconds - self.spent, 0.0)


@dataclass(kw_only=True)
class SearchState:
    """What both searches count; each route's state adds what it finds (search.ColumnState: columns
    of Q, samples.SampleState: rows of C = Q⁻¹).

    seen: keys of the zero patterns already examined (`candidates.new_patterns`); draws: directions
    drawn or proposed; candidates: those with enough zeros; patterns: new patterns refined;
    last_column_used: the last column (or sample) came in closed form (last_column.py).
    """

    seen: set[bytes] = field(default_factory=set)
    draws: int = 0
    candidates: int = 0
    patterns: int = 0
    last_column_used: bool = False
    started: float = field(default_factory=time.perf_counter)
    undrawable: str = ""
    """Why the last chunk drew nothing ('' when it drew): too few rows above the noise for one draw
    (`charge_undrawable`). Such a chunk is charged to the draw budget all the same."""
    undrawn: int = 0
    """Draws charged to the budget without being drawn (counted in `draws`)."""
    unverifiable: str = ""
    """Why the search stopped before its budget with b − 1 samples ('' otherwise): the last one is too weak in the
    gradient to verify (completion.weak_last_sample)."""
    time_capped: bool = False
    """The search stopped on its wall-clock cap (`max_seconds`) with draws of its budget left (`out_of_budget`
    records it): where it stopped depends on the machine's speed and load, so its answer would too."""
    best_found: int = 0
    """The most samples (columns) found at once so far, and `progress_draw` the draw count when it last rose."""
    progress_draw: int = 0
    stalled: str = ""
    """Why the stall rule stopped the search ('' otherwise): no new sample in many times the draws the next one
    takes where SPEAR's structure holds, on an update that shows a defence (`settings.stall`, stall.py)."""

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    @property
    def found(self) -> int:
        """Columns (paper route) or samples (deflated route) found so far."""
        raise NotImplementedError

    def draw_rows(self, b: int) -> int:
        """Rows a draw takes: b − 1 in the column search (the deflated route's state overrides it)."""
        return b - 1

    def stats(self) -> dict[str, Any]:
        """The attack's search counters (`Reconstruction.stats`); the same keys on both routes."""
        return {"draws": self.draws, "two_sided_draws": 0, "two_sided_route": False, "candidates": self.candidates,
                "patterns": self.patterns, "fits_or_lp_checks": 0, "samples_found": self.found, "retries": 0,
                "last_sample_closed_form": self.last_column_used}


def charge_undrawable(state: SearchState, count: int, rows: int, total: int, need: int) -> None:
    """Charge a chunk of `count` draws that cannot be drawn to the budget: only `rows` of `total` rows
    stand above the noise and a draw needs `need` (state.undrawable says so until a chunk draws)."""
    state.draws += count
    state.undrawn += count
    state.undrawable = f"only {rows} of {total} neurons stand above the noise level and a draw needs {need} of them"


def stop_reason(state: SearchState, settings: SearchSettings, b: int) -> str:
    """Why a search stopped without a batch, as the failed cell's reason: nothing could be drawn any
    more (the rest of the draw budget was charged without drawing), the time cap (`SearchState.time_capped`), or
    the draw budget."""
    found = (f"with {state.found} of {b} samples found" if state.found <= b else  # the column search keeps more
             f"with {state.found} candidate columns kept for {b} samples")
    if state.unverifiable:
        return f"stopped after {state.draws} draws {found}: {state.unverifiable}"
    if state.stalled:
        return (f"{NOT_APPLICABLE}: " if state.best_found == 0 else "") + \
            f"stopped after {state.draws} draws {found}: {state.stalled}"
    if state.undrawable:
        return (f"nothing left to draw after {state.draws - state.undrawn} draws {found}: {state.undrawable} "
                f"(the other {state.undrawn} draws of the budget were charged without drawing)")
    if state.time_capped:
        before = f", {settings.spent:.0f} s of it spent before the search" if settings.spent > 0 else ""
        return (f"time budget spent (the safety cap max_seconds = {settings.max_seconds:g}{before}) after "
                f"{state.draws} of {settings.max_draws} draws {found}")
    return f"draw budget spent after {state.draws} draws {found}"


SPENT_STAT = "guide_seconds"
"""The key under which an attack's proposal sources report the seconds they spent before the search (spear-guided's
guide); `charge_before` takes them from the search's time budget."""


def charge_before(settings: SearchSettings, stats: dict[str, Any]) -> SearchSettings:
    """`settings` with the seconds spent before the search (`stats[SPENT_STAT]`, if any) charged to its time cap."""
    spent = float(stats.get(SPENT_STAT, 0.0))
    return replace(settings, spent=settings.spent + spent) if spent > 0 else settings


FAILURE_STAT = "failure"
"""The key under which a search that returns no batch (`SpearSearch._search`, and a subclass's own) leaves its
failure kind in its stats; `SpearSearch.reconstruct` takes it out and gives it to `Reconstruction.failed`."""


def stop_failure(state: SearchState) -> Failure:
    """The failure kind (`core.reconstruction.Failure`) of a search that stopped without a batch, as `stop_reason`
    words it: "verification" when a sample could not be verified (`unverifiable`), "not-applicable" when too
    few neurons stand above the noise for a draw or the stall rule stopped it (SPEAR's exact zeros are gone: its
    assumption does not hold for this update), else "budget" (the draw or time budget is spent)."""
    if state.unverifiable:
        return "verification"
    return "not-applicable" if state.undrawable or state.stalled else "budget"


def out_of_budget(state: SearchState, settings: SearchSettings) -> bool:
    """The draw or time budget is spent, or the stall rule stops the search (`stalled`); a stop on time with draws
    left is recorded (`SearchState.time_capped`)."""
    if state.draws >= settings.max_draws:
        return True
    if settings.stall is not None and stalled(state, settings.stall):
        return True
    state.time_capped = state.seconds >= settings.search_seconds
    return state.time_capped


def stalled(state: SearchState, rule: StallRule) -> bool:
    """Whether the stall rule stops the search now: no new best count of found samples in `rule.limit` draws
    (state.best_found and state.progress_draw follow the best count, at most b: columns the column search keeps
    beyond b are no progress while no selection of b verifies; the reason goes to `state.stalled`)."""
    found = min(state.found, rule.b)
    if found > state.best_found:
        state.best_found, state.progress_draw = found, state.draws
        return False
    missing, rows = max(rule.b - found, 1), state.draw_rows(rule.b)
    idle = state.draws - state.progress_draw
    if idle < rule.limit(rows, missing):
        return False
    state.stalled = rule.reason(idle, rows, missing)
    return True


def search_bar(problem: LayerProblem, settings: SearchSettings) -> AbstractContextManager[Tally]:
    """The progress bar of a search (samples found of b); drawn only under `progress.attack_progress`."""
    return tally(total=problem.b, desc=f"{settings.label} samples found")


def show_progress(bar: Tally, state: SearchState, settings: SearchSettings) -> None:
    """Samples found, draws, elapsed seconds and the budget left (the nearer of draws and time)."""
    left = min(1 - state.draws / settings.max_draws, 1 - (state.seconds + settings.spent) / settings.max_seconds)
    bar.show(state.found, f"draws {state.draws:,}, {state.seconds:.0f} s, budget left {max(left, 0):.0%}")
