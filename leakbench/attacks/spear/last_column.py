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

from dataclasses import dataclass

import torch

from leakbench.attacks.spear.candidates import kernel_on, one_per_direction, unique_kernel, zero_masks
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import SampleFit, bias_direction, project_out_next
from leakbench.attacks.spear.select import select_independent
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
                         *, determined: float = TOLERANCES.last_determined) -> torch.Tensor:
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
    system above `Tolerances.column_cond`.

    Measured: docs/notebook/spear-measurements.md.
    """
    return fixed_by(zero_row_systems(problem, C_known, span)[1])


def fixed_by(Mz: torch.Tensor) -> torch.Tensor:
    """`determined_columns` from the zero-row systems Mz (j, m, k)."""
    S = torch.linalg.svdvals(Mz)
    determined: torch.Tensor = S[:, -1] > TOLERANCES.column_cond * S[:, 0]
    return determined


@dataclass(frozen=True)
class RowSpace:
    """The rows the missing samples can have (`missing_row_space`).

    basis (b × k, orthonormal): orthogonal to every found sample's determined column and to every `sure` direction;
    sure (s, b): unit directions of missing columns known for sure (`sure_directions`): a missing sample's row is
    orthogonal to every other sample's column, so each one known takes a dimension away from the other samples' fits;
    dual (s, b): per sure direction, the unit vector that gives its own sample's row that dimension back (in the span
    of the columns, orthogonal to all of them but that one: a row of their pseudo-inverse).
    """

    basis: torch.Tensor
    sure: torch.Tensor
    dual: torch.Tensor


def missing_row_space(problem: LayerProblem, C_known: torch.Tensor, N: torch.Tensor,
                      sure: torch.Tensor | None = None) -> RowSpace:
    """The row space (`RowSpace`) of the k missing samples, given the known ones (C_known), the null space N (b×k)
    of C_known and directions `sure` (s, b) of missing columns: a missing sample's row is orthogonal to every known
    sample's column (`known_columns`, with N as the span), so it lies in their orthogonal complement — k-dimensional,
    plus one dimension per known column its zero rows do not fix (`determined_columns`: left out) — and, unless
    it is that direction's sample, orthogonal to each sure direction too."""
    L_span, Mz = zero_row_systems(problem, C_known, N)
    columns = solve_columns(problem, C_known, N, L_span, Mz)[:, fixed_by(Mz)]
    if sure is None:
        sure = columns.new_zeros((0, columns.shape[0]))
    W = torch.cat([columns, sure.T], dim=1)
    dual = torch.linalg.pinv(W)[columns.shape[1]:]
    return RowSpace(basis=complement(W), sure=sure, dual=dual / dual.norm(dim=1, keepdim=True))


def sure_directions(problem: LayerProblem, q: torch.Tensor, clean: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Which unit directions q (j, b) of missing columns are known for sure (`RowSpace.sure`), given which have a
    clean kernel (`clean_kernels`): those whose exact zero set is not dominated — nearly all of it
    (`Tolerances.column_inside`) inside the larger zero set of another direction, the mark of a mixture of that
    column with others read as zero under the tolerance — and independent of the sparser ones kept
    (`select.select_independent`). Returns the indices kept.

    Measured: docs/notebook/spear-measurements.md.
    """
    zero = zero_masks(problem.Ln, q, tol).to(problem.Ln.dtype)
    count = zero.sum(dim=1)
    shared = zero @ zero.T
    dominated = ((shared >= TOLERANCES.column_inside * count[:, None]) & (count[None, :] > count[:, None])).any(dim=1)
    kept = torch.nonzero(clean & ~dominated).flatten()
    kept = kept[torch.argsort(count[kept], descending=True, stable=True)]
    kept = kept[one_per_direction(q[kept], TOLERANCES.direction_cos, q.shape[0])]
    return kept[select_independent(q[kept], count[kept], q.shape[0], rtol=TOLERANCES.select_rtol)]


def clean_kernels(problem: LayerProblem, q: torch.Tensor, tol: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Whether each unit direction q (j, b) has a clean one-dimensional kernel on its exact zero set in L: at least
    b − 1 + Tolerances.min_extra_zeros zero rows, σ_{b−1} > unique_gap·σ_1 (candidates.unique_kernel) and
    σ_b ≤ Tolerances.column_kernel·σ_{b−1}.

    The row count comes first: on b − 1 rows every direction has a kernel, and its σ_b is no test at all.
    Measured: docs/notebook/spear-measurements.md."""
    clean = torch.zeros(q.shape[0], dtype=torch.bool, device=q.device)
    for start in range(0, q.shape[0], block):  # (block, m, b) at a time
        zero = zero_masks(problem.Ln, q[start:start + block], tol)
        _, S = kernel_on(problem.Ln, zero)
        enough = zero.sum(dim=1) >= problem.b - 1 + TOLERANCES.min_extra_zeros
        clean[start:start + block] = enough & unique_kernel(S, TOLERANCES.unique_gap) & (
            S[:, -1] <= TOLERANCES.column_kernel * S[:, -2])
    return clean


def complement(columns: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis (b × (b − j)) of the orthogonal complement of `columns` (b × j, independent)."""
    U, _, _ = torch.linalg.svd(columns, full_matrices=True)
    B: torch.Tensor = U[:, columns.shape[1]:]
    return B


def fit_in_row_space(problem: LayerProblem, active: torch.Tensor, B: torch.Tensor,
                     cond_floor: float = TOLERANCES.cond_floor, rounds: int = 1) -> SampleFit:
    """Next-layer fits of samples c = B w with ReLU patterns `active` (j, m, 1 = active), B (b × k) for all or
    (j, b, k) one per fit: c (j, b), the relative residual (inf where σ_min < cond_floor·σ_max, or where σ_min <
    `Tolerances.cond_floor`·σ_max and the pattern has fewer than `Tolerances.row_space_spare` active rows beyond the k
    unknowns: the residual tests only those), whether each pattern reproduces itself (`consistent`) and the
    conditioning σ_min/σ_max.

    The sample's activation lies in the next layer's row space and c·u = 1: one least squares per pattern over
    k unknowns instead of b (`fit.fit_once_normal` solves the same system over all b). With `rounds` > 1 each fit
    is repeated with the fitted sample's own pattern, as `fit.fit_samples` does over all b
    (`Tolerances.row_space_rounds`). An empty row space (every sample found) fits nothing: residual inf.
    """
    j = active.shape[0]
    if B.shape[-1] == 0:
        return SampleFit(c=B.new_zeros(j, B.shape[-2]), residual=B.new_full((j,), float("inf")),
                         consistent=torch.zeros(j, dtype=torch.bool, device=B.device), cond=B.new_zeros(j))
    B = B.expand(j, *B.shape[-2:])
    for _ in range(rounds - 1):
        c = fit_once_in_row_space(problem, active, B, cond_floor).c
        active = (c @ problem.A.T + problem.bias > 0).to(active.dtype)
    return fit_once_in_row_space(problem, active, B, cond_floor)


def fit_once_in_row_space(problem: LayerProblem, active: torch.Tensor, B: torch.Tensor, cond_floor: float
                          ) -> SampleFit:
    """One round of `fit_in_row_space`, B (j, b, k)."""
    assert problem.P_next is not None
    X = project_out_next(problem, active.unsqueeze(-1) * (problem.A @ B))
    pb = project_out_next(problem, (active * problem.bias).unsqueeze(-1))[..., 0]
    u = bias_direction(problem)
    weight = problem.A.norm(dim=1).mean() / u.norm()
    M = torch.cat([X, weight * (u @ B).unsqueeze(1)], dim=1)
    rhs = torch.cat([-pb, weight.expand(active.shape[0], 1)], dim=1)
    w = torch.linalg.lstsq(M, rhs.unsqueeze(-1)).solution
    c = (B @ w)[..., 0]
    z = c @ problem.A.T + problem.bias
    residual = (M @ w)[..., 0].sub(rhs).norm(dim=1) / (active * z).norm(dim=1).clamp_min(1e-300)
    S = torch.linalg.svdvals(M)
    cond = S[:, -1] / S[:, 0]
    spare = active.sum(dim=1) - B.shape[-1]  # equations the residual tests beyond the unknowns
    t = TOLERANCES
    residual[(cond <= cond_floor) | ((cond < t.cond_floor) & (spare < t.row_space_spare))] = float("inf")
    clear = z.abs() > problem.slack * z.abs().amax(dim=1, keepdim=True)
    stable = (((z > 0) == (active > 0)) | ~clear).all(dim=1)
    return SampleFit(c=c, residual=residual, consistent=stable, cond=cond)


def samples_from_directions(problem: LayerProblem, space: RowSpace, q: torch.Tensor, tol: torch.Tensor,
                            cond_floor: float = TOLERANCES.noise_cond_floor) -> SampleFit:
    """Missing samples from their column directions `q` (j, b) while others are still missing (`fit_in_row_space`:
    c, residual, whether each pattern reproduces itself, conditioning).

    Each is fitted in the missing samples' row space (`missing_row_space`: k unknowns instead of b; a sure
    direction's own sample gets its dual dimension back), with the ReLU pattern of L q (active where |Ln q| > tol).
    Measured: docs/notebook/spear-measurements.md.
    """
    active = ((problem.Ln @ q.T).abs() > tol[:, None]).T.to(problem.A.dtype)  # (j, m)
    own = (q @ space.sure.T).abs() >= 1 - TOLERANCES.same_direction  # (j, s): q is that sure direction
    mine = own.any(dim=1)
    c, residual, cond = q.new_zeros(q.shape), q.new_full((q.shape[0],), float("inf")), q.new_zeros(q.shape[0])
    stable = torch.zeros(q.shape[0], dtype=torch.bool, device=q.device)
    for part, B in ((~mine, space.basis), (mine, own_bases(space, own[mine]))):
        if bool(part.any()):
            fit = fit_in_row_space(problem, active[part], B, cond_floor, TOLERANCES.row_space_rounds)
            c[part], residual[part], stable[part], cond[part] = fit.c, fit.residual, fit.consistent, fit.cond
    return SampleFit(c=c, residual=residual, consistent=stable, cond=cond)


def own_bases(space: RowSpace, own: torch.Tensor) -> torch.Tensor:
    """Per direction that is a sure one (`own`: (j, s), one True per row), the row space with that direction's dual
    vector added (j, b, k + 1)."""
    dual = space.dual[own.to(torch.long).argmax(dim=1)] if own.shape[0] else space.dual[:0]
    return torch.cat([space.basis.expand(own.shape[0], *space.basis.shape), dual.unsqueeze(-1)], dim=-1)
