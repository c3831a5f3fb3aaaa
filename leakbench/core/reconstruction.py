"""An attack's answer for one batch (`Reconstruction`), outside the attacks package.

The record store reads stored answers back (`leakbench.records.artifacts`) without loading any
attack; `leakbench.attacks` re-exports these names as part of the attack contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Status = Literal["ok", "partial", "failed"]
"""ok: the whole batch. partial: the batch is incomplete, and the answer holds only the samples the
attack verified one by one (fewer than the batch; never an unverified one). failed: no answer."""
STATUSES: tuple[Status, ...] = ("ok", "partial", "failed")
ANSWERED: tuple[Status, ...] = ("ok", "partial")
"""The statuses whose answer is scored (a failed one has none)."""
Space = Literal["image", "feature"]
Failure = Literal["verification", "budget", "not-applicable", "error"]
"""Why a failed attack has no answer (issue 43): verification, its own checks rejected its answer; budget, it ran
out of draws, seconds or iterations (an attack worker killed at its time limit included); not-applicable, the
attack's assumptions do not hold for this victim or update (no ReLU after the layer, a batch as wide as the
layer, a gradient too noisy to draw from); error, anything else (an exception, a refused reply). None: not
failed, or stored before the kind was recorded (unknown)."""
FAILURES: tuple[Failure, ...] = ("verification", "budget", "not-applicable", "error")


@dataclass
class Reconstruction:
    """An attack's answer for one batch.

    `images` (b, C, H, W) in [0, 1] when the attack reconstructs images; `features` (b, n) when it
    reconstructs the inputs of an inner layer (`layer`). On failure both may be None, `reason`
    says why and `failure` which kind of failure it is (`Failure`; None for an answer, and for a failed
    attack that does not say). A partial answer (`partial`) holds only the samples the attack verified,
    fewer than the batch, and `reason` says why the batch is incomplete. `stats` holds the attack's own counters (draws,
    candidates, seconds, …).
    """

    status: Status
    space: Space
    images: torch.Tensor | None = None
    features: torch.Tensor | None = None
    layer: int | None = None
    reason: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None

    @property
    def answered(self) -> bool:
        """Whether there is an answer to score: the whole batch, or the verified samples of an incomplete one."""
        return self.status in ANSWERED

    @classmethod
    def partial(cls, reason: str, *, space: Space = "image", images: torch.Tensor | None = None,
                features: torch.Tensor | None = None, layer: int | None = None,
                stats: dict[str, Any] | None = None) -> Reconstruction:
        """An incomplete batch: the k samples the attack verified (k rows, fewer than the batch) and why the
        rest are missing. The harness scores them like any answer and records "batch incomplete: k of b
        verified" (`incomplete_reason`)."""
        return cls(status="partial", space=space, images=images, features=features, layer=layer, reason=reason,
                   stats=stats or {})

    def rows(self) -> int:
        """How many samples the answer holds in its own space (0 without one)."""
        answer = self.images if self.space == "image" else self.features
        return 0 if answer is None or not self.answered else int(answer.shape[0])

    @classmethod
    def failed(cls, reason: str, *, failure: Failure | None = None, space: Space = "image", layer: int | None = None,
               stats: dict[str, Any] | None = None) -> Reconstruction:
        """No answer: `reason` says why in words, `failure` which kind (`Failure`; None when the attack does not
        say: read as unknown)."""
        return cls(status="failed", space=space, layer=layer, reason=reason, stats=stats or {}, failure=failure)


def incomplete_reason(k: int, b: int, reason: str) -> str:
    """A partial answer's reason as records keep it: "batch incomplete: k of b verified (the attack's reason)"."""
    return f"batch incomplete: {k} of {b} verified" + (f" ({reason})" if reason else "")
