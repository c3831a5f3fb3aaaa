"""Sampling on both sides of the ReLU: the route for deep layers, where samples have few zeros.

SPEAR's draws need b−1 neurons inactive for one sample. Deep in a network at init most live
neurons are active for most samples (FC-6 layer 5, b = 20: 12–18 zeros among ~110 live
neurons, fewer than b−1), so no such draw exists. The next layer's gradient gives a second
equation per neuron. Write a sample as v = (a, c, t): its layer input is x = Rᵀc, its post-ReLU
activation is h = V a (V: orthonormal basis of the next layer's gradient row space, which holds
every h), and t = 1. For every neuron r exactly one of two linear equations holds:

    active:    f_r(v) = V_r·a − A_r·c − bias_r·t = 0      (h_r equals the pre-activation)
    inactive:  g_r(v) = V_r·a = 0                         (h_r = 0)

Neurons active for the whole batch satisfy f_r = 0 for every sample: their f_r span the
(b+1)-dimensional annihilator F0 of the samples' span W, and carry no information about any
single sample. `find_batch_span` finds those neurons (a robust regression), giving W (b-dim).
Inside W each remaining ("informative") neuron splits the samples by its two equations, so a draw
of b−1 informative neurons with a random guess of each one's side has a one-dimensional kernel
that is sample i with probability 2^−(b−1) when the guesses match i — independent of how few
zeros the sample has. Survivors go through the same fit and verification as zero sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction
from leakbench.attacks.spear.tolerances import TOLERANCES


@dataclass(frozen=True)
class BatchSpan:
    """W (2b+1 × b): orthonormal basis of span{(a_i, c_i, t_i)}; the informative neurons' two
    equations restricted to W (unit rows, k × b each); `scale` multiplies a in the coordinates."""

    W: torch.Tensor
    informative: torch.Tensor
    f: torch.Tensor
    g: torch.Tensor
    scale: torch.Tensor


def equations(problem: LayerProblem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows f_r and g_r (m' × 2b+1) in coordinates (a/scale, c, t), and that scale."""
    assert problem.V_next is not None
    scale = problem.A.norm(dim=1).mean()
    V = problem.V_next * scale
    f = torch.cat([V, -problem.A, -problem.bias[:, None]], dim=1)
    g = torch.cat([V, torch.zeros_like(problem.A), torch.zeros_like(problem.bias[:, None])], dim=1)
    return f, g, scale


def find_batch_span(problem: LayerProblem, *, max_resid: float = TOLERANCES.span_max_resid,
                    min_gap: float = TOLERANCES.span_min_gap,
                    fractions: tuple[float, ...] = (0.5, 0.3, 0.2, 0.12), steps: int = 10) -> BatchSpan | None:
    """F0 from the neurons active for the whole batch, found by least trimmed squares.

    Every sample has a = M c and t = u·c for one b×b matrix M (the samples' c are independent;
    u = L⁺ dL/db, fit.py). A neuron active for every sample then satisfies the regression
    A_r + bias_r·u = Mᵀ(scale·V_r); other neurons do not. Concentration steps (fit on the h
    best-fitting neurons, re-rank, repeat) from the plain least-squares fit find those neurons
    when they are a fair share; h runs through `fractions` of the neurons. The fitting neurons are
    those below the widest gap (≥ `min_gap`×) in the sorted relative residuals, if at least b+4 of
    them fit better than `max_resid` (measured: docs/notebook/spear-measurements.md). Then W = span of
    (M c, c, u·c). None when no such fit exists (e.g. at the first layer, where few neurons are active for every
    sample).
    """
    assert problem.V_next is not None  # the deflated search runs only with the next layer's gradient
    b = problem.b
    f, g, scale = equations(problem)
    u = bias_direction(problem)
    x, y = problem.V_next * scale, problem.A + problem.bias[:, None] * u[None]
    for fraction in fractions:
        keep = torch.ones(problem.m, dtype=torch.bool, device=x.device)
        for _ in range(steps):
            M = torch.linalg.lstsq(x[keep], y[keep]).solution
            resid = (y - x @ M).norm(dim=1) / y.norm(dim=1).clamp_min(1e-300)
            keep = torch.zeros_like(keep)
            keep[torch.argsort(resid)[: max(b + 2, int(fraction * problem.m))]] = True
        inliers = gap_split(resid, b + 4, max_resid, min_gap)
        if inliers is not None:
            break
    else:
        return None
    M = torch.linalg.lstsq(x[inliers], y[inliers]).solution
    W, _ = torch.linalg.qr(torch.cat([M, torch.eye(b, dtype=M.dtype, device=M.device), u[None]]))
    fw, gw = f[~inliers] @ W, g[~inliers] @ W
    return BatchSpan(W=W, informative=torch.nonzero(~inliers).flatten(), scale=scale,
                     f=fw / fw.norm(dim=1, keepdim=True), g=gw / gw.norm(dim=1, keepdim=True))


def gap_split(resid: torch.Tensor, min_count: int, max_resid: float, min_gap: float) -> torch.Tensor | None:
    """Mask of the values below the widest multiplicative gap in sorted `resid`, or None.

    The split must leave at least `min_count` values below it, all under `max_resid`, and the gap
    must be at least `min_gap`.
    """
    r = resid.sort().values.clamp_min(1e-300)
    ratio = r[1:] / r[:-1]
    ok = (torch.arange(ratio.numel(), device=r.device) >= min_count - 1) & (r[:-1] <= max_resid)
    if not bool(ok.any()):
        return None
    ratio = torch.where(ok, ratio, torch.zeros_like(ratio))
    i = int(ratio.argmax())
    return resid <= r[i] if float(ratio[i]) >= min_gap else None


def draw_active(problem: LayerProblem, span: BatchSpan, count: int, gen: torch.Generator, *,
                rel_tol: float = TOLERANCES.active_rel_tol, slack: float = TOLERANCES.active_slack,
                zero_tol: float = TOLERANCES.active_zero_tol) -> torch.Tensor:
    """Zero patterns (k, m') of candidate samples from `count` draws of b−1 informative neurons.

    Each drawn neuron contributes f_r or g_r (a fair coin); the kernel direction y in W must make
    one of the two vanish (to `zero_tol`) on at least b+2 informative neurons. Survivors are scaled
    to t = 1 and kept when V a matches ReLU(A c + bias) within `rel_tol` of its scale on all but a
    `slack` fraction of the neurons; their pattern is A c + bias ≤ 0.
    """
    assert problem.V_next is not None  # as for find_batch_span
    b, k = problem.b, span.informative.numel()
    device = problem.A.device
    if k < b - 1:
        return torch.zeros(0, problem.m, dtype=torch.bool, device=device)
    keys = torch.rand(count, k, generator=gen, device=device, dtype=torch.float32)
    idx = keys.topk(b - 1, dim=1, sorted=False).indices
    side = torch.rand(count, b - 1, generator=gen, device=device) < 0.5
    rows = torch.cat([span.f, span.g])[idx + k * side]
    solved, info = torch.linalg.solve_ex(rows[..., : b - 1], -rows[..., b - 1])
    y: torch.Tensor = torch.cat([solved, torch.ones(count, 1, dtype=solved.dtype, device=device)], dim=1)
    y = y[(info == 0) & torch.isfinite(y).all(dim=1)]
    y = y / y.norm(dim=1, keepdim=True)
    zero = torch.minimum((y @ span.f.T).abs_(), (y @ span.g.T).abs_()) <= zero_tol
    v = y[zero.sum(dim=1) >= min(k, b + 2)] @ span.W.T
    v = v[v[:, -1].abs() > 1e-12 * v.norm(dim=1)]
    v = v / v[:, -1:]
    z = v[:, b:2 * b] @ problem.A.T + problem.bias
    h = (v[:, :b] * span.scale) @ problem.V_next.T
    ok = (h - z.clamp_min(0)).abs() <= rel_tol * z.abs().amax(dim=1, keepdim=True)
    return z[ok.sum(dim=1) >= (1 - slack) * problem.m] <= 0
