"""Convolutional victim: Normalise → VGG-style blocks (Conv3×3 → ReLU → MaxPool2) → Flatten → FC head.

Layer numbering (what `layer` means for attacks): layer 1 is the convolutional trunk, which
linear-layer attacks cannot attack; layers 2 … depth are the linear layers of the head, every one
but the last followed by a ReLU. So the first FC layer is layer 2, and its inputs (the flattened
trunk output) are the features SPEAR or CPA recover there. `depth` counts the trunk: depth 3 is
trunk → Linear(width) → ReLU → Linear(classes).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import ImageVictim, build_seeded, check_parameter_count

FEATURE_SIDE = 8
"""The trunk pools until the feature map is 8×8 (2 blocks at 32×32, 3 at 64×64)."""


class ConvNet(ImageVictim):
    """A small VGG-style trunk and an FC+ReLU head; same attack interface as FCNet."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int = 200, depth: int = 3,
                 channels: int = 32, mean: float = 0.5, std: float = 0.5) -> None:
        super().__init__()
        c, h, w = input_shape
        blocks = math.log2(h / FEATURE_SIDE) if h == w and h >= FEATURE_SIDE else -1
        if blocks != int(blocks) or blocks < 1:
            raise ConfigError(f"conv victim needs square inputs of side 8·2^k (16, 32, 64, …), got {h}×{w}")
        self._keep_settings(input_shape, num_classes, width, depth, channels, mean, std, "conv")
        trunk: list[nn.Module] = []
        for i in range(int(blocks)):
            trunk += [nn.Conv2d(c if i == 0 else channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        self.trunk = nn.Sequential(*trunk, nn.Flatten())
        self.head = self._fc_head(channels * FEATURE_SIDE * FEATURE_SIDE, "conv net")

    def _keep_settings(self, input_shape: tuple[int, int, int], num_classes: int, width: int, depth: int,
                       channels: int, mean: float, std: float, arch: str) -> None:
        """Check the head's depth, the width and the channels (one line naming `arch`), and keep them."""
        if depth < 3:
            raise ConfigError(f"{arch} depth must be at least 3 (trunk, one FC+ReLU, classifier), got {depth}")
        if width < 1 or channels < 1:
            raise ConfigError(f"width and channels must be positive, got {width} and {channels}")
        c, h, w = input_shape
        self.input_shape = (c, h, w)
        self.num_classes = num_classes
        self.width, self.depth, self.channels = width, depth, channels
        self.mean, self.std = mean, std

    def _fc_head(self, n_features: int, what: str) -> nn.Sequential:
        """The head on `n_features` trunk outputs: depth − 2 Linear(width)+ReLU, then Linear(classes)."""
        width, depth, num_classes = self.width, self.depth, self.num_classes
        check_parameter_count((n_features + 1) * width + (depth - 3) * (width + 1) * width + (width + 1) * num_classes,
                              f"{what} of depth {depth} and width {width}")
        head: list[nn.Module] = []
        for i in range(depth - 2):
            head += [nn.Linear(n_features if i == 0 else width, width), nn.ReLU()]
        head.append(nn.Linear(width, num_classes))
        return nn.Sequential(*head)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.trunk((images - self.mean) / self.std))
        return out

    def linear_layers(self) -> list[nn.Linear]:
        """The head's linear layers in order; index L−2 is layer L."""
        return [m for m in self.head if isinstance(m, nn.Linear)]

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        """Names (weight, bias) of linear layer `layer` (2..depth; layer 1 is the conv trunk)."""
        if not 2 <= layer <= self.depth:
            raise ConfigError(f"conv net: layer {layer} is not a linear layer (layer 1 is the convolutional "
                              f"trunk; linear layers are 2..{self.depth})")
        idx = 2 * (layer - 2)
        return f"head.{idx}.weight", f"head.{idx}.bias"

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        """What linear layer `layer` receives for `images` (differentiable; layer 1: the flat normalised image)."""
        if layer == 1:
            return self.normalize(images)
        h: torch.Tensor = self.trunk((images - self.mean) / self.std)
        for module in list(self.head)[: 2 * (layer - 2)]:
            h = module(h)
        return h

    def check_attackable(self, layer: int) -> None:
        """Raise unless `layer` is a linear layer of the head followed by a ReLU (2..depth−1)."""
        if not 2 <= layer <= self.depth - 1:
            raise ConfigError(f"layer {layer} is not a linear layer followed by ReLU in the conv net "
                              f"(valid: 2..{self.depth - 1}; layer 1 is the convolutional trunk)")


def build_conv(input_shape: tuple[int, int, int], num_classes: int, *, width: int = 200, depth: int = 3,
               seed: int = 0, dtype: torch.dtype = torch.float32) -> ConvNet:
    """Build a conv victim with PyTorch's default init drawn from `seed`."""
    return build_seeded(ConvNet, input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
