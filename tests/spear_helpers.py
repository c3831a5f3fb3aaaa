"""A small linear+ReLU problem on the embedded images for SPEAR's unit tests (its ground truth beside it)."""

from __future__ import annotations

import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction, project_out_next
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import fedsgd_update
from leakbench.fl.update import ThreatModel
from leakbench.models import build_fc

TRUE_ROW = 1e-3
"""Relative distance under which a recovered row c is that true sample's row. `layer_problem` is factorised from
float32 gradients, so a true row is recovered only to float32 rounding amplified by its fit's conditioning, and by how
much depends on the CPU's floating-point kernels (issue 42): measured 1e-7 … 2.4e-5 for the true rows these tests
recover under MKL's AVX-512, AVX2 and SSE4.2 paths, ATen's default kernels and 1–4 threads, where a row that is not a
sample (a local minimum of the descent, a fit of a mixed or under-determined pattern) is ≥ 8.7e-2 off. Not 1e-5 or
1e-6: on an AMD EPYC true rows at 2e-6 failed `test_descent_ends_on_missing_samples` at 1e-6."""


def nearest_rows(c: torch.Tensor, C: torch.Tensor) -> torch.return_types.min:
    """For each row of c (j, b): its relative distance to the nearest true row of C (b, b), and which row that is."""
    return (torch.cdist(c, C) / C.norm(dim=1)[None]).min(dim=1)


def layer_problem(b: int, width: int, seed: int = 0) -> tuple[LayerProblem, torch.Tensor]:
    """Layer 1 of an FC-3 of `width` at init on `b` embedded images: the factorised problem (with the next
    layer's gradient) and the layer's true inputs X (b, n), float64."""
    ds = load_dataset("embedded")
    batch = sample_batch(ds, b, seed=seed)
    model = build_fc(ds.image_shape, ds.num_classes, width=width, depth=3, seed=seed)
    update = fedsgd_update(model, batch, ThreatModel())
    problem = create_attack("spear").layer_problem(update)
    with torch.no_grad():
        X = model.layer_inputs(batch.images, 1).flatten(1).double()
    return problem, X


def fit_once_lstsq(problem: LayerProblem, zero: torch.Tensor, free: torch.Tensor | None = None,
              cond_floor: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference fit (leakbench's fit before issue 26, `torch.linalg.lstsq` on the full system): c for
    each pattern, the relative residual, and z = A c + bias; `fit.fit_once_normal` must agree with it.

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
