"""The paper's route (`route=paper`): SPEAR's search for the columns of Q, as published.

Sample (sampling.py), filter (candidates.py), select (select.py), scale and verify (solve.py), with
a draw and time budget; the attacked layer's gradient only. The default route runs it too when the
next layer's gradient cannot be used (rank below b); otherwise it runs deflation.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from leakbench.attacks.spear.candidates import (
    canonical,
    is_new,
    min_zeros,
    new_patterns,
    pattern_margin,
    refine,
    zero_masks,
)
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.last_column import last_column_candidates
from leakbench.attacks.spear.next_weight import passes_next_weight
from leakbench.attacks.spear.sampling import count_zeros, draw_directions
from leakbench.attacks.spear.select import improve_by_swaps, select_independent
from leakbench.attacks.spear.solve import Solution, solve_batch
from leakbench.attacks.spear.state import SearchSettings, SearchState, out_of_budget, search_bar, show_progress


@dataclass
class ColumnState(SearchState):
    """The paper route's state: the unit columns of Q accepted so far (k × b, in the order found),
    the LP checks run (`candidates.pattern_margin`) and, of the selections verified, the one with the
    fewest ReLU violations (`best`: the approximate forms' answer when none verifies), besides the counters of
    every search."""

    columns: torch.Tensor
    lp_checks: int = 0
    rejected_next_weight: int = 0
    best: Solution | None = None

    @property
    def found(self) -> int:
        return int(self.columns.shape[0])

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "fits_or_lp_checks": self.lp_checks,
                **({"rejected_next_weight": self.rejected_next_weight} if self.rejected_next_weight else {})}


def consider(problem: LayerProblem, masks: torch.Tensor, tol: torch.Tensor, state: ColumnState,
             settings: SearchSettings) -> None:
    """Refine candidate zero sets; accept unique-kernel, sparse, new columns (with `settings.next_weight_check`, only
    those in the span of the next layer's weight on their non-zero rows: leakbench's next-layer weight check,
    next_weight.py; with `settings.lp_check`, only those whose pattern is a feasible ReLU pattern: leakbench's LP
    check)."""
    if masks.shape[0] == 0:
        return
    state.patterns += int(masks.shape[0])
    q, exact, unique = refine(problem.Ln, masks, tol, settings.tolerances.unique_gap)
    enough = exact.sum(1) >= min_zeros(problem, settings)
    if settings.lp_check:  # leakbench's: a direction (numerically) zero on almost every row is no sample's pattern
        enough &= exact.sum(1) <= settings.tolerances.max_zero_fraction * problem.m
    keep = unique & enough
    q, exact = canonical(q[keep]), exact[keep]
    new = is_new(q, state.columns)
    q, exact = q[new], exact[new]
    if settings.next_weight_check and q.shape[0]:  # leakbench's next-layer weight check (next_weight.py)
        passed = passes_next_weight(problem, q, tol)
        state.rejected_next_weight += int((~passed).sum())
        q, exact = q[passed], exact[passed]
    for direction, zero in zip(q, exact, strict=True):
        if not bool(is_new(direction[None], state.columns)[0]):
            continue
        if settings.lp_check:
            size = (problem.Ln @ direction).abs()
            active = size > 100 * tol
            sure = zero & (size <= settings.tolerances.lp_zero_factor * tol)
            state.lp_checks += 1
            if pattern_margin(problem, sure.cpu().numpy(), active.cpu().numpy()) <= 0:
                continue
        state.columns = torch.cat([state.columns, direction[None]])


def sample_chunk(problem: LayerProblem, tol: torch.Tensor, state: ColumnState, settings: SearchSettings,
                 gen: torch.Generator) -> torch.Tensor:
    """Draw one chunk; return the loose zero masks of its new, sparse-enough directions."""
    count = min(settings.chunk, settings.max_draws - state.draws)
    q = draw_directions(problem.Ln, problem.b, count, gen)
    state.draws += count
    q = q[torch.isfinite(q).all(dim=1)]
    loose = tol * settings.tolerances.sample_tol_factor
    hits = q[count_zeros(problem.Ln, q, loose) >= min_zeros(problem, settings)]
    state.candidates += int(hits.shape[0])
    masks = zero_masks(problem.Ln, hits, loose)
    return masks[new_patterns(masks, state, settings.tolerances.max_new_per_chunk)]


def select_columns(problem: LayerProblem, state: ColumnState, tol: torch.Tensor,
                   settings: SearchSettings) -> torch.Tensor:
    """Select step: indices of up to b accepted columns, sparsest first and linearly independent
    (`select.select_independent`), then with `settings.second_stage` improved by swaps
    (`select.improve_by_swaps`, among every accepted candidate); returned in the order the columns were found."""
    zeros = zero_masks(problem.Ln, state.columns, tol).sum(1)
    chosen = select_independent(state.columns, zeros, problem.b, rtol=settings.tolerances.independent_rtol)
    if settings.second_stage and chosen.numel() == problem.b:
        chosen = improve_by_swaps(problem, state.columns, chosen, zeros, tol)
    return chosen.sort().values


ColumnProposals = Callable[[LayerProblem, ColumnState, torch.Tensor, SearchSettings, torch.Generator],
                           "torch.Tensor | None"]
"""A proposal source of the column search (guided_columns.ColumnGuides): loose zero masks (k, m) to refine, or None
to leave the turn to SPEAR's own draws."""


def search_columns(problem: LayerProblem, tol: torch.Tensor, settings: SearchSettings,
                   gen: torch.Generator, propose: ColumnProposals | None = None) -> tuple[ColumnState, Solution | None]:
    """The column search: sample, filter, select b columns of Q, scale and verify, within the budget.

    Each chunk of draws (`sample_chunk`) is filtered (`consider`: exact zero set, unique kernel, zero
    count, new; with `settings.lp_check`, an LP-feasible pattern); `select_columns` picks b independent
    columns (with `settings.second_stage`, then improved by the second greedy stage) and `solve.solve_batch`
    scales them from dL/db and verifies the ReLU pattern. A selection that fails verification means
    "keep sampling" (each selection verified once) until the budget runs out; with the LP check the first
    complete selection is final (its candidates are all sound). With `last_column`, the b-th column is
    looked for in closed form as soon as b−1 are selected (last_column.py). Returns the state (its `best`:
    the selection with the fewest ReLU violations) and the last solution (None when the budget ran out before
    b columns were selected). `propose` (leakbench's guided column search, guided_columns.py) is asked first every
    turn; once `Tolerances.guide_share_after` of its turns in a row found no column it gives every other turn to
    SPEAR's own draws, until it finds one again.
    """
    b = problem.b
    state = ColumnState(columns=torch.empty(0, b, dtype=problem.Ln.dtype, device=problem.Ln.device))
    tried_last = False
    solution: Solution | None = None
    verified: set[tuple[int, ...]] = set()
    selected_from, chosen = -1, torch.empty(0, dtype=torch.long)
    misses = turn = 0
    with search_bar(problem, settings) as bar:
        while not out_of_budget(state, settings):
            turn += 1
            shared = misses >= settings.tolerances.guide_share_after and turn % 2 == 0
            masks = propose(problem, state, tol, settings, gen) if propose is not None and not shared else None
            found = state.found
            consider(problem, sample_chunk(problem, tol, state, settings, gen) if masks is None else masks, tol,
                     state, settings)
            if masks is not None:
                misses = 0 if state.found > found else misses + 1
            if state.columns.shape[0] != selected_from:  # the selection depends on the candidates only
                selected_from, chosen = state.columns.shape[0], select_columns(problem, state, tol, settings)
            if settings.last_column and chosen.numel() == b - 1 and not tried_last:
                tried_last = True
                q = last_column_candidates(problem, state.columns[chosen].T)
                loose = tol * settings.tolerances.sample_tol_factor
                consider(problem, zero_masks(problem.Ln, q, loose), tol, state, settings)
                selected_from, chosen = state.columns.shape[0], select_columns(problem, state, tol, settings)
                state.last_column_used = chosen.numel() == b
            show_progress(bar, state, settings)
            key = tuple(chosen.tolist())
            if chosen.numel() == b and key not in verified:
                verified.add(key)
                solution = solve_batch(problem, state.columns[chosen].T, tol)
                if state.best is None or solution.violations < state.best.violations:
                    state.best = solution
                if solution.ok or settings.lp_check:
                    break
    return state, solution
