"""Additive Gaussian noise on a shared update (not DP-SGD: no clipping, no accountant).

`add_noise(update, sigma, seed)` adds i.i.d. N(0, s²) to every entry of every shared gradient
tensor, drawn from a generator seeded with the cell's seed (same seed, same noise). The scale
`s` is `sigma` itself ("absolute") or `sigma × max |entry|` of each tensor ("max", the scale-free
level of the `noise` view of `paper/spear-noise` and docs/notebook/spear.md's noise table). σ = 0 returns the update
unchanged. The update's `kind` gains "+noise" (e.g. "fedsgd+noise").

An absolute σ means little without the size of what it is added to: `noise_snr` gives, per shared tensor, the
RMS of the update's entries before the noise over the noise std; a cell with noise records it for its own
update (`harness.victim.noise_columns`: the `noise_snr` column).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import MAX_NOISE_STD, REQUIRED, Ranged, chosen, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate

NOISE_SCALES = ("absolute", "max")
"""How σ sets each tensor's noise std: σ itself, or σ × that tensor's max |entry|."""


def check_noise(sigma: float, scale: str) -> None:
    """Raise ConfigError unless σ is a number in [0, MAX_NOISE_STD] (above it no signal is left, and
    the update heads for float32's overflow) and `scale` is one of NOISE_SCALES."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 <= sigma <= MAX_NOISE_STD:
        raise ConfigError(f"noise: sigma must be a number in [0, 10^6] (a larger std leaves no signal and "
                          f"overflows float32 updates), got {sigma!r}")
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
        grads[name] = g + noise_std(g, sigma, scale) * torch.randn(g.shape, generator=gen, dtype=g.dtype)
    return update.with_gradients(grads, "noise")


def noise_std(gradient: torch.Tensor, sigma: float, scale: str) -> float:
    """The std of the noise `add_noise` adds to `gradient`: σ, or σ·max|entry| ("max")."""
    return sigma * (float(gradient.abs().max()) if scale == "max" else 1.0)


def noise_snr(gradients: Mapping[str, torch.Tensor], sigma: float, scale: str = "absolute") -> dict[str, float]:
    """Per shared tensor, the signal-to-noise ratio of noise σ on the update `gradients` (before the noise):
    RMS of the tensor's entries over the noise std (`noise_std`), rounded to 3 significant digits. Below 1 the
    noise is larger than a typical entry (σ = 1e-4 on layer 1 of FC-6 w400 at init: 0.85); ∞ for σ = 0."""
    out = {}
    for name, g in gradients.items():
        std = noise_std(g, sigma, scale)
        rms = float(g.double().pow(2).mean().sqrt()) if g.numel() else 0.0
        out[name] = math.inf if std == 0 else float(f"{rms / std:.3g}")
    return out


@dataclass(frozen=True)
class NoiseConfig(Ranged):
    """Additive Gaussian noise on every shared gradient entry.

    sigma: the noise std σ (0 … 10^6; 0 is no noise; `ranges.MAX_NOISE_STD` says why 10^6).
    scale: "absolute" (std σ) or "max" (std σ × each tensor's max |entry|).
    """

    sigma: float = ranged(REQUIRED, 0, MAX_NOISE_STD)
    scale: str = chosen("absolute", *NOISE_SCALES)

    owner: ClassVar[str] = "noise"

    def __post_init__(self) -> None:
        check_noise(self.sigma, self.scale)  # first: its error says why σ is bounded
        super().__post_init__()


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
