"""Gradient pruning: zero the smallest-magnitude fraction p of every shared tensor.

Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019, §5 (defence strategies): gradients with
small magnitudes are set to zero before sharing; the paper sweeps the pruned fraction over 1 %, 10 %,
20 %, 30 %, 50 % and 70 % and finds that DLG fails beyond 20 % (FC/LeNet on CIFAR-100).

Per tensor of n entries, exactly round(p·n) entries are zeroed: those of smallest |g|, ties broken by
position (the entry with the lower flat index is zeroed first), so the result is deterministic. The
DLG code thresholds at a percentile instead (`|g| < percentile(|g|, p)`), which zeroes the same
entries when the magnitudes are distinct. The update's `kind` gains "+prune".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.ranges import Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate


def smallest(values: torch.Tensor, fraction: float) -> torch.Tensor:
    """A boolean mask of `values`' shape marking its round(fraction·n) smallest entries (ties: lower flat
    index first)."""
    flat = values.reshape(-1)
    k = round(fraction * flat.numel())
    mask = torch.zeros(flat.numel(), dtype=torch.bool)
    if k:
        order = torch.sort(flat, stable=True).indices
        mask[order[:k]] = True
    return mask.reshape(values.shape)


def prune(gradient: torch.Tensor, fraction: float) -> torch.Tensor:
    """`gradient` with its round(fraction·n) smallest-magnitude entries set to 0."""
    return gradient.masked_fill(smallest(gradient.abs(), fraction), 0.0)


@dataclass(frozen=True)
class PruneConfig(Ranged):
    """Gradient pruning (Zhu et al., NeurIPS 2019).

    fraction: the fraction p of each tensor's entries zeroed, the smallest in magnitude, in [0, 1)
        (0: none; the paper's levels are 0.01, 0.1, 0.2, 0.3, 0.5 and 0.7).
    """

    fraction: float = ranged(0.2, 0, 1, high_open=True)
    owner: ClassVar[str] = "prune"


@register_transform
class Prune(UpdateTransform):
    """Gradient pruning (Zhu et al., NeurIPS 2019): zero the smallest-magnitude fraction p of each tensor."""

    paper = Citation("Zhu et al., NeurIPS 2019", "https://arxiv.org/abs/1906.08935")
    name = "prune"
    Config = PruneConfig
    config: PruneConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        grads = {name: prune(g, self.config.fraction) for name, g in update.gradients.items()}
        return update.with_gradients(grads, "prune")

    def label(self) -> str:
        return f"prune p={self.config.fraction:g}"

    def columns(self) -> dict[str, Any]:
        return {"prune_fraction": float(self.config.fraction)}
