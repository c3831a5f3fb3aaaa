"""Random (b−1)-row submatrices of L and their kernel directions, vectorised over a chunk."""

from __future__ import annotations

import torch


def draw_directions(Ln: torch.Tensor, b: int, count: int, gen: torch.Generator,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel directions (count, b) of `count` random (b−1)-row submatrices of `Ln`.

    Rows are drawn without replacement, uniformly or (with `weights`, shape (m,) for all draws or
    (count, m) per draw; zero weight = never drawn) by the Gumbel-top-k trick, so no Python loop
    runs per draw. The kernel comes from one batched LU solve: q = (y, 1) with
    L_A[:, :b−1] y = −L_A[:, b−1]. Singular blocks give non-finite rows, dropped by the caller.
    """
    m = Ln.shape[0]
    if m < b - 1:  # fewer usable rows than a draw needs (e.g. heavy noise): no direction
        return torch.full((count, b), float("nan"), dtype=Ln.dtype, device=Ln.device)
    keys = torch.rand(count, m, generator=gen, device=Ln.device, dtype=torch.float32)
    if weights is not None:
        keys = keys.log_().neg_().log_().neg_() + weights.log().to(keys.dtype)
    idx = keys.topk(b - 1, dim=1, sorted=False).indices
    LA = Ln[idx]
    y, info = torch.linalg.solve_ex(LA[..., : b - 1], -LA[..., b - 1])
    q: torch.Tensor = torch.cat([y, torch.ones(count, 1, dtype=Ln.dtype, device=Ln.device)], dim=1)
    q = q / q.norm(dim=1, keepdim=True)
    q[info != 0] = float("nan")
    return q


def count_zeros(Ln: torch.Tensor, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Number of rows r with |Ln_r · q_k| ≤ tol_r, for every direction q_k (k,)."""
    return ((Ln @ q.T).abs_() <= tol[:, None]).sum(0)
