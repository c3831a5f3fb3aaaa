"""Feature inversion: from recovered inputs of layer L back to images, through the public prefix.

An attack on an inner linear layer L (SPEAR, CPA at L > 1, or at the first FC layer of the conv
victim) recovers that layer's inputs f. The server knows the network before layer L, so it can
look for images x in [0, 1] that the prefix maps to f:

    min_x  ‖φ_L(x) − f‖² / ‖f‖²  +  tv · TV(x),     x = sigmoid(z),

with φ_L = `model.layer_inputs(·, L)` (public weights only), TV the mean absolute difference of
neighbouring pixels (an image prior), Adam on z from a seeded start near grey. Each recovered
feature vector gives one image, in the same order. Deterministic: same inputs and seed → same images.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from leakbench.core.errors import ConfigError
from leakbench.core.inversion import InversionConfig  # the setting lives outside attacks (records read specs)

if TYPE_CHECKING:
    from leakbench.models.base import ImageVictim


def inverts(attack: str, layer: int) -> bool:
    """Whether cells of `attack` at `layer` recover features that inversion can turn into images: the
    attack has a layer setting (SPEAR, CPA) and attacks an inner layer (layer ≥ 2); the other cells
    reconstruct images themselves."""
    from leakbench.attacks import attack_class  # the registry imports attacks that import this module

    return attack_class(attack).reconstructs(layer) == "feature"


def total_variation(images: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of horizontally and vertically neighbouring pixels, per image."""
    dh = (images[..., 1:, :] - images[..., :-1, :]).abs().flatten(1).mean(1)
    dw = (images[..., :, 1:] - images[..., :, :-1]).abs().flatten(1).mean(1)
    return dh + dw


def invert_features(model: ImageVictim, features: torch.Tensor, layer: int, config: InversionConfig, *,
                    seed: int) -> torch.Tensor:
    """Images (b, C, H, W) in [0, 1] whose layer-`layer` inputs under `model` approximate `features` (b, n)."""
    if not hasattr(model, "layer_inputs") or not hasattr(model, "input_shape"):
        raise ConfigError("feature inversion needs a victim exposing layer_inputs() and input_shape")
    dtype = next(model.parameters()).dtype
    target = features.detach().to(dtype)
    scale = target.pow(2).sum(1).clamp_min(torch.finfo(dtype).tiny)
    gen = torch.Generator().manual_seed(seed)
    z = (0.01 * torch.randn((target.shape[0], *model.input_shape), generator=gen, dtype=dtype)).requires_grad_(True)
    optimizer = torch.optim.Adam([z], lr=config.lr)
    for _ in range(config.steps):
        optimizer.zero_grad(set_to_none=True)
        x = torch.sigmoid(z)
        fit = (model.layer_inputs(x, layer) - target).pow(2).sum(1) / scale
        loss = (fit + config.tv * total_variation(x)).sum()
        loss.backward()
        optimizer.step()
    return torch.sigmoid(z).detach().to(torch.float32)
