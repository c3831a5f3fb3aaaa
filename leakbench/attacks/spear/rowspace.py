"""Fits in the missing samples' row space: a missing sample's row is orthogonal to the found samples' columns
(and to the remembered directions that are missing columns for sure), so its fit has b − found unknowns, not b.

`row_space` builds that space once per set of found samples (last_column.missing_row_space); `fits_in_row_space`
fits column directions' patterns there, `patterns_in_row_space` ReLU patterns (descent.py's), and both are
judged by acceptance.keep_samples (`keep_row_space_fits`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from leakbench.attacks.spear.acceptance import keep_samples, noise_level_fits
from leakbench.attacks.spear.candidates import first_of_each_pattern, zero_masks
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import SampleFit
from leakbench.attacks.spear.last_column import (
    RowSpace,
    clean_kernels,
    fit_in_row_space,
    missing_row_space,
    samples_from_directions,
    sure_directions,
)
from leakbench.attacks.spear.samples import SampleState, found_key
from leakbench.attacks.spear.tolerances import TOLERANCES


def fits_in_row_space(problem: LayerProblem, N: torch.Tensor, q: torch.Tensor, tol: torch.Tensor, state: SampleState,
                      residual_tol: float) -> torch.Tensor:
    """Fit the samples of column directions q (j, b) in the missing samples' row space (`row_space`), keep the
    sound ones (`acceptance.keep_samples`); whether each was sound.

    A missing sample's row is orthogonal to the found samples' columns, so its fit has b − found unknowns
    instead of b: that fits true patterns whose fit over all b failed (singular or ill-conditioned, or ended on
    another pattern or an outlying residual). From b = `Tolerances.row_space_from_b` on, the row space is also
    orthogonal to the remembered directions that are missing columns for sure (`sure_remembered`), and a fit is
    judged as one over all b (`acceptance.keep_samples` with its conditioning, down to `Tolerances.noise_cond_floor`).
    Measured: docs/notebook/spear-measurements.md.
    """
    wide = problem.b >= TOLERANCES.row_space_from_b  # below: the found columns alone, and the usual floor
    fit = samples_from_directions(problem, row_space(problem, state, N, tol, sure=wide), q, tol,
                                  cond_floor=TOLERANCES.noise_cond_floor if wide else TOLERANCES.cond_floor)
    return keep_row_space_fits(problem, state, fit, residual_tol)


def patterns_in_row_space(problem: LayerProblem, N: torch.Tensor, active: torch.Tensor, tol: torch.Tensor,
                          state: SampleState, residual_tol: float) -> torch.Tensor:
    """Fit ReLU patterns `active` (j, m; 1 = active) in the missing samples' row space (`row_space`), each refitted
    with its own pattern (`Tolerances.row_space_rounds`), and keep the sound ones (`keep_row_space_fits`: judged as
    `fits_in_row_space` judges a direction's pattern); whether each was sound."""
    fit = fit_in_row_space(problem, active, row_space(problem, state, N, tol).basis, TOLERANCES.noise_cond_floor,
                           TOLERANCES.row_space_rounds)
    return keep_row_space_fits(problem, state, fit, residual_tol)


def keep_row_space_fits(problem: LayerProblem, state: SampleState, fit: SampleFit, residual_tol: float
                        ) -> torch.Tensor:
    """`acceptance.keep_samples` for row-space fits: sound when consistent, with residual ≤ max(residual_tol, slack),
    and judged with their conditioning (down to `Tolerances.noise_cond_floor`: `acceptance.noise_level_fits`); each
    counts as a fit."""
    state.fits += int(fit.c.shape[0])
    fit = replace(fit, consistent=fit.consistent & (fit.residual <= max(residual_tol, problem.slack)))
    return keep_samples(state, fit.c, fit.residual, fit.consistent, fit.cond, noise_level_fits(problem, fit))


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


def inside_directions(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices into `state.directions` of the remembered directions inside the null space N of the found samples, one
    per zero pattern (copies of a column differ in rounding), and their zero masks."""
    index = torch.nonzero((state.directions @ N).norm(dim=1) > 1 - TOLERANCES.same_direction).flatten()
    masks = zero_masks(problem.Ln, state.directions[index], tol)
    first = first_of_each_pattern(masks).to(index.device)
    return index[first], masks[first]
