"""A small CIFAR-style ResNet with BatchNorm: Normalise → conv stem → residual blocks → global average pool → FC head.

The trunk follows He et al. (2016, §4.2, the CIFAR ResNets): a 3×3 conv stem (BN, ReLU), then three
stages of one basic block each (two 3×3 convs with BN; a 1×1 conv with BN on the shortcut when the
shape changes), at `channels`, 2·`channels` and 4·`channels` channels, the last two with stride 2,
then a global average pool: a ResNet-8. The head is the same FC+ReLU head as the conv victim, so
SPEAR and CPA attack its linear layers and inversion turns what they recover back into images.

Layer numbering (as in `leakbench.models.conv`): layer 1 is the convolutional trunk, layers
2 … depth the head's linear layers, every one but the last followed by a ReLU; depth 3 is trunk →
Linear(width) → ReLU → Linear(classes). Any square input of side ≥ 8 works (32×32, 64×64, …): the
pool makes the feature size 4·`channels` whatever the side.

BatchNorm: in eval mode (the default threat model, `ThreatModel.bn_mode`) the layers use their
running statistics; in train mode the private batch's own statistics enter the forward pass, and
each forward updates the running statistics (`leakbench.fl.update`).
"""

from __future__ import annotations

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import build_seeded
from leakbench.models.conv import ConvNet


class BasicBlock(nn.Module):
    """conv3×3 → BN → ReLU → conv3×3 → BN, plus the shortcut (1×1 conv + BN when the shape changes), → ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def resnet_trunk(c_in: int, channels: int) -> nn.Sequential:
    """Stem and three stages of the CIFAR ResNet-8, then global average pooling and flattening (4·channels features)."""
    return nn.Sequential(
        nn.Conv2d(c_in, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
        BasicBlock(channels, channels, 1), BasicBlock(channels, 2 * channels, 2),
        BasicBlock(2 * channels, 4 * channels, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class ResNet(ConvNet):
    """A ResNet-8 trunk with BatchNorm and the conv victim's FC+ReLU head; same attack interface as ConvNet."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int = 200, depth: int = 3,
                 channels: int = 16, mean: float = 0.5, std: float = 0.5) -> None:
        nn.Module.__init__(self)
        c, h, w = input_shape
        if h != w or h < 8:
            raise ConfigError(f"resnet victim needs square inputs of side at least 8, got {h}×{w}")
        self._keep_settings(input_shape, num_classes, width, depth, channels, mean, std, "resnet")
        self.trunk = resnet_trunk(c, channels)
        self.head = self._fc_head(4 * channels, "resnet")


def build_resnet(input_shape: tuple[int, int, int], num_classes: int, *, width: int = 200, depth: int = 3,
                 seed: int = 0, dtype: torch.dtype = torch.float32) -> ResNet:
    """Build a resnet victim with PyTorch's default init (BN: weight 1, bias 0) drawn from `seed`."""
    return build_seeded(ResNet, input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
