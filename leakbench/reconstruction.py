"""An attack's answer for one batch (`Reconstruction`), outside the attacks package.

The record store reads stored answers back (`leakbench.records.artifacts`) without loading any
attack; `leakbench.attacks` re-exports these names as part of the attack contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Status = Literal["ok", "failed"]
Space = Literal["image", "feature"]


@dataclass
class Reconstruction:
    """An attack's answer for one batch.

    `images` (b, C, H, W) in [0, 1] when the attack reconstructs images; `features` (b, n) when it
    reconstructs the inputs of an inner layer (`layer`). On failure both may be None and `reason`
    says why. `stats` holds the attack's own counters (draws, candidates, seconds, …).
    """

    status: Status
    space: Space
    images: torch.Tensor | None = None
    features: torch.Tensor | None = None
    layer: int | None = None
    reason: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, reason: str, *, space: Space = "image", layer: int | None = None,
               stats: dict[str, Any] | None = None) -> Reconstruction:
        return cls(status="failed", space=space, layer=layer, reason=reason, stats=stats or {})
