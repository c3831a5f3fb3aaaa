"""The next-layer weight check (leakbench addition, issue 44): a column of Dᵀ lies, on its non-zero rows, in the span
of the next linear layer's weight.

Behind the attacked layer's ReLU the next linear layer W2 (m2 × m) gives every sample's column of Dᵀ = dL/dZ as

    d_i = mask_i ⊙ (W2ᵀ δ_i),        δ_i = dL/dz2_i ∈ R^{m2},

so on the rows where d_i is non-zero it is W2ᵀ restricted to those rows times one vector δ_i: m2 unknowns against
≈ m/2 equations when the next layer is narrow (FC-2: the 10-class classifier, m2 = 10, m = 1000). A mixture of
samples is not: on its rows each sample's mask adds its own δ_j, so no single δ fits. The check is what the
next-layer fit (fit.py) is to the deflated search, on the column side, where that fit cannot run (the classifier's
gradient has rank ≤ classes − 1 < b). It needs no ground truth: W2 is the model's, which the server holds.
Measured: docs/reference/attacks.md (SPEAR, "The shallow MLP").
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.tolerances import TOLERANCES


def next_weight_residuals(problem: LayerProblem, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Per direction q_k (k, b): the relative least-squares residual of L q_k on its non-zero rows (|Ln q| > tol)
    against the span of `problem.W_next` (m', m2) there; 0 where the check says nothing (no W_next, or too few
    non-zero rows: at most m2 + `Tolerances.next_weight_spare`)."""
    out = torch.zeros(q.shape[0], dtype=q.dtype, device=q.device)
    W = problem.W_next
    if W is None:
        return out
    d = problem.L @ q.T  # (m', k)
    nonzero = ((problem.Ln @ q.T).abs() > tol[:, None]).T
    for k in range(q.shape[0]):
        rows = nonzero[k]
        if int(rows.sum()) <= W.shape[1] + TOLERANCES.next_weight_spare:
            continue
        Wr, dr = W[rows], d[rows, k]
        v = torch.linalg.lstsq(Wr, dr[:, None]).solution
        out[k] = (dr - (Wr @ v)[:, 0]).norm() / dr.norm().clamp_min(1e-300)
    return out


def passes_next_weight(problem: LayerProblem, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Mask of directions q (k, b) whose column passes the check: residual ≤ max(`Tolerances.next_weight_tol`,
    the problem's noise slack)."""
    limit = max(TOLERANCES.next_weight_tol, problem.slack)
    passed: torch.Tensor = next_weight_residuals(problem, q, tol) <= limit
    return passed
