"""PRECODE's variational bottleneck, inserted into a victim before its output layer.

Scheliga, Mäder and Seeland, "PRECODE – A Generic Model Extension to Prevent Deep Gradient
Leakage", WACV 2022. The features h that would reach the classifier go through

    (μ, s) = encoder(h),  σ = softplus(s − 5),  z = μ + σ ⊙ ε,  ε ~ N(0, I),  h' = decoder(z)

(encoder Linear(n, 2K), decoder Linear(K, n): the authors' code, after Alemi et al.'s VIB), and
the classifier sees h'. Training adds β · KL(N(μ, σ²) ‖ N(0, I)) (in bits, averaged over the
batch) to the cross-entropy (`ImageVictim.penalty`); the paper's settings are K = 256, β = 0.001.
Every forward pass samples ε (in training and evaluation, as in the authors' code) from a
generator seeded with (`noise_seed`, number of forward passes so far — the buffer `draws`, saved
with the weights): the same seed and history give the same noise, and the global RNG is never
drawn from.

Layer numbering of the wrapped victim `PrecodeVictim` (base of depth d): layers 1 … d−1 are the
base's, the encoder is layer d, the decoder layer d + 1 and the classifier layer d + 2 (its depth),
so label recovery still finds the output layer and SPEAR at layer d − 1 sees the encoder as the
layer after it. The attackable layers (linear + ReLU) are the base's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import ImageVictim

NOISE_MIX = 0x9E3779B97F4A7C15
"""Mixes a noise seed and a forward count into one generator seed (the 64-bit golden ratio)."""


class VariationalBottleneck(nn.Module):
    """encoder → (μ, σ) → z = μ + σ·ε → decoder; keeps the β-weighted KL term of its last forward."""

    def __init__(self, features: int, size: int, beta: float, noise_seed: int) -> None:
        super().__init__()
        self.encoder = nn.Linear(features, 2 * size)
        self.decoder = nn.Linear(size, features)
        self.size, self.beta = size, beta
        self.noise_seed = noise_seed
        self.draws: torch.Tensor
        self.register_buffer("draws", torch.zeros((), dtype=torch.int64))  # in the state dict: a cached
        # trained victim goes on with the noise a freshly trained one would draw
        self.kl: torch.Tensor | None = None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        stats = self.encoder(h)
        mu, std = stats[:, :self.size], nn.functional.softplus(stats[:, self.size:] - 5)
        gen = torch.Generator(device=h.device).manual_seed((self.noise_seed * NOISE_MIX + int(self.draws)) % 2**63)
        self.draws += 1
        eps = torch.randn(mu.shape, generator=gen, dtype=mu.dtype, device=mu.device)
        self.kl = -0.5 * (1 + 2 * std.log() - mu.pow(2) - std.pow(2)).sum(1).mean() / math.log(2)
        out: torch.Tensor = self.decoder(mu + std * eps)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and deep-copied without the last forward's KL term (a tensor inside a graph)."""
        return {**self.__dict__, "kl": None}


class PrecodeHead(nn.Module):
    """The bottleneck, then the victim's own output layer."""

    def __init__(self, bottleneck: VariationalBottleneck, out: nn.Linear) -> None:
        super().__init__()
        self.vb, self.out = bottleneck, out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.out(self.vb(h))
        return result


class PrecodeVictim(ImageVictim):
    """A victim with PRECODE's bottleneck before its output layer (layer numbering: module docstring)."""

    def __init__(self, base: ImageVictim, size: int, beta: float, noise_seed: int) -> None:
        super().__init__()
        self.input_shape, self.mean, self.std = base.input_shape, base.mean, base.std
        self.num_classes = getattr(base, "num_classes", 0)
        self.base_depth = base.depth
        self.depth = base.depth + 2
        self.out_path = base.layer_param_names(base.depth)[0].rpartition(".")[0]
        parent_path, _, leaf = self.out_path.rpartition(".")
        out = base.get_submodule(self.out_path)
        if not isinstance(out, nn.Linear):
            raise ConfigError("precode: the victim's output layer is not an nn.Linear")
        bottleneck = VariationalBottleneck(out.in_features, size, beta, noise_seed)
        base.get_submodule(parent_path).add_module(leaf, PrecodeHead(bottleneck, out))
        self.base = base

    @property
    def bottleneck(self) -> VariationalBottleneck:
        """The bottleneck, registered once, inside the base's head (so parameter names are the base's)."""
        head = self.base.get_submodule(self.out_path)
        assert isinstance(head, PrecodeHead)
        return head.vb

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(images)
        return out

    def penalty(self) -> torch.Tensor | None:
        """β · KL of the last forward pass (None before any)."""
        kl = self.bottleneck.kl
        return None if kl is None else self.bottleneck.beta * kl

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        """Names (weight, bias): the base's layers 1 … d−1, then encoder (d), decoder (d+1), classifier (d+2)."""
        d = self.base_depth
        if layer < d:
            weight, bias = self.base.layer_param_names(layer)
            return f"base.{weight}", f"base.{bias}"
        part = {d: "vb.encoder", d + 1: "vb.decoder", d + 2: "out"}.get(layer)
        if part is None:
            raise ConfigError(f"precode victim: no linear layer {layer} (layers 1..{self.depth})")
        return f"base.{self.out_path}.{part}.weight", f"base.{self.out_path}.{part}.bias"

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        """What linear layer `layer` ≤ d (the encoder) receives for `images`; the decoder's and the
        classifier's inputs are sampled, so they are no function of the images alone (a ConfigError)."""
        if layer > self.base_depth:
            raise ConfigError(f"precode victim: the inputs of layer {layer} are sampled (layers above "
                              f"{self.base_depth} follow the bottleneck's noise)")
        return self.base.layer_inputs(images, layer)

    def check_attackable(self, layer: int) -> None:
        """The base's attackable layers (the bottleneck's are not followed by a ReLU)."""
        if layer >= self.base_depth:
            raise ConfigError(f"layer {layer} is not a linear layer followed by ReLU in the PRECODE victim "
                              f"(its bottleneck is layers {self.base_depth}..{self.base_depth + 1})")
        check = getattr(self.base, "check_attackable", None)
        if check is not None:
            check(layer)


def add_precode(model: ImageVictim, size: int, beta: float, seed: int) -> PrecodeVictim:
    """`model` with PRECODE's bottleneck of latent size `size` and KL weight `beta`; its init drawn from
    `seed` (global RNG untouched), its sampling noise seeded from `seed` too; same dtype as `model`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        victim = PrecodeVictim(model, size, beta, noise_seed=seed)
    return victim.to(next(model.parameters()).dtype)
