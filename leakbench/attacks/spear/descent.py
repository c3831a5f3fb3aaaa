"""Row-space descent (two proposal sources, scheduler.py): missing samples found by minimising their next-layer misfit.

A missing sample's row c lies in the missing samples' row space (`rowspace.row_space`: c = B w) with c·u = 1
(fit.bias_direction), and its activation ReLU(A c + bias) lies in the next layer's row space: P_next·ReLU(A c + bias)
= 0. A pattern fit solves that for one given ReLU pattern, so it needs a pattern within a few percent of the true one;
this source solves it for c itself — L-BFGS on the relative misfit ‖P_next a‖² / ‖a‖² from random starts in the row
space — and hands the pattern each start ends on to the row-space fit and its acceptance
(`rowspace.patterns_in_row_space`), as any other proposal. A leakbench addition (issue 26), for trained victims:
it takes turns only from b = `Tolerances.descent_from_b` visible samples, once a sample is found (the starts' scale
is the found samples'). `GuideDescent` starts the same descent from the guide's own estimates of the rows instead
(spear-guided, b ≥ 64, each estimate once): it took width 1000 at init from 27 of 400 to exact at b = 400.

Measured: docs/notebook/spear-measurements.md.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy.optimize import minimize

from leakbench.attacks.spear.deflation import null_basis
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction
from leakbench.attacks.spear.guided import Guide, match_guides
from leakbench.attacks.spear.rowspace import patterns_in_row_space, row_space
from leakbench.attacks.spear.scheduler import Search, shares_turn
from leakbench.attacks.spear.tolerances import TOLERANCES


class AffineRowSpace(NamedTuple):
    """The rows c = B w with c·u = 1 (u = fit.bias_direction), as w = offset + Z v: B (b × k), offset (k,) and an
    orthonormal Z (k × (k − 1))."""

    B: torch.Tensor
    offset: torch.Tensor
    Z: torch.Tensor


def affine_row_space(problem: LayerProblem, B: torch.Tensor) -> AffineRowSpace:
    """`AffineRowSpace` of the row space B (b × k)."""
    uB = bias_direction(problem) @ B
    Z = torch.linalg.svd(uB[None], full_matrices=True)[2][1:].T
    return AffineRowSpace(B, uB / (uB @ uB), Z)


class Misfit:
    """The relative next-layer misfit f(v) = ‖P_next a‖² / ‖a‖², a = ReLU(M v + z0), of one start v (k − 1,) in the
    affine row space (M = A B Z, z0 = A B offset + bias), with its gradient, in NumPy float64 for SciPy's L-BFGS-B:
    with P_next = I − V Vᵀ a projector, ∂f/∂a = 2 (P_next a − f a) / ‖a‖², and ∂a/∂z = [z > 0]."""

    def __init__(self, problem: LayerProblem, space: AffineRowSpace) -> None:
        assert problem.V_next is not None
        B, offset, Z = space
        AB = problem.A @ B
        self.M = (AB @ Z).cpu().numpy()
        self.z0 = (AB @ offset + problem.bias).cpu().numpy()
        self.V = problem.V_next.cpu().numpy()

    def __call__(self, v: np.ndarray) -> tuple[float, np.ndarray]:
        z = self.M @ v + self.z0
        a = np.maximum(z, 0.0)
        aa = float(a @ a)
        if aa <= 1e-300:  # every neuron inactive: no activation to fit
            return 0.0, np.zeros_like(v)
        r = a - self.V @ (self.V.T @ a)
        f = float(a @ r) / aa
        return f, self.M.T @ (2.0 * (r - f * a) / aa * (z > 0))


def descend(problem: LayerProblem, space: AffineRowSpace, starts: torch.Tensor, iterations: int) -> torch.Tensor:
    """The rows c (j, b) where L-BFGS on `Misfit` ends from each start v (j, k − 1), one start at a time (a shared
    line search stalls the batch: 3 of 200 random starts ended on a missing sample, against 184 one at a time).

    SciPy's L-BFGS-B with the misfit's gradient in closed form, no early stop on small steps or gradients; on the CPU
    (a start is a few hundred products of an m × k matrix). Measured: docs/notebook/spear-measurements.md."""
    objective = Misfit(problem, space)
    options = {"maxiter": iterations, "maxfun": 10 * iterations, "ftol": 0.0, "gtol": 0.0}
    ends = [minimize(objective, v0, jac=True, method="L-BFGS-B", options=options).x
            for v0 in starts.cpu().numpy()]
    v = torch.as_tensor(np.stack(ends), dtype=starts.dtype, device=starts.device)
    B, offset, Z = space
    return (offset + v @ Z.T) @ B.T


def random_starts(space: AffineRowSpace, found: torch.Tensor, count: int, gen: torch.Generator) -> torch.Tensor:
    """`count` random starts v (count, k − 1), as far from the row space's offset as the found samples' projections
    are (their median)."""
    B, offset, Z = space
    scale = ((found @ B - offset) @ Z).norm(dim=1).median()
    v = torch.randn(count, Z.shape[1], generator=gen, dtype=B.dtype, device=B.device)
    starts: torch.Tensor = v / v.norm(dim=1, keepdim=True).clamp_min(1e-300) * scale
    return starts


def descend_and_fit(search: Search, N: torch.Tensor, space: AffineRowSpace, starts: torch.Tensor) -> None:
    """Descend from `starts` (`descend`), then hand the pattern each ends on to the row-space fit and its acceptance
    (`rowspace.patterns_in_row_space`); each start counts as a pattern and a draw."""
    problem, state = search.problem, search.state
    c = descend(problem, space, starts, TOLERANCES.descent_iterations)
    active = (c @ problem.A.T + problem.bias > 0).to(c.dtype)
    patterns_in_row_space(problem, N, active, search.tol, state, search.residual_tol)
    state.patterns += starts.shape[0]
    state.draws += starts.shape[0]


def guide_starts(problem: LayerProblem, space: AffineRowSpace, rows: torch.Tensor) -> torch.Tensor:
    """Starts v (j, k − 1) from estimates of rows c (j, b) (`guided.Guide.rows`): each scaled to c·u = 1, then its
    part in the affine row space (B has orthonormal columns). Estimates with c·u = 0 are left out."""
    B, offset, Z = space
    cu = rows @ bias_direction(problem)
    keep = cu.abs() > 0
    return (rows[keep] / cu[keep, None] @ B - offset) @ Z


class GuideDescent:
    """Row-space descent from the guide's own estimates (a proposal source): each estimate of a sample the guide has
    not matched is a start, once; `Tolerances.guide_descent_starts` a turn, from the b where the guide-pattern fits
    start (`Tolerances.pattern_fit_from_b`), until every estimate was tried. A leakbench addition (issue 26).

    Measured: docs/notebook/spear-measurements.md.

    It takes over from the guide-pattern fits once they have found `Tolerances.outlier_min_found` samples, a reference
    to judge its fits by (guided.PatternFits pauses while it has starts); measured against starting before any fit
    and after all of them: docs/notebook/spear-measurements.md.
    """

    name = "guide_descent"

    def __init__(self, guide: Guide) -> None:
        self.guide = guide
        self.tried = torch.zeros(guide.margin.shape[0], dtype=torch.bool)
        self.starts = 0
        self.found = 0
        self.seconds = 0.0

    def untried(self, search: Search) -> torch.Tensor:
        """The open guides whose estimates were not descended from yet (none below the b it starts from)."""
        problem, t = search.problem, TOLERANCES
        if problem.b < t.pattern_fit_from_b or self.guide.rows is None or search.missing < 2:
            return torch.zeros(0, dtype=torch.long)
        match_guides(self.guide, problem, search.state.samples)
        return (self.guide.open & ~self.tried).nonzero().flatten()

    def has_starts(self, search: Search) -> bool:
        """Whether estimates are left to descend from (guided.PatternFits pauses for them)."""
        return self.untried(search).numel() > 0

    def turn(self, search: Search, asked: int) -> bool:
        problem, state, rows = search.problem, search.state, self.guide.rows
        untried = self.untried(search)[:TOLERANCES.guide_descent_starts]
        if rows is None or untried.numel() == 0:
            return False
        begin, before = time.perf_counter(), state.found
        self.tried[untried] = True
        N = null_basis(state.samples, problem.b)
        space = affine_row_space(problem, row_space(problem, state, N, search.tol).basis)
        if space.B.shape[1] < 2:
            return False
        starts = guide_starts(problem, space, rows[untried].to(space.B))
        descend_and_fit(search, N, space, starts)
        self.starts += starts.shape[0]
        self.found += state.found - before
        self.seconds += time.perf_counter() - begin
        return True

    def stats(self) -> dict[str, Any]:
        return {"guide_descent_starts": self.starts, "guide_descent_found": self.found,
                "guide_descent_seconds": self.seconds}


class RowSpaceDescent:
    """Row-space descent as a proposal source: `Tolerances.descent_starts` random starts a turn; a turn that finds
    nothing makes it share the turns (`shares_turn`) until one finds a sample again. Its own generator, seeded from the
    search's draws, leaves the other sources' random stream as it was."""

    name = "row_space_descent"

    def __init__(self) -> None:
        self.starts = 0
        self.found = 0
        self.seconds = 0.0
        self.misses = 0

    def turn(self, search: Search, asked: int) -> bool:
        problem, state, t = search.problem, search.state, TOLERANCES
        stalled = self.misses > 0
        if problem.b < t.descent_from_b or state.found == 0 or search.missing < 2 or shares_turn(asked, stalled):
            return False
        begin, before = time.perf_counter(), state.found
        N = null_basis(state.samples, problem.b)
        B = row_space(problem, state, N, search.tol).basis
        if B.shape[1] < 2:
            return False
        gen = torch.Generator(device=B.device).manual_seed(state.draws)
        space = affine_row_space(problem, B)
        descend_and_fit(search, N, space, random_starts(space, state.samples, t.descent_starts, gen))
        self.starts += t.descent_starts
        self.found += state.found - before
        self.misses = 0 if state.found > before else self.misses + 1
        self.seconds += time.perf_counter() - begin
        return True

    def stats(self) -> dict[str, Any]:
        return {"descent_starts": self.starts, "descent_found": self.found, "descent_seconds": self.seconds}
