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


def sparsity_matching(problem: LayerProblem, Q_hat: torch.Tensor, zero_tol: torch.Tensor) -> float:
    """Fraction of (sample, neuron) pairs where the batch recovered from columns Q̂ (b × b) is consistent:
    pre-activation > 0 exactly where Dᵀ = L Q̂ is non-zero (1.0 for the true columns). −1 if Q̂ is singular."""
    s, _ = column_scales(problem, Q_hat)
    try:
        Z = torch.linalg.solve(Q_hat * s[None, :], problem.A.T) + problem.bias[None, :]
    except RuntimeError:  # torch.linalg.LinAlgError: singular selection
        return -1.0
    active = ((problem.Ln @ Q_hat).abs() > zero_tol[:, None]).T
    return float(((Z > 0) == active).to(torch.float64).mean())


def improve_by_swaps(problem: LayerProblem, columns: torch.Tensor, chosen: torch.Tensor, zero_counts: torch.Tensor,
                     zero_tol: torch.Tensor, *, pool: int, rounds: int = 4) -> torch.Tensor:
    """The second greedy stage: indices of `chosen` (b,) into `columns` (j, b) after swaps.

    Each round tries every unselected candidate among the `pool` sparsest in every position and makes
    the single swap that raises `sparsity_matching` most; it stops when no swap helps, or after `rounds`.
    """
    chosen = chosen.clone()
    best = sparsity_matching(problem, columns[chosen].T, zero_tol)
    order = torch.argsort(zero_counts, descending=True)[:pool].tolist()
    for _ in range(rounds):
        swap: tuple[int, int] | None = None
        for cand in (i for i in order if i not in set(chosen.tolist())):
            for pos in range(chosen.numel()):
                trial = chosen.clone()
                trial[pos] = cand
                score = sparsity_matching(problem, columns[trial].T, zero_tol)
                if score > best + 1e-12:
                    best, swap = score, (pos, cand)
        if swap is None:
            break
        chosen[swap[0]] = swap[1]
    return chosen
