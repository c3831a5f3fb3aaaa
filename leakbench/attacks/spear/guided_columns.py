"""Guided column search (leakbench addition, issue 44): a guide's draws for the column search.

Where the attacked layer feeds a classifier with fewer classes than b (FC-2: layer 1, then the 10-class
classifier), the next layer's gradient dL/dW2 = Σ_i δ_i h_iᵀ has rank ≤ 9 (each δ_i = (p_i − e_{y_i})/b has
entries summing to zero), so the next-layer fit of the deflated search (fit.py) has no row space to fit in,
and SPEAR runs its column search (search.py) on the attacked layer's gradient alone. That search drew its
b−1 rows uniformly, a hit with probability ≈ 2^−(b−1): past b ≈ 25 it finds nothing, and spear-guided's
guide was computed and never asked. This source gives the column search the guide's proposals (`ColumnGuides`:
draws within each open guide's predicted zeros, guides projected onto the complement of the found columns, and a
sweep of that complement for the last two samples). Everything after the proposal is the column search's:
refinement, unique kernel, zero count, the next-layer weight check, leakbench's LP check, selection, scale from
dL/db and the ReLU verification.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from leakbench.attacks.spear.candidates import new_patterns, zero_masks
from leakbench.attacks.spear.deflation import null_basis
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.guided import Guide, close_matched, make_guide, row_margins
from leakbench.attacks.spear.search import ColumnState
from leakbench.attacks.spear.state import SearchSettings


class ColumnGuides:
    """A guide's proposals for the column search (`search.search_columns`' `propose`): zero masks (k, m), or None
    when no guide is left to follow (every guide matched to a found column).

    A guide's most confidently inactive rows are often inactive for many samples at once (rows whose weights oppose
    every image), so the kernel of a block of them is several samples' span. Each proposal is therefore b−1 + e rows
    (e = 0 … `max_extra`) drawn uniformly among the guide's most confident fraction (½, ¾ or all, in turn) of the
    rows it predicts inactive: another sample is inactive on all of them with probability ≈ 2^−(b−1+e), and the
    guide's sample is wherever the drawn rows are truly inactive for it. The column search refines every mask to its
    exact zero set (`search.consider`).

    Each found column sharpens the guides still open (`projected_margins`): a missing sample's input coordinates p_j
    (a row of Q⁻¹) are orthogonal to every found column q_i (p_j·q_i = 0 for i ≠ j), so only a guide's component
    in the complement of the found columns predicts anything; projecting onto it removes the rest of its error.
    When at most `sweep_below` samples are missing and two turns found nothing, the guides are replaced by a sweep
    of that complement (`sweep_margins`): with two missing, each open guide is a mixture of both, and random points
    of the plane they span, at the guides' scale, land in the missing samples' own ReLU cells."""

    def __init__(self, guide: Guide, per_turn: int = 256, max_extra: int = 4,
                 fractions: tuple[float, ...] = (0.5, 0.75, 1.0), sweep_below: int = 2,
                 more: Callable[[int], torch.Tensor | None] | None = None, more_runs: int = 2) -> None:
        self.guide, self.per_turn, self.max_extra, self.fractions = guide, per_turn, max_extra, fractions
        self.sweep_below, self.more, self.more_runs, self.runs_made = sweep_below, more, more_runs, 0
        self.proposed = self.stalled = self.found_at = self.swept = 0
        self.margin, self.projected_at = guide.margin, 0

    def __call__(self, problem: LayerProblem, state: ColumnState, tol: torch.Tensor, settings: SearchSettings,
                 gen: torch.Generator) -> torch.Tensor | None:
        if self.more is not None and self.stalled >= 3 and self.runs_made < self.more_runs:
            self._add_guides(problem, self.more(self.runs_made))
        guide = self.guide
        match_columns(guide, problem, state, tol)
        need = problem.b - 1
        if need < 1 or not bool(guide.open.any()):
            return None
        margin = self._margins(problem, state, gen)
        ranks = (confidence_ranks(margin), distinct_ranks(margin, zero_masks(problem.Ln, state.columns, tol).cpu()))
        inactive = (margin < 0).sum(dim=1)
        repeats = max(2, min(self.per_turn, settings.max_draws - state.draws) // margin.shape[0])
        masks = []
        for t in range(repeats):
            fraction = self.fractions[t % len(self.fractions)]
            count = need + (t // len(self.fractions)) % (self.max_extra + 1)
            limit = (inactive * fraction).long().clamp(min=count, max=problem.m)
            masks.append(draw_within(ranks[t % 2], limit, count, gen))
        out = torch.cat(masks)
        state.draws += int(out.shape[0])
        self.proposed += int(out.shape[0])
        out = out.to(problem.Ln.device)
        return out[new_patterns(out, state, settings.tolerances.max_new_per_chunk)]

    def _add_guides(self, problem: LayerProblem, features: torch.Tensor | None) -> None:
        """Another run of the guide (`more`: CPA from another seed) joins the open guides when the search stalls: a
        sample one run images poorly another often images well (FC-2 w1000 b = 64 seed 2: 48 of 64 with one run, 64
        of 64 with three)."""
        self.runs_made += 1
        self.stalled = 0
        if features is None:
            return
        new, old = make_guide(problem, features, 1.0), self.guide  # `pool`: unused by the column search
        assert old.rows is not None and new.rows is not None
        self.guide = Guide(margin=torch.cat([old.margin, new.margin]), pool=torch.cat([old.pool, new.pool]),
                           open=torch.cat([old.open, new.open]), rows=torch.cat([old.rows, new.rows]))
        self.projected_at = -1

    def _margins(self, problem: LayerProblem, state: ColumnState, gen: torch.Generator) -> torch.Tensor:
        """The open guides' margins (g, m) for this turn: projected onto the complement of the found columns, or a
        sweep of that complement when at most `sweep_below` samples are missing and two turns found nothing."""
        guide = self.guide
        if guide.rows is not None and state.found != self.projected_at:
            self.margin, self.projected_at = projected_margins(problem, guide.rows, state.columns), state.found
        self.stalled = 0 if state.found != self.found_at else self.stalled + 1
        self.found_at = state.found
        if guide.rows is not None and problem.b - state.found <= self.sweep_below and self.stalled >= 2:
            self.swept += 1
            return sweep_margins(problem, state.columns, guide.rows[guide.open.to(guide.rows.device)], self.per_turn,
                                 gen)
        return self.margin[guide.open]

    def stats(self) -> dict[str, Any]:
        return {"guided_column_proposals": self.proposed, "guides_matched": self.guide.matched,
                "complement_sweeps": self.swept, "guide_runs": 1 + self.runs_made}


def confidence_ranks(margin: torch.Tensor) -> torch.Tensor:
    """Per guide (g, m): each row's rank by how confidently the guide predicts it inactive (0: most negative)."""
    return margin.argsort(dim=1).argsort(dim=1)


def distinct_ranks(margin: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
    """Per guide (g, m): its predicted-inactive rows first, those inactive for the fewest other samples (open guides'
    predictions and the found columns' exact zero sets `found` (k, m)) first among them, then by confidence. Where
    the samples' patterns overlap (inputs ≥ 0 and no bias: the rows opposing every image), a block of such rows
    leaves the guide's sample alone in its kernel sooner than its most confident rows do."""
    predicted = margin < 0
    others = predicted.sum(dim=0) + found.sum(dim=0) - predicted.to(torch.long)  # (g, m)
    m = margin.shape[1]
    key = torch.where(predicted, others, others.new_full((), 2 * m + 1)) * (m + 1) + confidence_ranks(margin)
    return key.argsort(dim=1).argsort(dim=1)


def projected_margins(problem: LayerProblem, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """The guides' margins (g, m) from their row coordinates c (g, b) projected onto the complement of the found
    columns (k, b) (guided.make_guide's margin otherwise)."""
    N = null_basis(columns, problem.b)
    return row_margins(problem, rows @ N @ N.T)


def sweep_margins(problem: LayerProblem, columns: torch.Tensor, rows: torch.Tensor, count: int,
                  gen: torch.Generator) -> torch.Tensor:
    """Margins (count, m) of random points of the complement of the found columns (k, b): uniform directions, norms
    log-uniform in [¼, 4] × the median norm of the open guides' projected coordinates `rows` (g, b)."""
    N = null_basis(columns, problem.b)
    v = torch.randn(count, N.shape[1], generator=gen, dtype=N.dtype).to(N.device)
    scale = float((rows @ N).norm(dim=1).median())
    factor = torch.exp((torch.rand(count, 1, generator=gen, dtype=N.dtype) * 2 - 1) * math.log(4.0)).to(N.device)
    return row_margins(problem, ((v / v.norm(dim=1, keepdim=True)) * scale * factor) @ N.T)


def draw_within(rank: torch.Tensor, limit: torch.Tensor, count: int, gen: torch.Generator) -> torch.Tensor:
    """Masks (g, m): per guide, `count` rows drawn uniformly among its `limit` most confident ones (rank < limit)."""
    u = torch.rand(rank.shape, generator=gen, dtype=torch.float64)
    u[rank >= limit[:, None]] = 2.0
    picked: torch.Tensor = u.argsort(dim=1).argsort(dim=1) < count
    return picked


def match_columns(guide: Guide, problem: LayerProblem, state: ColumnState, tol: torch.Tensor) -> None:
    """Close the guides that found columns: greedy one-to-one matching of the guides' predicted inactive rows to the
    found columns' zero sets, on agreement (as guided.match_guides does with found samples)."""
    guide.open[:] = True
    if state.columns.shape[0] == 0:
        return
    zero = zero_masks(problem.Ln, state.columns, tol).cpu().to(torch.float64)
    predicted = (guide.margin < 0).to(torch.float64)
    agree = (predicted @ zero.T + (1 - predicted) @ (1 - zero).T) / zero.shape[1]  # (guides, columns), no (g, k, m)
    close_matched(guide.open, agree)
