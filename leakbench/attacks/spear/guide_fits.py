"""Guide-pattern fits (leakbench addition, issue 16): fit a sample to each guide's whole predicted pattern.

A draw needs b−1 rows that are all inactive for one sample. At width 400 and b = 150 a sample has only
≈ 200 inactive neurons, so a draw must hit 149 of them: even from the guide's most confident rows that
almost never happens (docs/notebook/spear.md, "Past b = 100"). The next-layer fit needs no such luck: given a
pattern it solves for the sample in least squares (fit.py), and the fitted sample's own ReLU pattern
is the next pattern to fit. Started from a guide's predicted pattern (ẑ < 0) — CPA gets ≈ 6 % of the
signs wrong there — this fixed-point iteration lands on the true sample for many guides. Measured
with the ground truth (TinyImageNet FC-6 width 400 at init, layer 1, b = 150, seed 0, CPA guide):
3 rounds: 14 consistent fits; 10 rounds: 90 consistent fits, all within 2e-6 (relative) of a true
sample; 30 rounds: 98. Every consistent fit goes through the usual acceptance (fit residual, pattern
stability, known and banned samples) and, with the rest of the batch, the final verification.
"""

from __future__ import annotations

import time
from typing import Any

from leakbench.attacks.spear.deflation import SampleState, accept_fits
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.guided import Guide
from leakbench.attacks.spear.scheduler import Search


def fit_guide_patterns(problem: LayerProblem, guide: Guide, state: SampleState, residual_tol: float, rounds: int,
                       max_seconds: float, block: int = 32) -> int:
    """Fit every guide's predicted pattern (`rounds` refits each), in blocks while time is left;
    returns the number of patterns fitted (each counts as one draw of the search)."""
    zero = (guide.margin < 0).to(problem.L.device)
    done = 0
    for start in range(0, zero.shape[0], block):
        if state.seconds >= max_seconds:
            break
        part = zero[start:start + block]
        accept_fits(problem, part, state, residual_tol, rounds=rounds)
        done += int(part.shape[0])
    state.patterns += done
    state.draws += done
    return done


class PatternFits:
    """Guide-pattern fits as a proposal source (scheduler.py): the search's first turn (none if `rounds` is 0)."""

    name = "pattern_fits"

    def __init__(self, guide: Guide, rounds: int) -> None:
        self.guide, self.rounds = guide, rounds
        self.patterns = 0
        self.found = 0
        self.seconds = 0.0

    def turn(self, search: Search, asked: int) -> bool:
        if asked > 1 or self.rounds == 0:
            return False
        begin = time.perf_counter()
        self.patterns = fit_guide_patterns(search.problem, self.guide, search.state, search.residual_tol,
                                           self.rounds, search.settings.max_seconds)
        self.found = search.state.found
        self.seconds = time.perf_counter() - begin
        return True

    def stats(self) -> dict[str, Any]:
        return {"pattern_fit_patterns": self.patterns, "pattern_fit_found": self.found,
                "pattern_fit_seconds": self.seconds}
