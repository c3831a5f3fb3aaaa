"""The closed-form last sample (leakbench addition, notes: pitfall 7), for both searches.

Paper route (columns of Q, search.py): `last_column_candidates` below. Deflated route (rows of C,
deflation.py): `complete_last_sample` (one least-squares solve), `complete_samples` (the last
samples from remembered column directions) and `samples_from_directions` (missing samples from their
directions while others are still missing).

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
from leakbench.attacks.spear.fit import bias_direction, project_out_next
from leakbench.attacks.spear.tolerances import TOLERANCES


def null_vector(Q_known: torch.Tensor) -> torch.Tensor:
    """Unit vector orthogonal to the k known columns (b×k, k = b−1)."""
    U: torch.Tensor = torch.linalg.svd(Q_known, full_matrices=True)[0]
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
    Vh: torch.Tensor = torch.linalg.svd(M, full_matrices=False)[2]
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
    directions even when their next-layer fit was ill-conditioned). Each known column follows from
    them (`known_columns`); inverting the completed Q gives the missing rows up to scale; c·u = 1
    fixes it. Returns C with the k new rows last.
    """
    Q = torch.cat([known_columns(problem, C_known, Q_rem), Q_rem], dim=1)
    rows = torch.linalg.inv(Q)[C_known.shape[0]:]
    rows = rows / (rows @ bias_direction(problem))[:, None]
    return torch.cat([C_known, rows])


def known_columns(problem: LayerProblem, C_known: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """The columns (b × (b−k)) of Q = C⁻¹ that belong to the known samples, given a basis `span` (b×k)
    of the space the k missing columns span (their directions, or the null space of C_known).

    Each is q_i = a_i + span·t_i with C_known a = I; t_i ∈ R^k is fixed by the zeros of sample i's own
    ReLU pattern (L q_i vanishes there) when it has k independent ones (`determined_columns`).
    """
    return solve_columns(problem, C_known, span, *zero_row_systems(problem, C_known, span))


def zero_row_systems(problem: LayerProblem, C_known: torch.Tensor, span: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """L·span (m×k), and the same rows kept only where each known sample is inactive (its zero rows; (j, m, k))."""
    L_span = problem.L @ span
    zero = ((C_known @ problem.A.T + problem.bias) <= 0).to(L_span.dtype)
    return L_span, L_span.unsqueeze(0) * zero.unsqueeze(-1)


def solve_columns(problem: LayerProblem, C_known: torch.Tensor, span: torch.Tensor, L_span: torch.Tensor,
                  Mz: torch.Tensor) -> torch.Tensor:
    """`known_columns` from its zero-row systems (`zero_row_systems`): t_i by least squares on each."""
    a: torch.Tensor = torch.linalg.pinv(C_known)
    rhs = -(Mz.transpose(1, 2) @ (problem.L @ a).T.unsqueeze(-1))
    t: torch.Tensor = torch.linalg.lstsq(Mz.transpose(1, 2) @ L_span.unsqueeze(0), rhs).solution[..., 0]
    return a + span @ t.T


def determined_columns(problem: LayerProblem, C_known: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Whether each known sample's zero rows fix its column (`known_columns`): σ_min/σ_max of its zero-row
    system above TOLERANCES.column_cond.

    Measured (TinyImageNet FC-6 width 400 trained 20 epochs, b = 100, random true samples taken as found):
    a sample with fewer zero rows than the k unknowns (41 of them for k = 70) has conditioning 1e-20 and its
    least-squares column is 5 % off (1 − |cos|), which bent the whole row space; every other column has
    conditioning ≥ 6e-6 and is exact to 1e-10.
    """
    return fixed_by(zero_row_systems(problem, C_known, span)[1])


def fixed_by(Mz: torch.Tensor) -> torch.Tensor:
    """`determined_columns` from the zero-row systems Mz (j, m, k)."""
    S = torch.linalg.svdvals(Mz)
    determined: torch.Tensor = S[:, -1] > TOLERANCES.column_cond * S[:, 0]
    return determined


def missing_row_space(problem: LayerProblem, C_known: torch.Tensor, N: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis B of the rows the k missing samples can have, given the known ones (C_known)
    and the null space N (b×k) of C_known: a missing sample's row is orthogonal to every known sample's
    column (`known_columns`, with N as the span), so it lies in their orthogonal complement — k-dimensional,
    plus one dimension per known column its zero rows do not fix (`determined_columns`: left out)."""
    L_span, Mz = zero_row_systems(problem, C_known, N)
    return complement(solve_columns(problem, C_known, N, L_span, Mz)[:, fixed_by(Mz)])


def complement(columns: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis (b × (b − j)) of the orthogonal complement of `columns` (b × j, independent)."""
    U, _, _ = torch.linalg.svd(columns, full_matrices=True)
    B: torch.Tensor = U[:, columns.shape[1]:]
    return B


def fit_in_row_space(problem: LayerProblem, active: torch.Tensor, B: torch.Tensor, cond_floor: float = 1e-2,
                     rounds: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-layer fits of samples c = B w (B: b×k) with ReLU patterns `active` (j, m, 1 = active): c (j, b), the
    relative residual (inf where σ_min < cond_floor·σ_max) and whether each pattern reproduces itself.

    The sample's activation lies in the next layer's row space and c·u = 1: one least squares per pattern over
    k unknowns instead of b (`fit.fit_once_normal` solves the same system over all b). With `rounds` > 1 each fit
    is repeated with the fitted sample's own pattern, as `fit.fit_samples` does over all b
    (`Tolerances.row_space_rounds`). An empty row space (every sample found) fits nothing: residual inf.
    """
    if B.shape[1] == 0:
        j = active.shape[0]
        return (B.new_zeros(j, B.shape[0]), B.new_full((j,), float("inf")),
                torch.zeros(j, dtype=torch.bool, device=B.device))
    for _ in range(rounds - 1):
        c, _, _ = fit_once_in_row_space(problem, active, B, cond_floor)
        active = (c @ problem.A.T + problem.bias > 0).to(active.dtype)
    return fit_once_in_row_space(problem, active, B, cond_floor)


def fit_once_in_row_space(problem: LayerProblem, active: torch.Tensor, B: torch.Tensor, cond_floor: float
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round of `fit_in_row_space`."""
    assert problem.P_next is not None
    k = B.shape[1]
    X = project_out_next(problem, active.unsqueeze(-1) * (problem.A @ B).unsqueeze(0))
    pb = project_out_next(problem, (active * problem.bias).unsqueeze(-1))[..., 0]
    u = bias_direction(problem)
    weight = problem.A.norm(dim=1).mean() / u.norm()
    M = torch.cat([X, (weight * (u @ B)).expand(active.shape[0], 1, k)], dim=1)
    rhs = torch.cat([-pb, weight.expand(active.shape[0], 1)], dim=1)
    w = torch.linalg.lstsq(M, rhs.unsqueeze(-1)).solution[..., 0]
    c = w @ B.T
    z = c @ problem.A.T + problem.bias
    residual = (M @ w.unsqueeze(-1))[..., 0].sub(rhs).norm(dim=1) / (active * z).norm(dim=1).clamp_min(1e-300)
    S = torch.linalg.svdvals(M)
    residual[S[:, -1] <= cond_floor * S[:, 0]] = float("inf")
    clear = z.abs() > problem.slack * z.abs().amax(dim=1, keepdim=True)
    stable = (((z > 0) == (active > 0)) | ~clear).all(dim=1)
    return c, residual, stable


def samples_from_directions(problem: LayerProblem, B: torch.Tensor, q: torch.Tensor, tol: torch.Tensor,
                            cond_floor: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Missing samples from their column directions `q` (j, b) while others are still missing: c (j, b),
    the relative next-layer residual (inf where ill-conditioned) and whether each pattern reproduces itself.

    Each is fitted in the missing samples' row space B (`missing_row_space`, `fit_in_row_space`: k unknowns
    instead of b), with the ReLU pattern of L q (active where |Ln q| > tol).
    Measured (TinyImageNet FC-6 width 400 trained 1 epoch, b = 64): the fit over all b unknowns is
    ill-conditioned for the sparse samples (σ_min/σ_max median 8.8e-3 at ≈ 140 active rows), while 24
    of the 39 missing directions were known.
    """
    active = ((problem.Ln @ q.T).abs() > tol[:, None]).T.to(problem.A.dtype)  # (j, m)
    return fit_in_row_space(problem, active, B, cond_floor, TOLERANCES.row_space_rounds)
