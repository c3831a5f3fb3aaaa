"""Additive Gaussian noise on a shared update (not DP-SGD: no clipping, no accountant).

`add_noise(update, sigma, seed)` adds i.i.d. N(0, s²) to every entry of every shared gradient
tensor, drawn from a generator seeded with the cell's seed (same seed, same noise). The scale
`s` is `sigma` itself ("absolute") or `sigma × max |entry|` of each tensor ("max", the scale-free
level of the `noise` view of `paper/spear-noise` and docs/spear.md's noise table). σ = 0 returns the update
unchanged. The update's `kind` gains "+noise" (e.g. "fedsgd+noise").
"""

from __future__ import annotations

import dataclasses
import math

import torch

from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate

NOISE_SCALES = ("absolute", "max")
"""How σ sets each tensor's noise std: σ itself, or σ × that tensor's max |entry|."""


def check_noise(sigma: float, scale: str) -> None:
    """Raise ConfigError unless σ is a finite number ≥ 0 and `scale` is one of NOISE_SCALES."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (math.isfinite(sigma) and sigma >= 0):
        raise ConfigError(f"noise: sigma must be a finite number ≥ 0, got {sigma!r}")
    if scale not in NOISE_SCALES:
        raise ConfigError(f"noise_scale must be one of {', '.join(NOISE_SCALES)}, got {scale!r}")


def add_noise(update: ClientUpdate, sigma: float, seed: int, scale: str = "absolute") -> ClientUpdate:
    """`update` with Gaussian noise of std σ (or σ·max|g| per tensor) added to every gradient entry."""
    check_noise(sigma, scale)
    if sigma == 0:
        return update
    gen = torch.Generator().manual_seed(seed)
    grads = {}
    for name, g in update.gradients.items():
        std = sigma * (float(g.abs().max()) if scale == "max" else 1.0)
        grads[name] = g + std * torch.randn(g.shape, generator=gen, dtype=g.dtype)
    return dataclasses.replace(update, gradients=grads, kind=f"{update.kind}+noise")
