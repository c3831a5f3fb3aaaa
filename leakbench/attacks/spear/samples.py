"""The deflated search's state: the samples found, banned and set aside, and the directions remembered.

`SampleState` holds rows c_i of C = Q⁻¹ (sample i is x_i = Rᵀc_i; the column search's state is
search.ColumnState); the functions here are its bookkeeping — adding a sample or replacing a near-copy
(`add_sample`, `nearest_known`), banning and re-admitting (`ban_sample`, `lift_bans`), remembering column
directions (`remember_directions`). Which fits become samples is acceptance.py's; the completion, completion.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from leakbench.attacks.spear.candidates import is_new
from leakbench.attacks.spear.fit import FitCache
from leakbench.attacks.spear.last_column import RowSpace
from leakbench.attacks.spear.state import SearchState
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
    directions: unit columns of Q whose pattern was sound but whose fit was not (`completion.try_directions`), and
    whether each has a clean kernel (`direction_clean`, filled in by `rowspace.clean_directions` when first needed);
    directions_tried: the last completion tried from them, with the search state (never tried twice);
    from_directions: samples completed from directions in the verified batch;
    outliers: sound fits kept out of the found samples as outliers among them (`acceptance.outlying_fits`,
    `acceptance.set_aside`), with their `outlier_residuals`; outliers_tried: the last batch completed from them
    (`completion.try_outliers`); from_outliers: samples taken from them in the verified batch;
    fits: next-layer fits run; retries: verifications failed; kernels_split: rank-deficient draws drawn again
    inside their kernel (`deflation.draw_patterns`); fit_cache: the (pattern, free rows)
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

    def draw_rows(self, b: int) -> int:
        """Rows a deflated draw takes with k samples known: b − k − 1 (at least 1)."""
        return max(b - self.found - 1, 1)

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "fits_or_lp_checks": self.fits, "retries": self.retries,
                "samples_from_directions": self.from_directions, "samples_from_outliers": self.from_outliers,
                "kernels_split": self.kernels_split,
                "fits_skipped": self.fit_cache.skipped if self.fit_cache is not None else 0}


def found_key(state: SampleState) -> tuple[int, float, int]:
    """What identifies the found samples for caches: their number, their residuals' sum and the bans so far."""
    return state.found, float(state.residuals.sum()), state.retries


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


def nearest_known(c: torch.Tensor, known: torch.Tensor) -> int | None:
    """Index of the known sample within `Tolerances.same_sample` (relative) of c, if any."""
    if known.shape[0] == 0:
        return None
    dist = (known - c).norm(dim=1)
    i = int(dist.argmin())
    return i if float(dist[i]) <= TOLERANCES.same_sample * float(c.norm()) else None


def ban_sample(state: SampleState, i: int) -> None:
    """Drop found sample i after a failed verification and ban it for a while, not for good.

    A failed completion does not say which sample is wrong, only which one the wrong batch violates
    most: with a false sample among the found ones (a mixture or a near-copy), that may be a true
    one. Its ban lifts once the search has added `Tolerances.ban_lifetime` new samples (twice that after a second
    ban, and so on), i.e. once the found set has changed enough for the completion to come out otherwise.
    """
    c, residual = state.samples[i], state.residuals[i:i + 1]
    state.samples = torch.cat([state.samples[:i], state.samples[i + 1:]])
    state.residuals = torch.cat([state.residuals[:i], state.residuals[i + 1:]])
    before = torch.nonzero((state.banned - c).norm(dim=1) <= TOLERANCES.same_banned * c.norm()).flatten()
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
    state.ban_until[j] = state.admitted + TOLERANCES.ban_lifetime * int(state.ban_strikes[j])


def lift_bans(state: SampleState) -> None:
    """Re-admit every banned sample whose ban has run out (`ban_sample`) to the found samples."""
    due = torch.nonzero((state.ban_until >= 0) & (state.ban_until <= state.admitted)).flatten().tolist()
    for j in due:
        state.ban_until[j] = -1
        add_sample(state, state.banned[j], state.ban_residuals[j:j + 1])


def remember_directions(state: SampleState, q: torch.Tensor) -> None:
    """Keep unit column directions whose pattern was sound but whose sample fit was not."""
    fresh = is_new(q, state.directions)
    state.directions = torch.cat([state.directions, q[fresh]])
