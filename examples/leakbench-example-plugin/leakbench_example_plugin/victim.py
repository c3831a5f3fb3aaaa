"""The example plugin's victim: torchvision's ResNet-18 at random init, as a victim from outside.

Registered through the entry point `resnet18` in the group `leakbench.victims` (pyproject.toml); a
suite picks it with `arch = "resnet18"` (`resnet18-ig.toml`). Its only linear layer is the classifier
(`fc`, not followed by a ReLU), so linear-layer attacks (SPEAR, CPA) have nothing to attack here;
gradient-matching attacks (IG, DLG) attack the whole network. Width and depth do not apply. The
network's classes come from torchvision, which the sandboxed attack worker imports when it unpickles
the update (`leakbench.models.outside`).
"""

from __future__ import annotations

import torchvision
from torch import nn

from leakbench.models import VictimFactory


def build_resnet18(input_shape: tuple[int, int, int], num_classes: int, width: int, depth: int) -> nn.Module:
    """torchvision's ResNet-18 (no pretrained weights) with a `num_classes`-way classifier; 3-channel images."""
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


resnet18 = VictimFactory(build=build_resnet18, linear_layers=("fc",), relu_after=(),
                         description="torchvision ResNet-18 at random init (IG/DLG: the whole network; no "
                                     "linear+ReLU layer for SPEAR/CPA)")
