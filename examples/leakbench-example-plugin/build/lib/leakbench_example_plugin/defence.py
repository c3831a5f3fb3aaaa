"""The example plugin's defence, in one file: uniform quantisation of every shared gradient tensor.

Registered through the entry point `example-quantise` in the group `leakbench.defences` (pyproject.toml);
a suite names it in `defences = ["none", { name = "example-quantise", bits = 4 }]`. Defence code runs
in the harness, on the client's side (`leakbench.fl.transform`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from leakbench.fl import Client, ClientUpdate, UpdateTransform
from leakbench.ranges import Ranged, ranged


@dataclass(frozen=True)
class QuantiseConfig(Ranged):
    """Uniform quantisation.

    bits: levels per sign are 2^(bits−1) − 1 steps of max |entry| / (2^(bits−1) − 1), per tensor.
    """

    bits: int = ranged(8, 2, 32)


class Quantise(UpdateTransform):
    """Uniform gradient quantisation: each tensor rounded to 2^bits levels spanning ± its max |entry|."""

    name = "example-quantise"
    Config = QuantiseConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        steps = 2 ** (self.config.bits - 1) - 1
        grads = {}
        for name, g in update.gradients.items():
            scale = float(g.abs().max()) / steps or 1.0
            grads[name] = torch.round(g / scale) * scale
        return dataclasses.replace(update, gradients=grads, kind=f"{update.kind}+quantise")
