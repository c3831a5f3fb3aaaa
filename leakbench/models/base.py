"""What every victim shares: public normalisation constants inside the model, images in [0, 1] outside."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


@runtime_checkable
class Layered(Protocol):
    """A model that names its linear layers (every victim; `isinstance` checks both attributes are there)."""

    depth: int

    def layer_param_names(self, layer: int) -> tuple[str, str]: ...


@dataclass(frozen=True)
class VictimInfo:
    """What a victim's training gave: epochs, top-1 accuracies on the train and test parts, the cache
    hash ("" at init; accuracies NaN there, nothing was measured), whether this call trained it and, for a
    victim trained with DP-SGD, its training's ε (`harness.victim.train_epsilon`; None otherwise)."""

    train_epochs: int
    train_accuracy: float
    test_accuracy: float
    victim_hash: str
    trained_now: bool = False
    train_epsilon: float | None = None


class ImageVictim(nn.Module):
    """Base of the victims: `input_shape` (C, H, W), `mean`, `std`, and the flat normalised input view."""

    input_shape: tuple[int, int, int]
    mean: float
    std: float
    depth: int
    victim_info: VictimInfo
    """How the victim was prepared (set by the harness; `leakbench.models.victims`)."""

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        """Names (weight, bias) in `named_parameters()` of linear layer `layer`; each victim defines it."""
        raise NotImplementedError

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        """What linear layer `layer` receives for `images`; each victim defines it."""
        raise NotImplementedError

    def penalty(self) -> torch.Tensor | None:
        """The victim's own term of the training loss for its last forward pass, added to the
        cross-entropy (`training_loss`): PRECODE's β·KL (`leakbench.models.precode`); None for the others."""
        return None

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """Images in [0,1] (N,C,H,W) → flat normalised images (N, C·H·W)."""
        return ((images - self.mean) / self.std).flatten(1)

    def denormalize(self, inputs: torch.Tensor) -> torch.Tensor:
        """Flat normalised images → images (N,C,H,W); the inverse of `normalize`."""
        return (inputs * self.std + self.mean).reshape(-1, *self.input_shape)


def training_loss(model: nn.Module, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss a client (and victim training) minimises: mean cross-entropy of `logits`, plus the
    victim's own term for the forward pass that gave them (`ImageVictim.penalty`), if any."""
    loss = nn.functional.cross_entropy(logits, labels)
    penalty = model.penalty() if isinstance(model, ImageVictim) else None
    return loss if penalty is None else loss + penalty


MAX_PARAMETERS = 2**28
"""A victim may hold at most 2^28 (≈ 268 million) parameters, 1 GiB in float32: beyond, building it is
refused with one line instead of an allocation error (per-sample DP gradients multiply it by b)."""


def check_parameter_count(count: int, what: str) -> None:
    """Raise a ConfigError before allocating a victim of more than MAX_PARAMETERS parameters."""
    from leakbench.core.errors import ConfigError

    if count > MAX_PARAMETERS:
        raise ConfigError(f"{what} would hold {count:,} parameters, more than the {MAX_PARAMETERS:,} allowed "
                          "(lower the width, the depth or the image size)")


def build_seeded(cls: type[M], *args: Any, seed: int, dtype: torch.dtype, **kwargs: Any) -> M:
    """`cls(*args, **kwargs)` with PyTorch's default init drawn from `seed` (global RNG untouched), cast to `dtype`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(*args, **kwargs)
    return model.to(dtype)
