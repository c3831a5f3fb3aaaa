"""The deflated search's one loop: proposal sources asked in a stated order, then completion.

Every turn the `Scheduler` asks its sources in order; the first that takes the turn runs one chunk of
proposals and hands them to SPEAR's acceptance (refinement to an exact zero set, next-layer fit,
deflation: deflation.accept_patterns / accept_fits). A source passes the turn when it has nothing to
offer now, or when the one sharing rule says so (`shares_turn`: a stalled source gives every other
turn to the sources after it). The last source of every list, `sources.ZeroDraws` (SPEAR's own
draws), always takes the turn, so the search never idles. Source lists (each attack's `_sources`):

    spear          [TwoSided?, ZeroDraws]                              sources.py
    spear-guided   [PatternFits?, GuidePool, TwoSided?, ZeroDraws]     guided.py
    spear-dl       [DLTrims, TwoSided?, ZeroDraws]                     dl.py

(TwoSided where the batch span exists, active.py; PatternFits for b ≥ its threshold, guide_fits.py.)
Between turns the loop tries to finish the batch: the closed-form completion once b−1 samples are known
(deflation.complete_batch) and the remembered directions (deflation.try_directions). The budget is the
search's (draws and seconds, state.out_of_budget); a source with a budget of its own (guide pools that
grow until they hold every live row, dictionary learning down to a number of missing samples) passes
once it is spent. A new idea is a new source: a class with `name`, `turn` and `stats` in a source list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from leakbench.attacks.spear.deflation import SampleState, complete_batch, try_directions
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fastfit import FitCache, fit_once_normal
from leakbench.attacks.spear.solve import Solution
from leakbench.attacks.spear.state import SearchSettings, out_of_budget, search_bar, show_progress


@dataclass
class Search:
    """One run of the deflated search: what every source reads, and the state it adds samples to."""

    problem: LayerProblem
    tol: torch.Tensor
    settings: SearchSettings
    gen: torch.Generator
    residual_tol: float
    state: SampleState

    @property
    def missing(self) -> int:
        """Samples not found yet."""
        return self.problem.b - self.state.found


class ProposalSource(Protocol):
    """One way of proposing candidates. `turn` runs one chunk through SPEAR's acceptance and returns
    True, or returns False to pass the turn; `asked` counts the times the scheduler asked it (1, 2, …)."""

    name: str

    def turn(self, search: Search, asked: int) -> bool: ...

    def stats(self) -> dict[str, Any]: ...


def shares_turn(asked: int, stalled: bool, phase: int = 0) -> bool:
    """The scheduler's one sharing rule: a stalled source passes every other turn (those with asked % 2 == phase)."""
    return stalled and asked % 2 == phase


class Scheduler:
    """Asks the sources in order each turn; counts the turns asked and taken per source."""

    def __init__(self, sources: list[ProposalSource]) -> None:
        self.sources = sources
        self.asked = {source.name: 0 for source in sources}
        self.taken = {source.name: 0 for source in sources}

    def turn(self, search: Search) -> str:
        """Run one turn; the name of the source that took it."""
        for source in self.sources:
            self.asked[source.name] += 1
            if source.turn(search, self.asked[source.name]):
                self.taken[source.name] += 1
                return source.name
        raise AssertionError("the last source (ZeroDraws) always takes its turn")

    def stats(self) -> dict[str, Any]:
        """Each source's stats, and the turns each took (`turns_<source name>`)."""
        out: dict[str, Any] = {f"turns_{name}": taken for name, taken in self.taken.items()}
        for source in self.sources:
            out.update(source.stats())
        return out


def search_samples(problem: LayerProblem, tol: torch.Tensor, settings: SearchSettings, gen: torch.Generator,
                   residual_tol: float, scheduler: Scheduler) -> tuple[SampleState, Solution | None]:
    """Find all b samples (rows of C) by deflated search, or stop at the budget.

    The last sample needs no search: it follows from the other b−1 (`complete_last_sample`). When
    the search itself found all b (common under noise, where the closed form is less accurate than
    the fits), those are verified first. When the completed batch fails verification, the found
    sample with the most ReLU violations is set aside (deflation.complete_batch) and the search goes
    on. Every next-layer fit is the normal-equation fit, each (pattern, free rows) fitted once
    (fastfit.py).
    """
    b = problem.b
    state = SampleState(samples=torch.empty(0, b, dtype=problem.L.dtype, device=problem.L.device),
                        fit_solver=fit_once_normal, fit_cache=FitCache())
    search = Search(problem, tol, settings, gen, residual_tol, state)
    solution = None
    with search_bar(problem, settings) as bar:
        while True:
            show_progress(bar, state, settings)
            if state.found >= b - 1:  # verified even when the budget ran out with this chunk
                solution = complete_batch(problem, state, tol, residual_tol)
                if solution.ok:
                    return state, solution
            if out_of_budget(state, settings):
                break
            scheduler.turn(search)
            if state.found < b - 1:
                solution = try_directions(problem, state, tol, residual_tol)
                if solution is not None:
                    return state, solution
    return state, solution
