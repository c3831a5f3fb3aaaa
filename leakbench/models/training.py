"""Training a victim: the recipe (a frozen dataclass) and a seeded, deterministic training loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from leakbench.errors import ConfigError
from leakbench.harness.limits import MAX_SEED
from leakbench.models.base import training_loss
from leakbench.ranges import MAX_WEIGHT, Ranged, ranged

OPTIMIZERS = ("sgd", "adam")
MAX_TRAIN_EPOCHS = 1000
"""Epochs a victim may train: 0 (at init) … 1000."""
MAX_TRAIN_BATCH = 2**20
"""Training mini-batch size: at most 2^20 samples."""


@dataclass(frozen=True)
class TrainRecipe(Ranged):
    """How a victim trains: cross-entropy, mini-batches of `batch_size` reshuffled every epoch from
    `seed`, no learning-rate schedule. Default Adam, lr 1e-3, batches of 64: SGD at lr 0.01 (momentum
    0.9) left FC-6 on TinyImageNet at chance after 3 epochs; Adam reaches 5.8 % train accuracy in 5.

    optimizer: "sgd" (with `momentum`) or "adam". lr: learning rate. weight_decay: L2 coefficient.
    augment: random horizontal flips (off by default). seed: the shuffling (and flip) seed; the
    init comes from the cell's seed.
    """

    optimizer: str = "adam"
    lr: float = ranged(0.001, 0, 10, low_open=True)
    momentum: float = ranged(0.9, 0, 1, high_open=True)
    batch_size: int = ranged(64, 1, MAX_TRAIN_BATCH)
    weight_decay: float = ranged(0.0, 0, MAX_WEIGHT)
    augment: bool = False
    seed: int = ranged(0, 0, MAX_SEED, high_open=True)
    owner: ClassVar[str] = "training"

    def __post_init__(self) -> None:
        super().__post_init__()  # declared ranges (leakbench.ranges)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"training optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")


def check_epochs(value: object, where: str) -> int:
    """`value` as a number of training epochs in [0, MAX_TRAIN_EPOCHS], or a ConfigError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TRAIN_EPOCHS:
        raise ConfigError(f"{where} must be an integer in [0, {MAX_TRAIN_EPOCHS}], got {value!r}")
    return value


def _optimizer(model: nn.Module, recipe: TrainRecipe) -> torch.optim.Optimizer:
    if recipe.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                           weight_decay=recipe.weight_decay)


def train(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, recipe: TrainRecipe,
          epochs: int) -> nn.Module:
    """Train `model` in place for `epochs` on the images (in [0,1]) and labels at `indices`; returns it in eval mode.

    Deterministic: the shuffling and flips come from a generator seeded with `recipe.seed`, and the
    loop draws nothing from the global RNG (same threads, same seed → same weights).
    """
    gen = torch.Generator().manual_seed(recipe.seed)
    opt = _optimizer(model, recipe)
    dtype = next(model.parameters()).dtype
    model.train()
    for _ in range(epochs):
        order = indices[torch.randperm(len(indices), generator=gen)]
        for start in range(0, len(order), recipe.batch_size):
            idx = order[start:start + recipe.batch_size]
            x = images[idx].to(dtype)
            if recipe.augment:
                flip = torch.rand(len(idx), generator=gen) < 0.5
                x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            opt.zero_grad(set_to_none=True)
            training_loss(model, model(x), labels[idx]).backward()  # cross-entropy (+ PRECODE's β·KL)
            opt.step()
    model.zero_grad(set_to_none=True)
    return model.eval()


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, *,
             chunk: int = 1024) -> float:
    """Top-1 accuracy of `model` on the images and labels at `indices`, in [0, 1]."""
    dtype = next(model.parameters()).dtype
    correct = 0
    for start in range(0, len(indices), chunk):
        idx = indices[start:start + chunk]
        correct += int((model(images[idx].to(dtype)).argmax(1) == labels[idx]).sum())
    return correct / max(len(indices), 1)
