"""SPEAR's filter step: which sampled directions are worth keeping (both searches).

The zero tolerance, the zero count a candidate needs (`min_zeros`), de-duplication of zero patterns
(`new_patterns`), refinement to the exact zero set with its unique-kernel test (`refine`), and
leakbench's per-candidate LP check that the pattern is a ReLU pattern at all (`pattern_margin`).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linprog

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.state import SearchSettings, SearchState
from leakbench.attacks.spear.tolerances import TOLERANCES


def zero_masks(Ln: torch.Tensor, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Boolean (k, m): which rows each direction q_k makes (numerically) zero."""
    return ((Ln @ q.T).abs() <= tol[:, None]).T


def pattern_keys(masks: torch.Tensor) -> list[bytes]:
    """A hashable key per zero pattern (rows of `masks`), for de-duplication across chunks."""
    packed = np.packbits(masks.cpu().numpy(), axis=1)
    return [row.tobytes() for row in packed]


def first_of_each_pattern(masks: torch.Tensor) -> torch.Tensor:
    """Indices (ascending) of the first row of each distinct zero pattern among `masks` (k, m)."""
    first: dict[bytes, int] = {}
    for i, key in enumerate(pattern_keys(masks)):
        first.setdefault(key, i)
    return torch.as_tensor(sorted(first.values()), dtype=torch.long, device=masks.device)


def kernel_on(Ln: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each zero set (k, m): the smallest right singular vector of Ln restricted to it, and
    all singular values (k, b), largest first."""
    M = Ln.unsqueeze(0) * masks.unsqueeze(-1).to(Ln.dtype)
    _, S, Vh = torch.linalg.svd(M, full_matrices=False)
    return Vh[:, -1, :], S


def unique_kernel(S: torch.Tensor, unique_gap: float) -> torch.Tensor:
    """Whether each zero set's kernel is one-dimensional, from its singular values S (k, b'): σ_{b'−1} >
    unique_gap·σ_1. With b' = 1 (one sample visible: `factors.visible_rank`) every direction is that one."""
    if S.shape[1] < 2:
        return torch.ones(S.shape[0], dtype=torch.bool, device=S.device)
    return S[:, -2] > unique_gap * S[:, 0]


def refine(Ln: torch.Tensor, masks: torch.Tensor, tol: torch.Tensor, unique_gap: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Re-solve each candidate on its whole zero set, then once more on the exact zero set.

    The b−1 sampled rows fix a direction only as well as that small block is conditioned; the
    ≈ m/2 zero rows of a true column fix it to working precision. A true column's exact zero
    set has a one-dimensional kernel. A mixture of samples i and j vanishes exactly on
    Z_i ∩ Z_j, where both q_i and q_j vanish: a kernel of dimension ≥ 2. Returns the refined
    directions, their exact zero masks, and the mask of candidates with a unique kernel.
    """
    q, _ = kernel_on(Ln, masks)
    exact = zero_masks(Ln, q, tol)
    q, S = kernel_on(Ln, exact)
    exact = zero_masks(Ln, q, tol)
    unique = unique_kernel(S, unique_gap)
    return q, exact, unique


def one_per_direction(y: torch.Tensor, cos_tol: float, limit: int) -> torch.Tensor:
    """Indices (ascending, at most `limit`) of the first row of each group of rows of y within cos_tol (1 − |cos|)
    of it (`Tolerances.one_per_direction_from_b`)."""
    u = y / y.norm(dim=1, keepdim=True)
    left = torch.ones(u.shape[0], dtype=torch.bool, device=u.device)
    keep: list[int] = []
    while bool(left.any()) and len(keep) < limit:
        i = int(torch.nonzero(left)[0])
        keep.append(i)
        left &= (u @ u[i]).abs() < 1 - cos_tol
    return torch.as_tensor(keep, dtype=torch.long, device=u.device)


def canonical(q: torch.Tensor) -> torch.Tensor:
    """Unit directions with the sign fixed (largest-magnitude entry positive)."""
    q = q / q.norm(dim=1, keepdim=True)
    pivot = q.abs().argmax(dim=1)
    return q * torch.sign(q.gather(1, pivot[:, None]))


def is_new(q: torch.Tensor, known: torch.Tensor, *, cos_tol: float = TOLERANCES.same_direction) -> torch.Tensor:
    """Mask of unit directions in `q` (k,b) not already in `known` (j,b)."""
    if known.shape[0] == 0:
        return torch.ones(q.shape[0], dtype=torch.bool, device=q.device)
    return (q @ known.T).abs().max(dim=1).values < 1 - cos_tol


def pattern_margin(problem: LayerProblem, zero: np.ndarray, active: np.ndarray) -> float:
    """Largest margin t of a sample x = Rᵀc whose ReLU pattern is the candidate's.

    Maximise t subject to z_r = (A c + bias)_r ≤ −t on zero rows and ≥ t on active rows
    (rows in neither set are unconstrained), t ≤ 1: one small LP in b+1 variables (HiGHS).
    A true column gives t > 0 (its own sample has that pattern).
    """
    A = problem.A.cpu().numpy()
    bias = problem.bias.cpu().numpy()
    b = A.shape[1]
    rows = np.concatenate([A[zero], -A[active]])
    rhs = np.concatenate([-bias[zero], bias[active]])
    A_ub = np.hstack([rows, np.ones((rows.shape[0], 1))])
    cost = np.zeros(b + 1)
    cost[-1] = -1.0
    res = linprog(cost, A_ub=A_ub, b_ub=rhs, bounds=[(None, None)] * b + [(None, 1.0)], method="highs")
    return float(res.x[-1]) if res.status == 0 else -np.inf


def zero_tolerance(problem: LayerProblem, rel_tol: float, noise_factor: float) -> torch.Tensor:
    """Per-row tolerance on |Ln_r · q| below which an entry counts as zero.

    A floor `rel_tol` for rounding, plus the noise floor estimated from the discarded singular
    values (σ_{b+1} ≈ s·(√m + √n) for i.i.d. noise of std s), relative to each row's norm.
    """
    row_norm = problem.L.norm(dim=1)
    tol: torch.Tensor = rel_tol + noise_factor * noise_std(problem) * np.sqrt(problem.b) / row_norm.clamp_min(1e-300)
    return tol


def noise_std(problem: LayerProblem) -> float:
    """The std s of i.i.d. noise on the gradient's entries that its discarded singular values imply:
    σ_{b+1} ≈ s·(√m + √n) (the noise on each entry of L = G Rᵀ has that std too)."""
    m, n = problem.m, problem.R.shape[1]
    sigma1 = float(torch.linalg.matrix_norm(problem.L, ord=2))
    return float(problem.noise * sigma1 / (np.sqrt(m) + np.sqrt(n)))


def extra_zeros(m: int, settings: SearchSettings) -> int:
    """Zeros a candidate needs beyond the b−1 that every draw forces, among m live rows."""
    return max(settings.tolerances.min_extra_zeros, int(np.ceil(settings.tolerances.min_zero_fraction * m)))


def min_zeros(problem: LayerProblem, settings: SearchSettings) -> int:
    """A candidate needs this many zero rows (b−1 come for free with every draw)."""
    return problem.b - 1 + extra_zeros(problem.m, settings)


def new_patterns(masks: torch.Tensor, state: SearchState, limit: int) -> torch.Tensor:
    """Indices of rows of `masks` whose zero pattern has not been examined before (≤ limit)."""
    keep: list[int] = []
    for i, key in enumerate(pattern_keys(masks)):
        if key not in state.seen:
            state.seen.add(key)
            keep.append(i)
            if len(keep) >= limit:
                break
    return torch.as_tensor(keep, dtype=torch.long, device=masks.device)
