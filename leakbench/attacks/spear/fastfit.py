"""Cheaper next-layer fits for large batches (leakbench addition, issue 16).

Measured (cProfile, TinyImageNet FC-6 width 2000 at init, b = 150, guided SPEAR, seed 0): 478 of
535 s went to `fit.fit_samples` — 3 264 patterns × 3 rounds of a batched least squares on the
(m+1)×b system M = [P_next(a⊙A); w·u] (QR in `lstsq`, the projection P_next(a⊙A) and `svdvals`
each cost O(m·b²) per pattern with large constants). Two shortcuts, both giving the same fits:

* **Normal equations** (`fit_once_normal`): MᵀM = Aᵀdiag(a)A − BᵀB + w²uuᵀ with B = Vᵀdiag(a)A, formed
  with two batched matrix products per pattern block, then one b×b `eigh` that gives both the solve
  and the conditioning test (σ_min/σ_max of M is √(λ_min/λ_max)). Rows left free in the first round
  (their activation is an unknown) are eliminated exactly: the least squares over their activations
  removes those coordinates, so the fit runs on the other rows with V orthonormalised there. The
  residual is recomputed from the fitted c directly (never from the normal equations), so the
  acceptance test keeps full precision; only c itself carries the cond²·ε error of the normal
  equations, ≤ 1e-12 relative at the cond_floor = 1e-2 that any accepted fit passes.
* **No refit of a pattern already fitted** (`FitCache`): many draws of one sample refine to the same
  exact zero set; the fit of a (zero set, free rows) pair is deterministic, so it is done once.
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.candidates import pattern_keys
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction

BLOCK_BYTES = 256e6
"""Patterns per block are chosen so that the (patterns, m, b) product stays near this size."""


def fit_once_normal(problem: LayerProblem, zero: torch.Tensor, free: torch.Tensor | None = None,
                    cond_floor: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same contract as `fit._fit_once`: least-squares c per pattern (k, m), the relative residual,
    and z = A c + bias; residual inf where the system is ill-conditioned."""
    V = problem.V_next
    assert V is not None
    A, bias = problem.A, problem.bias
    k, b = zero.shape[0], problem.b
    active_full = (~zero).to(A.dtype)
    if free is not None and bool(free.any()):
        keep = ~free
        active_full = active_full * keep.to(A.dtype)
        A_, bias_, active = A[keep], bias[keep], active_full[:, keep]
        U, S, _ = torch.linalg.svd(V[keep], full_matrices=False)
        V_ = U[:, S > 1e-10 * S.max()] if S.numel() else U
    else:
        A_, bias_, active, V_ = A, bias, active_full, V
    u = bias_direction(problem)
    weight = A.norm(dim=1).mean() / u.norm()
    w2uu = (weight ** 2) * torch.outer(u, u)
    m_ = A_.shape[0]
    block = max(1, int(BLOCK_BYTES // (8 * m_ * b)))
    c = torch.empty(k, b, dtype=A.dtype, device=A.device)
    bad = torch.zeros(k, dtype=torch.bool, device=A.device)
    Vt = V_.T.contiguous()
    for s in range(0, k, block):
        a = active[s:s + block]
        Aa = a.unsqueeze(-1) * A_  # (kb, m', b)
        B = torch.matmul(Vt, Aa)  # (kb, r, b)
        ab = a * bias_
        vb = ab @ V_  # (kb, r)
        MtM = Aa.mT @ A_ - B.mT @ B + w2uu
        Mtr = -(ab @ A_ - (B.mT @ vb.unsqueeze(-1))[..., 0]) + (weight ** 2) * u
        lam, Q = torch.linalg.eigh(MtM)
        lam_max = lam[:, -1:].clamp_min(1e-300)
        bad[s:s + block] = lam[:, 0] <= (cond_floor ** 2) * lam_max[:, 0]
        inv = torch.where(lam > 1e-300 * lam_max, 1.0 / lam.clamp_min(1e-300), torch.zeros_like(lam))
        c[s:s + block] = (Q @ (inv * (Q.mT @ Mtr.unsqueeze(-1))[..., 0]).unsqueeze(-1))[..., 0]
    z = c @ A.T + bias
    az = (active * (c @ A_.T + bias_))
    e = az - (az @ V_) @ Vt
    bias_row = weight * (c @ u - 1)
    residual = (e.square().sum(1) + bias_row.square()).sqrt() / (active_full * z).norm(dim=1).clamp_min(1e-300)
    residual[bad] = float("inf")
    return c, residual, z


class FitCache:
    """The (zero set, free rows) pairs already fitted in this search: such a fit is never repeated."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.skipped = 0
        self.retries = 0

    def fresh(self, zero: torch.Tensor, free: torch.Tensor | None, retries: int = 0) -> torch.Tensor:
        """Mask of the patterns (k, m) not fitted before with these free rows (first copy in a call).

        Forgets everything when the search has banned a sample since (`retries` changed): a fit that
        lost to a now-banned near-copy may be accepted then.
        """
        if retries != self.retries:
            self.seen.clear()
            self.retries = retries
        tail = pattern_keys(free[None])[0] if free is not None else b""
        keep = []
        for key in pattern_keys(zero):
            key = key + tail
            keep.append(key not in self.seen)
            self.seen.add(key)
        mask = torch.as_tensor(keep, dtype=torch.bool, device=zero.device)
        self.skipped += int((~mask).sum())
        return mask
