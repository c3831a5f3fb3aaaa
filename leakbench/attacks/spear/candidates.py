"""Turning sampled directions into verified columns of Q: group, refine, test, check the pattern."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linprog

from leakbench.attacks.spear.factors import LayerProblem


def zero_masks(Ln: torch.Tensor, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Boolean (k, m): which rows each direction q_k makes (numerically) zero."""
    return ((Ln @ q.T).abs() <= tol[:, None]).T


def pattern_keys(masks: torch.Tensor) -> list[bytes]:
    """A hashable key per zero pattern (rows of `masks`), for de-duplication across chunks."""
    packed = np.packbits(masks.cpu().numpy(), axis=1)
    return [row.tobytes() for row in packed]


def kernel_on(Ln: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each zero set (k, m): the smallest right singular vector of Ln restricted to it, and
    all singular values (k, b), largest first."""
    M = Ln.unsqueeze(0) * masks.unsqueeze(-1).to(Ln.dtype)
    _, S, Vh = torch.linalg.svd(M, full_matrices=False)
    return Vh[:, -1, :], S


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
    unique = S[:, -2] > unique_gap * S[:, 0]
    return q, exact, unique


def canonical(q: torch.Tensor) -> torch.Tensor:
    """Unit directions with the sign fixed (largest-magnitude entry positive)."""
    q = q / q.norm(dim=1, keepdim=True)
    pivot = q.abs().argmax(dim=1)
    return q * torch.sign(q.gather(1, pivot[:, None]))


def is_new(q: torch.Tensor, known: torch.Tensor, *, cos_tol: float = 1e-6) -> torch.Tensor:
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
