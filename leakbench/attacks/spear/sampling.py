"""Random (b−1)-row submatrices of L and their kernel directions, vectorised over a chunk."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.tolerances import TOLERANCES


def draw_directions(Ln: torch.Tensor, b: int, count: int, gen: torch.Generator,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel directions (count, b) of `count` random (b−1)-row submatrices of `Ln`.

    Rows are drawn without replacement, uniformly or (with `weights`, shape (m,) for all draws or
    (count, m) per draw; zero weight = never drawn) by the Gumbel-top-k trick, so no Python loop
    runs per draw (`draw_rows`). The kernel comes from one batched LU solve (`kernel_directions`).
    Singular blocks give non-finite rows, dropped by the caller.
    """
    m = Ln.shape[0]
    if m < b - 1:  # fewer usable rows than a draw needs (e.g. heavy noise): no direction
        return torch.full((count, b), float("nan"), dtype=Ln.dtype, device=Ln.device)
    return kernel_directions(Ln, draw_rows(m, b, count, gen, weights))[0]


def draw_rows(m: int, b: int, count: int, gen: torch.Generator, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Indices (count, b−1) of b−1 rows out of m per draw, without replacement (`draw_directions`)."""
    keys = torch.rand(count, m, generator=gen, device=gen.device, dtype=torch.float32)
    if weights is not None:
        keys = keys.log_().neg_().log_().neg_() + weights.log().to(keys.dtype)
    return keys.topk(b - 1, dim=1, sorted=False).indices


def kernel_directions(Ln: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit kernel directions (count, b) of the drawn rows idx (count, b−1) of Ln, and which draws may be rank
    deficient (a singular or nearly singular block: their kernel may have dimension ≥ 2, and the direction is
    then one arbitrary vector of it; `split_kernels` measures the dimension).

    q = (y, 1) with L_A[:, :b−1] y = −L_A[:, b−1], one batched LU; singular blocks give non-finite rows.
    """
    b = Ln.shape[1]
    LA = Ln[idx]
    LU, pivots, info = torch.linalg.lu_factor_ex(LA[..., : b - 1])
    y = torch.linalg.lu_solve(LU, pivots, -LA[..., b - 1:])[..., 0]
    q: torch.Tensor = torch.cat([y, torch.ones(idx.shape[0], 1, dtype=Ln.dtype, device=Ln.device)], dim=1)
    q = q / q.norm(dim=1, keepdim=True)
    q[info != 0] = float("nan")
    pivot = LU.diagonal(dim1=-2, dim2=-1).abs()
    if pivot.shape[1] == 0:  # b = 1: no row to draw, nothing to split
        return q, info != 0
    deficient = (pivot.amin(dim=1) <= TOLERANCES.deficient * pivot.amax(dim=1)) | (info != 0)
    return q, deficient


def split_kernels(Ln: torch.Tensor, idx: torch.Tensor, tol: torch.Tensor, gen: torch.Generator,
                  tries: int) -> torch.Tensor:
    """Directions (≤ len(idx)·tries, b) drawn inside the kernels of rank-deficient draws idx (j, b−1) of Ln.

    A draw's kernel holds the column of every sample whose zero set holds all the drawn rows. When it has
    dimension d+1 ≥ 2, several samples are in it, and SPEAR's draw returns an arbitrary mixture of them: a miss.
    The same draw inside the kernel K (b × (d+1)) needs only d more rows, among the rows that do not vanish
    on K: `tries` such draws per kernel (leakbench addition, issue 26). Measured: docs/notebook/spear-measurements.md.
    """
    found = []
    for rows in idx:
        _, S, Vh = torch.linalg.svd(Ln[rows], full_matrices=True)
        d = int((S <= TOLERANCES.deficient * S[0]).sum())  # extra kernel dimensions beyond the one every draw has
        K = Vh[Ln.shape[1] - d - 1:].T
        LK = Ln @ K
        norms = LK.norm(dim=1)
        usable = norms > tol
        if d < 1 or int(usable.sum()) < d:
            continue
        a = draw_directions(LK[usable] / norms[usable, None], d + 1, tries, gen)
        found.append(a[torch.isfinite(a).all(dim=1)] @ K.T)
    if not found:
        return torch.zeros(0, Ln.shape[1], dtype=Ln.dtype, device=Ln.device)
    return torch.cat(found)


def count_zeros(Ln: torch.Tensor, q: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Number of rows r with |Ln_r · q_k| ≤ tol_r, for every direction q_k (k,)."""
    return ((Ln @ q.T).abs_() <= tol[:, None]).sum(0)
