"""The feature-inversion setting (`InversionConfig`), outside the attacks package.

A cell's spec carries it and the record store reads specs back, neither loading any attack;
`leakbench.attacks.inversion` re-exports it next to the inversion itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from leakbench.core.ranges import MAX_LR, MAX_STEPS, MAX_WEIGHT, Ranged, ranged


@dataclass(frozen=True)
class InversionConfig(Ranged):
    """steps: Adam steps (0 disables inversion); lr: Adam step size on the logits z; tv: weight of the prior."""

    steps: int = ranged(0, 0, MAX_STEPS)
    lr: float = ranged(0.1, 0, MAX_LR, low_open=True)
    tv: float = ranged(1.0, 0, MAX_WEIGHT)
    owner: ClassVar[str] = "inversion"
