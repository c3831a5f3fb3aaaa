"""Candidate columns of Q by sparse dictionary learning instead of random (b−1)-row draws.

The factor L (m×b) of the attacked layer's gradient is L = Dᵀ Q⁻¹ with Dᵀ sparse (a sample's
column of Dᵀ vanishes where its ReLU is off, about half the rows): Lᵀ = Q⁻ᵀ D is a complete
dictionary learning problem, "sparsely-used" because every atom's code is about half zeros.
Two ways to propose the directions q with L q sparse:

- `msp`: ℓ4-norm maximisation over the orthogonal group (Zhai, Yang, Liao, Wright and Ma,
  "Complete dictionary learning via ℓ4-norm maximization over the orthogonal group", JMLR 2020):
  whiten Ȳ = (Y Yᵀ)^−½ Y, then the matching-stretching-projection fixed point
  A ← polar((A Ȳ)^∘3 Ȳᵀ). Published; measured too weak here on its own (docs/notebook/spear.md): at
  θ ≈ ½ and m/b ≈ 8 the true columns are not maxima of the ℓ4 objective.
- `trimmed` (leakbench's own, not from the literature): least trimmed squares with a shrinking
  trim, q ← smallest eigenvector of Σ_{r ∈ S(q)} Ln_rᵀ Ln_r over the `keep` rows S(q) where |Ln_r·q|
  is smallest. A true column vanishes on ≈ m/2 rows, a mixture of two only on ≈ m/4, so a
  trim between the two has the true columns as its zero-residual fixed points; starting from
  all rows of a random half and shrinking the trim slowly lands on the sparsest column in reach.

Either proposal only seeds SPEAR: its rows are "rounded" to zero patterns, and the patterns go
through SPEAR's refinement, next-layer fit, deflation and verification (deflation.py), so a bad
proposal costs time, never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from leakbench.attacks.spear.candidates import extra_zeros, new_patterns, zero_masks
from leakbench.attacks.spear.deflation import accept_patterns, null_basis, reduced_rows
from leakbench.attacks.spear.sampling import count_zeros
from leakbench.attacks.spear.scheduler import Search, shares_turn
from leakbench.attacks.spear.tolerances import TOLERANCES


def msp_directions(Ln: torch.Tensor, gen: torch.Generator, *, iterations: int = 100) -> torch.Tensor:
    """ℓ4-MSP on the rows of Ln (m×b'): b' unit directions y (b', b') with Ln y (hopefully) sparse."""
    Y = Ln.T
    evals, U = torch.linalg.eigh(Y @ Y.T)
    whiten = U @ torch.diag(evals.clamp_min(1e-300).rsqrt()) @ U.T
    Yw = whiten @ Y
    bp = Y.shape[0]
    A = torch.linalg.qr(torch.randn(bp, bp, generator=gen, dtype=Ln.dtype, device=Ln.device))[0]
    for _ in range(iterations):
        U2, _, Vh = torch.linalg.svd(((A @ Yw) ** 3) @ Yw.T)
        A = U2 @ Vh
    y: torch.Tensor = (whiten @ A.T).T
    unit: torch.Tensor = y / y.norm(dim=1, keepdim=True)
    return unit


def subset_starts(Ln: torch.Tensor, count: int, gen: torch.Generator, *, fraction: float = 0.5) -> torch.Tensor:
    """`count` starting directions: the least-energy direction of a random `fraction` of the rows."""
    m = Ln.shape[0]
    keep = torch.rand(count, m, generator=gen, device=Ln.device) < fraction
    M = Ln.unsqueeze(0) * keep.unsqueeze(-1).to(Ln.dtype)
    vectors: torch.Tensor = torch.linalg.eigh(M.transpose(1, 2) @ M)[1]
    return vectors[:, :, 0]


def trim_schedule(m: int, start: float, keep: float, steps: int, hold: int) -> list[int]:
    """Rows kept per iteration: from start·m down to keep·m (linearly), then `hold` steps at keep·m."""
    last = max(1, int(keep * m))
    shrink: list[int] = np.linspace(max(start * m, last), last, steps).astype(int).tolist()
    return shrink + [last] * hold


def trimmed_directions(Ln: torch.Tensor, y: torch.Tensor, schedule: list[int]) -> torch.Tensor:
    """Least trimmed squares from starts y (s, b'): each step keeps the rows where |Ln·y| is smallest."""
    for k in schedule:
        idx = (y @ Ln.T).abs().topk(min(k, Ln.shape[0]), dim=1, largest=False).indices
        M = Ln[idx]
        y = torch.linalg.eigh(M.transpose(1, 2) @ M)[1][:, :, 0]
    return y


def expected_zero_fraction(remaining: int) -> float:
    """Fraction of live rows a remaining sample is inactive on, if each neuron were off with
    probability ½ independently: live rows are those active for at least one of `remaining`."""
    tail = 0.5 ** remaining
    return (0.5 - tail) / (1.0 - tail)


@dataclass(frozen=True)
class Proposal:
    """How `DLTrims` proposes directions; see `SpearDLConfig` for each knob (and tolerances.py)."""

    init: str
    starts: int
    keep: float
    start_keep: float
    steps: int
    hold: int
    min_remaining: int


def propose(LNn: torch.Tensor, gen: torch.Generator, proposal: Proposal) -> torch.Tensor:
    """Unit directions y (s, b') in the reduced space whose image LNn·y should be sparse.

    The final trim keeps `proposal.keep` × a typical sample's zero rows (`expected_zero_fraction`).
    `init`: "subsets" (random halves of the rows, then the shrinking trim), "msp" (ℓ4-MSP's b'
    directions, then the final trim held) or "msp-only" (MSP's directions as they are).
    """
    m, bp = LNn.shape
    fraction = proposal.keep * expected_zero_fraction(bp)
    if proposal.init.startswith("msp"):
        y = msp_directions(LNn, gen)
        if proposal.init == "msp-only":
            return y
        return trimmed_directions(LNn, y, trim_schedule(m, fraction, fraction, 1, proposal.hold))
    y = subset_starts(LNn, proposal.starts, gen)
    return trimmed_directions(LNn, y, trim_schedule(m, proposal.start_keep, fraction, proposal.steps, proposal.hold))


class DLTrims:
    """Dictionary-learning proposals as a source (scheduler.py): one round of `propose` in the space left
    by the samples found so far, rounded to loose zero patterns and handed to SPEAR's `accept_patterns`
    (refinement to the exact zero set, next-layer fit, acceptance).

    Passes the turn once fewer than `min_remaining` samples are missing, and shares its turns
    (`shares_turn`) after a round that found nothing while at most `Tolerances.dl_share_below` are missing (measured:
    b = 50, width 2000 stalled with 6 missing without it). With more missing, SPEAR's draws are not
    tried: they need ≈ 2^(b'−1) draws per sample, and one chunk of them cost ~20 s of refinement at
    b' = 100 (width 2000) against 3.4 s for a round of proposals.
    """

    name = "dl_trims"

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal
        self.rounds = 0
        self.starts = 0
        self.found = 0
        self.misses = 0

    def turn(self, search: Search, asked: int) -> bool:
        problem, state, tol, settings = search.problem, search.state, search.tol, search.settings
        N = null_basis(state.samples, problem.b)
        bp = N.shape[1]
        self.rounds = asked
        if bp < self.proposal.min_remaining or shares_turn(asked, bp <= TOLERANCES.dl_share_below and self.misses > 0):
            return False
        LNn, tol_r, live = reduced_rows(problem, N, tol)
        y = propose(LNn[live], search.gen, self.proposal)
        state.draws += y.shape[0]
        self.starts += y.shape[0]
        loose = tol_r * settings.tolerances.sample_tol_factor
        need = bp - 1 + extra_zeros(int(live.sum()), settings)
        y = y[count_zeros(LNn[live], y, loose[live]) >= need]
        state.candidates += y.shape[0]
        masks = zero_masks(LNn, y, loose)
        before = state.found
        fresh = masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]
        accept_patterns(problem, N, fresh, tol, state, search.residual_tol, doubt=TOLERANCES.doubt)
        found = state.found - before
        self.found += max(found, 0)
        self.misses = 0 if found > 0 else self.misses + 1
        return True

    def stats(self) -> dict[str, Any]:
        return {"dl_init": self.proposal.init, "dl_rounds": self.rounds, "dl_starts": self.starts,
                "dl_found": self.found}
