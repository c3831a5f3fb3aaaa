"""Soteria: prune the defended linear layer's gradient on the representation features that reveal most.

Sun, Chen, Xu, Li, Guan & Wang, "Soteria: Provable Defense against Privacy Leakage in Federated
Learning from Representation Perspective", CVPR 2021. The defended layer is a linear layer W; its
input r = f(x) is the "representation". Feature j of r enters the shared gradient only through the
column dL/dW[:, j]. Perturbing r_j by δ moves the reconstructed input by about δ / ‖∂r_j/∂x‖, so the
features with the largest ‖r_j‖ / ‖∂r_j/∂x‖ are the ones whose removal moves a reconstruction the
most; Soteria zeroes their gradient columns.

As in the released code (`defense_soteria`: per sample i and feature j the norm ‖∂r_ij/∂x_i‖ divided
by r_ij, summed over the batch; the features below the p-th percentile of that sum are masked), the
score of feature j is s_j = Σ_i ‖∂r_ij/∂x_i‖ / |r_ij|, and the columns of the round(p·d) features of
smallest s_j (ties: lower index first) are set to 0. A sample where r_ij = 0 and ∂r_ij/∂x_i = 0 (a
ReLU off) adds nothing to s_j (0/0 counts as 0), and a feature off for the whole batch — its
column is already zero — scores ∞, so it does not use up the pruning budget; r_ij = 0 with a
non-zero derivative makes s_j infinite too (never pruned). x is the image in [0, 1] as the client
feeds it (a constant rescaling of x changes no ranking). The bias and every other tensor are left as they are.

The paper prunes 1 %–80 % of the features (its figures: rates 1, 5, 10, 20, 40, 60, 80 %; the
released code's default is 1 %). `layer` 0 (the default) defends the victim's first linear layer:
for the conv victim that is the first layer of the head (layer 2), whose input is the trunk's
flattened feature map — Soteria's setting, where the defended FC layer reads the conv features; for
the FC victims it is layer 1, the layer SPEAR and CPA invert, whose representation is the normalised
image itself, whose derivative is known (‖∂r_ij/∂x_i‖ = 1/std for every j: no product is computed).
Otherwise ∂r_j/∂x for all j at once: a vector-Jacobian product per feature, vectorised with
`torch.func.vmap` over chunks of features (the jacobian is never held whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch.func import vjp, vmap

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import Ranged, ranged
from leakbench.fl.prune import smallest
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate

if TYPE_CHECKING:
    from leakbench.models.base import ImageVictim

MAX_LAYER = 64
CHUNK_ENTRIES = 2**24
"""Features per vectorised chunk are chosen so one chunk's input gradients hold about 2^24 numbers."""


def defended_layer(model: ImageVictim, layer: int) -> int:
    """`layer`, or for 0 the victim's first linear layer (the smallest L whose parameters it names)."""
    if layer:
        model.layer_param_names(layer)  # a ConfigError when it is not a linear layer
        return layer
    for candidate in range(1, MAX_LAYER + 1):
        try:
            model.layer_param_names(candidate)
            return candidate
        except ConfigError:
            continue
    raise ConfigError("soteria: the victim names no linear layer")


def feature_scores(model: ImageVictim, images: torch.Tensor, layer: int) -> torch.Tensor:
    """s_j = Σ_i ‖∂r_ij/∂x_i‖ / |r_ij| for every input feature j of linear layer `layer` (0/0 counts 0; ∞
    for a feature that is 0/0 for every sample)."""
    dtype = next(model.parameters()).dtype
    x = images.detach().to(dtype)

    def representation(inputs: torch.Tensor) -> torch.Tensor:
        return model.layer_inputs(inputs, layer)

    with torch.enable_grad():
        result = vjp(representation, x)
    r: torch.Tensor = result[0].detach()
    if torch.equal(r, model.normalize(x)):  # r is the normalised image: ∂r_ij/∂x_i = e_j / std, norm 1/std
        return _scores(torch.full_like(r, 1.0 / model.std), r)
    pullback = result[1]
    b, d = int(r.shape[0]), int(r.shape[1])
    chunk = max(1, CHUNK_ENTRIES // max(1, x.numel()))

    def input_gradient_norms(j: torch.Tensor) -> torch.Tensor:
        cotangent = torch.zeros_like(r).index_fill(1, j.reshape(1), 1.0)
        grad_x: torch.Tensor = pullback(cotangent)[0]
        per_sample: torch.Tensor = grad_x.reshape(b, -1).norm(dim=1)
        return per_sample  # (b,) ‖∂r_ij/∂x_i‖: samples do not interact

    norms = torch.cat([vmap(input_gradient_norms)(idx) for idx in torch.arange(d).split(chunk)]).T  # (b, d)
    return _scores(norms, r)


def _scores(norms: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """s_j = Σ_i norms_ij / |r_ij| (0/0 counts 0; ∞ for a feature that is 0/0 for every sample)."""
    ratio = norms / r.abs()
    scores: torch.Tensor = torch.nan_to_num(ratio, nan=0.0, posinf=torch.inf).sum(dim=0)
    return scores.masked_fill(ratio.isnan().all(dim=0), torch.inf)  # off for the whole batch: column already 0


def soteria_mask(model: ImageVictim, images: torch.Tensor, layer: int, fraction: float) -> torch.Tensor:
    """True for the input features of `layer` whose gradient columns Soteria zeroes."""
    return smallest(feature_scores(model, images, layer), fraction)


@dataclass(frozen=True)
class SoteriaConfig(Ranged):
    """Soteria (Sun et al., CVPR 2021).

    fraction: the fraction p of the defended layer's input features whose gradient columns are
        zeroed, in [0, 1) (the paper: 1 %–80 %; its released code: 1 %).
    layer: the defended linear layer, numbered as a cell's `layer` (0: the victim's first linear
        layer: layer 1 of an FC victim, layer 2 — the first after the conv trunk — of the conv one).
    """

    fraction: float = ranged(0.1, 0, 1, high_open=True)
    layer: int = ranged(0, 0, MAX_LAYER)
    owner: ClassVar[str] = "soteria"


@register_transform
class Soteria(UpdateTransform):
    """Soteria (Sun et al., CVPR 2021): zero the defended layer's gradient columns of the most revealing features."""

    paper = Citation("Sun et al., CVPR 2021", "https://arxiv.org/abs/2012.06043")
    name = "soteria"
    Config = SoteriaConfig
    config: SoteriaConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        layer = defended_layer(client.model, self.config.layer)
        weight, _ = client.model.layer_param_names(layer)
        if weight not in update.gradients:
            raise ConfigError(f"soteria: the update holds no gradient of {weight}")
        mask = soteria_mask(client.model, client.batch.images, layer, self.config.fraction)
        grads = dict(update.gradients)
        grads[weight] = grads[weight].masked_fill(mask.unsqueeze(0), 0.0)
        return update.with_gradients(grads, "soteria")

    def label(self) -> str:
        where = f" layer={self.config.layer}" if self.config.layer else ""
        return f"soteria p={self.config.fraction:g}{where}"

    def columns(self) -> dict[str, Any]:
        return {"soteria_fraction": float(self.config.fraction), "soteria_layer": self.config.layer}
