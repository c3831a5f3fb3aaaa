"""Training a victim: the recipe (a frozen dataclass) and a seeded, deterministic training loop."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakbench.errors import ConfigError

OPTIMIZERS = ("sgd", "adam")
MAX_TRAIN_EPOCHS = 1000
"""Epochs a victim may train: 0 (at init) … 1000."""


@dataclass(frozen=True)
class TrainRecipe:
    """How a victim trains: cross-entropy, mini-batches of `batch_size` reshuffled every epoch from
    `seed`, no learning-rate schedule. Default Adam, lr 1e-3, batches of 64: SGD at lr 0.01 (momentum
    0.9) left FC-6 on TinyImageNet at chance after 3 epochs; Adam reaches 5.8 % train accuracy in 5.

    optimizer: "sgd" (with `momentum`) or "adam". lr: learning rate. weight_decay: L2 coefficient.
    augment: random horizontal flips (off by default). seed: the shuffling (and flip) seed; the
    init comes from the cell's seed.
    """

    optimizer: str = "adam"
    lr: float = 0.001
    momentum: float = 0.9
    batch_size: int = 64
    weight_decay: float = 0.0
    augment: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"training optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr <= 10):
            raise ConfigError(f"training lr must be in (0, 10], got {self.lr!r}")
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise ConfigError(f"training momentum must be in [0, 1), got {self.momentum!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"training batch size must be a positive integer, got {self.batch_size!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ConfigError(f"training weight decay must be ≥ 0, got {self.weight_decay!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ConfigError(f"training seed must be an integer in [0, 2^63), got {self.seed!r}")


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
            nn.functional.cross_entropy(model(x), labels[idx]).backward()
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
