"""What both searches share: the run's settings, the budget, and the progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from leakbench.attacks.spear.factors import LayerProblem
from leakbench.progress import Tally, tally

if TYPE_CHECKING:
    from leakbench.attacks.spear.search import SearchState


@dataclass(frozen=True)
class SearchSettings:
    """The search knobs of one run: `SpearConfig`'s fields of the same names (see there for their
    meaning), with `chunk` resolved (`attack.auto_chunk`) and the progress bar's `label`."""

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


def out_of_budget(state: SearchState, settings: SearchSettings) -> bool:
    """The draw or time budget is spent."""
    return state.draws >= settings.max_draws or state.seconds >= settings.max_seconds


def search_bar(problem: LayerProblem, settings: SearchSettings):
    """The progress bar of a search (samples found of b); drawn only under `progress.attack_progress`."""
    return tally(total=problem.b, desc=f"{settings.label} samples found")


def show_progress(bar: Tally, state: SearchState, settings: SearchSettings) -> None:
    """Samples found, draws, elapsed seconds and the budget left (the nearer of draws and time)."""
    left = min(1 - state.draws / settings.max_draws, 1 - state.seconds / settings.max_seconds)
    bar.show(int(state.accepted.shape[0]),
             f"draws {state.draws:,}, {state.seconds:.0f} s, budget left {max(left, 0):.0%}")
