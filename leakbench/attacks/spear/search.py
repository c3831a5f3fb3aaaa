"""The sampling search for the columns of Q, with a draw and time budget (SPEAR's main loop)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from leakbench.attacks.spear.candidates import (canonical, is_new, min_zeros, new_patterns, pattern_margin, refine,
                                                zero_masks)
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.last_column import last_column_candidates
from leakbench.attacks.spear.sampling import count_zeros, draw_directions
from leakbench.attacks.spear.state import SearchSettings, search_bar, show_progress


@dataclass
class SearchState:
    """Columns found so far, patterns already examined, and counters for the attack's stats."""

    accepted: torch.Tensor
    banned: torch.Tensor | None = None
    retries: int = 0
    seen: set[bytes] = field(default_factory=set)
    draws: int = 0
    candidates: int = 0
    patterns: int = 0
    lp_checks: int = 0
    last_column_used: bool = False
    active_draws: int = 0
    two_sided: bool = False
    tail: bool = False
    active_misses: int = 0
    zero_misses: int = 0
    chunks: int = 0
    zero_chunks: int = 0
    started: float = field(default_factory=time.perf_counter)

    directions: torch.Tensor | None = None
    residuals: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.residuals is None:
            self.residuals = self.accepted.new_zeros(self.accepted.shape[0])
        if self.banned is None:
            self.banned = self.accepted[:0].clone()
        if self.directions is None:
            self.directions = self.accepted[:0].clone()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def consider(problem: LayerProblem, masks: torch.Tensor, tol: torch.Tensor, state: SearchState,
             settings: SearchSettings) -> None:
    """Refine candidate zero sets; accept unique-kernel, feasible, new columns."""
    if masks.shape[0] == 0:
        return
    state.patterns += int(masks.shape[0])
    q, exact, unique = refine(problem.Ln, masks, tol, settings.unique_gap)
    enough = exact.sum(1) >= min_zeros(problem, settings)
    keep = unique & enough
    q, exact = canonical(q[keep]), exact[keep]
    for direction, zero in zip(q, exact):
        if not bool(is_new(direction[None], state.accepted)[0]):
            continue
        active = (problem.Ln @ direction).abs() > 100 * tol
        state.lp_checks += 1
        if pattern_margin(problem, zero.cpu().numpy(), active.cpu().numpy()) > 0:
            state.accepted = torch.cat([state.accepted, direction[None]])


def sample_chunk(problem: LayerProblem, tol: torch.Tensor, state: SearchState, settings: SearchSettings,
                 gen: torch.Generator) -> torch.Tensor:
    """Draw one chunk; return the loose zero masks of its new, sparse-enough directions."""
    count = min(settings.chunk, settings.max_draws - state.draws)
    q = draw_directions(problem.Ln, problem.b, count, gen)
    state.draws += count
    q = q[torch.isfinite(q).all(dim=1)]
    loose = tol * settings.sample_tol_factor
    hits = q[count_zeros(problem.Ln, q, loose) >= min_zeros(problem, settings)]
    state.candidates += int(hits.shape[0])
    masks = zero_masks(problem.Ln, hits, loose)
    return masks[new_patterns(masks, state, settings.max_new_per_chunk)]


def search_columns(problem: LayerProblem, tol: torch.Tensor, settings: SearchSettings,
                   gen: torch.Generator) -> SearchState:
    """Draw submatrices until b verified columns are known or the budget is spent."""
    b = problem.b
    state = SearchState(accepted=torch.empty(0, b, dtype=problem.Ln.dtype, device=problem.Ln.device))
    tried_last = False
    with search_bar(problem, settings) as bar:
        while state.accepted.shape[0] < b:
            if state.draws >= settings.max_draws or state.seconds >= settings.max_seconds:
                break
            consider(problem, sample_chunk(problem, tol, state, settings, gen), tol, state, settings)
            if settings.last_column and state.accepted.shape[0] == b - 1 and not tried_last:
                tried_last = True
                q = last_column_candidates(problem, state.accepted.T)
                consider(problem, zero_masks(problem.Ln, q, tol * settings.sample_tol_factor), tol, state, settings)
                state.last_column_used = state.accepted.shape[0] == b
            show_progress(bar, state, settings)
    return state
