"""Residual guides (leakbench addition, issue 16): a new guide for the samples the first one missed.

At b ≥ 150 the first guide (CPA on the whole update) leaves some samples without a usable guide
(two guide images on one sample, or a poor image). Once k samples are known, the missing ones form
a b' = b−k problem of their own: with N an orthonormal basis of the null space of the found rows
of C, the rows of L N are sparse mixtures of the b' unknown samples only,

    (L N)_r = Σ_j D_rj p_j,    p_j = Nᵀc_j ∈ R^{b'},  j over the missing samples,

with D_rj = 0 wherever neuron r is inactive for sample j. The D_rj are super-Gaussian (about half
exactly zero), so FastICA on the live rows of L N (m observations, b' components) estimates the
unmixing: each component y_j makes L N y_j ≈ a multiple of column j of D, whose (near-)zero rows
predict sample j's inactive neurons. A guide built from them (same `Guide` as the first one, so
draws, pools, matching and everything after the draw are the usual guided SPEAR's) leads the draws
for exactly the samples still missing. As with any guide, a wrong prediction costs time only: what
it proposes is refined, fitted and verified like every other draw.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch

from leakbench.attacks.spear.deflation import null_basis, reduced_rows
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.guided import Guide
from leakbench.attacks.spear.tolerances import TOLERANCES


def residual_directions(problem: LayerProblem, C: torch.Tensor, tol: torch.Tensor, seed: int,
                        max_iter: int = 400) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """FastICA on the live rows of L N: unit directions Y (b', b') in the reduced space, with N and
    the live-row mask; None when there are too few live rows or ICA fails."""
    from sklearn.decomposition import FastICA

    N = null_basis(C, problem.b)
    bp = N.shape[1]
    _, _, live = reduced_rows(problem, N, tol)
    X = (problem.L @ N)[live].cpu().numpy()
    if bp < 2 or X.shape[0] < 2 * bp:
        return None
    ica = FastICA(n_components=bp, whiten="unit-variance", fun="logcosh", random_state=seed, max_iter=max_iter,
                  tol=TOLERANCES.ica_tol)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ica.fit(X)
    except (ValueError, np.linalg.LinAlgError):
        return None
    Y = torch.as_tensor(ica.components_, dtype=problem.L.dtype, device=problem.L.device)
    if not bool(torch.isfinite(Y).all()):
        return None
    return Y / Y.norm(dim=1, keepdim=True).clamp_min(1e-300), N, live


def residual_guide(problem: LayerProblem, C: torch.Tensor, tol: torch.Tensor, seed: int,
                   pool_start: float) -> Guide | None:
    """A guide for the samples not in C (k, b): one guide row per ICA component of the residual problem.

    Its margin is |L N y_j| per unit row, scaled to the component's largest live value, minus that
    component's median over the live rows (negative: predicted inactive; about half the rows, as for a
    true sample); rows that are not live (inactive for every missing sample) get −1. Matching starts
    only samples found after this guide was made (`Guide.known`).
    """
    found = residual_directions(problem, C, tol, seed)
    if found is None:
        return None
    Y, N, live = found
    LNn, _, _ = reduced_rows(problem, N, tol)
    s = (LNn @ Y.T).abs()  # (m, b')
    s = s / s[live].amax(dim=0).clamp_min(1e-300)
    margin = (s - s[live].median(dim=0).values).T.contiguous()
    margin[:, ~live] = -1.0
    g = margin.shape[0]
    return Guide(margin=margin.cpu(), pool=torch.full((g,), pool_start, dtype=torch.float64),
                 open=torch.ones(g, dtype=torch.bool), known=C.clone())


class ResidualGuides:
    """The guide a guided chunk follows: the first one, then residual guides once it stalls.

    A residual guide is made when the guide in use went `after` guided chunks without a new sample,
    2 ≤ missing ≤ `max_missing`, and either samples were found since the last one was made or that one
    stalled too (then with the next ICA seed). `made` counts them for the attack's stats.
    """

    def __init__(self, problem: LayerProblem, first: Guide, tol: torch.Tensor, seed: int, pool_start: float,
                 after: int, max_missing: int) -> None:
        self.problem, self.first, self.current, self.tol, self.seed = problem, first, first, tol, seed
        self.pool_start, self.after, self.max_missing = pool_start, after, max_missing
        self.built_at = -1
        self.made = 0
        self.draws = 0
        self.seconds = 0.0

    def stats(self) -> dict[str, Any]:
        """The guides' counters for the attack's stats (the first guide's, and the residual guides')."""
        first = self.first
        return {"guided_draws": first.draws, "guides_matched": first.matched, "residual_guides": self.made,
                "residual_guide_seconds": self.seconds,
                "residual_guided_draws": self.draws + (self.current.draws if self.made else 0)}

    def guide(self, C: torch.Tensor) -> Guide:
        """The guide for the next guided chunk, given the samples found so far (rows of C)."""
        k = int(C.shape[0])
        missing = self.problem.b - k
        stalled = self.current.misses >= self.after
        if stalled and 2 <= missing <= self.max_missing and (k != self.built_at or self.current.known is not None):
            start = time.perf_counter()
            new = residual_guide(self.problem, C, self.tol, self.seed + self.made, self.pool_start)
            self.seconds += time.perf_counter() - start
            self.built_at = k
            self.made += 1
            if new is not None:
                if self.current.known is not None:
                    self.draws += self.current.draws
                self.current = new
        return self.current
