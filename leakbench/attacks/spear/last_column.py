"""The last column for the price of O(m) kernel solves (notes: pitfall 7).

With b−1 columns of Q known, the row c of Q⁻¹ that belongs to the missing sample is their null
vector, so that sample is x = α·Rᵀc for an unknown scale α (sign included). Its zero set
{r : α·(A c)_r + bias_r ≤ 0} changes only at the m breakpoints α_r = −bias_r / (A c)_r; one α
inside each interval between breakpoints gives every possible zero set, and the kernel of Ln
on that set is the missing column when the set is right.
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem


def null_vector(Q_known: torch.Tensor) -> torch.Tensor:
    """Unit vector orthogonal to the k known columns (b×k, k = b−1)."""
    U, _, _ = torch.linalg.svd(Q_known, full_matrices=True)
    return U[:, -1]


def zero_sets_along_line(problem: LayerProblem, c: torch.Tensor) -> torch.Tensor:
    """Boolean masks (k, m) of the zero sets of x = α·Rᵀc, one per interval of α."""
    u = problem.A @ c
    bias = problem.bias
    ok = u.abs() > 0
    breaks = torch.sort(-bias[ok] / u[ok]).values
    breaks = torch.unique_consecutive(breaks)
    span = (breaks[-1] - breaks[0]).abs() + breaks.abs().max() + 1.0
    mids = torch.cat([breaks[:1] - span, (breaks[1:] + breaks[:-1]) / 2, breaks[-1:] + span])
    z = mids[:, None] * u[None, :] + bias[None, :]
    return z <= 0


def last_column_candidates(problem: LayerProblem, Q_known: torch.Tensor) -> torch.Tensor:
    """Candidate directions (k, b) for the missing column, one per zero set with ≥ b−1 rows."""
    b = problem.b
    masks = zero_sets_along_line(problem, null_vector(Q_known))
    masks = masks[masks.sum(1) >= b - 1]
    if masks.shape[0] == 0:
        return torch.empty(0, b, dtype=problem.Ln.dtype, device=problem.Ln.device)
    M = problem.Ln.unsqueeze(0) * masks.unsqueeze(-1).to(problem.Ln.dtype)
    _, _, Vh = torch.linalg.svd(M, full_matrices=False)
    return Vh[:, -1, :]
