"""SPEAR's selection step: k columns out of the filtered candidates, greedily.

First stage (`select_independent`): sparsest first (most zero rows), each kept only if it is linearly
independent of those already kept. Second stage (`improve_by_swaps`): swap a selected column for an
unselected candidate while that raises the batch's sparsity-matching score (`sparsity_matching`: how
often the recovered pre-activations' signs agree with the zeros of the recovered Dᵀ = L Q), as the paper
describes its second greedy stage (Dimitrov et al. 2024; its code is not available here, so this follows
the published description). spear-paper runs both; leakbench's per-candidate LP check
(`candidates.pattern_margin`) makes the second stage unnecessary on the deflated search's fallback.
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.solve import column_scales

SWAP_BATCH = 512
"""Trial selections scored at once by the second greedy stage (bounds its memory: SWAP_BATCH·m·b floats)."""


def select_independent(directions: torch.Tensor, zero_counts: torch.Tensor, k: int, *, rtol: float,
                       pool: int | None = None) -> torch.Tensor:
    """Indices (at most k, in the order chosen) of rows of `directions` (j, b) picked greedily.

    Rows are taken by decreasing `zero_counts` (j,), among the `pool` sparsest if given; a row is kept
    when it raises the rank of those kept (`torch.linalg.matrix_rank` with relative tolerance `rtol`).
    """
    order = torch.argsort(zero_counts, descending=True)
    if pool is not None:
        order = order[:pool]
    chosen: list[int] = []
    for i in order.tolist():
        if len(chosen) >= k:
            break
        if not chosen or int(torch.linalg.matrix_rank(directions[[*chosen, i]], rtol=rtol)) > len(chosen):
            chosen.append(i)
    return torch.as_tensor(chosen, dtype=torch.long, device=directions.device)


def sparsity_matching(problem: LayerProblem, Q_hats: torch.Tensor, zero_tol: torch.Tensor) -> torch.Tensor:
    """Per selection Q̂ (Q_hats: (n, b, b), its columns the candidates), the fraction of (sample, neuron) pairs
    where the batch recovered from Q̂ is consistent: pre-activation > 0 exactly where Dᵀ = L Q̂ is non-zero
    (1.0 for the true columns); −1 for a singular selection. Batched: one call scores every trial swap."""
    n, b = Q_hats.shape[0], problem.b
    s, _ = column_scales(problem, Q_hats)
    Zt, info = torch.linalg.solve_ex(Q_hats * s[:, None, :], problem.A.T.expand(n, b, -1))
    active = ((problem.Ln @ Q_hats).abs() > zero_tol[:, None]).transpose(1, 2)
    score = ((Zt + problem.bias > 0) == active).to(torch.float64).mean((1, 2))
    return torch.where(info == 0, score, torch.full_like(score, -1.0))


def improve_by_swaps(problem: LayerProblem, columns: torch.Tensor, chosen: torch.Tensor, zero_counts: torch.Tensor,
                     zero_tol: torch.Tensor, *, pool: int | None = None, rounds: int = 4) -> torch.Tensor:
    """The second greedy stage: indices of `chosen` (b,) into `columns` (j, b) after swaps.

    Each round scores every unselected candidate (among the `pool` sparsest if given) in every position
    and makes the single swap that raises `sparsity_matching` most (the first such, candidates sparsest
    first); it stops when no swap helps, or after `rounds`.
    """
    chosen = chosen.clone()
    best = float(sparsity_matching(problem, columns[chosen].T[None], zero_tol)[0])
    order = torch.argsort(zero_counts, descending=True)[:pool]
    for _ in range(rounds):
        cands = order[~torch.isin(order, chosen)]
        if cands.numel() == 0:
            break
        trials = chosen.repeat(cands.numel(), chosen.numel(), 1)  # (candidate, position, b)
        trials[:, range(chosen.numel()), range(chosen.numel())] = cands[:, None]
        scores = torch.cat([sparsity_matching(problem, columns[part].transpose(1, 2), zero_tol)
                            for part in trials.flatten(0, 1).split(SWAP_BATCH)])
        top = int(scores.argmax())
        if float(scores[top]) <= best + 1e-12:
            break
        best, chosen = float(scores[top]), trials.flatten(0, 1)[top].clone()
    return chosen
