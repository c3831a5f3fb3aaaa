"""Uniform quantisation (leakbench's rounding, not QSGD): b-bit stochastic rounding over ±max|g|, or signs.

Registered as `uniform-quantise`. Until issue 43 it was named `quantise` and cited QSGD, which it is
not: QSGD (`leakbench.fl.qsgd`) scales buckets by their 2-norm, keeps signs and keeps zeros. A suite
that still names `quantise` is refused with one line saying what it became (`RETIRED`); cells stored
under that name keep their stored labels and columns and are read back as they were (`StoredQuantise`).

- "stochastic": each tensor is rounded onto 2^b evenly spaced levels spanning [−s, s], s = its max
  |entry| (step Δ = 2s / (2^b − 1)); an entry between two levels goes to the upper one with
  probability equal to its distance from the lower one over Δ, so the rounding is unbiased
  (E[q(g)] = g), as stochastic rounding generally (Gupta et al., ICML 2015). Zero is no level (the
  count of levels is even): every exact zero of the gradient becomes ±Δ/2 at random, and the sign of
  a small entry may flip. The draws come from a generator seeded with the client's seed: same seed,
  same update. b = 1 is stochastic sign × s.
- "sign": every entry becomes its sign, −1, 0 or +1 (signSGD: Bernstein, Wang, Azizzadenesheli &
  Anandkumar, "signSGD: Compressed Optimisation for Non-Convex Problems", ICML 2018): the magnitude
  is gone; `bits` does not apply.

The update's `kind` gains "+uniform-quantise". (The example plugin's `example-quantise` is a different,
deterministic rounding.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import Ranged, chosen, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform, retire_transform
from leakbench.fl.update import ClientUpdate

MODES = ("stochastic", "sign")
"""How an entry is quantised: b-bit stochastic rounding, or its sign (signSGD)."""
MAX_BITS = 24
"""At most 24 bits: float32 holds 2^24 levels exactly."""
DEFAULT_BITS = 8


def stochastic_round(g: torch.Tensor, bits: int, gen: torch.Generator) -> torch.Tensor:
    """`g` rounded onto 2^bits levels evenly spaced over [−max|g|, max|g|], up or down at random with the
    probabilities that keep it unbiased; a zero tensor stays zero."""
    scale = float(g.abs().max()) if g.numel() else 0.0
    if scale == 0.0:
        return g.clone()
    step = 2 * scale / (2**bits - 1)
    position = (g + scale) / step  # in [0, 2^bits − 1]
    lower = position.floor()
    up = torch.rand(g.shape, generator=gen, dtype=g.dtype) < (position - lower)
    level = (lower + up.to(g.dtype)).clamp(0, 2**bits - 1)
    rounded: torch.Tensor = level * step - scale
    return rounded


@dataclass(frozen=True)
class QuantiseConfig(Ranged):
    """Uniform quantisation of every shared tensor (leakbench's rounding, not QSGD).

    bits: levels per tensor are 2^bits over ±max|g| (1..24; common levels 2, 4, 8) in mode "stochastic".
    mode: "stochastic" (unbiased b-bit stochastic rounding; zero is no level) or "sign" (signSGD:
        every entry becomes −1, 0 or +1; `bits` must then stay at its default).
    """

    bits: int = ranged(DEFAULT_BITS, 1, MAX_BITS)
    mode: str = chosen("stochastic", *MODES)
    owner: ClassVar[str] = "uniform-quantise"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode == "sign" and self.bits != DEFAULT_BITS:
            raise ConfigError(f"{self.owner}: bits does not apply with mode = 'sign' (got bits = {self.bits}); "
                              "leave it out")


@register_transform
class UniformQuantise(UpdateTransform):
    """Uniform quantisation (leakbench's rounding, not QSGD): 2^b stochastic levels over ±max|g|, or signs."""

    paper = Citation("Bernstein et al., ICML 2018 (sign mode)", "https://arxiv.org/abs/1802.04434")
    name = "uniform-quantise"
    Config = QuantiseConfig
    config: QuantiseConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        if self.config.mode == "sign":
            grads = {name: torch.sign(g) for name, g in update.gradients.items()}
        else:
            gen = torch.Generator().manual_seed(client.seed)
            grads = {name: stochastic_round(g, self.config.bits, gen) for name, g in update.gradients.items()}
        return update.with_gradients(grads, self.name)

    def label(self) -> str:
        return f"{self.name} sign" if self.config.mode == "sign" else f"{self.name} {self.config.bits}-bit"

    def columns(self) -> dict[str, Any]:
        prefix = self.name.replace("-", "_")
        return {f"{prefix}_bits": 0 if self.config.mode == "sign" else self.config.bits,
                f"{prefix}_mode": self.config.mode}


class StoredQuantise(UniformQuantise):
    """`uniform-quantise` under its stored name `quantise` (cells run before issue 43), never registered:
    a stored spec reads back with its stored label ("quantise 8-bit") and columns (`quantise_bits`)."""

    name = "quantise"


retire_transform(StoredQuantise, "'quantise' is retired (it was uniform rounding over ±max|g|, not QSGD): name "
                 "'uniform-quantise' for that rounding (same settings) or 'qsgd' for QSGD as published")
