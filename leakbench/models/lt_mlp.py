"""The victim of Shariati & Alambardar Meybodi's LT-code peeling paper (arXiv:2609.09659, 2026), `lt-mlp`.

A two-layer MLP: raw pixels in [0, 1] (no normalisation: mean 0, std 1), flattened, → Linear(width) → ReLU
→ Linear(classes). The first layer's weights are drawn from N(0, σ²) with σ = 0.5 and its bias is zero (a
parameter holding zeros: its gradient dL/db₁ is shared like every other, and the peeling attack reads it);
the classifier's weights are Xavier-uniform, its bias zero. This is the paper's passive setting ("§VIII:
N = 1000 ReLU neurons, σ = 0.5, Xavier-uniform second layer, all biases zero"), which it evaluates in
float64 (the `fedsgd-f64` client: `leakbench.fl.transform.FedSGD64`).

Two differences from the released TensorFlow code, neither changing the distribution of anything the
attacks see: the image is flattened channel-first (C, H, W) as every leakbench victim is, where the
released code flattens (H, W, C) — a fixed permutation of i.i.d. weight rows — and the weights are drawn
from torch's generator seeded by the cell's seed, not numpy's.
"""

from __future__ import annotations

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import build_seeded
from leakbench.models.fc import FCNet

LT_SIGMA = 0.5
"""Standard deviation of the first layer's weights in the paper (§VI-A, §VIII)."""


class LTMLP(FCNet):
    """The paper's two-layer MLP of hidden width `width` on images of shape `input_shape` (see the module)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int, depth: int = 2,
                 sigma: float = LT_SIGMA) -> None:
        if depth != 2:
            raise ConfigError(f"lt-mlp is the paper's two-layer MLP (depth 2), got depth {depth}; "
                              "deeper FC victims: arch fc")
        if not sigma > 0:
            raise ConfigError(f"lt-mlp: sigma must be positive, got {sigma}")
        super().__init__(input_shape, num_classes, width=width, depth=2, mean=0.0, std=1.0)
        first, classifier = self.linear_layers()
        with torch.no_grad():
            first.weight.normal_(0.0, sigma)
            first.bias.zero_()
            nn.init.xavier_uniform_(classifier.weight)
            classifier.bias.zero_()
        self.sigma = sigma


def build_lt_mlp(input_shape: tuple[int, int, int], num_classes: int, *, width: int = 1000, depth: int = 2,
                 seed: int = 0, dtype: torch.dtype = torch.float32) -> LTMLP:
    """The paper's victim (width 1000 there) with its init drawn from `seed`."""
    return build_seeded(LTMLP, input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)
