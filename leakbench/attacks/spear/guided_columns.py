"""Guided column search (leakbench addition, issue 44): a guide's draws for the column search.

Where the attacked layer feeds a classifier with fewer classes than b (FC-2: layer 1, then the 10-class
classifier), the next layer's gradient dL/dW2 = Σ_i δ_i h_iᵀ has rank ≤ 9 (each δ_i = (p_i − e_{y_i})/b has
entries summing to zero), so the next-layer fit of the deflated search (fit.py) has no row space to fit in,
and SPEAR runs its column search (search.py) on the attacked layer's gradient alone. That search drew its
b−1 rows uniformly, a hit with probability ≈ 2^−(b−1): past b ≈ 25 it finds nothing, and spear-guided's
guide was computed and never asked. This source gives the column search the guide's proposals: each guide
(guided.Guide: an approximate sample's predicted pre-activations) not yet matched to a found column first
proposes its b−1 most confidently inactive rows as a zero set (refined by the column search to the exact
zero set), then draws b−1 rows among its pool of confidently inactive rows, the pool growing by
`Tolerances.pool_growth` after every turn in which it stays unmatched (as guided.GuidePool does in the
deflated space). Everything after the proposal is the column search's: refinement, unique kernel,
zero count, leakbench's LP check, selection, scale from dL/db and the ReLU verification.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from leakbench.attacks.spear.candidates import min_zeros, new_patterns, zero_masks
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.guided import Guide
from leakbench.attacks.spear.sampling import count_zeros, draw_rows, kernel_directions
from leakbench.attacks.spear.search import ColumnState
from leakbench.attacks.spear.state import SearchSettings


class ColumnGuides:
    """A guide's proposals for the column search (`search.search_columns`' `propose`): zero masks (k, m), or None
    when no guide is left to follow (every guide matched to a found column, or every open pool holds all rows)."""

    def __init__(self, guide: Guide, growth: float) -> None:
        self.guide, self.growth = guide, growth
        self.refined = torch.zeros_like(guide.open)
        self.proposed = 0

    def __call__(self, problem: LayerProblem, state: ColumnState, tol: torch.Tensor, settings: SearchSettings,
                 gen: torch.Generator) -> torch.Tensor | None:
        guide = self.guide
        match_columns(guide, problem, state, tol)
        need = problem.b - 1
        m = problem.m
        open_ = guide.open & (guide.pool * need < m)
        if need < 1 or not bool(open_.any()):
            return None
        conf = -guide.margin.to(problem.Ln.device)
        rank = conf.argsort(dim=1, descending=True).argsort(dim=1)
        first = open_ & ~self.refined
        if bool(first.any()):  # each guide's b−1 most confident rows, once, as a zero set to refine
            self.refined |= first
            masks = rank[first.to(rank.device)] < need
            self.proposed += int(masks.shape[0])
            state.draws += int(masks.shape[0])
            return masks[new_patterns(masks, state, masks.shape[0])]
        n_open = int(open_.sum())
        per_guide = max(1, min(settings.chunk, settings.max_draws - state.draws) // n_open)
        size = (guide.pool[open_] * need).ceil().long().clamp(min=need, max=m).to(rank.device)
        weights = (rank[open_.to(rank.device)] < size[:, None]).to(problem.Ln.dtype)
        weights = weights.repeat_interleave(per_guide, dim=0)
        idx = draw_rows(m, problem.b, weights.shape[0], gen, weights=weights)
        q, _ = kernel_directions(problem.Ln, idx)
        state.draws += int(idx.shape[0])
        self.proposed += int(idx.shape[0])
        q = q[torch.isfinite(q).all(dim=1)]
        loose = tol * settings.tolerances.sample_tol_factor
        hits = q[count_zeros(problem.Ln, q, loose) >= min_zeros(problem, settings)]
        state.candidates += int(hits.shape[0])
        guide.pool[open_] *= self.growth
        masks = zero_masks(problem.Ln, hits, loose)
        return masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]

    def stats(self) -> dict[str, Any]:
        return {"guided_column_proposals": self.proposed, "guides_matched": self.guide.matched}


def match_columns(guide: Guide, problem: LayerProblem, state: ColumnState, tol: torch.Tensor) -> None:
    """Close the guides that found columns: greedy one-to-one matching of the guides' predicted inactive rows to the
    found columns' zero sets, on agreement (as guided.match_guides does with found samples)."""
    guide.open[:] = True
    if state.columns.shape[0] == 0:
        return
    zero = zero_masks(problem.Ln, state.columns, tol).cpu().to(torch.float64)
    predicted = (guide.margin < 0).to(torch.float64)
    agree = (predicted @ zero.T + (1 - predicted) @ (1 - zero).T) / zero.shape[1]  # (guides, columns), no (g, k, m)
    for _ in range(min(agree.shape)):
        i, k = divmod(int(agree.argmax()), agree.shape[1])
        if agree[i, k] < 0:
            break
        guide.open[i] = False
        agree[i, :] = -math.inf
        agree[:, k] = -math.inf
