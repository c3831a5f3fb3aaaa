"""FedAvg client updates: E local epochs of mini-batch SGD, shared as a weight difference.

The client starts from the public weights θ₀, runs `epochs` passes over its batch of b samples in
mini-batches of `minibatch` samples (reshuffled every epoch by a generator seeded from the cell's
seed; the last mini-batch of an epoch is smaller when `minibatch` does not divide b), each step
θ ← θ − η ∇ mean-loss(mini-batch). It shares Δ = θ₀ − θ_K after K = epochs · ⌈b / minibatch⌉ steps.

What attacks receive: `ClientUpdate.gradients = Δ / (η K)`, the average gradient along the local
trajectory, so gradient attacks get a gradient-like object on the usual scale. With one epoch over
the whole batch (K = 1) it is exactly the FedSGD gradient (up to float rounding); otherwise it mixes
gradients taken at K different weights, which is what makes FedAvg harder to attack. `kind` is
"fedavg"; the model in the update is the public start θ₀ (the server knows it, not θ_K).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_WIDTH
from leakbench.core.ranges import MAX_LR, Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel, client_mode, shared_buffers
from leakbench.models.base import training_loss

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim

MAX_LOCAL_EPOCHS = 10_000
"""Local epochs of a FedAvg client: at most 10,000."""


@dataclass(frozen=True)
class FedAvgConfig(Ranged):
    """Local training of one FedAvg client.

    epochs: local epochs E over the client's batch.
    minibatch: samples per local SGD step; 0 means the whole batch (b).
    lr: local learning rate η.
    """

    epochs: int = ranged(1, 1, MAX_LOCAL_EPOCHS)
    minibatch: int = ranged(0, 0, MAX_WIDTH)
    lr: float = ranged(0.1, 0, MAX_LR, low_open=True)
    owner: ClassVar[str] = "fedavg"

    def steps(self, batch_size: int) -> int:
        """K, the number of local SGD steps on a batch of `batch_size` samples."""
        return self.epochs * math.ceil(batch_size / self.size(batch_size))

    def size(self, batch_size: int) -> int:
        """Samples per mini-batch for a batch of `batch_size` (0 → the whole batch)."""
        if self.minibatch > batch_size:
            raise ConfigError(f"fedavg: minibatch {self.minibatch} is larger than the batch size {batch_size}")
        return self.minibatch or batch_size

    def label(self) -> str:
        """A short readable name, e.g. 'E=5 mb=5 η=0.1' ('mb=b' for the whole batch)."""
        return f"E={self.epochs} mb={self.minibatch or 'b'} η={self.lr:g}"


def local_training(model: nn.Module, batch: Batch, config: FedAvgConfig, *, seed: int) -> int:
    """Train `model` in place for the configured epochs; returns the number of steps K."""
    b = batch.size
    size = config.size(b)
    dtype = next(model.parameters()).dtype
    images, labels = batch.images.to(dtype), batch.labels
    params = [p for p in model.parameters()]
    gen = torch.Generator().manual_seed(seed)
    steps = 0
    for _ in range(config.epochs):
        order = torch.randperm(b, generator=gen)
        for start in range(0, b, size):
            idx = order[start:start + size]
            loss = training_loss(model, model(images[idx]), labels[idx])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.sub_(config.lr * g)
            steps += 1
    return steps


def fedavg_update(model: ImageVictim, batch: Batch, config: FedAvgConfig, *, seed: int,
                  threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """The FedAvg update of `model` on `batch`: (θ₀ − θ_K) / (η K) per parameter; `model` is not modified."""
    public = copy.deepcopy(model).requires_grad_(False).eval()
    client = client_mode(copy.deepcopy(model), threat).requires_grad_(True)
    steps = local_training(client, batch, config, seed=seed)
    start, end = dict(public.named_parameters()), dict(client.named_parameters())
    scale = config.lr * steps
    gradients = {name: ((start[name] - end[name].detach()) / scale).clone() for name in start}
    return ClientUpdate(
        model=public,
        gradients=gradients,
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        kind="fedavg",
        buffers=shared_buffers(client, threat),
    )


def fedavg_columns(fedavg: FedAvgConfig | None) -> dict[str, Any]:
    """E, mini-batch size (0 = whole batch), η of a FedAvg client, and a label ('fedsgd' without)."""
    if fedavg is None:
        return {"client": "fedsgd", "fedavg_epochs": 0, "fedavg_minibatch": 0, "fedavg_lr": math.nan}
    return {"client": fedavg.label(), "fedavg_epochs": fedavg.epochs, "fedavg_minibatch": fedavg.minibatch,
            "fedavg_lr": float(fedavg.lr)}


@register_transform
class FedAvg(UpdateTransform):
    """FedAvg: local SGD epochs on the batch, sharing (θ₀ − θ_K) / (η K)."""

    paper = Citation("McMahan et al., AISTATS 2017", "https://arxiv.org/abs/1602.05629")
    name = "fedavg"
    Config = FedAvgConfig
    config: FedAvgConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return fedavg_update(client.model, client.batch, self.config, seed=client.seed, threat=client.threat)

    def label(self) -> str:
        return self.config.label()

    def columns(self) -> dict[str, Any]:
        return fedavg_columns(self.config)
