"""From a candidate ReLU pattern to the sample itself, using the next layer's gradient.

A sample x = Rᵀc with pattern "active on P" has post-ReLU activation h = 1_P ⊙ (A c + bias), and
h must lie in the row space of the next layer's weight gradient. Both are linear in c, so one
least-squares solve per pattern gives c (scale and sign included, pinned by the bias), and its
residual says whether the pattern belongs to a real sample: a mixture of samples leaves a
residual orders of magnitude above rounding.

The fit is solved by normal equations, and a (pattern, free rows) pair is fitted once per search
(leakbench addition, issue 16; the one fit of every route since issue 26).

The fit dominated the search's time on large batches (measured: docs/notebook/spear-measurements.md); two shortcuts,
both giving the same fits:

* **Normal equations** (`fit_once_normal`): MᵀM = Aᵀdiag(a)A − BᵀB + w²uuᵀ with B = Vᵀdiag(a)A, formed
  with two batched matrix products per pattern block, then one b×b `eigh` that gives both the solve
  and the conditioning test (σ_min/σ_max of M is √(λ_min/λ_max)). Rows left free in the first round
  (their activation is an unknown) are eliminated exactly: the least squares over their activations
  removes those coordinates, so the fit runs on the other rows with V orthonormalised there. The
  residual is recomputed from the fitted c directly (never from the normal equations), so the
  acceptance test keeps full precision; only c itself carries the ε/cond² error of the normal
  equations, ≤ 5e-10 relative at the lowest floor any accepted fit passes (`Tolerances.noise_cond_floor` = 5e-4).
* **No refit of a pattern already fitted** (`FitCache`): many draws of one sample refine to the same
  exact zero set; the fit of a (zero set, free rows) pair is deterministic, so it is done once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakbench.attacks.spear.candidates import pattern_keys
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.tolerances import TOLERANCES


@dataclass(frozen=True)
class SampleFit:
    """Per candidate pattern: the fitted c (k, b), the relative residual, pattern agreement, and the
    conditioning σ_min/σ_max of the last round's system."""

    c: torch.Tensor
    residual: torch.Tensor
    consistent: torch.Tensor
    cond: torch.Tensor


def fit_samples(problem: LayerProblem, zero: torch.Tensor, *, residual_tol: float,
                free: torch.Tensor | None = None, rounds: int = TOLERANCES.fit_rounds,
                cond_floor: float = TOLERANCES.cond_floor) -> SampleFit:
    """Fit one sample per zero pattern (k, m) and test it; requires `problem.P_next`.

    Rows in `free` (m,) are uncertain (their gradient entry is at the noise level): in the
    first round their activation is an extra unknown instead of a constraint. The fitted
    sample's own pre-activations then give its exact ReLU pattern, so the fit is repeated with
    that pattern (`rounds` times) and the final pattern must reproduce itself. Under gradient
    noise (`problem.slack`) the residual tolerance grows with it and neurons whose pre-activation
    is within the slack of zero may flip. Each round is one normal-equation fit (`fit_once_normal`,
    with `cond_floor`).
    """
    residual_tol = max(residual_tol, problem.slack)
    for i in range(rounds):
        c, residual, z, cond = fit_once_normal(problem, zero, free if i == 0 else None, cond_floor)
        new_zero = z <= 0
        clear = z.abs() > problem.slack * z.abs().amax(dim=1, keepdim=True)
        stable = ((new_zero == zero) | ~clear).all(dim=1)
        zero = new_zero
    return SampleFit(c=c, residual=residual, consistent=stable & (residual <= residual_tol), cond=cond)


def project_out_next(problem: LayerProblem, X: torch.Tensor) -> torch.Tensor:
    """P_next X for X (…, m, j), as X − V(VᵀX): O(m·b·j) per pattern instead of O(m²·j)."""
    V = problem.V_next
    assert V is not None
    return X - V @ (V.T @ X)


def same_samples(c: torch.Tensor, known: torch.Tensor, rel_tol: float = TOLERANCES.same_known) -> torch.Tensor:
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


BLOCK_BYTES = 256e6
"""Patterns per block are chosen so that the (patterns, m, b) product stays near this size."""


def fit_once_normal(problem: LayerProblem, zero: torch.Tensor, free: torch.Tensor | None = None,
                    cond_floor: float = TOLERANCES.cond_floor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Least-squares c per zero pattern (k, m) with `free` rows' activations as extra unknowns, the
    relative residual, z = A c + bias, and the conditioning σ_min/σ_max; residual inf where the system
    is ill-conditioned (σ_min < cond_floor·σ_max).

    The system: besides "h in the next layer's row space", every sample satisfies c·u = 1 with
    u = L⁺g (from dL/db = Dᵀ1 and Dᵀ = L C⁻¹); that row pins down patterns whose activations alone
    leave c ambiguous."""
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
        V_ = U[:, S > TOLERANCES.fit_rank_tol * S.max()] if S.numel() else U
    else:
        A_, bias_, active, V_ = A, bias, active_full, V
    u = bias_direction(problem)
    weight = A.norm(dim=1).mean() / u.norm()
    w2uu = (weight ** 2) * torch.outer(u, u)
    m_ = A_.shape[0]
    block = max(1, int(BLOCK_BYTES // (8 * m_ * b)))
    c = torch.empty(k, b, dtype=A.dtype, device=A.device)
    bad = torch.zeros(k, dtype=torch.bool, device=A.device)
    cond = torch.zeros(k, dtype=A.dtype, device=A.device)
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
        cond[s:s + block] = (lam[:, 0].clamp_min(0) / lam_max[:, 0]).sqrt()
        inv = torch.where(lam > 1e-300 * lam_max, 1.0 / lam.clamp_min(1e-300), torch.zeros_like(lam))
        c[s:s + block] = (Q @ (inv * (Q.mT @ Mtr.unsqueeze(-1))[..., 0]).unsqueeze(-1))[..., 0]
    z = c @ A.T + bias
    az = (active * (c @ A_.T + bias_))
    e = az - (az @ V_) @ Vt
    bias_row = weight * (c @ u - 1)
    residual = (e.square().sum(1) + bias_row.square()).sqrt() / (active_full * z).norm(dim=1).clamp_min(1e-300)
    residual[bad] = float("inf")
    return c, residual, z, cond


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
