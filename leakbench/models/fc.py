"""Fully connected ReLU victim: Normalise → Flatten → (Linear → ReLU) × (depth−1) → Linear."""

from __future__ import annotations

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import ImageVictim, build_seeded, check_parameter_count


class FCNet(ImageVictim):
    """FC-`depth` network of hidden width `width` on images of shape `input_shape`.

    The input is normalised with public per-model constants `(x − mean) / std`, so layer 1
    sees the normalised, flattened image. `linear_layers()[L-1]` is "layer L"; layers
    1 … depth−1 are followed by a ReLU and can be attacked by SPEAR-style attacks.
    """

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int, depth: int,
                 mean: float = 0.5, std: float = 0.5) -> None:
        super().__init__()
        if depth < 2:
            raise ConfigError(f"depth must be at least 2 (one hidden layer), got {depth}")
        if width < 1:
            raise ConfigError(f"width must be positive, got {width}")
        self.input_shape = (input_shape[0], input_shape[1], input_shape[2])
        self.num_classes = num_classes
        self.width, self.depth = width, depth
        self.mean, self.std = mean, std
        n_in = input_shape[0] * input_shape[1] * input_shape[2]
        check_parameter_count((n_in + 1) * width + (depth - 2) * (width + 1) * width + (width + 1) * num_classes,
                              f"FC-{depth} of width {width} on {n_in} inputs")
        layers: list[nn.Module] = []
        for i in range(depth - 1):
            layers += [nn.Linear(n_in if i == 0 else width, width), nn.ReLU()]
        layers.append(nn.Linear(width if depth > 1 else n_in, num_classes))
        self.body = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(self.normalize(images))
        return out

    def linear_layers(self) -> list[nn.Linear]:
        """The linear layers in order; index L−1 is layer L."""
        return [m for m in self.body if isinstance(m, nn.Linear)]

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        """Names (weight, bias) in `named_parameters()` of linear layer `layer` (1-based, 1..depth)."""
        if not 1 <= layer <= self.depth:
            raise ConfigError(f"FC-{self.depth} has no linear layer {layer}")
        idx = 2 * (layer - 1)
        return f"body.{idx}.weight", f"body.{idx}.bias"

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        """What linear layer `layer` receives for `images` (used for ground truth only)."""
        h = self.normalize(images)
        for module in list(self.body)[: 2 * (layer - 1)]:
            h = module(h)
        return h

    def logits_from(self, pre_activation: torch.Tensor, layer: int) -> torch.Tensor:
        """The logits given linear layer `layer`'s output (its pre-activation, before the ReLU): the rest
        of the network after that layer, so a server can differentiate the loss in that layer's output."""
        if not 1 <= layer <= self.depth - 1:
            raise ConfigError(f"FC-{self.depth} has no linear layer {layer} followed by a ReLU")
        out: torch.Tensor = self.body[2 * layer - 1:](pre_activation)
        return out

    def check_attackable(self, layer: int) -> None:
        """Raise unless linear layer `layer` exists and is followed by a ReLU."""
        if not 1 <= layer <= self.depth - 1:
            raise ConfigError(
                f"layer {layer} is not a linear layer followed by ReLU in FC-{self.depth} (valid: 1..{self.depth - 1})"
            )


def build_fc(input_shape: tuple[int, int, int], num_classes: int, *, width: int = 200, depth: int = 6,
             seed: int = 0, dtype: torch.dtype = torch.float32) -> FCNet:
    """Build an FC victim with PyTorch's default init drawn from `seed` (the paper's default: FC-6, width 200)."""
    return build_seeded(FCNet, input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
