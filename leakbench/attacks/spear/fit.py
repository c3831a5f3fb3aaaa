"""From a candidate ReLU pattern to the sample itself, using the next layer's gradient.

A sample x = Rᵀc with pattern "active on P" has post-ReLU activation h = 1_P ⊙ (A c + bias), and
h must lie in the row space of the next layer's weight gradient. Both are linear in c, so one
least-squares solve per pattern gives c (scale and sign included, pinned by the bias), and its
residual says whether the pattern belongs to a real sample: a mixture of samples leaves a
residual orders of magnitude above rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from leakbench.attacks.spear.factors import LayerProblem


@dataclass(frozen=True)
class SampleFit:
    """Per candidate pattern: the fitted c (k, b), the relative residual, and pattern agreement."""

    c: torch.Tensor
    residual: torch.Tensor
    consistent: torch.Tensor


FitSolver = Callable[[LayerProblem, torch.Tensor, torch.Tensor | None],
                     tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""`_fit_once`'s contract: (problem, zero patterns, free rows) → (c, relative residual, z); see fastfit.py."""


def fit_samples(problem: LayerProblem, zero: torch.Tensor, *, residual_tol: float,
                free: torch.Tensor | None = None, rounds: int = 3,
                solver: FitSolver | None = None) -> SampleFit:
    """Fit one sample per zero pattern (k, m) and test it; requires `problem.P_next`.

    Rows in `free` (m,) are uncertain (their gradient entry is at the noise level): in the
    first round their activation is an extra unknown instead of a constraint. The fitted
    sample's own pre-activations then give its exact ReLU pattern, so the fit is repeated with
    that pattern (`rounds` times) and the final pattern must reproduce itself. Under gradient
    noise (`problem.slack`) the residual tolerance grows with it and neurons whose pre-activation
    is within the slack of zero may flip. `solver`: replaces `_fit_once` (same contract; fastfit.py).
    """
    residual_tol = max(residual_tol, problem.slack)
    for i in range(rounds):
        c, residual, z = (solver or _fit_once)(problem, zero, free if i == 0 else None)
        new_zero = z <= 0
        clear = z.abs() > problem.slack * z.abs().amax(dim=1, keepdim=True)
        stable = ((new_zero == zero) | ~clear).all(dim=1)
        zero = new_zero
    return SampleFit(c=c, residual=residual, consistent=stable & (residual <= residual_tol))


def _fit_once(problem: LayerProblem, zero: torch.Tensor, free: torch.Tensor | None = None,
              cond_floor: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Least-squares c for each pattern; returns c, the relative residual, and z = A c + bias.

    Besides "h in the next layer's row space", every sample satisfies c·u = 1 with u = L⁺g
    (from dL/db = Dᵀ1 and Dᵀ = L C⁻¹); that row pins down patterns whose activations alone
    leave c ambiguous. Patterns whose system stays ill-conditioned (σ_min < cond_floor·σ_max, where
    rounding noise would be amplified past 8-bit precision) get residual inf.
    """
    assert problem.P_next is not None
    k, b = zero.shape[0], problem.b
    active = (~zero).to(problem.A.dtype)
    if free is not None:
        active = active * (~free).to(active.dtype)
    PA = project_out_next(problem, active.unsqueeze(-1) * problem.A.unsqueeze(0))
    Pb = project_out_next(problem, (active * problem.bias).unsqueeze(-1))
    u = bias_direction(problem)
    weight = problem.A.norm(dim=1).mean() / u.norm()
    M = torch.cat([PA, (weight * u).expand(k, 1, -1)], dim=1)
    if free is not None and bool(free.any()):
        F = problem.P_next[:, free] * problem.A.norm(dim=1).mean()
        F = torch.cat([F, torch.zeros(1, F.shape[1], dtype=F.dtype, device=F.device)])
        M = torch.cat([M, F.expand(k, -1, -1)], dim=2)
    rhs = torch.cat([-Pb, weight.expand(k, 1, 1)], dim=1)
    sol = torch.linalg.lstsq(M, rhs).solution[..., 0]
    c = sol[:, :b]
    z = c @ problem.A.T + problem.bias
    residual = (M @ sol.unsqueeze(-1) - rhs)[..., 0].norm(dim=1) / (active * z).norm(dim=1).clamp_min(1e-300)
    S = torch.linalg.svdvals(M[..., :b])
    residual[S[:, -1] <= cond_floor * S[:, 0]] = float("inf")
    return c, residual, z


def project_out_next(problem: LayerProblem, X: torch.Tensor) -> torch.Tensor:
    """P_next X for X (…, m, j), as X − V(VᵀX): O(m·b·j) per pattern instead of O(m²·j)."""
    V = problem.V_next
    assert V is not None
    return X - V @ (V.T @ X)


def same_samples(c: torch.Tensor, known: torch.Tensor, rel_tol: float = 1e-6) -> torch.Tensor:
    """Mask of rows of `c` (k,b) equal (up to rel_tol) to a row of `known` (j,b)."""
    if known.shape[0] == 0:
        return torch.zeros(c.shape[0], dtype=torch.bool, device=c.device)
    dist = torch.cdist(c, known)
    same: torch.Tensor = (dist <= rel_tol * c.norm(dim=1, keepdim=True)).any(dim=1)
    return same


def bias_direction(problem: LayerProblem) -> torch.Tensor:
    """u = L⁺g: every sample satisfies c·u = 1 (from dL/db = Dᵀ1 and Dᵀ = L C⁻¹)."""
    u: torch.Tensor = torch.linalg.lstsq(problem.L, problem.g[:, None]).solution[:, 0]
    return u
