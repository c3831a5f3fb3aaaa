"""Which fitted samples the deflated search keeps: a fit must be consistent, not banned, no outlier among the
found samples, and conditioned well enough — or at the gradient's noise level with a column in its zero set.

`accept_fits` fits zero patterns through the next layer's gradient (fit.fit_samples) and passes them to
`keep_samples`, the one judge of every route (drawn patterns, row-space fits, guides, descent); outlying fits are
set aside (`set_aside`), not deflated with, for completion.try_outliers.
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.candidates import kernel_on, unique_kernel, zero_masks, zero_tolerance
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import SampleFit, fit_samples, same_samples
from leakbench.attacks.spear.samples import SampleState, add_sample, lift_bans, merge_row, nearest_known
from leakbench.attacks.spear.tolerances import TOLERANCES


def fits_with_free_rows(problem: LayerProblem, exact: torch.Tensor, free: torch.Tensor, state: SampleState,
                        residual_tol: float) -> torch.Tensor:
    """`accept_fits` of each zero pattern (k, m) with its own free rows (k, m); whether each was sound."""
    return torch.cat([accept_fits(problem, exact[i:i + 1], state, residual_tol, free=free[i]).consistent
                      for i in range(exact.shape[0])])


def accept_fits(problem: LayerProblem, zero: torch.Tensor, state: SampleState, residual_tol: float,
                free: torch.Tensor | None = None, rounds: int = TOLERANCES.fit_rounds) -> SampleFit:
    """Fit a sample to each zero pattern (k, m); keep the consistent ones not known or banned yet.

    A fit within `Tolerances.same_sample` (relative) of a known sample is that sample again; it replaces the known
    one when its residual is smaller: a near-copy with a misread neuron or two must not block the exact sample
    (measured: docs/notebook/spear-measurements.md). `rounds`: refits with the fitted sample's own pattern
    (fit.fit_samples).
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
    fit = fit_samples(problem, zero, residual_tol=residual_tol, free=free, rounds=rounds,
                      cond_floor=TOLERANCES.noise_cond_floor)
    state.fits += int(zero.shape[0])
    sound = keep_samples(state, fit.c, fit.residual, fit.consistent, fit.cond, noise_level_fits(problem, fit))
    return SampleFit(c=fit.c, residual=fit.residual, consistent=sound, cond=fit.cond)


def keep_samples(state: SampleState, c: torch.Tensor, residual: torch.Tensor, consistent: torch.Tensor,
                 cond: torch.Tensor | None = None, noise_level: torch.Tensor | None = None) -> torch.Tensor:
    """Add the consistent fitted samples c (j, b) that are not outliers (`outlying_fits`), best residual
    first, unless banned; a near-copy of a known sample replaces it when its residual is smaller. Each new
    sample counts in `state.admitted` and may lift bans (`samples.lift_bans`). Returns the mask of the fits judged
    sound.

    `cond` (σ_min/σ_max of each fit, fit.fit_samples) and `noise_level` (`noise_level_fits`): a fit under
    `Tolerances.cond_floor` is sound only if it is no outlier — its residual scaled by cond_floor / cond, as its
    error grows with 1 / cond — and either
    * its conditioning is above `Tolerances.low_cond_floor` and the found samples give a reference
      (`Tolerances.outlier_min_found`), or
    * it is in `noise_level`: residual at the noise level and a column in its zero set (fitted down to
      `Tolerances.noise_cond_floor`).
    Measured: docs/notebook/spear-measurements.md.
    """
    t = TOLERANCES
    outlying = outlying_fits(state, residual if cond is None else residual / (cond / t.cond_floor).clamp(max=1.0))
    if cond is not None:
        referenced = cond > (t.low_cond_floor if state.found >= t.outlier_min_found else t.cond_floor)
        at_noise = noise_level if noise_level is not None else torch.zeros_like(consistent)
        consistent = consistent & (referenced | at_noise)
    set_aside(state, c[consistent & outlying], residual[consistent & outlying])
    consistent = consistent & ~outlying
    good = torch.nonzero(consistent).flatten()
    for i in good[torch.argsort(residual[good])].tolist():
        ci, ri = c[i], residual[i:i + 1]
        if bool(same_samples(ci[None], state.banned[state.ban_until > state.admitted], rel_tol=t.same_banned)[0]):
            continue
        if add_sample(state, ci, ri):
            state.admitted += 1
            lift_bans(state)
    drop_outliers(state)
    return consistent


def outlying_fits(state: SampleState, residual: torch.Tensor) -> torch.Tensor:
    """Fits (j,) within the acceptance tolerance but far above the residuals of the samples found so far.

    On a trained victim a sample's next-layer fit can pass the acceptance tolerance while it is off, and deflating
    with it moves the null space off the missing columns (measured: docs/notebook/spear-measurements.md). An outlying
    fit is not kept; it is set aside (`set_aside`), and its pattern's column direction is remembered
    (deflation.accept_patterns) for the directions' completion (completion.try_directions).
    """
    if state.found < TOLERANCES.outlier_min_found:
        return torch.zeros_like(residual, dtype=torch.bool)
    outlier: torch.Tensor = residual > TOLERANCES.outlier_ratio * state.residuals.median()
    return outlier


def noise_level_fits(problem: LayerProblem, fit: SampleFit) -> torch.Tensor:
    """Fits under `Tolerances.cond_floor` that are sound without a reference (`keep_samples`): residual at the
    gradient's noise level (≤ `LayerProblem.slack`), and the fitted sample's own zero set is a column's exact zero
    set: the rows of L where its pre-activation is ≤ 0 have a one-dimensional kernel q (the layer's own evidence, as for
    a drawn pattern: candidates.refine), and q vanishes on no other row.

    Why the column test (a fit at the noise level can be far off): docs/notebook/spear-measurements.md.
    """
    low = fit.consistent & (fit.cond <= TOLERANCES.cond_floor) & (fit.residual <= problem.slack)
    if not bool(low.any()):
        return low
    zero = (fit.c[low] @ problem.A.T + problem.bias) <= 0
    q, S = kernel_on(problem.Ln, zero)
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    column = unique_kernel(S, TOLERANCES.unique_gap) & (zero_masks(problem.Ln, q, tol) == zero).all(dim=1)
    low[low.clone()] = column
    return low


def drop_outliers(state: SampleState) -> None:
    """Drop the found samples that are outliers among them (`outlying_fits`): kept before the found samples
    gave a reference (measured: docs/notebook/spear-measurements.md)."""
    out = outlying_fits(state, state.residuals)
    if bool(out.any()):
        set_aside(state, state.samples[out], state.residuals[out])
        state.samples, state.residuals = state.samples[~out], state.residuals[~out]


def set_aside(state: SampleState, c: torch.Tensor, residual: torch.Tensor) -> None:
    """Keep sound fits c (j, b) that are outliers among the found samples in `state.outliers` (a near-copy of one kept
    replaces it when its residual is smaller); `completion.try_outliers` completes the batch from them.

    An outlier is not used to deflate: one 1e-4 off moves the null space off the missing columns. But it may be a
    true sample that the victim fits less well than the others (measured: docs/notebook/spear-measurements.md).
    """
    for ci, ri in zip(c, residual, strict=True):
        if nearest_known(ci, state.samples) is None:
            state.outliers, state.outlier_residuals, _ = merge_row(state.outliers, state.outlier_residuals, ci,
                                                                   ri[None])
