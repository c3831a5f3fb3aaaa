"""Victim networks. Normalisation happens inside the model, once; inputs are images in [0, 1]."""

from __future__ import annotations

import torch

from leakbench.errors import ConfigError
from leakbench.models.base import ImageVictim
from leakbench.models.conv import ConvNet, build_conv
from leakbench.models.fc import FCNet, build_fc

ARCHS = ("fc", "conv")
"""Victim architectures: `fc` (FCNet, layers 1..depth linear) and `conv` (ConvNet, layer 1 = conv trunk)."""


def build_model(arch: str, input_shape: tuple[int, int, int], num_classes: int, *, width: int, depth: int,
                seed: int = 0, dtype: torch.dtype = torch.float32) -> ImageVictim:
    """The victim `arch` ("fc" or "conv") with init drawn from `seed`."""
    if arch == "fc":
        return build_fc(input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
    if arch == "conv":
        return build_conv(input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
    raise ConfigError(f"unknown architecture {arch!r} (known: {', '.join(ARCHS)})")


def victim_label(arch: str, depth: int, width: int, train_epochs: int = 0) -> str:
    """The one name of a victim in tables, grids, captions and progress lines: 'FC-6 w200', 'conv-3 w200',
    'FC-6 w200 trained 5 ep' (architecture and depth, hidden width, training epochs when trained)."""
    name = f"{'FC' if arch == 'fc' else arch}-{depth} w{width}"
    return f"{name} trained {train_epochs} ep" if train_epochs else name


def first_attackable_layer(arch: str) -> int:
    """The first layer a linear-layer attack can target: 1 for fc, 2 for conv (layer 1 is the trunk)."""
    return 2 if arch == "conv" else 1


__all__ = ["ARCHS", "ConvNet", "FCNet", "ImageVictim", "build_conv", "build_fc", "build_model",
           "first_attackable_layer", "victim_label"]
