"""Soteria: prune the defended linear layer's gradient on the representation features that reveal most.

Sun, Chen, Xu, Li, Guan & Wang, "Soteria: Provable Defense against Privacy Leakage in Federated
Learning from Representation Perspective", CVPR 2021. The defended layer is a linear layer W; its
input r = f(x) is the "representation". Feature j of r enters the shared gradient only through the
column dL/dW[:, j]. Perturbing r_j by δ moves the reconstructed input by about δ / ‖∂r_j/∂x‖, so the
features with the largest ‖r_j‖ / ‖∂r_j/∂x‖ are the ones whose removal moves a reconstruction the
most; Soteria zeroes their gradient columns.

Placement (`layer`, default −1): the paper's. Its released code (github.com/jeremy313/Soteria,
`GS_attack/reconstruct_image.py` and `DLG_attack/Defend_DLG.ipynb`) defends the fully connected layer
whose input is the feature extractor's output (`model.extract_feature()`): for its LeNet that is the
one linear layer, the classifier (`input_gradient[8]`, `dy_dx[8]`: the weight after the four conv
layers' weights and biases), for its ConvNet the final `linear` (`input_gradient[-2]`). leakbench
derives it from the victim: the victim's last linear layer (FC-k: layer k, whose input is layer
k−1's ReLU output; the conv and ResNet victims: the head's last layer). `layer = 0` is the victim's
first linear layer (for an FC victim layer 1, whose representation is the normalised image itself:
its columns are pixels, on exactly the layer SPEAR and CPA invert); it is what `soteria` defended by
default before issue 43, and it is the registered transform `soteria-first` (leakbench's variant,
not the paper's placement). `layer = N` ≥ 1 defends linear layer N.

Score, as the released code computes it: per sample i and feature j the norm ‖∂r_ij/∂x_i‖ of the
feature's gradient with respect to the (normalised) input image, divided by r_ij + 0.1 (no absolute
value: r_ij itself, which a ReLU or sigmoid representation keeps ≥ 0), summed over the batch; the
features whose |sum| lies below the p-th percentile are masked. So s_j = |Σ_i ‖∂r_ij/∂x_i‖ / (r_ij + 0.1)|,
and the columns of the round(p·d) features of smallest s_j (ties: lower index first; the released
code's `np.percentile` threshold with `<` masks the same features up to its interpolation at the cut)
are set to 0. A feature off for the whole batch (r_ij = 0, ∂r_ij/∂x_i = 0) scores 0 and is masked
first, as in the released code: its column is zero already, so it uses up pruning budget without
changing the update. A sample with r_ij = −0.1 and a zero derivative (0/0) adds nothing. x is the
normalised image the victim's first layer reads ((x − mean)/std, the released code's `ground_truth`).
The bias and every other tensor are left as they are.

The paper prunes 1 %–80 % of the features (its figures: rates 1, 5, 10, 20, 40, 60, 80 %; the
released code's default is 1 %). When the representation is the normalised image (`soteria-first` on
an FC victim) its derivative is known (‖∂r_ij/∂x_i‖ = 1 for every j: no product is computed).
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
LAST = -1
"""`layer` −1: the victim's last linear layer, the paper's placement (the default)."""
FIRST = 0
"""`layer` 0: the victim's first linear layer (`soteria-first`, leakbench's variant)."""
SHIFT = 0.1
"""The released code divides each feature's input-gradient norm by r + 0.1."""
CHUNK_ENTRIES = 2**24
"""Features per vectorised chunk are chosen so one chunk's input gradients hold about 2^24 numbers."""


def linear_layers(model: ImageVictim) -> list[int]:
    """The numbers L ≤ MAX_LAYER of the victim's linear layers (those whose parameters it names), in order."""
    found = []
    for candidate in range(1, MAX_LAYER + 1):
        try:
            model.layer_param_names(candidate)
        except ConfigError:
            continue
        found.append(candidate)
    return found


def defended_layer(model: ImageVictim, layer: int) -> int:
    """`layer` ≥ 1 itself; −1 (`LAST`): the victim's last linear layer, which reads the representation the
    feature extractor feeds the classifier (the paper's placement); 0 (`FIRST`): its first linear layer."""
    if layer > 0:
        model.layer_param_names(layer)  # a ConfigError when it is not a linear layer
        return layer
    layers = linear_layers(model)
    if not layers:
        raise ConfigError("soteria: the victim names no linear layer")
    return layers[-1] if layer == LAST else layers[0]


def described_layer(defence: dict[str, Any]) -> int:
    """The `layer` of a Soteria level as an update lists it (`ClientUpdate.defences`): `soteria-first`'s is
    0, `soteria`'s its own setting (−1 when absent: the paper's placement)."""
    return FIRST if defence["name"] == SoteriaFirst.name else int(defence.get("layer", LAST))


def feature_scores(model: ImageVictim, images: torch.Tensor, layer: int) -> torch.Tensor:
    """s_j = |Σ_i ‖∂r_ij/∂z_i‖ / (r_ij + 0.1)| for every input feature j of linear layer `layer`, z the
    normalised image (the released code's score; 0/0 counts 0)."""
    dtype = next(model.parameters()).dtype
    x = images.detach().to(dtype)

    def representation(inputs: torch.Tensor) -> torch.Tensor:
        return model.layer_inputs(inputs, layer)

    with torch.enable_grad():
        result = vjp(representation, x)
    r: torch.Tensor = result[0].detach()
    if torch.equal(r, model.normalize(x)):  # r is the normalised image z: ∂r_ij/∂z_i = e_j, norm 1
        return _scores(torch.ones_like(r), r)
    pullback = result[1]
    b, d = int(r.shape[0]), int(r.shape[1])
    chunk = max(1, CHUNK_ENTRIES // max(1, x.numel()))

    def input_gradient_norms(j: torch.Tensor) -> torch.Tensor:
        cotangent = torch.zeros_like(r).index_fill(1, j.reshape(1), 1.0)
        grad_x: torch.Tensor = pullback(cotangent)[0]
        per_sample: torch.Tensor = grad_x.reshape(b, -1).norm(dim=1)
        return per_sample  # (b,) ‖∂r_ij/∂x_i‖: samples do not interact

    norms = torch.cat([vmap(input_gradient_norms)(idx) for idx in torch.arange(d).split(chunk)]).T  # (b, d)
    return _scores(norms * model.std, r)  # x = z·std + mean: ∂r/∂z = ∂r/∂x · std


def _scores(norms: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """s_j = |Σ_i norms_ij / (r_ij + 0.1)| (0/0 counts 0), as the released code sums and compares."""
    ratio = torch.nan_to_num(norms / (r + SHIFT), nan=0.0)
    scores: torch.Tensor = ratio.sum(dim=0).abs()
    return scores


def soteria_mask(model: ImageVictim, images: torch.Tensor, layer: int, fraction: float) -> torch.Tensor:
    """True for the input features of `layer` whose gradient columns Soteria zeroes."""
    return smallest(feature_scores(model, images, layer), fraction)


@dataclass(frozen=True)
class SoteriaConfig(Ranged):
    """Soteria (Sun et al., CVPR 2021).

    fraction: the fraction p of the defended layer's input features whose gradient columns are
        zeroed, in [0, 1) (the paper: 1 %–80 %; its released code: 1 %).
    layer: the defended linear layer, numbered as a cell's `layer`: −1 (the default) the victim's last
        linear layer, the paper's placement (FC-k: layer k; the conv and ResNet victims: the head's
        last layer); 0 its first linear layer (`soteria-first`); N ≥ 1 linear layer N.
    """

    fraction: float = ranged(0.1, 0, 1, high_open=True)
    layer: int = ranged(LAST, LAST, MAX_LAYER)
    owner: ClassVar[str] = "soteria"


@register_transform
class Soteria(UpdateTransform):
    """Soteria (Sun et al., CVPR 2021), the paper's placement: the last linear layer's most revealing columns zeroed."""

    paper = Citation("Sun et al., CVPR 2021", "https://arxiv.org/abs/2012.06043")
    name = "soteria"
    Config = SoteriaConfig
    config: SoteriaConfig

    def defended(self) -> int:
        """The configured `layer` (−1, 0 or N; see SoteriaConfig)."""
        return self.config.layer

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        layer = defended_layer(client.model, self.defended())
        weight, _ = client.model.layer_param_names(layer)
        if weight not in update.gradients:
            raise ConfigError(f"{self.name}: the update holds no gradient of {weight}")
        mask = soteria_mask(client.model, client.batch.images, layer, self.config.fraction)
        grads = dict(update.gradients)
        grads[weight] = grads[weight].masked_fill(mask.unsqueeze(0), 0.0)
        return update.with_gradients(grads, self.name)

    def label(self) -> str:
        layer = self.config.layer
        where = "" if layer == LAST else " layer=first" if layer == FIRST else f" layer={layer}"
        return f"soteria p={self.config.fraction:g}{where}"

    def columns(self) -> dict[str, Any]:
        return {"soteria_fraction": float(self.config.fraction), "soteria_layer": self.config.layer}


@dataclass(frozen=True)
class SoteriaFirstConfig(Ranged):
    """Soteria's pruning at the victim's first linear layer (leakbench's variant).

    fraction: the fraction p of the first linear layer's input features whose gradient columns are
        zeroed, in [0, 1) (the paper's rates: 1 %–80 %).
    """

    fraction: float = ranged(0.1, 0, 1, high_open=True)
    owner: ClassVar[str] = "soteria-first"


@register_transform
class SoteriaFirst(Soteria):
    """Soteria's pruning at the victim's first linear layer (leakbench's variant, not the paper's placement).

    On an FC victim the first layer's representation is the normalised image: its columns are pixels,
    on the layer SPEAR and CPA invert. Before issue 43 this was `soteria`'s default."""

    name = "soteria-first"
    Config = SoteriaFirstConfig  # type: ignore[assignment]
    config: SoteriaFirstConfig  # type: ignore[assignment]

    def defended(self) -> int:
        return FIRST

    def label(self) -> str:
        return f"soteria-first p={self.config.fraction:g}"

    def columns(self) -> dict[str, Any]:
        return {"soteria_first_fraction": float(self.config.fraction)}
