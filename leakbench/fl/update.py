"""Client updates: FedSGD (the gradient of the mean batch loss) packaged with the public model."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch

if TYPE_CHECKING:
    from leakbench.models.base import ImageVictim


@dataclass(frozen=True)
class ThreatModel:
    """What the server (attacker) knows besides the update and the model.

    `batch_size_known` False: the update carries `batch_size=None` (attacks that need it are refused
    up front, or estimate it: `leakbench.attacks.estimate.estimate_batch_size`). `labels_known`
    True: the update carries the batch's labels. `defence_known` True: the update carries the list of
    defences applied to it, names and settings (`ClientUpdate.defences`), so an attack may adapt to them.
    """

    batch_size_known: bool = True
    labels_known: bool = False
    defence_known: bool = False

    def label(self) -> str:
        """A short readable name: 'default', or what differs from it ('labels known, b estimated')."""
        parts = (["labels known"] if self.labels_known else []) + ([] if self.batch_size_known else ["b estimated"]) \
            + (["defence known"] if self.defence_known else [])
        return ", ".join(parts) or "default"


@dataclass(frozen=True)
class ClientUpdate:
    """Everything an attack receives: the public model and the shared gradients.

    `gradients` maps parameter names of `model` to dL/dθ of the mean cross-entropy over the
    batch. `batch_size` and `labels` are present only when the threat model grants them.
    `defences` is None unless the threat model says the defence is known; then it lists the defences
    applied after the client's update, in order, as plain data (`{"name": ..., setting: value, ...}`;
    empty when there is none). No field holds the client's images.
    """

    model: ImageVictim
    gradients: dict[str, torch.Tensor]
    threat: ThreatModel
    batch_size: int | None
    labels: torch.Tensor | None = field(default=None)
    kind: str = "fedsgd"
    defences: tuple[dict[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        if self.threat.defence_known and self.defences is None:
            object.__setattr__(self, "defences", ())  # known: none applied so far
        if not self.threat.defence_known and self.defences is not None:
            raise ValueError("an update lists its defences only when the threat model says they are known")


def fedsgd_update(model: ImageVictim, batch: Batch, threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """Compute the FedSGD update of `model` on `batch`; the model is copied, not modified."""
    public = copy.deepcopy(model)
    public.zero_grad(set_to_none=True)
    dtype = next(public.parameters()).dtype
    loss = nn.functional.cross_entropy(public(batch.images.to(dtype)), batch.labels)
    names = [n for n, _ in public.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in public.named_parameters()])
    gradients = {n: g.detach().clone() for n, g in zip(names, grads, strict=True)}
    return ClientUpdate(
        model=public.requires_grad_(False).eval(),
        gradients=gradients,
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
    )
