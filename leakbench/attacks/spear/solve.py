"""From b columns of Q to the batch: scale and sign from dL/db, X = Q⁻¹R, ReLU verification."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.tolerances import TOLERANCES


@dataclass(frozen=True)
class Solution:
    """The recovered layer inputs X (b×n) and the ReLU-pattern check that needs no ground truth.

    `violations` counts (sample, neuron) pairs whose recovered pre-activation is clearly negative
    although the gradient says the neuron passed a non-zero gradient for that sample: impossible
    behind a ReLU, so any violation means the columns are wrong.
    """

    X: torch.Tensor
    violations: int
    scale_ok: bool
    per_sample: torch.Tensor | None = None

    @property
    def ok(self) -> bool:
        return self.violations == 0 and self.scale_ok


def column_scales(problem: LayerProblem, Q_hat: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """SPEAR's scale step: s (b,) from g = L·Q̂·s (least squares; dL/db = Dᵀ1 and Dᵀ = L Q̂ diag s),
    and whether every scale is clearly non-zero. Batched too: Q̂ (n, b, b) gives s (n, b)."""
    LQ = problem.L @ Q_hat
    s = torch.linalg.lstsq(LQ, problem.g[:, None].expand(*LQ.shape[:-2], -1, 1)).solution[..., 0]
    return s, bool((s.abs() > TOLERANCES.scale_nonzero * s.abs().amax(-1, keepdim=True)).all())


def solve_batch(problem: LayerProblem, Q_hat: torch.Tensor, zero_tol: torch.Tensor) -> Solution:
    """Paper route: the column scales (`column_scales`), then X = (Q̂ diag s)⁻¹ R, and verify."""
    s, scale_ok = column_scales(problem, Q_hat)
    Q = Q_hat * s[None, :]
    X = torch.linalg.solve(Q, problem.R)
    Z = torch.linalg.solve(Q, problem.A.T) + problem.bias[None, :]
    nonzero_d = ((problem.Ln @ Q_hat).abs() > zero_tol[:, None]).T
    margin = TOLERANCES.relu_margin * Z.abs().max()
    violations = int(((Z < -margin) & nonzero_d).sum())
    return Solution(X=X, violations=violations, scale_ok=scale_ok)


def solve_from_samples(problem: LayerProblem, C: torch.Tensor, zero_tol: torch.Tensor) -> Solution:
    """X = C R for samples found by deflation; verify the ReLU pattern and dL/db = D 1.

    With X = C R the gradient factors as Dᵀ = L C⁻¹, so the bias gradient must equal L C⁻¹ 1 —
    a check of every sample's scale that the search never used.
    """
    X = C @ problem.R
    Q = torch.linalg.inv(C)
    Dt = problem.L @ Q
    Z = C @ problem.A.T + problem.bias[None, :]
    nonzero_d = ((problem.Ln @ (Q / Q.norm(dim=0, keepdim=True))).abs() > zero_tol[:, None] + problem.slack).T
    margin = max(TOLERANCES.relu_margin, problem.slack) * Z.abs().max()
    bad = (Z < -margin) & nonzero_d
    bias_error = float((Dt.sum(1) - problem.g).norm() / problem.g.norm())
    return Solution(X=X, violations=int(bad.sum()), scale_ok=bias_error < max(TOLERANCES.scale_tol, problem.slack),
                    per_sample=bad.sum(1))
