"""Joint refinement of a whole batch once every sample's ReLU pattern is known.

Each sample found by the search was fitted on its own through the next layer's gradient (fit.py).
That fit is only as precise as the next layer's gradient row space, and the row space is poorly
determined along directions where that gradient has small singular values (measured:
docs/notebook/spear-measurements.md).

The attacked layer's own gradient holds what those fits ignore: with Q = C⁻¹, Dᵀ = L Q must vanish
wherever a sample's pre-activation A c_i + bias is negative. Those zeros couple all samples (Q
depends on every row of C), and they are as precise as the attacked gradient itself. Gauss–Newton on
C (b² unknowns) minimises, with the patterns of the current C,

    Σ_{(r,i) inactive} (Ln_r·q_i / |q_i|)²  +  Σ_i w_i² |P_next h_i|² / |h_i|²  +  Σ_i (c_i·u − 1)²/|u|²,

h_i = 1_{P_i} ⊙ (A c_i + bias), u = L⁺ dL/db. Each sample's next-layer weight is w_i = ρ / max(r_i, ρ),
r_i its next-layer residual before refinement and ρ = `Tolerances.joint_floor_multiple` × the gradient's noise estimate:
a sample that already explains the next layer to the noise level keeps it (weight 1), one whose fit
is off (the ill-conditioned ones) is moved by the zeros instead (measured against a uniform weight:
docs/notebook/spear-measurements.md).
The refined batch is verified like any other (solve.py) and, because the zeros alone may be about as
many as b² at deep layers, its next-layer residuals must also stay within the acceptance tolerance
(`next_layer_residuals`).
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction
from leakbench.attacks.spear.tolerances import TOLERANCES


def refine_batch(problem: LayerProblem, C: torch.Tensor, *, iterations: int = 3) -> torch.Tensor:
    """Gauss–Newton refinement of all b rows of C together (module docstring); returns the new C."""
    assert problem.P_next is not None
    floor = max(TOLERANCES.joint_floor_multiple * problem.noise, 1e-12)
    next_weight = floor / next_layer_residuals(problem, C).clamp_min(floor)
    for _ in range(iterations):
        J, e = _linearise(problem, C, next_weight)
        step = torch.linalg.lstsq(J, -e[:, None]).solution[:, 0]
        C = C + step.reshape(C.shape)
    return C


def _linearise(problem: LayerProblem, C: torch.Tensor, next_weight: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Jacobian (rows × b², d/d vec(C) row-major) and residuals of the three terms at C."""
    b = problem.b
    Q = torch.linalg.inv(C)
    qn = Q.norm(dim=0)
    z = C @ problem.A.T + problem.bias
    sample, row = torch.nonzero(z <= 0, as_tuple=True)
    LQ = problem.Ln @ Q
    e_zero = LQ[row, sample] / qn[sample]
    # d(Q) = −Q dC Q, so d(Ln_r q_i) = −(Ln_r Q) dC q_i: an outer product per (r, i)
    J_zero = -(LQ[row].unsqueeze(2) * Q.T[sample].unsqueeze(1)).reshape(-1, b * b) / qn[sample, None]
    J_next, e_next = _next_layer_blocks(problem, z, next_weight)
    u = bias_direction(problem)
    eye = torch.eye(b, dtype=C.dtype, device=C.device)
    J_bias = torch.kron(eye, (u / u.norm())[None])
    e_bias = (C @ u - 1) / u.norm()
    return torch.cat([J_zero, J_next, J_bias]), torch.cat([e_zero, e_next, e_bias])


def _next_layer_blocks(problem: LayerProblem, z: torch.Tensor, weight: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-layer term, each sample's block compressed to b rows by QR (same least squares)."""
    assert problem.P_next is not None  # refine_batch runs only with the next layer's gradient
    active = (z > 0).to(z.dtype)
    h = active * z
    scale = weight / h.norm(dim=1).clamp_min(1e-300)
    M = problem.P_next.unsqueeze(0) @ (active.unsqueeze(-1) * problem.A.unsqueeze(0)) * scale[:, None, None]
    e = (h @ problem.P_next) * scale[:, None]  # P_next is symmetric
    Qm, Rm = torch.linalg.qr(M)
    # the part of e outside each block's range does not depend on C: dropping it leaves the minimiser
    e_small = (Qm.transpose(1, 2) @ e.unsqueeze(-1))[..., 0]
    blocks: torch.Tensor = torch.block_diag(*Rm)
    return blocks, e_small.flatten()


def next_layer_residuals(problem: LayerProblem, C: torch.Tensor) -> torch.Tensor:
    """Per sample |P_next h_i| / |h_i| with h_i = ReLU(A c_i + bias): 0 for an exact sample."""
    assert problem.P_next is not None
    h = (C @ problem.A.T + problem.bias).clamp_min(0)
    residuals: torch.Tensor = (h @ problem.P_next).norm(dim=1) / h.norm(dim=1).clamp_min(1e-300)
    return residuals
