"""The sampling search for the columns of Q, with a draw and time budget (SPEAR's main loop)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from leakbench.attacks.spear.candidates import (canonical, is_new, pattern_keys, pattern_margin, refine,
                                                zero_masks)
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.last_column import last_column_candidates
from leakbench.attacks.spear.sampling import count_zeros, draw_directions
from leakbench.progress import Tally, tally


@dataclass(frozen=True)
class SearchSettings:
    """Knobs of the search; see `SpearConfig` for their meaning."""

    max_draws: int
    max_seconds: float
    chunk: int
    min_extra_zeros: int
    min_zero_fraction: float
    sample_tol_factor: float
    unique_gap: float
    max_new_per_chunk: int
    last_column: bool
    sampler: str = "auto"
    row_weight_power: float = 0.0
    label: str = "spear"


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
    fit_solver: object = None  # leakbench addition (fastfit.py): replaces fit._fit_once when set
    fit_cache: object = None  # fastfit.FitCache: skip refits of patterns already fitted

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


def extra_zeros(m: int, settings: SearchSettings) -> int:
    """Zeros a candidate needs beyond the b−1 that every draw forces, among m live rows."""
    return max(settings.min_extra_zeros, int(np.ceil(settings.min_zero_fraction * m)))


def min_zeros(problem: LayerProblem, settings: SearchSettings) -> int:
    """A candidate needs this many zero rows (b−1 come for free with every draw)."""
    return problem.b - 1 + extra_zeros(problem.m, settings)


def new_patterns(masks: torch.Tensor, state: SearchState, limit: int) -> torch.Tensor:
    """Indices of rows of `masks` whose zero pattern has not been examined before (≤ limit)."""
    keep: list[int] = []
    for i, key in enumerate(pattern_keys(masks)):
        if key not in state.seen:
            state.seen.add(key)
            keep.append(i)
            if len(keep) >= limit:
                break
    return torch.as_tensor(keep, dtype=torch.long, device=masks.device)


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


def search_bar(problem: LayerProblem, settings: SearchSettings):
    """The progress bar of a search (samples found of b); drawn only under `progress.attack_progress`."""
    return tally(total=problem.b, desc=f"{settings.label} samples found")


def show_progress(bar: Tally, state: SearchState, settings: SearchSettings) -> None:
    """Samples found, draws, elapsed seconds and the budget left (the nearer of draws and time)."""
    left = min(1 - state.draws / settings.max_draws, 1 - state.seconds / settings.max_seconds)
    bar.show(int(state.accepted.shape[0]),
             f"draws {state.draws:,}, {state.seconds:.0f} s, budget left {max(left, 0):.0%}")


def zero_tolerance(problem: LayerProblem, rel_tol: float, noise_factor: float) -> torch.Tensor:
    """Per-row tolerance on |Ln_r · q| below which an entry counts as zero.

    A floor `rel_tol` for rounding, plus the noise floor estimated from the discarded singular
    values (σ_{b+1} ≈ s·(√m + √n) for i.i.d. noise of std s), relative to each row's norm.
    """
    m, n = problem.m, problem.R.shape[1]
    row_norm = problem.L.norm(dim=1)
    sigma1 = float(torch.linalg.matrix_norm(problem.L, ord=2))
    noise_std = problem.noise * sigma1 / (np.sqrt(m) + np.sqrt(n))
    return rel_tol + noise_factor * noise_std * np.sqrt(problem.b) / row_norm.clamp_min(1e-300)
