"""Training a victim: the recipe (a frozen dataclass) and a seeded, deterministic training loop.

Plain training takes the gradient of each mini-batch's mean loss. Defended training (`UpdateRule`) makes
each step's update the way a federated client under the cell's defences would — FedSGD rounds, one per
mini-batch, through the cell's update transforms (DP-SGD, noise, any registered defence) — and the
optimiser applies the shared update: what the defence costs in accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_SEED
from leakbench.core.ranges import MAX_WEIGHT, Ranged, ranged
from leakbench.models.base import ImageVictim, training_loss

if TYPE_CHECKING:  # annotations only: the update transforms load the plugins when first used
    from leakbench.datasets.base import LocalData
    from leakbench.fl.transform import UpdateTransform
    from leakbench.fl.update import ThreatModel
    from leakbench.models.base import ImageVictim

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
    augment: random horizontal flips (off by default). seed: the shuffling (and flip, and per-step DP/noise)
    seed; the init comes from the cell's seed. A suite's `train = { seed = "cell" }` gives each cell its own
    seed here (`cell_seeded`): each cell seed then trains a victim of its own, from its own init and its own
    training seed.
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
        super().__post_init__()  # declared ranges (leakbench.core.ranges)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"training optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")


CELL_SEED = "cell"
"""A suite's `train = { seed = "cell" }`: the training seed of each cell is the cell's seed (`cell_seeded`)."""


def split_cell_seed(raw: dict[str, Any], where: str) -> tuple[dict[str, Any], bool]:
    """A suite's `train` table without `seed = "cell"`, and whether it had it (each cell then trains with its
    own seed: `cell_seeded`). Any other text as the seed is a ConfigError naming `where`; a number is left
    for the recipe's own range check."""
    seed = raw.get("seed")
    if not isinstance(seed, str):
        return raw, False
    if seed != CELL_SEED:
        raise ConfigError(f"{where}: seed must be an integer in [0, 2^63) or \"{CELL_SEED}\" (each cell seed's "
                          f"own training seed), got {seed!r}")
    return {k: v for k, v in raw.items() if k != "seed"}, True


def cell_seeded(recipe: TrainRecipe, seed: int) -> TrainRecipe:
    """`recipe` with training seed `seed` (a cell's seed, under `train = { seed = "cell" }`)."""
    return replace(recipe, seed=seed)


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


@dataclass(frozen=True)
class UpdateRule:
    """How every training step's update is made: `transforms` (one client transform first — FedSGD or
    DP-SGD — then the defences, as `fl.transform.client_update` runs them) on the step's mini-batch, which
    is a `Batch` of `dataset` with `num_classes` classes; `threat` is the client's threat model."""

    transforms: tuple[UpdateTransform, ...]
    dataset: str
    num_classes: int
    threat: ThreatModel | None = field(default=None)

    def defended(self) -> bool:
        """False when the rule is plain FedSGD (training as without a rule, bit for bit)."""
        return is_defended(self.transforms)

    def key(self) -> list[dict[str, Any]]:
        """The transforms as plain data (name and settings), for the victim cache key."""
        return [{"name": t.name, "config": asdict(t.config)} for t in self.transforms]


def is_defended(transforms: Sequence[UpdateTransform]) -> bool:
    """Whether `transforms` change a step's update: anything but plain FedSGD alone."""
    return not (len(transforms) == 1 and transforms[0].name == "fedsgd")


def steps_per_epoch(train_size: int, batch_size: int) -> int:
    """Training steps in one epoch over `train_size` samples in mini-batches of `batch_size` (the last one may
    be smaller)."""
    return -(-train_size // batch_size)


def step_seed(seed: int, step: int) -> int:
    """The seed of training step `step` (counted over all epochs from 0) of a recipe seeded `seed`: DP and
    noise draws differ between steps and are the same on every rerun."""
    return int(np.random.SeedSequence([seed, step, 0xDEFE]).generate_state(1, np.uint32)[0])


def train(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, recipe: TrainRecipe,
          epochs: int, *, rule: UpdateRule | None = None,
          on_epoch: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """Train `model` in place for `epochs` on the images (in [0,1]) and labels at `indices`; returns it in eval mode.

    Deterministic: the shuffling and flips come from a generator seeded with `recipe.seed`, and the
    loop draws nothing from the global RNG (same threads, same seed → same weights). With a defended
    `rule`, each step's gradients are the update its transforms share (seeded by `step_seed`); without
    one, or with plain FedSGD, the mean-loss gradient as always (the same weights bit for bit).
    `on_epoch(epoch, model)` (epoch counted from 1) is called after each epoch with the model in eval mode
    (put back in train mode after it): the weights after epoch k of an N-epoch run are those of a k-epoch run.
    """
    gen = torch.Generator().manual_seed(recipe.seed)
    opt = _optimizer(model, recipe)
    dtype = next(model.parameters()).dtype
    defended = rule if rule is not None and rule.defended() else None
    local = _local_data(images, labels, indices) if defended is not None else None
    model.train()
    step = 0
    for epoch in range(epochs):
        order = indices[torch.randperm(len(indices), generator=gen)]
        for start in range(0, len(order), recipe.batch_size):
            idx = order[start:start + recipe.batch_size]
            x = images[idx].to(dtype)
            if recipe.augment:
                flip = torch.rand(len(idx), generator=gen) < 0.5
                x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            opt.zero_grad(set_to_none=True)
            if defended is None:
                training_loss(model, model(x), labels[idx]).backward()  # cross-entropy (+ PRECODE's β·KL)
            else:
                _defended_gradients(model, x, labels[idx], idx, defended, step_seed(recipe.seed, step), local)
            opt.step()
            step += 1
        if on_epoch is not None:
            on_epoch(epoch + 1, model.eval())
            model.train()
    model.zero_grad(set_to_none=True)
    return model.eval()


def _local_data(images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor) -> LocalData:
    """The training client's local data: the images at `indices` (MixUp's partners come from there)."""
    from leakbench.datasets.base import LocalData

    return LocalData(images, labels, np.sort(indices.numpy()))


def _defended_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, rule: UpdateRule,
                        seed: int, local: LocalData | None = None) -> None:
    """Set each parameter's `.grad` to the update the rule's client shares for the mini-batch (x, y), drawn
    from the client's `local` data.

    The client computes it as in ordinary training: in train mode (BatchNorm on the batch's statistics),
    on a copy of the model; what that forward pass changed in the copy's buffers (BatchNorm running
    statistics, PRECODE's forward count) is carried back, so the model moves as under plain training."""
    from dataclasses import replace

    from leakbench.datasets.base import Batch
    from leakbench.fl.transform import Client, client_update
    from leakbench.fl.update import ThreatModel

    batch = Batch(images=x, labels=y, indices=tuple(int(i) for i in idx), dataset=rule.dataset,
                  num_classes=rule.num_classes, local=local)
    threat = replace(rule.threat or ThreatModel(), bn_mode="train", bn_stats_shared=True)
    update = client_update(list(rule.transforms), Client(cast(ImageVictim, model), batch, seed, threat))
    for name, param in model.named_parameters():
        grad = update.gradients.get(name)
        param.grad = None if grad is None else grad.to(param.dtype).clone()
    _carry_buffers(model, x, update.buffers)


def _carry_buffers(model: nn.Module, x: torch.Tensor, buffers: dict[str, torch.Tensor] | None) -> None:
    """Give `model` the buffers its client's copy had after the step: the update's `buffers` when the
    client transform shares them (FedSGD does), else one forward pass of the step's images without gradient
    (a DP-SGD step; the model has buffers). Nothing for a model without buffers."""
    if next(model.buffers(), None) is None:
        return
    if buffers is None:
        with torch.no_grad():
            model(x)
        return
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name in buffers:
                buffer.copy_(buffers[name])


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
