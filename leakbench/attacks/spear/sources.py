"""SPEAR's own proposal sources: zero draws (the paper's sampling, in the deflated space) and two-sided draws.

Every attack's source list ends with these (scheduler.py): `TwoSided` where the batch span exists
(active.py), then `ZeroDraws`, which always takes its turn.
"""

from __future__ import annotations

from typing import Any

import torch

from leakbench.attacks.spear.active import BatchSpan, draw_active
from leakbench.attacks.spear.candidates import new_patterns
from leakbench.attacks.spear.deflation import accept_fits, accept_patterns, draw_patterns, null_basis
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.scheduler import ProposalSource, Search, shares_turn


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
        b−1 of them lie in one sample's zero set far more often (measured with ground truth on
        TinyImageNet FC-6, b = 20, power 2: 8× more hits at layer 1, 40× at layer 2, > 1000× at
        layer 3). Uniform chunks alternate with weighted ones so that a sample whose zeros sit on large
        rows is never found more than 2× slower than by SPEAR's uniform draws.
        """
        self.chunks += 1
        if self.power <= 0 or self.chunks % 2 == 0:
            return None
        norms = (problem.L @ N)[live].norm(dim=1)
        weights: torch.Tensor = (norms / norms.max()).clamp_min(1e-6).pow(-self.power)
        return weights

    def stats(self) -> dict[str, Any]:
        return {}


ZERO_ROUTE_TAIL = 4
"""With at most this many samples missing, two-sided draws share the turns with zero draws (sampler "auto")."""


class TwoSided:
    """Two-sided draws (active.py) for deep layers, where samples have fewer than b−1 zeros.

    sampler "actives": every turn. "auto": every turn while more than `ZERO_ROUTE_TAIL` samples are
    missing, then every other turn (zero draws need only a few rows there, and remembered directions
    complete samples whose next-layer fit is ill-conditioned: measured on two samples of TinyImageNet
    b = 20, layer 5, seed 1 that two-sided draws essentially never isolate); patterns are re-examined
    once on that switch. "both": 7 of 8 turns to the route that found a sample more recently (1:1 on a tie).
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
        masks = masks[new_patterns(masks, state, settings.max_new_per_chunk)]
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
            if search.missing > ZERO_ROUTE_TAIL:
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
