"""Row-space descent (a proposal source, scheduler.py): missing samples found by minimising their next-layer misfit.

A missing sample's row c lies in the missing samples' row space (`deflation.row_space`: c = B w) with c·u = 1
(fit.bias_direction), and its activation ReLU(A c + bias) lies in the next layer's row space: P_next·ReLU(A c + bias)
= 0. A pattern fit solves that for one given ReLU pattern, so it needs a pattern within a few percent of the true one;
this source solves it for c itself — L-BFGS on the relative misfit ‖P_next a‖² / ‖a‖² from random starts in the row
space — and hands the pattern each start ends on to the row-space fit and its acceptance
(`deflation.patterns_in_row_space`), as any other proposal. A leakbench addition (issue 26), for trained victims:
it takes turns only from b = `Tolerances.descent_from_b` visible samples, once a sample is found (the starts' scale
is the found samples').

Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 100, seed 0, the suite cell stopped at 45 found; `benchmarks/
spear_tail.py --dump`, then this descent by hand): the guide's patterns agree with the missing samples' on 72 % of
neurons (median), and pattern fits from them — even from true patterns with 3 % of the neurons flipped — end on no
missing sample; from 200 random starts the descent ended on a missing sample 184 times (17 distinct), and 16 starts
a turn took the search from 45 to 89 found in 35 s, all true. On CIFAR-10 trained 20 epochs, b = 64 (58 visible,
`factors.next_visible_rank`), the guides stopped at 3 found and 12 such turns took it to 27, all true.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy.optimize import minimize

from leakbench.attacks.spear.deflation import null_basis, patterns_in_row_space, row_space
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import bias_direction
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
    (a start is a few hundred products of an m × k matrix). Measured (`benchmarks/spear_descent.py` on three
    `benchmarks/spear_tail.py --dump` states of the trained CIFAR-10 cells, 48 random starts each): 7–10 ms a start
    against 0.22–0.34 s for torch's L-BFGS (strong Wolfe line search, autograd), ending on a missing sample as often
    (3/0, 4/3 and 43/45 starts; 2/0, 3/3 and 9/11 distinct samples)."""
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
        c = descend(problem, space, random_starts(space, state.samples, t.descent_starts, gen), t.descent_iterations)
        active = (c @ problem.A.T + problem.bias > 0).to(c.dtype)
        patterns_in_row_space(problem, N, active, search.tol, state, search.residual_tol)
        state.patterns += t.descent_starts
        state.draws += t.descent_starts
        self.starts += t.descent_starts
        self.found += state.found - before
        self.misses = 0 if state.found > before else self.misses + 1
        self.seconds += time.perf_counter() - begin
        return True

    def stats(self) -> dict[str, Any]:
        return {"descent_starts": self.starts, "descent_found": self.found, "descent_seconds": self.seconds}
