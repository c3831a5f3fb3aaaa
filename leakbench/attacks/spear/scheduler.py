"""The deflated search's one loop: proposal sources asked in a stated order, then completion.

Every turn the `Scheduler` asks its sources in order; the first that takes the turn runs one chunk of
proposals and hands them to SPEAR's acceptance (refinement to an exact zero set, next-layer fit,
deflation: deflation.accept_patterns / accept_fits). A source passes the turn when it has nothing to
offer now, or when the one sharing rule says so (`shares_turn`: a stalled source gives every other
turn to the sources after it). The last source of every list, `ZeroDraws` (SPEAR's own
draws), always takes the turn, so the search never idles (the attack builds every list with
`default_sources` at its end). Source lists (each attack's `_sources`):

    spear          [TwoSided?, ZeroDraws]                                        here (SPEAR's own sources)
    spear-guided   [PatternFits?, GuideDescent?, GuidePool, RowSpaceDescent,     guided.py, descent.py
                    TwoSided?, ZeroDraws]
    spear-dl       [DLTrims, TwoSided?, ZeroDraws]                               dl.py

(TwoSided where the batch span exists, active.py; PatternFits and GuideDescent for b ≥ their threshold, guided.py,
descent.py: the fits pause for the descent once found samples give a reference; RowSpaceDescent passes below 48
visible samples and until a sample is found.)
Between turns the loop tries to finish the batch: the closed-form completion once b−1 samples are known
(completion.complete_batch) and the remembered directions (completion.try_directions). The budget is the
search's (draws and seconds, state.out_of_budget); a source with a budget of its own (guide pools that
grow until they hold every live row, dictionary learning down to a number of missing samples) passes
once it is spent. A new idea is a new source: a class with `name`, `turn` and `stats` in a source list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from leakbench.attacks.spear.acceptance import accept_fits
from leakbench.attacks.spear.active import BatchSpan, draw_active
from leakbench.attacks.spear.candidates import new_patterns
from leakbench.attacks.spear.completion import complete_batch, try_directions, try_outliers
from leakbench.attacks.spear.deflation import accept_patterns, draw_patterns, null_basis
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import FitCache
from leakbench.attacks.spear.samples import SampleState
from leakbench.attacks.spear.solve import Solution
from leakbench.attacks.spear.state import SearchSettings, out_of_budget, search_bar, show_progress
from leakbench.attacks.spear.tolerances import TOLERANCES


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
    sample with the most ReLU violations is set aside (completion.complete_batch) and the search goes
    on. Each (pattern, free rows) is fitted once per search (fit.FitCache).
    """
    b = problem.b
    state = SampleState(samples=torch.empty(0, b, dtype=problem.L.dtype, device=problem.L.device),
                        fit_cache=FitCache())
    search = Search(problem, tol, settings, gen, residual_tol, state)
    solution = None
    with search_bar(problem, settings) as bar:
        while True:
            show_progress(bar, state, settings)
            if state.found >= b - 1:  # verified even when the budget ran out with this chunk
                solution = complete_batch(problem, state, tol, residual_tol)
                if solution.ok:
                    return state, solution
                if state.unverifiable:
                    return state, None
            if out_of_budget(state, settings):
                break
            scheduler.turn(search)
            if state.found < b - 1:
                solution = try_outliers(problem, state, tol, residual_tol)
                if solution is None:
                    solution = try_directions(problem, state, tol, residual_tol)
                if solution is not None:
                    return state, solution
    return state, solution


class ZeroDraws:
    """SPEAR's draws: b'−1 live rows of the deflated factor, whose kernel isolates a sample when all are
    inactive for it. Every other drawn chunk weights rows by |L_r N|^−power (`weights`)."""

    name = "zero_draws"

    def __init__(self, power: float) -> None:
        self.power = power
        self.chunks = 0
        self.misses = 0

    def turn(self, search: Search, asked: int) -> bool:
        problem, state = search.problem, search.state
        before = state.found
        N = null_basis(state.samples, problem.b)
        masks = draw_patterns(problem, N, search.tol, state, search.settings, search.gen, weights=self.weights)
        accept_patterns(problem, N, masks, search.tol, state, search.residual_tol)
        self.misses = 0 if state.found > before else self.misses + 1
        return True

    def weights(self, problem: LayerProblem, N: torch.Tensor, live: torch.Tensor) -> torch.Tensor | None:
        """Draw weights |L_r N|^−power for the live rows, on every other drawn chunk (None: uniform).

        Row r of the gradient is L_r = Σ_i D_ir c_i over the samples for which neuron r passed a
        gradient, so rows with a small norm tend to be inactive for more of the remaining samples, and
        b−1 of them lie in one sample's zero set far more often (measured: docs/notebook/spear-measurements.md).
        Uniform chunks alternate with weighted ones so that a sample whose zeros sit on large
        rows is never found more than 2× slower than by SPEAR's uniform draws.
        """
        self.chunks += 1
        if self.power <= 0 or self.chunks % 2 == 0:
            return None
        norms = (problem.L @ N)[live].norm(dim=1)
        weights: torch.Tensor = (norms / norms.max()).clamp_min(TOLERANCES.weight_floor).pow(-self.power)
        return weights

    def stats(self) -> dict[str, Any]:
        return {}


class TwoSided:
    """Two-sided draws (active.py) for deep layers, where samples have fewer than b−1 zeros.

    sampler "actives": every turn. "auto": every turn while more than `Tolerances.zero_route_tail` samples are
    missing, then every other turn (zero draws need only a few rows there, and remembered directions
    complete samples whose next-layer fit is ill-conditioned; measured: docs/notebook/spear-measurements.md); patterns
    are re-examined once on that switch. "both": 7 of 8 turns to the route that found a sample more recently (1:1 on a
    tie).
    """

    name = "two_sided"

    def __init__(self, span: BatchSpan, sampler: str, zeros: ZeroDraws) -> None:
        self.span, self.sampler, self.zeros = span, sampler, zeros
        self.draws = 0
        self.misses = 0
        self.tail = False

    def turn(self, search: Search, asked: int) -> bool:
        if not self.takes(search, asked):
            return False
        state, settings = search.state, search.settings
        count = min(settings.chunk, settings.max_draws - state.draws)
        masks = draw_active(search.problem, self.span, count, search.gen)
        state.draws += count
        self.draws += count
        state.candidates += int(masks.shape[0])
        masks = masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]
        state.patterns += int(masks.shape[0])
        before = state.found
        if masks.shape[0]:
            accept_fits(search.problem, masks, state, search.residual_tol)
        self.misses = 0 if state.found > before else self.misses + 1
        return True

    def takes(self, search: Search, asked: int) -> bool:
        if self.sampler == "actives":
            return True
        if self.sampler == "auto":
            if search.missing > TOLERANCES.zero_route_tail:
                return True
            if not self.tail:
                self.tail = True
                search.state.seen.clear()
            return not shares_turn(asked, stalled=True, phase=1)
        if self.misses == self.zeros.misses:
            return asked % 2 == 0
        return (asked % 8 != 0) == (self.misses < self.zeros.misses)

    def stats(self) -> dict[str, Any]:
        return {"two_sided_draws": self.draws}


def default_sources(power: float, span: BatchSpan | None, sampler: str) -> list[ProposalSource]:
    """SPEAR's own sources, last in every list: two-sided draws where the batch span exists, then zero draws."""
    zeros = ZeroDraws(power)
    if span is None or sampler == "zeros":
        return [zeros]
    return [TwoSided(span, sampler, zeros), zeros]
