"""Guided SPEAR: draws led by an approximate reconstruction from another attack.

Plain SPEAR isolates a sample when all b−1 drawn neurons are inactive for it, probability
≈ 2^−(b−1). An approximate reconstruction x̂_j (CPA, gradient matching) predicts each neuron's
pre-activation ẑ_j = W x̂_j + bias; neurons far below zero are almost surely inactive for the
sample x̂_j resembles. Drawing the b−1 rows among sample j's most confidently inactive neurons
hits with probability ≈ p^(b−1) for a pool precision p close to one (notes, "Going past b ≈ 25").
Everything after the draw is SPEAR's: zero-count filter, refinement, next-layer fit, deflation,
closed-form last sample and the final verification, so the answer is exact or reported failed.
The guide is only a proposal distribution: which guide image matches which sample never matters.

Guide-pattern fits (`fit_guide_patterns`, the source `PatternFits`; leakbench addition, issue 16): fit a
sample to each guide's whole predicted pattern. A draw needs b−1 rows that are all inactive for one
sample. At width 400 and b = 150 a sample has only ≈ 200 inactive neurons, so a draw must hit 149 of
them: even from the guide's most confident rows that almost never happens (docs/notebook/spear.md, "Past
b = 100"). The next-layer fit needs no such luck: given a pattern it solves for the sample in least
squares (fit.py), and the fitted sample's own ReLU pattern is the next pattern to fit. Started from a
guide's predicted pattern (ẑ < 0) — CPA gets ≈ 6 % of the signs wrong there — this fixed-point iteration
lands on the true sample for many guides (measured: docs/notebook/spear-measurements.md). Every consistent fit goes
through the usual acceptance (fit residual, pattern stability, known and banned samples) and, with the rest of the
batch, the final verification.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from leakbench.attacks.spear.acceptance import accept_fits
from leakbench.attacks.spear.candidates import new_patterns
from leakbench.attacks.spear.deflation import accept_patterns, draw_patterns, null_basis, reduced_rows
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.samples import SampleState
from leakbench.attacks.spear.scheduler import Search, shares_turn
from leakbench.attacks.spear.tolerances import TOLERANCES

if TYPE_CHECKING:
    from leakbench.attacks.spear.residual import ResidualGuides


@dataclass
class Guide:
    """Per guide sample (rows): the signed distance of its predicted pre-activation to zero.

    `margin` (g, m) is ẑ_r / ‖A_r‖ in the layer's input space, negative where the neuron is
    predicted inactive. `pool` (g,) is each guide's current pool size as a multiple of the rows a
    draw needs; it grows while the guide finds nothing. `open` marks guides not yet matched to a
    found sample.
    """

    margin: torch.Tensor
    pool: torch.Tensor
    open: torch.Tensor
    draws: int = 0
    misses: int = 0
    known: torch.Tensor | None = None
    """Samples (rows of C) found before this guide was made (residual.py): never matched to it."""
    rows: torch.Tensor | None = None
    """The guide's own estimates of the rows c (g, b), where it has them (`make_guide`): row-space descent starts
    from them (descent.py)."""

    @property
    def matched(self) -> int:
        return int((~self.open).sum())


def make_guide(problem: LayerProblem, features: torch.Tensor, pool_start: float) -> Guide:
    """A guide from approximate layer inputs (g, n): project onto the gradient's input span first.

    Every true input lies in the row space of R (x = Rᵀc), so only the guide's component there
    predicts anything; the projection also removes whatever the guide got wrong outside it.
    """
    c = features.to(problem.R.dtype).to(problem.R.device).reshape(features.shape[0], -1) @ problem.R.T
    margin = row_margins(problem, c)
    g = margin.shape[0]
    return Guide(margin=margin, pool=torch.full((g,), pool_start, dtype=torch.float64),
                 open=torch.ones(g, dtype=torch.bool), rows=c)


def row_margins(problem: LayerProblem, c: torch.Tensor) -> torch.Tensor:
    """Margins (g, m) of points with row coordinates c (g, b): each neuron's pre-activation over its weight row's
    norm, negative where predicted inactive; on the CPU, where guide bookkeeping stays."""
    z = c @ problem.A.T + problem.bias
    margin: torch.Tensor = (z / problem.A.norm(dim=1).clamp_min(1e-300)).cpu()
    return margin


def close_matched(open_: torch.Tensor, agree: torch.Tensor) -> None:
    """Greedy one-to-one matching on agreement (guides × found, modified in place): the best remaining pair first;
    each matched guide is closed in `open_`."""
    for _ in range(min(agree.shape)):
        i, k = divmod(int(agree.argmax()), agree.shape[1])
        open_[i] = False
        agree[i, :] = -math.inf
        agree[:, k] = -math.inf


def match_guides(guide: Guide, problem: LayerProblem, C: torch.Tensor) -> None:
    """Close the guides that found samples: greedy one-to-one matching on ReLU-pattern agreement."""
    guide.open[:] = True
    if guide.known is not None and guide.known.shape[0] and C.shape[0]:
        C = C[torch.cdist(C, guide.known.to(C)).amin(dim=1) > TOLERANCES.same_known * C.norm(dim=1)]
    if C.shape[0] == 0:
        return
    zero = ((C @ problem.A.T + problem.bias) <= 0).cpu()
    agree = ((guide.margin < 0).unsqueeze(1) == zero.unsqueeze(0)).to(torch.float64).mean(-1)
    close_matched(guide.open, agree)


def pool_weights(guide: Guide, live: torch.Tensor, need: int, per_guide: int) -> torch.Tensor:
    """Row weights (draws, m): each open guide's `pool` most confident predicted-inactive live rows."""
    conf = torch.where(live, -guide.margin[guide.open], torch.full_like(guide.margin[guide.open], -math.inf))
    n_live = int(live.sum())
    size = (guide.pool[guide.open] * need).ceil().long().clamp(min=need, max=n_live)
    rank = conf.argsort(dim=1, descending=True).argsort(dim=1)
    weights = (rank < size[:, None]).to(torch.float64)
    return weights.repeat_interleave(per_guide, dim=0)


def exhausted(guide: Guide, n_live: int, need: int) -> bool:
    """Every open guide's pool holds all live rows: its draws are SPEAR's own, nothing left to lead."""
    return bool((guide.pool[guide.open] * need >= n_live).all())


class GuidePool:
    """Guided draws (a proposal source, scheduler.py): each open guide draws its rows among its pool of
    most confidently inactive live neurons; the pool grows by `growth` after every turn in which the
    guide is not matched to a found sample. Passes the turn when no guide is left to follow (all
    matched, or all exhausted), so that SPEAR's own sources take over.

    Once `Tolerances.guide_share_after` guided turns in a row found nothing (samples the guides do not separate), the
    pool shares its turns (`shares_turn`) until a guided turn finds a sample again. The count is the
    pool's, not a guide's: a residual guide (residual.py) replaces a stalled one after every few fruitless
    turns, and when each new guide counted afresh SPEAR's own draws never had a turn (measured:
    docs/notebook/spear-measurements.md). `refine_first`: before drawing, hand each open guide's whole pool to SPEAR's
    refinement as a zero set (least-squares kernel on all its rows, then the exact zero set): one "draw" per
    guide that succeeds when the pool holds no active neuron; draws follow only if nothing new
    was found.
    """

    name = "guide_pools"

    def __init__(self, guides: ResidualGuides, growth: float, refine_first: bool = False) -> None:
        self.guides, self.growth, self.refine_first = guides, growth, refine_first
        self.misses = 0

    def turn(self, search: Search, asked: int) -> bool:
        if shares_turn(asked, self.misses >= TOLERANCES.guide_share_after):
            return False
        found = search.state.found
        if not guided_chunk(search, self.guides.guide(search.state.samples), self.growth, self.refine_first):
            return False
        self.misses = 0 if search.state.found > found else self.misses + 1
        return True

    def stats(self) -> dict[str, Any]:
        return self.guides.stats()


def guided_chunk(search: Search, guide: Guide, growth: float, refine_first: bool) -> bool:
    """One chunk of guided draws in the deflated space; False when no guide is left to follow."""
    problem, state, tol = search.problem, search.state, search.tol
    match_guides(guide, problem, state.samples)
    N = null_basis(state.samples, problem.b)
    need = N.shape[1] - 1
    _, _, live = reduced_rows(problem, N, tol)
    n_open = int(guide.open.sum())
    if n_open == 0 or need < 1 or int(live.sum()) < need or exhausted(guide, int(live.sum()), need):
        return False
    found = state.found
    if refine_first:
        pools = pool_weights(guide, live.cpu(), need, 1).to(problem.L.device) > 0
        state.draws += n_open
        guide.draws += n_open
        accept_patterns(problem, N, pools[new_patterns(pools, state, n_open)], tol, state, search.residual_tol)
    if state.found == found:
        per_guide = max(1, min(search.settings.chunk, search.settings.max_draws - state.draws) // n_open)
        weights = pool_weights(guide, live.cpu(), need, per_guide).to(problem.L.device)[:, live]
        before = state.draws
        masks = draw_patterns(problem, N, tol, state, search.settings, search.gen, weights=lambda *_: weights)
        accept_patterns(problem, N, masks, tol, state, search.residual_tol)
        guide.draws += state.draws - before
    guide.misses = 0 if state.found > found else guide.misses + 1
    still_open = guide.open.clone()
    match_guides(guide, problem, state.samples)
    guide.pool[still_open & guide.open] *= growth
    return True


def fit_guide_patterns(problem: LayerProblem, guide: Guide, state: SampleState, residual_tol: float, rounds: int,
                       max_seconds: float, start: int = 0, stop: Callable[[], bool] | None = None,
                       block: int = 32) -> int:
    """Fit the predicted pattern of each guide from number `start` on (`rounds` refits each), in blocks while time is
    left and until `stop()` says so after a block; returns the number of the first guide not reached (each pattern
    fitted counts as one draw of the search). From a `start` past 0 (fits resumed), only the guides still open."""
    zero = (guide.margin < 0).to(problem.L.device)
    resumed = start > 0
    while start < zero.shape[0] and state.seconds < max_seconds and not (stop is not None and stop()):
        part = torch.arange(start, min(start + block, zero.shape[0]))
        if resumed:
            match_guides(guide, problem, state.samples)
            part = part[guide.open[part]]
        part = part.to(zero.device)
        if part.numel():
            accept_fits(problem, zero[part], state, residual_tol, rounds=rounds)
        state.patterns += int(part.numel())
        state.draws += int(part.numel())
        start = min(start + block, zero.shape[0])
    return start


class PatternFits:
    """Guide-pattern fits as a proposal source (scheduler.py), from the search's first turn (none if `rounds` is 0).

    `pause` (the descent from the guide's estimates, descent.GuideDescent.has_starts): once the found samples give a
    reference to judge fits by (`Tolerances.outlier_min_found`), the fits stop after the current block and pass their
    turns while `pause(search)` holds, then go on with the guides still open. The descent finds a sample for far less
    than a pattern fit of a large batch, but before the reference it accepts fits far off (measured:
    docs/notebook/spear-measurements.md).
    """

    name = "pattern_fits"

    def __init__(self, guide: Guide, rounds: int, pause: Callable[[Search], bool] | None = None) -> None:
        self.guide, self.rounds, self.pause = guide, rounds, pause
        self.next = 0
        self.patterns = 0
        self.found = 0
        self.seconds = 0.0

    def turn(self, search: Search, asked: int) -> bool:
        state = search.state
        done = self.next >= self.guide.margin.shape[0] or state.seconds >= search.settings.search_seconds
        if self.rounds == 0 or done:
            return False
        if self.next > 0 and self.pause is not None and self.pause(search):
            return False
        begin, before, draws = time.perf_counter(), state.found, state.draws
        self.next = fit_guide_patterns(search.problem, self.guide, state, search.residual_tol, self.rounds,
                                       search.settings.search_seconds, self.next, lambda: self.stops(search))
        self.patterns += state.draws - draws
        self.found += state.found - before
        self.seconds += time.perf_counter() - begin
        return True

    def stops(self, search: Search) -> bool:
        """Whether the fits stop for the descent after this block: the found samples give a reference and it has
        starts."""
        return self.pause is not None and search.state.found >= TOLERANCES.outlier_min_found and self.pause(search)

    def stats(self) -> dict[str, Any]:
        return {"pattern_fit_patterns": self.patterns, "pattern_fit_found": self.found,
                "pattern_fit_seconds": self.seconds}
