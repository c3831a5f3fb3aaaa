"""The batch's completion and its verification: with b − 1 samples found, the last in closed form; from
remembered directions or outliers set aside, the missing ones; each completed batch checked without ground truth.

`complete_batch` verifies the found samples (b, or b − 1 and the closed-form last) and bans the worst on a
failure; `try_directions` and `try_outliers` complete the batch from remembered directions and from fits set
aside as outliers (acceptance.set_aside), each choice once per search state; `verify_batch` refines a failed
batch jointly (joint.py).
"""

from __future__ import annotations

import torch

from leakbench.attacks.spear.candidates import pattern_keys
from leakbench.attacks.spear.deflation import null_basis
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.joint import next_layer_residuals, refine_batch
from leakbench.attacks.spear.last_column import complete_last_sample, complete_samples
from leakbench.attacks.spear.rowspace import fits_in_row_space, inside_directions
from leakbench.attacks.spear.samples import SampleState, ban_sample, found_key
from leakbench.attacks.spear.select import select_independent
from leakbench.attacks.spear.solve import Solution, solve_from_samples
from leakbench.attacks.spear.tolerances import TOLERANCES


def complete_batch(problem: LayerProblem, state: SampleState, tol: torch.Tensor,
                   residual_tol: float) -> Solution:
    """With ≥ b−1 samples found: verify them (all b if found, else b−1 plus the closed-form last).

    On success `state.samples` becomes the batch. On failure the sample with the most ReLU
    violations is dropped and banned for a while (`samples.ban_sample`), so the search goes on with b−2 samples —
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

    A sample the victim predicts confidently barely moves the gradient; the found samples' rounding, not a wrong
    one, decides its closed form, so none is banned (measured: docs/notebook/spear-measurements.md)."""
    norms = (problem.L @ torch.linalg.inv(C)).norm(dim=0)
    share = float(norms[-1] / norms[:-1].median())
    return share if share < TOLERANCES.weak_share else None


def verify_batch(problem: LayerProblem, C: torch.Tensor, tol: torch.Tensor,
                 residual_tol: float) -> tuple[torch.Tensor, Solution]:
    """Verify a complete batch C (b×b); if it fails, refine all samples jointly and verify again.

    The refined batch (joint.py) is kept only if it passes the same verification and every sample
    still explains the next layer's gradient within the acceptance tolerance; otherwise C and its
    failed verification are returned unchanged (the caller bans its worst sample). Batches above
    `Tolerances.joint_max_b` skip the refinement (its dense least squares has b² unknowns).
    """
    solution = solve_from_samples(problem, C, tol)
    if solution.ok or problem.P_next is None or problem.b > TOLERANCES.joint_max_b:
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

    A batch completed from remembered directions can pass the batch checks with a sample far off, which its
    next-layer residual gives away (measured: docs/notebook/spear-measurements.md).
    """
    return problem.P_next is None or float(next_layer_residuals(problem, C).max()) <= max(residual_tol, problem.slack)


def take_completion(problem: LayerProblem, state: SampleState, C: torch.Tensor, tol: torch.Tensor,
                    residual_tol: float) -> Solution | None:
    """Verify a batch C completed from the found samples (`verify_batch`); keep it as `state.samples` and return its
    solution if it verifies and every completed sample explains the next layer (`explained`), else None."""
    C, solution = verify_batch(problem, C, tol, residual_tol)
    if not (solution.ok and explained(problem, C[state.found:], residual_tol)):
        return None
    state.samples = C
    return solution


def try_outliers(problem: LayerProblem, state: SampleState, tol: torch.Tensor, residual_tol: float) -> Solution | None:
    """Complete the batch with the best-fitting outliers (`acceptance.set_aside`) independent of the found samples and
    of one another, and the last sample in closed form if they are one short (`complete_last_sample`), and verify it;
    each choice once per search state (one short: the last sample as `complete_batch` finds it with b − 1 found).
    Measured: docs/notebook/spear-measurements.md."""
    known = state.found
    k = problem.b - known
    if k < 1 or state.outliers.shape[0] < k - 1:
        return None
    N = null_basis(state.samples, problem.b)
    picked = select_independent(state.outliers @ N, -state.outlier_residuals, k, rtol=TOLERANCES.select_rtol)
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


def direction_pool(problem: LayerProblem, state: SampleState, N: torch.Tensor, tol: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The remembered directions inside the null space N of the found samples (`rowspace.inside_directions`), their
    zero masks, and the indices of the k = b − found sparsest independent ones (`try_directions` completes or fits
    from those)."""
    k = problem.b - state.samples.shape[0]
    index, masks = inside_directions(problem, state, N, tol)
    inside = state.directions[index]
    return inside, masks, select_independent(inside, masks.sum(1), k, rtol=TOLERANCES.select_rtol, pool=4 * k)


def try_directions(problem: LayerProblem, state: SampleState, tol: torch.Tensor,
                   residual_tol: float) -> Solution | None:
    """If remembered directions cover all k ≥ 2 missing columns, complete the batch and verify it;
    otherwise (or if that fails) fit the samples of the directions there are, each in the subspace
    left to it (`last_column.samples_from_directions`), and keep the consistent ones.

    Directions inside the current null space are either missing columns or mixtures of them; one
    per zero pattern (copies of one column differ in rounding), the k sparsest independent ones are
    tried (verification decides), each choice once per search state (the samples found, their
    residuals and the bans). Any k (why: docs/notebook/spear-measurements.md).
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
