"""The closed-form last sample (leakbench addition, notes: pitfall 7), for both searches.

Paper route (columns of Q, search.py): `last_column_candidates` below. Deflated route (rows of C,
deflation.py): `complete_last_sample` (one least-squares solve) and `complete_samples` (the last
samples from remembered column directions).

The last column for the price of O(m) kernel solves:

With b−1 columns of Q known, the row c of Q⁻¹ that belongs to the missing sample is their null
vector, so that sample is x = α·Rᵀc for an unknown scale α (sign included). Its zero set
{r : α·(A c)_r + bias_r ≤ 0} changes only at the m breakpoints α_r = −bias_r / (A c)_r; one α
inside each interval between breakpoints gives every possible zero set, and the kernel of Ln
on that set is the missing column when the set is right.
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction


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


def complete_last_sample(problem: LayerProblem, C_known: torch.Tensor, tol: torch.Tensor,
                         *, determined: float = 1e-3) -> torch.Tensor:
    """The last sample's c, once b−1 samples are known; returns C with the new row last.

    The missing column q_j of Q = C⁻¹ is the null vector of the known rows. Every other column
    satisfies c_k·q_i = δ_ki for the known k, so q_i = a_i + t_i q_j, where t_i is fixed by the
    zeros that sample i's own ReLU pattern forces on L q_i — unless L q_j (nearly) vanishes on
    those zeros. c_j is orthogonal to every well-determined q_i, satisfies c_j·u = 1 and, when
    the next layer's gradient is usable, puts its activation in that layer's row space with
    the pattern of L q_j. All three are linear in c_j: one least-squares solve.
    """
    _, _, Vh = torch.linalg.svd(C_known, full_matrices=True)
    qj = Vh[-1]
    Lqj = problem.L @ qj
    zero = ((C_known @ problem.A.T + problem.bias) <= 0).T.to(Lqj.dtype)
    La = problem.L @ torch.linalg.pinv(C_known)
    on_zeros = ((Lqj[:, None] ** 2) * zero).sum(0)
    t = -((La * Lqj[:, None]) * zero).sum(0) / on_zeros.clamp_min(1e-300)
    good = on_zeros.sqrt() > determined * Lqj.norm()
    Q_other = (torch.linalg.pinv(C_known) + qj[:, None] * t[None, :])[:, good]
    rows = [Q_other.T / Q_other.norm(dim=0)[:, None]]
    u = bias_direction(problem)
    rows.append(u[None] / u.norm())
    rhs = [torch.zeros(rows[0].shape[0], dtype=u.dtype, device=u.device), (1 / u.norm())[None]]
    if problem.P_next is not None:
        active = ((problem.Ln @ qj).abs() > tol).to(u.dtype)
        weight = 1 / problem.A.norm(dim=1).mean()
        rows.append(weight * problem.P_next @ (active[:, None] * problem.A))
        rhs.append(-weight * problem.P_next @ (active * problem.bias))
    cj = torch.linalg.lstsq(torch.cat(rows), torch.cat(rhs)[:, None]).solution[:, 0]
    return torch.cat([C_known, cj[None]])


def complete_samples(problem: LayerProblem, C_known: torch.Tensor, Q_rem: torch.Tensor) -> torch.Tensor:
    """All missing samples from the first layer alone, given the directions of their columns.

    `Q_rem` (b×k) holds unit directions of the k missing columns of Q = C⁻¹ (found as sparse
    directions even when their next-layer fit was ill-conditioned). Each known column is
    q_i = a_i + Q_rem t_i with C_known a = I; t_i ∈ R^k is fixed by the zeros of sample i's own
    ReLU pattern. Inverting the completed Q gives the missing rows up to scale; c·u = 1 fixes it.
    Returns C with the k new rows last.
    """
    a = torch.linalg.pinv(C_known)
    LQr = problem.L @ Q_rem
    La = problem.L @ a
    zero = ((C_known @ problem.A.T + problem.bias) <= 0).to(LQr.dtype)
    Mz = LQr.unsqueeze(0) * zero.unsqueeze(-1)
    normal = Mz.transpose(1, 2) @ LQr.unsqueeze(0)
    rhs = -(Mz.transpose(1, 2) @ La.T.unsqueeze(-1))
    t = torch.linalg.lstsq(normal, rhs).solution[..., 0]
    Q = torch.cat([a + Q_rem @ t.T, Q_rem], dim=1)
    rows = torch.linalg.inv(Q)[C_known.shape[0]:]
    rows = rows / (rows @ bias_direction(problem))[:, None]
    return torch.cat([C_known, rows])
