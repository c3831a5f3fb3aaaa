"""Client updates: FedSGD (the gradient of the mean batch loss) packaged with the public model."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from leakbench.core.errors import ConfigError

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

    `bn_mode` is the mode the client computes its update in (it matters for victims with BatchNorm,
    `leakbench.models.resnet`): "eval" (the default; running statistics, as the server sent them) or
    "train" (the private batch's own statistics enter the forward pass, as in ordinary local
    training). `bn_stats_shared` (train mode only): the update carries the BatchNorm running
    statistics after the step (`ClientUpdate.buffers`), as FedAvg implementations that average
    buffers share them. Either way the attacker knows both settings (they are the protocol).
    """

    batch_size_known: bool = True
    labels_known: bool = False
    bn_mode: str = "eval"
    bn_stats_shared: bool = False
    defence_known: bool = False

    def __post_init__(self) -> None:
        if self.bn_mode not in BN_MODES:
            raise ConfigError(f"bn_mode must be one of {', '.join(BN_MODES)}, got {self.bn_mode!r}")
        if self.bn_stats_shared and self.bn_mode != "train":
            raise ConfigError("bn_stats_shared needs bn_mode 'train' (in eval mode a step leaves the BatchNorm "
                              "statistics as the server sent them)")

    def label(self) -> str:
        """A short readable name: 'default', or what differs from it ('labels known, b estimated')."""
        parts = (["labels known"] if self.labels_known else []) + ([] if self.batch_size_known else ["b estimated"])
        parts += (["BN train"] if self.bn_mode == "train" else []) + (["BN stats shared"] if self.bn_stats_shared
                                                                      else [])
        parts += ["defence known"] if self.defence_known else []
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
    buffers: dict[str, torch.Tensor] | None = field(default=None)
    """The model's buffers (BatchNorm running statistics) after the client's step, when the threat model
    shares them (`ThreatModel.bn_stats_shared`); else None."""
    defences: tuple[dict[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        if self.threat.defence_known and self.defences is None:
            object.__setattr__(self, "defences", ())  # known: none applied so far
        if not self.threat.defence_known and self.defences is not None:
            raise ValueError("an update lists its defences only when the threat model says they are known")

    def with_gradients(self, gradients: dict[str, torch.Tensor], defence: str) -> ClientUpdate:
        """This update with `gradients` in place of its own, its kind naming `defence` ('fedsgd+prune')."""
        return replace(self, gradients=gradients, kind=f"{self.kind}+{defence}")


M = TypeVar("M", bound=nn.Module)

BN_MODES = ("eval", "train")
"""The modes a client computes its update in (`ThreatModel.bn_mode`)."""


def client_mode(model: nn.Module, threat: ThreatModel) -> nn.Module:
    """`model` in the mode the threat model says the client trains in (train or eval), returned."""
    return model.train(threat.bn_mode == "train")


def client_view(model: M, threat: ThreatModel) -> M:
    """A copy of `model` in the client's mode: what the layer inputs of a batch were when the client
    computed its update (train mode: the batch's own BatchNorm statistics). A copy, since a forward
    pass in train mode moves the running statistics."""
    view = copy.deepcopy(model)
    client_mode(view, threat)
    return view


def shared_buffers(model: nn.Module, threat: ThreatModel) -> dict[str, torch.Tensor] | None:
    """The model's buffers (running statistics) as the update carries them: copies when shared, else None."""
    if not threat.bn_stats_shared:
        return None
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def fedsgd_update(model: ImageVictim, batch: Batch, threat: ThreatModel = ThreatModel(), *,
                  dtype: torch.dtype | None = None) -> ClientUpdate:
    """Compute the FedSGD update of `model` on `batch` in the threat model's mode (`bn_mode`): the
    gradient of the client's training loss (`training_loss`: cross-entropy, plus PRECODE's KL term
    where the victim has one). The model is copied, not modified; the update's model is the one the
    server sent (its buffers as they were before the step, in eval mode). `dtype` (e.g. torch.float64):
    the client computes in that precision — its copy of the model and the batch cast to it, so the
    shared gradients are of that dtype (`fedsgd-f64`); None: the model's own dtype."""
    from leakbench.models.base import training_loss

    work = client_mode(copy.deepcopy(model), threat)
    if dtype is not None:
        work = work.to(dtype)
    work.zero_grad(set_to_none=True)
    dtype = next(work.parameters()).dtype
    loss = training_loss(work, work(batch.images.to(dtype)), batch.labels)
    names = [n for n, _ in work.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in work.named_parameters()])
    gradients = {n: g.detach().clone() for n, g in zip(names, grads, strict=True)}
    return ClientUpdate(
        model=copy.deepcopy(model).requires_grad_(False).eval(),
        gradients=gradients,
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        buffers=shared_buffers(work, threat),
    )
