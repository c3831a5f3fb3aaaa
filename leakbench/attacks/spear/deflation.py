"""SPEAR's search with deflation: each recovered sample shrinks the problem by one dimension.

With k samples known (rows c_i of C = Q⁻¹), every missing column q_j of Q is orthogonal to
them, so q_j = N y_j for an orthonormal basis N of their null space (b × (b−k)). Sampling then
needs (b−k−1)-row submatrices of L N, and a draw hits sample j with probability
C(z_j, b−k−1)/C(m, b−k−1): the hardest samples are searched last, in the smallest space.
Candidate patterns are turned into samples and tested with the next layer's gradient (fit.py).

This module is the search's acceptance and completion: draws in the deflated space (`draw_patterns`),
refinement and fit of proposed patterns (`accept_patterns`, `accept_fits`), the closed-form completion
and its verification (`complete_batch`) and the remembered directions (`try_directions`). Which
proposals are made when is the scheduler's (scheduler.py); the proposals themselves are the sources'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from leakbench.attacks.spear.candidates import (
    canonical,
    extra_zeros,
    first_of_each_pattern,
    is_new,
    kernel_on,
    new_patterns,
    one_per_direction,
    pattern_keys,
    unique_kernel,
    zero_masks,
    zero_tolerance,
)
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import (
    COND_FLOOR,
    LOW_COND_FLOOR,
    NOISE_COND_FLOOR,
    FitCache,
    SampleFit,
    fit_samples,
    same_samples,
)
from leakbench.attacks.spear.joint import JOINT_MAX_B, next_layer_residuals, refine_batch
from leakbench.attacks.spear.last_column import (
    RowSpace,
    clean_kernels,
    complete_last_sample,
    complete_samples,
    fit_in_row_space,
    missing_row_space,
    samples_from_directions,
    sure_directions,
)
from leakbench.attacks.spear.sampling import count_zeros, draw_rows, kernel_directions, split_kernels
from leakbench.attacks.spear.select import select_independent
from leakbench.attacks.spear.solve import Solution, solve_from_samples
from leakbench.attacks.spear.state import SearchSettings, SearchState, charge_undrawable
from leakbench.attacks.spear.tolerances import TOLERANCES

NEVER = torch.iinfo(torch.long).max
"""`SampleState.ban_until` of a ban given to the constructor: it never lifts."""

_UNSET = torch.empty(0)
"""SampleState's default for a tensor field not given (compared by identity, never used)."""


@dataclass
class SampleState(SearchState):
    """The deflated route's state, besides the counters of every search.

    samples: rows c_i of C = Q⁻¹ found so far (k × b; sample i is x_i = Rᵀc_i), with their next-layer
    `residuals`; admitted: samples the search has added to them (a new sample, not a replacement);
    banned: samples dropped after a failed verification, refused until their ban lifts (`ban_sample`,
    `lift_bans`: each row keeps its residual, the `admitted` count at which its ban lifts, −1 once
    lifted, NEVER for a ban given here, and how often it was banned);
    directions: unit columns of Q whose pattern was sound but whose fit was not (`try_directions`), and whether each
    has a clean kernel (`direction_clean`, filled in by `clean_directions` when first needed);
    directions_tried: the last completion tried from them, with the search state (never tried twice);
    from_directions: samples completed from directions in the verified batch;
    outliers: sound fits kept out of the found samples as outliers among them (`outlying_fits`, `set_aside`), with
    their `outlier_residuals`; outliers_tried: the last batch completed from them (`try_outliers`);
    from_outliers: samples taken from them in the verified batch;
    fits: next-layer fits run; retries: verifications failed; kernels_split: rank-deficient draws drawn again
    inside their kernel (`draw_patterns`); fit_cache: the (pattern, free rows)
    pairs fitted so far (fit.FitCache; scheduler.search_samples gives every search one).
    """

    samples: torch.Tensor
    # not given: empty (k residuals of 0, no rows banned or kept), set by __post_init__
    residuals: torch.Tensor = field(default_factory=lambda: _UNSET)
    banned: torch.Tensor = field(default_factory=lambda: _UNSET)
    ban_residuals: torch.Tensor = field(default_factory=lambda: _UNSET)
    ban_until: torch.Tensor = field(default_factory=lambda: _UNSET)
    ban_strikes: torch.Tensor = field(default_factory=lambda: _UNSET)
    admitted: int = 0
    directions: torch.Tensor = field(default_factory=lambda: _UNSET)
    direction_clean: torch.Tensor = field(default_factory=lambda: _UNSET)
    directions_tried: tuple[int, float, int, bytes] | None = None
    from_directions: int = 0
    outliers: torch.Tensor = field(default_factory=lambda: _UNSET)
    outlier_residuals: torch.Tensor = field(default_factory=lambda: _UNSET)
    outliers_tried: tuple[int, float, int, float] | None = None
    from_outliers: int = 0
    fits: int = 0
    retries: int = 0
    kernels_split: int = 0
    fit_cache: FitCache | None = None  # skip refits of patterns already fitted
    row_space: tuple[tuple[int, float, int, int], RowSpace] | None = None

    def __post_init__(self) -> None:
        if self.residuals is _UNSET:
            self.residuals = self.samples.new_zeros(self.samples.shape[0])
        if self.banned is _UNSET:
            self.banned = self.samples[:0].clone()
        if self.ban_residuals is _UNSET:
            self.ban_residuals = self.residuals.new_zeros(self.banned.shape[0])
        if self.ban_until is _UNSET:
            self.ban_until = torch.full((self.banned.shape[0],), NEVER, dtype=torch.long, device=self.banned.device)
        if self.ban_strikes is _UNSET:
            self.ban_strikes = torch.ones(self.banned.shape[0], dtype=torch.long, device=self.banned.device)
        if self.directions is _UNSET:
            self.directions = self.samples[:0].clone()
        if self.direction_clean is _UNSET:
            self.direction_clean = torch.zeros(0, dtype=torch.bool, device=self.samples.device)
        if self.outliers is _UNSET:
            self.outliers = self.samples[:0].clone()
        if self.outlier_residuals is _UNSET:
            self.outlier_residuals = self.outliers.new_zeros(self.outliers.shape[0])

    @property
    def found(self) -> int:
        return int(self.samples.shape[0])

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "fits_or_lp_checks": self.fits, "retries": self.retries,
                "samples_from_directions": self.from_directions, "samples_from_outliers": self.from_outliers,
                "kernels_split": self.kernels_split,
                "fits_skipped": self.fit_cache.skipped if self.fit_cache is not None else 0}


def null_basis(C: torch.Tensor, b: int) -> torch.Tensor:
    """Orthonormal basis (b × (b−k)) of the vectors orthogonal to the k rows of C."""
    if C.shape[0] == 0:
        return torch.eye(b, dtype=C.dtype, device=C.device)
    _, _, Vh = torch.linalg.svd(C, full_matrices=True)
    null: torch.Tensor = Vh[C.shape[0]:].T
    return null


def reduced_rows(problem: LayerProblem, N: torch.Tensor, tol: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unit rows of L N, their zero tolerance (same absolute size as in L), and the live rows.

    A row whose projection is at the noise level vanishes for every remaining sample (the
    neuron was active only for samples already found): it is not live, i.e. neither drawn nor
    counted, though it still belongs to every exact zero set.
    """
    LN = problem.L @ N
    norms = LN.norm(dim=1)
    scale = problem.L.norm(dim=1) / norms.clamp_min(1e-300)
    live = norms > 10 * tol * problem.L.norm(dim=1)
    return LN / norms.clamp_min(1e-300)[:, None], tol * scale, live


RowWeights = Callable[[LayerProblem, torch.Tensor, torch.Tensor], "torch.Tensor | None"]
"""(problem, N, live rows) → row weights for a chunk's draws: (live,) shared by all draws of the chunk,
(draws, live) one row per draw (its count is the chunk's size), or None for uniform draws."""


def draw_patterns(problem: LayerProblem, N: torch.Tensor, tol: torch.Tensor, state: SampleState,
                  settings: SearchSettings, gen: torch.Generator, weights: RowWeights) -> torch.Tensor:
    """One chunk of draws in the reduced space; the new loose zero masks (k, m), sparsest first.

    `weights` is asked once the chunk can be drawn (enough live rows); weights of shape (draws, live)
    set the chunk's size (guided.py), otherwise the chunk is `settings.chunk` draws within the budget.
    """
    bp = N.shape[1]
    LNn, tol_r, live = reduced_rows(problem, N, tol)
    loose = tol_r * settings.tolerances.sample_tol_factor
    count = min(settings.chunk, settings.max_draws - state.draws)
    if int(live.sum()) < bp - 1:
        charge_undrawable(state, count, int(live.sum()), problem.m, bp - 1)
        return torch.zeros(0, problem.m, dtype=torch.bool, device=problem.L.device)
    state.undrawable = ""
    w = weights(problem, N, live)
    if w is not None and w.dim() == 2:
        count = w.shape[0]
    idx = draw_rows(int(live.sum()), bp, count, gen, weights=w)
    y, deficient = kernel_directions(LNn[live], idx)
    state.draws += count
    t = settings.tolerances
    if problem.b >= t.split_from_b and bp <= t.split_max_missing and bool(deficient.any()):  # kernels of dim ≥ 2
        split_gen = torch.Generator(device=gen.device).manual_seed(state.draws)  # gen's stream stays as it was
        split = idx[deficient][:t.split_max_draws]
        state.kernels_split += int(split.shape[0])
        y = torch.cat([y, split_kernels(LNn[live], split, tol_r[live], split_gen, t.split_tries)])
    y = y[torch.isfinite(y).all(dim=1)]
    need = bp - 1 + extra_zeros(int(live.sum()), settings)
    counts = count_zeros(LNn[live], y, loose[live])
    order = torch.argsort(counts, descending=True)
    hits = y[order[counts[order] >= need]]
    if problem.b >= t.one_per_direction_from_b:  # the sparsest pattern of each direction (hits are sparsest first)
        hits = hits[one_per_direction(hits, t.direction_cos, 4 * t.max_new_per_chunk)]
    state.candidates += int(hits.shape[0])
    masks = zero_masks(LNn, hits, loose)
    return masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]


def accept_patterns(problem: LayerProblem, N: torch.Tensor, masks: torch.Tensor, tol: torch.Tensor,
                    state: SampleState, residual_tol: float, doubt: float = 0.0) -> None:
    """Refine reduced-space patterns to exact zero sets, fit samples, keep the new consistent ones.

    `doubt` > 0: zero rows with |Ln_r·q| above doubt × their tolerance are free in the first fit
    round (one fit per pattern), like rows that are not live. Measured (spear-dl, TinyImageNet
    b = 50, width 400): one active neuron with a tiny gradient entry read as zero at 0.66× the
    tolerance, while the true zeros sat below 0.064×, and that one row moved the fit 40 % off.
    """
    if masks.shape[0] == 0:
        return
    state.patterns += int(masks.shape[0])
    LNn, tol_r, live = reduced_rows(problem, N, tol)
    y, _ = kernel_on(LNn, masks & live)
    exact = zero_masks(LNn, y, tol_r) & live
    y, S = kernel_on(LNn, exact & live)
    exact = zero_masks(LNn, y, tol_r) | ~live
    doubtful = exact & live & ~zero_masks(LNn, y, (doubt or DOUBT) * tol_r)
    if doubt > 0:
        consistent = fits_with_free_rows(problem, exact, ~live | doubtful, state, residual_tol)
    else:
        consistent = accept_fits(problem, exact, state, residual_tol, free=~live).consistent
    unique = unique_kernel(S, TOLERANCES.unique_gap)
    if doubt == 0:  # a second chance for the failed unique patterns, with their doubtful zero rows free
        again = torch.nonzero(unique & ~consistent & doubtful.any(dim=1)).flatten()
        if again.numel():
            consistent[again] = fits_with_free_rows(problem, exact[again], ~live | doubtful[again], state, residual_tol)
    q = canonical(y @ N.T)
    failed = torch.nonzero(unique & ~consistent).flatten()
    t = TOLERANCES
    if failed.numel() and problem.b >= t.row_space_from_b and state.found >= t.row_space_from * problem.b:
        consistent[failed] = fits_in_row_space(problem, N, q[failed], tol, state, residual_tol)
    remember_directions(state, q[unique & ~consistent])


def fits_in_row_space(problem: LayerProblem, N: torch.Tensor, q: torch.Tensor, tol: torch.Tensor, state: SampleState,
                      residual_tol: float) -> torch.Tensor:
    """Fit the samples of column directions q (j, b) in the missing samples' row space (`row_space`), keep the
    sound ones (`keep_samples`); whether each was sound.

    A missing sample's row is orthogonal to the found samples' columns, so its fit has b − found unknowns
    instead of b: past half the batch that fits true patterns whose fit over all b failed — singular or
    ill-conditioned, and (on TinyImageNet 5 epochs, b = 100, the 17 it rescued there) at conditioning 1.2e-2 … 3.1e-2,
    where the fit over all b ended on another pattern or an outlying residual.
    Measured with the ground truth (TinyImageNet FC-6 width 400 trained 20 epochs, b = 100, the found samples
    drawn at random among the true ones; fits with σ_min/σ_max ≥ 1e-2 and residual ≤ 1e-4;
    `benchmarks/spear_true_fits.py --train-epochs 20 --row-space`): of the missing samples' true patterns,
    19 of 90 fit over all b and 30 in the row space with 10 found, 18 vs 41 of 80 with 20 found, 18 vs 36 of 70
    with 30 found, 8 vs 39 of 50 with 50 found, 0 vs 10 of 10 with 90 found — as many as with the true columns,
    once the columns their zero rows do not fix are left out (`last_column.determined_columns`: with them, 4 of 70
    with 30 found), hence `Tolerances.row_space_from` = 0.1.

    From b = `Tolerances.row_space_from_b` on, the row space is also orthogonal to the remembered directions that are
    missing columns for sure (`sure_remembered`), and a fit is judged as one over all b (`keep_samples` with its
    conditioning, down to fit.NOISE_COND_FLOOR). Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 100, seed 0,
    the search stopped at 15 found with the directions of 20 missing samples remembered to 1e-8, `benchmarks/
    spear_tail.py --dump`): in the row space of the found columns alone their fits were singular or off; with the
    other 19 sure directions each fitted at residual 7e-8 … 1.3e-6 and conditioning 2.3e-3 … 1.6e-2, 1.6e-6 … 2.8e-5
    off, and one call took the search from 15 to 35 found, all true.
    """
    wide = problem.b >= TOLERANCES.row_space_from_b  # below: the found columns alone, and the usual floor
    fit = samples_from_directions(problem, row_space(problem, state, N, tol, sure=wide), q, tol,
                                  cond_floor=NOISE_COND_FLOOR if wide else COND_FLOOR)
    return keep_row_space_fits(problem, state, fit, residual_tol)


def patterns_in_row_space(problem: LayerProblem, N: torch.Tensor, active: torch.Tensor, tol: torch.Tensor,
                          state: SampleState, residual_tol: float) -> torch.Tensor:
    """Fit ReLU patterns `active` (j, m; 1 = active) in the missing samples' row space (`row_space`), each refitted
    with its own pattern (`Tolerances.row_space_rounds`), and keep the sound ones (`keep_row_space_fits`: judged as
    `fits_in_row_space` judges a direction's pattern); whether each was sound."""
    fit = fit_in_row_space(problem, active, row_space(problem, state, N, tol).basis, NOISE_COND_FLOOR,
                           TOLERANCES.row_space_rounds)
    return keep_row_space_fits(problem, state, fit, residual_tol)


def keep_row_space_fits(problem: LayerProblem, state: SampleState, fit: SampleFit, residual_tol: float
                        ) -> torch.Tensor:
    """`keep_samples` for row-space fits: sound when consistent, with residual ≤ max(residual_tol, slack), and judged
    with their conditioning (down to fit.NOISE_COND_FLOOR: `noise_level_fits`); each counts as a fit."""
    state.fits += int(fit.c.shape[0])
    fit = replace(fit, consistent=fit.consistent & (fit.residual <= max(residual_tol, problem.slack)))
    return keep_samples(state, fit.c, fit.residual, fit.consistent, fit.cond, noise_level_fits(problem, fit))


def found_key(state: SampleState) -> tuple[int, float, int]:
    """What identifies the found samples for caches: their number, their residuals' sum and the bans so far."""
    return state.found, float(state.residuals.sum()), state.retries


def row_space(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor, sure: bool = True
              ) -> RowSpace:
    """The missing samples' row space (`last_column.missing_row_space`), with the sure directions among the remembered
    ones if `sure` (`sure_remembered`), computed once per set of found samples and remembered directions."""
    key = (*found_key(state), int(state.directions.shape[0]) if sure else -1)
    if state.row_space is None or state.row_space[0] != key:
        directions = sure_remembered(problem, state, N, tol) if sure else None
        state.row_space = (key, missing_row_space(problem, state.samples, N, directions))
    return state.row_space[1]


def sure_remembered(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """The remembered directions inside the null space N that are missing columns for sure (s, b;
    `last_column.sure_directions`)."""
    index, _ = inside_directions(problem, state, N, tol)
    q = state.directions[index]
    return q[sure_directions(problem, q, clean_directions(problem, state, tol)[index], tol)]


def clean_directions(problem: LayerProblem, state: SampleState, tol: torch.Tensor) -> torch.Tensor:
    """Whether each remembered direction has a clean kernel (`last_column.clean_kernels`), computed once per direction
    (directions are only ever appended)."""
    done = int(state.direction_clean.shape[0])
    if done < state.directions.shape[0]:
        state.direction_clean = torch.cat([state.direction_clean, clean_kernels(problem, state.directions[done:], tol)])
    return state.direction_clean


DOUBT = 0.1
"""Zero rows above this fraction of their tolerance are doubtful: free in the first fit round of spear-dl's
patterns (dl.py passes it as `doubt`), and in the second-chance refit of a failed unique pattern (accept_patterns).

Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64, seed 0, with the ground truth): two missing samples whose
exact zero sets held one active neuron each (a tiny gradient entry read as zero) fitted 97 % and 100 % off with
every zero row held, and 7.9e-7 and 1.8e-6 off (residuals at the found samples' level) with the rows above 0.1× their
tolerance free."""


def fits_with_free_rows(problem: LayerProblem, exact: torch.Tensor, free: torch.Tensor, state: SampleState,
                        residual_tol: float) -> torch.Tensor:
    """`accept_fits` of each zero pattern (k, m) with its own free rows (k, m); whether each was sound."""
    return torch.cat([accept_fits(problem, exact[i:i + 1], state, residual_tol, free=free[i]).consistent
                      for i in range(exact.shape[0])])


def accept_fits(problem: LayerProblem, zero: torch.Tensor, state: SampleState, residual_tol: float,
                free: torch.Tensor | None = None, rounds: int = 3) -> SampleFit:
    """Fit a sample to each zero pattern (k, m); keep the consistent ones not known or banned yet.

    A fit within `SAME` (relative) of a known sample is that sample again; it replaces the known
    one when its residual is smaller — a near-copy with a misread neuron or two (measured at
    layer 5: 2e-3 off, residual under the tolerance) must not block the exact sample.
    `rounds`: refits with the fitted sample's own pattern (fit.fit_samples).
    """
    cache, state.fit_cache = state.fit_cache, None
    if cache is not None:  # fit.FitCache: fit each (pattern, free rows) once per search
        try:
            fresh = cache.fresh(zero, free, state.retries)
            part = (accept_fits(problem, zero[fresh], state, residual_tol, free, rounds) if bool(fresh.any()) else
                    SampleFit(c=zero.new_zeros((0, problem.b), dtype=problem.A.dtype),
                              residual=zero.new_zeros(0, dtype=problem.A.dtype), consistent=fresh[fresh],
                              cond=zero.new_zeros(0, dtype=problem.A.dtype)))
        finally:
            state.fit_cache = cache
        consistent = torch.ones(zero.shape[0], dtype=torch.bool, device=zero.device)
        consistent[fresh] = part.consistent  # a pattern fitted before: its outcome is already recorded
        return SampleFit(c=part.c, residual=part.residual, consistent=consistent, cond=part.cond)
    fit = fit_samples(problem, zero, residual_tol=residual_tol, free=free, rounds=rounds, cond_floor=NOISE_COND_FLOOR)
    state.fits += int(zero.shape[0])
    sound = keep_samples(state, fit.c, fit.residual, fit.consistent, fit.cond, noise_level_fits(problem, fit))
    return SampleFit(c=fit.c, residual=fit.residual, consistent=sound, cond=fit.cond)


def noise_level_fits(problem: LayerProblem, fit: SampleFit) -> torch.Tensor:
    """Fits under fit.COND_FLOOR that are sound without a reference (`keep_samples`): residual at the gradient's
    noise level (≤ `LayerProblem.slack`), and the fitted sample's own zero set is a column's exact zero set: the
    rows of L where its pre-activation is ≤ 0 have a one-dimensional kernel q (the layer's own evidence, as for
    a drawn pattern: candidates.refine), and q vanishes on no other row.

    Measured (TinyImageNet FC-6 width 400 trained 5 epochs, b = 64, guide-pattern fits): a fit at conditioning
    1.0e-3 with residual 1.6e-7, among true samples at 1.4e-7 … 1.0e-6, was 17 % off; its zero set is a strict
    subset of a missing sample's, so it holds that sample's column, whose zero set is larger.
    """
    low = fit.consistent & (fit.cond <= COND_FLOOR) & (fit.residual <= problem.slack)
    if not bool(low.any()):
        return low
    zero = (fit.c[low] @ problem.A.T + problem.bias) <= 0
    q, S = kernel_on(problem.Ln, zero)
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    column = unique_kernel(S, TOLERANCES.unique_gap) & (zero_masks(problem.Ln, q, tol) == zero).all(dim=1)
    low[low.clone()] = column
    return low


OUTLIER_RATIO = 20.0
"""A fit whose residual is above this multiple of the found samples' median residual is an outlier (`outlying_fits`)."""

OUTLIER_MIN_FOUND = 8
"""Fits are judged against the found samples' residuals once at least this many are found."""


def outlying_fits(state: SampleState, residual: torch.Tensor) -> torch.Tensor:
    """Fits (j,) within the acceptance tolerance but far above the residuals of the samples found so far.

    On a trained victim a sample's next-layer fit can pass the acceptance tolerance while it is off:
    measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64, seed 0, `benchmarks/spear_tail.py`), the fit
    of a true pattern with conditioning 1.1e-2, just above the floor, gave residual 4.6e-5 and a sample
    1.7e-4 off, where the other found samples' residuals were 2e-7 (median). Deflating with it moved the
    null space off the missing columns: the search stalled at 24 of 64 (59 of 64, all true, with this
    test). Healthy searches measured (at init and trained, σ = 0 … 1e-4 × max|g|) keep every residual
    within 5× the median. An outlying fit is not kept; its pattern's column direction is remembered
    instead (`accept_patterns`) for the directions' completion (`try_directions`).
    """
    if state.found < OUTLIER_MIN_FOUND:
        return torch.zeros_like(residual, dtype=torch.bool)
    outlier: torch.Tensor = residual > OUTLIER_RATIO * state.residuals.median()
    return outlier


def keep_samples(state: SampleState, c: torch.Tensor, residual: torch.Tensor, consistent: torch.Tensor,
                 cond: torch.Tensor | None = None, noise_level: torch.Tensor | None = None) -> torch.Tensor:
    """Add the consistent fitted samples c (j, b) that are not outliers (`outlying_fits`), best residual
    first, unless banned; a near-copy of a known sample replaces it when its residual is smaller. Each new
    sample counts in `state.admitted` and may lift bans (`lift_bans`). Returns the mask of the fits judged sound.

    `cond` (σ_min/σ_max of each fit, fit.fit_samples) and `noise_level` (`noise_level_fits`): a fit under
    fit.COND_FLOOR is sound only if it is no outlier — its residual scaled by COND_FLOOR / cond, as its error grows
    with 1 / cond: measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 100, seed 0, row-space fits), a true
    pattern fitted at residual 4.3e-6, 17× the found samples' median, and conditioning 6.4e-3 was 5.5e-4 off and stalled
    the search at 43 found; the sound fits' errors stayed under residual / cond — and either
    * its conditioning is above fit.LOW_COND_FLOOR and the found samples give a reference (OUTLIER_MIN_FOUND).
      Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64): two missing samples fitted at conditioning
      9.0e-3 and 9.5e-3 with residuals 1.1× and 1.6× the found samples' median were 1.8e-6 and 1.6e-6 off;
      every fit with a larger error had an outlying residual; or
    * it is in `noise_level`: residual at the noise level and a column in its zero set (fitted down to
      fit.NOISE_COND_FLOOR). Measured (TinyImageNet
      FC-6 width 400 trained 5 epochs, b = 100, ground truth, `benchmarks/spear_true_fits.py`): 75 of the 100 true
      patterns fit (the other 25 are singular), with residuals 4.8e-8 … 1.4e-6 (90 % under 8.0e-7; slack 9.3e-7),
      at conditioning 5.9e-4 … 1.3e-2 (median 4.6e-3), 1.2e-6 … 8.3e-5 off; 7,663 false patterns from zero draws
      all fit above 0.48. Before this rule the search found none of the 100.
    """
    outlying = outlying_fits(state, residual if cond is None else residual / (cond / COND_FLOOR).clamp(max=1.0))
    if cond is not None:
        referenced = cond > (LOW_COND_FLOOR if state.found >= OUTLIER_MIN_FOUND else COND_FLOOR)
        at_noise = noise_level if noise_level is not None else torch.zeros_like(consistent)
        consistent = consistent & (referenced | at_noise)
    set_aside(state, c[consistent & outlying], residual[consistent & outlying])
    consistent = consistent & ~outlying
    good = torch.nonzero(consistent).flatten()
    for i in good[torch.argsort(residual[good])].tolist():
        ci, ri = c[i], residual[i:i + 1]
        if bool(same_samples(ci[None], state.banned[state.ban_until > state.admitted], rel_tol=1e-5)[0]):
            continue
        if add_sample(state, ci, ri):
            state.admitted += 1
            lift_bans(state)
    drop_outliers(state)
    return consistent


def drop_outliers(state: SampleState) -> None:
    """Drop the found samples that are outliers among them (`outlying_fits`): kept before the found samples
    gave a reference. Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64, guide-pattern fits): the first
    turn kept a fit with residual 1.2e-5, 1.1e-4 off, among samples at 3e-7; with it the completion verified a
    last sample 12 % off."""
    out = outlying_fits(state, state.residuals)
    if bool(out.any()):
        set_aside(state, state.samples[out], state.residuals[out])
        state.samples, state.residuals = state.samples[~out], state.residuals[~out]


def set_aside(state: SampleState, c: torch.Tensor, residual: torch.Tensor) -> None:
    """Keep sound fits c (j, b) that are outliers among the found samples in `state.outliers` (a near-copy of one kept
    replaces it when its residual is smaller); `try_outliers` completes the batch from them.

    An outlier is not used to deflate: one 1e-4 off moves the null space off the missing columns. But it may be a
    true sample that the victim fits less well than the others: measured (CIFAR-10 FC-6 width 400 trained 5 epochs,
    b = 64, seed 0, `benchmarks/spear_tail.py`), the last 3 missing samples' true patterns fit at residuals 1.1e-5 …
    4.6e-5, 40–170× the found samples' median 2.7e-7, at conditioning 1.1e-2; completing them from remembered
    directions instead left them 2e-3 off even from the true directions.
    """
    for ci, ri in zip(c, residual, strict=True):
        if nearest_known(ci, state.samples) is None:
            state.outliers, state.outlier_residuals, _ = merge_row(state.outliers, state.outlier_residuals, ci,
                                                                   ri[None])


def add_sample(state: SampleState, c: torch.Tensor, residual: torch.Tensor) -> bool:
    """Add sample c (b,) with its residual (1,) to the found ones, or let it replace a near-copy with a
    larger residual; whether it was new."""
    state.samples, state.residuals, new = merge_row(state.samples, state.residuals, c, residual)
    return new


def merge_row(rows: torch.Tensor, residuals: torch.Tensor, c: torch.Tensor, residual: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """rows (j, b) and their residuals (j,) with c (b,) and its residual (1,) added, or with c in place of its
    near-copy (`nearest_known`) when its residual is smaller; whether c was new."""
    near = nearest_known(c, rows)
    if near is None:
        return torch.cat([rows, c[None]]), torch.cat([residuals, residual]), True
    if float(residual) < float(residuals[near]):
        rows[near], residuals[near] = c, residual[0]
    return rows, residuals, False


BAN_LIFETIME = 2
"""A sample banned for the n-th time is refused until the search has added n × BAN_LIFETIME new samples."""


def ban_sample(state: SampleState, i: int) -> None:
    """Drop found sample i after a failed verification and ban it for a while, not for good.

    A failed completion does not say which sample is wrong, only which one the wrong batch violates
    most: with a false sample among the found ones (a mixture or a near-copy), that may be a true
    one. Its ban lifts once the search has added `BAN_LIFETIME` new samples (twice that after a second
    ban, and so on), i.e. once the found set has changed enough for the completion to come out otherwise.
    """
    c, residual = state.samples[i], state.residuals[i:i + 1]
    state.samples = torch.cat([state.samples[:i], state.samples[i + 1:]])
    state.residuals = torch.cat([state.residuals[:i], state.residuals[i + 1:]])
    before = torch.nonzero((state.banned - c).norm(dim=1) <= 1e-5 * c.norm()).flatten()
    if before.numel():  # banned before, lifted since
        j = int(before[0])
        state.ban_strikes[j] += 1
    else:
        j = state.banned.shape[0]
        state.banned = torch.cat([state.banned, c[None]])
        state.ban_residuals = torch.cat([state.ban_residuals, residual])
        state.ban_until = torch.cat([state.ban_until, state.ban_until.new_zeros(1)])
        state.ban_strikes = torch.cat([state.ban_strikes, state.ban_strikes.new_ones(1)])
    state.ban_residuals[j] = residual[0]
    state.ban_until[j] = state.admitted + BAN_LIFETIME * int(state.ban_strikes[j])


def lift_bans(state: SampleState) -> None:
    """Re-admit every banned sample whose ban has run out (`ban_sample`) to the found samples."""
    due = torch.nonzero((state.ban_until >= 0) & (state.ban_until <= state.admitted)).flatten().tolist()
    for j in due:
        state.ban_until[j] = -1
        add_sample(state, state.banned[j], state.ban_residuals[j:j + 1])


SAME = 1e-2


def nearest_known(c: torch.Tensor, known: torch.Tensor) -> int | None:
    """Index of the known sample within SAME (relative) of c, if any."""
    if known.shape[0] == 0:
        return None
    dist = (known - c).norm(dim=1)
    i = int(dist.argmin())
    return i if float(dist[i]) <= SAME * float(c.norm()) else None


def complete_batch(problem: LayerProblem, state: SampleState, tol: torch.Tensor,
                   residual_tol: float) -> Solution:
    """With ≥ b−1 samples found: verify them (all b if found, else b−1 plus the closed-form last).

    On success `state.samples` becomes the batch. On failure the sample with the most ReLU
    violations is dropped and banned for a while (`ban_sample`), so the search goes on with b−2 samples —
    unless the closed-form last sample is too weak in the gradient to verify (`weak_last_sample`): then no found
    sample is blamed, and `state.unverifiable` says why the search stops.
    """
    b = problem.b
    order = torch.argsort(state.residuals)
    state.samples, state.residuals = state.samples[order], state.residuals[order]
    if state.samples.shape[0] >= b:
        C, solution = verify_batch(problem, state.samples[:b], tol, residual_tol)
        if solution.ok:
            state.samples = C
            return solution
    state.samples, state.residuals = state.samples[: b - 1], state.residuals[: b - 1]
    C, solution = verify_batch(problem, complete_last_sample(problem, state.samples, tol), tol, residual_tol)
    state.last_column_used = True
    if solution.ok:
        state.samples = C
        return solution
    share = weak_last_sample(problem, C)
    if share is not None:
        state.unverifiable = (f"the last sample's share of the gradient is {share:.1e} of the median one, "
                              f"too weak for its closed form to verify")
        return solution
    assert solution.per_sample is not None  # solve_from_samples always counts violations per sample
    ban_sample(state, int(solution.per_sample[: b - 1].argmax()))
    state.retries += 1
    state.seen.clear()
    return solution


def weak_last_sample(problem: LayerProblem, C: torch.Tensor) -> float | None:
    """The last sample's share of the gradient, ‖column of Dᵀ = L C⁻¹‖ over the others' median, if under
    `Tolerances.weak_share`.

    A sample the victim predicts confidently barely moves the gradient: measured (TinyImageNet FC-6 width 400
    trained 20 epochs, b = 100, the suite's seed, `benchmarks/spear_tail.py`), sample 80, predicted at p = 0.998, has
    a gradient column 6.1e-4 of the median one (the closed form's: 1.5e-2); with the other 99 found and true (≤ 2e-5
    off), its closed form is 83 % off and the batch fails verification (484 ReLU violations), and banning the found
    sample with the most violations dropped a true one for good (no new sample lifts the ban). The found samples'
    rounding, not a wrong one, decides such a sample, so none is banned."""
    norms = (problem.L @ torch.linalg.inv(C)).norm(dim=0)
    share = float(norms[-1] / norms[:-1].median())
    return share if share < TOLERANCES.weak_share else None


def verify_batch(problem: LayerProblem, C: torch.Tensor, tol: torch.Tensor,
                 residual_tol: float) -> tuple[torch.Tensor, Solution]:
    """Verify a complete batch C (b×b); if it fails, refine all samples jointly and verify again.

    The refined batch (joint.py) is kept only if it passes the same verification and every sample
    still explains the next layer's gradient within the acceptance tolerance; otherwise C and its
    failed verification are returned unchanged (the caller bans its worst sample). Batches above
    `JOINT_MAX_B` skip the refinement (its dense least squares has b² unknowns).
    """
    solution = solve_from_samples(problem, C, tol)
    if solution.ok or problem.P_next is None or problem.b > JOINT_MAX_B:
        return C, solution
    refined = refine_batch(problem, C)
    if not bool(torch.isfinite(refined).all()):
        return C, solution
    if not explained(problem, refined, residual_tol):
        return C, solution
    check = solve_from_samples(problem, refined, tol)
    return (refined, check) if check.ok else (C, solution)


def explained(problem: LayerProblem, C: torch.Tensor, residual_tol: float) -> bool:
    """Whether every sample of C explains the next layer's gradient as an accepted fit must (relative residual ≤
    max(residual_tol, slack)); True without a next layer.

    A batch completed from remembered directions can pass the batch checks with a sample far off: measured
    (TinyImageNet FC-6 width 400 trained 20 epochs, b = 100, two missing), a sample the victim predicts at p = 0.998
    has a gradient column 4.6e-4 of the median one, and the completed batch verified with it 40 % off — its
    next-layer residual was 2.1e-2, where the true samples' are ≤ 9.5e-5.
    """
    return problem.P_next is None or float(next_layer_residuals(problem, C).max()) <= max(residual_tol, problem.slack)


def try_outliers(problem: LayerProblem, state: SampleState, tol: torch.Tensor, residual_tol: float) -> Solution | None:
    """Complete the batch with the best-fitting outliers (`set_aside`) independent of the found samples and of one
    another, and the last sample in closed form if they are one short (`complete_last_sample`), and verify it; each
    choice once per search state (one short: the last sample as `complete_batch` finds it with b − 1 found).

    Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64, the suite's cell `paper/spear-trained-cifar10`):
    61 found in 4 s, then 900 s without another; with the last 3 set aside and completed here, exact in 4 s."""
    known = state.found
    k = problem.b - known
    if k < 1 or state.outliers.shape[0] < k - 1:
        return None
    N = null_basis(state.samples, problem.b)
    picked = select_independent(state.outliers @ N, -state.outlier_residuals, k, rtol=1e-3)
    attempt = (*found_key(state), float(state.outlier_residuals[picked].sum()))
    if picked.shape[0] < max(k - 1, 1) or attempt == state.outliers_tried:
        return None
    state.outliers_tried = attempt
    C = torch.cat([state.samples, state.outliers[picked]])
    if picked.shape[0] < k:
        C = complete_last_sample(problem, C, tol)
    solution = take_completion(problem, state, C, tol, residual_tol)
    if solution is not None:
        state.from_outliers = int(picked.shape[0])
        state.last_column_used = picked.shape[0] < k
    return solution


def take_completion(problem: LayerProblem, state: SampleState, C: torch.Tensor, tol: torch.Tensor,
                    residual_tol: float) -> Solution | None:
    """Verify a batch C completed from the found samples (`verify_batch`); keep it as `state.samples` and return its
    solution if it verifies and every completed sample explains the next layer (`explained`), else None."""
    C, solution = verify_batch(problem, C, tol, residual_tol)
    if not (solution.ok and explained(problem, C[state.found:], residual_tol)):
        return None
    state.samples = C
    return solution


def remember_directions(state: SampleState, q: torch.Tensor) -> None:
    """Keep unit column directions whose pattern was sound but whose sample fit was not."""
    fresh = is_new(q, state.directions, cos_tol=1e-6)
    state.directions = torch.cat([state.directions, q[fresh]])


def inside_directions(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices into `state.directions` of the remembered directions inside the null space N of the found samples, one
    per zero pattern (copies of a column differ in rounding), and their zero masks."""
    index = torch.nonzero((state.directions @ N).norm(dim=1) > 1 - 1e-6).flatten()
    masks = zero_masks(problem.Ln, state.directions[index], tol)
    first = first_of_each_pattern(masks).to(index.device)
    return index[first], masks[first]


def direction_pool(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The remembered directions inside the null space N of the found samples (`inside_directions`), their zero masks,
    and the indices of the k = b − found sparsest independent ones (`try_directions` completes or fits from those)."""
    k = problem.b - state.samples.shape[0]
    index, masks = inside_directions(problem, state, N, tol)
    inside = state.directions[index]
    return inside, masks, select_independent(inside, masks.sum(1), k, rtol=1e-3, pool=4 * k)


def try_directions(problem: LayerProblem, state: SampleState, tol: torch.Tensor,
                   residual_tol: float) -> Solution | None:
    """If remembered directions cover all k ≥ 2 missing columns, complete the batch and verify it;
    otherwise (or if that fails) fit the samples of the directions there are, each in the subspace
    left to it (`last_column.samples_from_directions`), and keep the consistent ones.

    Directions inside the current null space are either missing columns or mixtures of them; one
    per zero pattern (copies of one column differ in rounding), the k sparsest independent ones are
    tried (verification decides), each choice once per search state (the samples found, their
    residuals and the bans). Any k: measured
    (TinyImageNet FC-6 width 400 at init, b = 150, seed 1, `benchmarks/spear_tail.py`), the search
    stalled with 27 samples missing, 26 of them with a next-layer fit just under the conditioning
    floor (σ_min/σ_max 0.68–1.0e-2, the fit has ≈ 200 active rows for b = 150 unknowns), while every
    one of the 27 directions had been remembered.
    """
    b, known = problem.b, state.samples.shape[0]
    k = b - known
    if k < 2 or state.directions.shape[0] == 0:
        return None
    N = null_basis(state.samples, b)
    inside, masks, picked = direction_pool(problem, state, N, tol)
    attempt = (*found_key(state), b"".join(pattern_keys(masks[picked])))
    if attempt == state.directions_tried or picked.shape[0] == 0:
        return None
    state.directions_tried = attempt
    chosen = inside[picked]
    if picked.shape[0] == k:
        solution = take_completion(problem, state, complete_samples(problem, state.samples, chosen.T), tol,
                                   residual_tol)
        if solution is not None:
            state.last_column_used = True
            state.from_directions = k
            return solution
    if problem.P_next is not None:  # some directions, or a completion that failed: fit their samples one by one
        fits_in_row_space(problem, N, chosen, tol, state, residual_tol)
    return None
