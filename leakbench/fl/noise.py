"""Additive Gaussian noise on a shared update (not DP-SGD: no clipping, no accountant).

`add_noise(update, sigma, seed)` adds i.i.d. N(0, s²) to every entry of every shared gradient
tensor, drawn from a generator seeded with the cell's seed (same seed, same noise). The scale
`s` is `sigma` itself ("absolute") or `sigma × max |entry|` of each tensor ("max", the scale-free
level of the `noise` view of `paper/spear-noise` and docs/notebook/spear.md's noise table). σ = 0 returns the update
unchanged. The update's `kind` gains "+noise" (e.g. "fedsgd+noise").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from leakbench.citation import Citation
from leakbench.errors import ConfigError
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate
from leakbench.ranges import REQUIRED, Ranged, chosen, ranged

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
    return update.with_gradients(grads, "noise")


@dataclass(frozen=True)
class NoiseConfig(Ranged):
    """Additive Gaussian noise on every shared gradient entry.

    sigma: the noise std σ (≥ 0; 0 is no noise).
    scale: "absolute" (std σ) or "max" (std σ × each tensor's max |entry|).
    """

    sigma: float = ranged(REQUIRED, 0, math.inf, high_open=True)
    scale: str = chosen("absolute", *NOISE_SCALES)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_noise(self.sigma, self.scale)


@register_transform
class Noise(UpdateTransform):
    """Additive Gaussian noise on every shared gradient entry (no clipping, no accountant: not DP)."""

    paper = Citation("Zhu et al., NeurIPS 2019", "https://arxiv.org/abs/1906.08935")
    name = "noise"
    Config = NoiseConfig
    config: NoiseConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        return add_noise(update, self.config.sigma, client.seed, self.config.scale)

    def label(self) -> str:
        return f"noise σ={self.config.sigma:g}" + ("×max|g|" if self.config.scale == "max" else "")

    def columns(self) -> dict[str, Any]:
        return {"noise_sigma": float(self.config.sigma), "noise_scale": self.config.scale}
