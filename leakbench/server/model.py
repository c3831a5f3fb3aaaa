"""What a malicious server sends, as plain data (`ServerModel`), and the victim the harness builds from it.

A `ServerModel` says two things: the width k of an imprint-type block put in front of the victim
(Linear d → k, ReLU, Linear k → d on the normalised, flattened image: Fowl et al.'s "imprint block", breaching's
`ImprintBlock` with `connection="linear"`; 0: no block), and new values for any parameters of the result
(the block's, and the victim's own under `base.`: trap weights). Nothing else: the structure is leakbench's
own code (`ModifiedVictim`), the values arrays whose names and shapes `modified_victim` compares with
that structure before one is loaded. So a server-side modification — plugin code, run in the sandbox — can
choose every weight of the model the client trains, and cannot run code in the harness.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import ImageVictim, check_parameter_count

MAX_BLOCK = 1 << 16
"""The widest imprint block a server may put in front of a victim (65,536 bins)."""


@dataclass(frozen=True)
class ServerModel:
    """The model a malicious server sends, relative to the public victim: an imprint block of `block` units
    in front of it (0: none) and `values`, new values of named parameters of the result (`ModifiedVictim`'s
    names: `block.0.weight` (k × d), `block.0.bias` (k), `block.2.weight` (d × k), `block.2.bias` (d), and the
    victim's own as `base.<name>`). A parameter not named keeps its value (the victim's, or zero in the block)."""

    block: int = 0
    values: dict[str, torch.Tensor] = field(default_factory=dict)


class ModifiedVictim(ImageVictim):
    """The victim `base` behind an imprint block of `block` units (none for 0): images → normalise → flatten →
    Linear(d, k) → ReLU → Linear(k, d) → the base victim's own layers, which take the block's output as the
    normalised image they would have seen. Layer numbers, BatchNorm and the loss are the base victim's; the
    block's parameters come first in `named_parameters()`."""

    def __init__(self, base: ImageVictim, block: int) -> None:
        super().__init__()
        self.input_shape, self.mean, self.std, self.depth = base.input_shape, base.mean, base.std, base.depth
        d = math.prod(base.input_shape)
        self.bins = block
        self.block = nn.Sequential(nn.Linear(d, block), nn.ReLU(), nn.Linear(block, d)) if block else nn.Identity()
        if block:
            for parameter in self.block.parameters():
                nn.init.zeros_(parameter)
        self.base = base
        self.agreed_max: dict[str, float] = {}
        """The public victim's largest |value| per parameter (`agreed_max`), set by `modified_victim`."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(self._through_block(images))
        return out

    def _through_block(self, images: torch.Tensor) -> torch.Tensor:
        """What the base victim receives: the block's output as images (denormalised; identity without a block)."""
        if not self.bins:
            return images
        return self.base.denormalize(self.block(self.base.normalize(images)))

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        weight, bias = self.base.layer_param_names(layer)
        return f"base.{weight}", f"base.{bias}"

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        return self.base.layer_inputs(self._through_block(images), layer)

    def penalty(self) -> torch.Tensor | None:
        return self.base.penalty()


def modified_victim(base: ImageVictim, server: ServerModel) -> ModifiedVictim:
    """The victim a malicious server sends in place of `base`: the `ModifiedVictim` that `server` describes, its
    values loaded once each has been checked against it: a block of 0 … MAX_BLOCK units within the parameter
    limit, every named parameter one of the result's, of its shape, float32 and finite. One ConfigError line
    otherwise (nothing of `base` changes)."""
    block = server.block
    if type(block) is not int or not 0 <= block <= MAX_BLOCK:
        raise ConfigError(f"the server's imprint block must have 0 to {MAX_BLOCK:,} units, got {block!r:.40}")
    d = math.prod(base.input_shape)
    check_parameter_count(sum(p.numel() for p in base.parameters()) + 2 * d * block + block + d,
                          f"the victim behind an imprint block of {block:,} units")
    victim = ModifiedVictim(copy.deepcopy(base), block)
    params = dict(victim.named_parameters())
    for name, value in server.values.items():
        target = params.get(name) if isinstance(name, str) else None
        if target is None:
            raise ConfigError(f"the server's model names a parameter {str(name)[:80]!r} the victim does not have")
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.shape != target.shape:
            raise ConfigError(f"the server's value of {name} is not a float32 tensor of shape {tuple(target.shape)}")
        if not bool(torch.isfinite(value).all()):
            raise ConfigError(f"the server's value of {name} is not finite")
    with torch.no_grad():
        for name, value in server.values.items():
            params[name].copy_(value.to(params[name].dtype))
    if hasattr(base, "victim_info"):
        victim.victim_info = base.victim_info
    victim.agreed_max = agreed_max(base)
    return victim.eval()


def agreed_max(base: ImageVictim) -> dict[str, float]:
    """The public victim's largest |value| per parameter, under the names its `ModifiedVictim` gives them (`base.…`):
    what a client that checks weight magnitudes (`fl.model_check.CheckWeights`) compares the received model with."""
    return {f"base.{name}": float(p.detach().abs().max()) if p.numel() else 0.0 for name, p in base.named_parameters()}

