"""SPEAR's search with deflation: each recovered sample shrinks the problem by one dimension.

With k samples known (rows c_i of C = Q⁻¹), every missing column q_j of Q is orthogonal to
them, so q_j = N y_j for an orthonormal basis N of their null space (b × (b−k)). Sampling then
needs (b−k−1)-row submatrices of L N, and a draw hits sample j with probability
C(z_j, b−k−1)/C(m, b−k−1): the hardest samples are searched last, in the smallest space.
Candidate patterns are turned into samples and tested with the next layer's gradient (fit.py).

This module is the deflated space and its draws: the null basis (`null_basis`), the rows of L N (`reduced_rows`),
one chunk of draws there (`draw_patterns`) and their patterns' refinement and fit (`accept_patterns`). The
search's state is samples.py's, which fits it keeps acceptance.py's, the fits in the missing row space
rowspace.py's, the completion and verification completion.py's; which proposals are made when is the
scheduler's (scheduler.py), and the proposals themselves are the sources'.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from leakbench.attacks.spear.acceptance import accept_fits, fits_with_free_rows
from leakbench.attacks.spear.candidates import (
    canonical,
    extra_zeros,
    kernel_on,
    new_patterns,
    one_per_direction,
    unique_kernel,
    zero_masks,
)
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.rowspace import fits_in_row_space
from leakbench.attacks.spear.samples import SampleState, remember_directions
from leakbench.attacks.spear.sampling import count_zeros, draw_rows, kernel_directions, split_kernels
from leakbench.attacks.spear.state import SearchSettings, charge_undrawable
from leakbench.attacks.spear.tolerances import TOLERANCES


def null_basis(C: torch.Tensor, b: int) -> torch.Tensor:
    """Orthonormal basis (b × (b−k)) of the vectors orthogonal to the k rows of C."""
    if C.shape[0] == 0:
        return torch.eye(b, dtype=C.dtype, device=C.device)
    _, _, Vh = torch.linalg.svd(C, full_matrices=True)
    null: torch.Tensor = Vh[C.shape[0]:].T
    return null


def reduced_rows(problem: LayerProblem, N: torch.Tensor, tol: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unit rows of L N, their zero tolerance (same absolute size as in L), and the live rows.

    A row whose projection is at the noise level vanishes for every remaining sample (the
    neuron was active only for samples already found): it is not live, i.e. neither drawn nor
    counted, though it still belongs to every exact zero set.
    """
    LN = problem.L @ N
    norms = LN.norm(dim=1)
    scale = problem.L.norm(dim=1) / norms.clamp_min(1e-300)
    live = norms > TOLERANCES.live_rows * tol * problem.L.norm(dim=1)
    return LN / norms.clamp_min(1e-300)[:, None], tol * scale, live


RowWeights = Callable[[LayerProblem, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
"""(problem, N, live rows) → row weights for a chunk's draws: (live,) shared by all draws of the chunk,
(draws, live) one row per draw (its count is the chunk's size), or None for uniform draws."""


def draw_patterns(problem: LayerProblem, N: torch.Tensor, tol: torch.Tensor, state: SampleState,
                  settings: SearchSettings, gen: torch.Generator, weights: RowWeights) -> torch.Tensor:
    """One chunk of draws in the reduced space; the new loose zero masks (k, m), sparsest first.

    `weights` is asked once the chunk can be drawn (enough live rows); weights of shape (draws, live)
    set the chunk's size (guided.py), otherwise the chunk is `settings.chunk` draws within the budget.
    """
    bp = N.shape[1]
    LNn, tol_r, live = reduced_rows(problem, N, tol)
    loose = tol_r * settings.tolerances.sample_tol_factor
    count = min(settings.chunk, settings.max_draws - state.draws)
    if int(live.sum()) < bp - 1:
        charge_undrawable(state, count, int(live.sum()), problem.m, bp - 1)
        return torch.zeros(0, problem.m, dtype=torch.bool, device=problem.L.device)
    state.undrawable = ""
    w = weights(problem, N, live)
    if w is not None and w.dim() == 2:
        count = w.shape[0]
    idx = draw_rows(int(live.sum()), bp, count, gen, weights=w)
    y, deficient = kernel_directions(LNn[live], idx)
    state.draws += count
    t = settings.tolerances
    if problem.b >= t.split_from_b and bp <= t.split_max_missing and bool(deficient.any()):  # kernels of dim ≥ 2
        split_gen = torch.Generator(device=gen.device).manual_seed(state.draws)  # gen's stream stays as it was
        split = idx[deficient][:t.split_max_draws]
        state.kernels_split += int(split.shape[0])
        y = torch.cat([y, split_kernels(LNn[live], split, tol_r[live], split_gen, t.split_tries)])
    y = y[torch.isfinite(y).all(dim=1)]
    need = bp - 1 + extra_zeros(int(live.sum()), settings)
    counts = count_zeros(LNn[live], y, loose[live])
    order = torch.argsort(counts, descending=True)
    hits = y[order[counts[order] >= need]]
    if problem.b >= t.one_per_direction_from_b:  # the sparsest pattern of each direction (hits are sparsest first)
        hits = hits[one_per_direction(hits, t.direction_cos, 4 * t.max_new_per_chunk)]
    state.candidates += int(hits.shape[0])
    masks = zero_masks(LNn, hits, loose)
    return masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]


def accept_patterns(problem: LayerProblem, N: torch.Tensor, masks: torch.Tensor, tol: torch.Tensor,
                    state: SampleState, residual_tol: float, doubt: float = 0.0) -> None:
    """Refine reduced-space patterns to exact zero sets, fit samples, keep the new consistent ones.

    `doubt` > 0: zero rows with |Ln_r·q| above doubt × their tolerance are free in the first fit
    round (one fit per pattern), like rows that are not live (measured: docs/notebook/spear-measurements.md).
    """
    if masks.shape[0] == 0:
        return
    state.patterns += int(masks.shape[0])
    LNn, tol_r, live = reduced_rows(problem, N, tol)
    y, _ = kernel_on(LNn, masks & live)
    exact = zero_masks(LNn, y, tol_r) & live
    y, S = kernel_on(LNn, exact & live)
    exact = zero_masks(LNn, y, tol_r) | ~live
    doubtful = exact & live & ~zero_masks(LNn, y, (doubt or TOLERANCES.doubt) * tol_r)
    if doubt > 0:
        consistent = fits_with_free_rows(problem, exact, ~live | doubtful, state, residual_tol)
    else:
        consistent = accept_fits(problem, exact, state, residual_tol, free=~live).consistent
    unique = unique_kernel(S, TOLERANCES.unique_gap)
    if doubt == 0:  # a second chance for the failed unique patterns, with their doubtful zero rows free
        again = torch.nonzero(unique & ~consistent & doubtful.any(dim=1)).flatten()
        if again.numel():
            consistent[again] = fits_with_free_rows(problem, exact[again], ~live | doubtful[again], state, residual_tol)
    q = canonical(y @ N.T)
    failed = torch.nonzero(unique & ~consistent).flatten()
    t = TOLERANCES
    if failed.numel() and problem.b >= t.row_space_from_b and state.found >= t.row_space_from * problem.b:
        consistent[failed] = fits_in_row_space(problem, N, q[failed], tol, state, residual_tol)
    remember_directions(state, q[unique & ~consistent])
