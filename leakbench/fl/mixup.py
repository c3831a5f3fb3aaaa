"""MixUp as a client-side defence: the client computes its FedSGD update on mixed images.

MixUp (Zhang, Cisse, Dauphin, Lopez-Paz, "mixup: Beyond Empirical Risk Minimization", ICLR 2018)
trains on convex combinations of pairs of samples. As a privacy defence the client shares the
gradient of the mixed loss instead of the plain one, so no shared gradient row belongs to one image;
Huang, Gupta, Song, Li and Arora ("Evaluating Gradient Inversion Attacks and Defenses in Federated
Learning", NeurIPS 2021) evaluate MixUp-style defences (MixUp and InstaHide) against gradient
inversion this way.

Here, for a batch of b images x_i with labels y_i, from the cell's seed: a permutation π of the
batch and λ_i ~ Beta(α, α) per sample; the client's update is the gradient of

    (1/b) Σ_i [ λ_i CE(f(x̃_i), y_i) + (1 − λ_i) CE(f(x̃_i), y_π(i)) ],  x̃_i = λ_i x_i + (1 − λ_i) x_π(i).

One λ per sample (the formula above) rather than Zhang et al.'s one λ per mini-batch: per-sample
mixing leaves no sample unmixed however λ falls. π may map a sample to itself (as Zhang et al.'s
`randperm`): that sample is shared unmixed. Zhang et al. use α = 1 on CIFAR-10 (λ uniform on [0, 1])
and α ∈ [0.1, 0.4] on ImageNet; the default here is their CIFAR-10 α = 1. The cell is scored against
the ORIGINAL images (its ground truth stays the batch): what an attack recovers of the mixtures
counts only as far as it resembles the images the client holds. The update's labels (when the threat
model grants them) are the batch's own labels y_i. Like FedSGD, the client runs in the threat
model's BatchNorm mode and adds its victim's own loss term (PRECODE's) to the mixed loss.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.ranges import MAX_WEIGHT, Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel, client_mode, shared_buffers

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim

MIXUP_STREAM = 0x313C
"""Mixed into the cell's seed so that MixUp's draws are a stream of their own."""


@dataclass(frozen=True)
class MixUpConfig(Ranged):
    """MixUp's mixing.

    alpha: α of λ ~ Beta(α, α) (Zhang et al.: 1 on CIFAR-10, 0.1–0.4 on ImageNet); larger mixes more.

    Small α keeps λ near 0 or 1 (little mixing), α = 1 is λ uniform, large α pushes λ to 1/2 (the
    strongest mixing).
    """

    alpha: float = ranged(1.0, 0, MAX_WEIGHT, low_open=True)
    owner: ClassVar[str] = "mixup"


def mixing(batch_size: int, alpha: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(λ, π) for a batch of `batch_size`: λ_i ~ Beta(α, α) and a permutation π, drawn from `seed`."""
    rng = np.random.default_rng([seed, MIXUP_STREAM])
    lam = torch.as_tensor(rng.beta(alpha, alpha, size=batch_size))
    perm = torch.as_tensor(rng.permutation(batch_size), dtype=torch.long)
    return lam, perm


def mixed_loss(model: nn.Module, batch: Batch, lam: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The mean MixUp loss of `model` on `batch` mixed with λ and π (the module docstring's formula)."""
    dtype = next(model.parameters()).dtype
    images, lam = batch.images.to(dtype), lam.to(dtype)
    shape = (-1,) + (1,) * (images.dim() - 1)
    mixed = lam.reshape(shape) * images + (1 - lam.reshape(shape)) * images[perm]
    logits = model(mixed)
    own = nn.functional.cross_entropy(logits, batch.labels, reduction="none")
    other = nn.functional.cross_entropy(logits, batch.labels[perm], reduction="none")
    return (lam * own + (1 - lam) * other).mean()


def mixup_update(model: ImageVictim, batch: Batch, config: MixUpConfig, *, seed: int,
                 threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """The MixUp client update of `model` on `batch` (the model is copied, not modified); same seed, same update."""
    from leakbench.models.base import ImageVictim

    work = client_mode(copy.deepcopy(model), threat)  # BatchNorm in the client's mode, as FedSGD
    work.zero_grad(set_to_none=True)
    lam, perm = mixing(batch.size, config.alpha, seed)
    params = dict(work.named_parameters())
    loss = mixed_loss(work, batch, lam, perm)
    penalty = work.penalty() if isinstance(work, ImageVictim) else None  # PRECODE's KL term, as `training_loss`
    grads = torch.autograd.grad(loss if penalty is None else loss + penalty, list(params.values()))
    return ClientUpdate(
        model=copy.deepcopy(model).requires_grad_(False).eval(),
        gradients={name: g.detach().clone() for name, g in zip(params, grads, strict=True)},
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        kind="mixup",
        buffers=shared_buffers(work, threat),
    )


@register_transform
class MixUp(UpdateTransform):
    """MixUp: the FedSGD gradient of the mixed loss on mixed images (Zhang et al., ICLR 2018)."""

    paper = Citation("Zhang et al., ICLR 2018", "https://arxiv.org/abs/1710.09412")
    name = "mixup"
    Config = MixUpConfig
    config: MixUpConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return mixup_update(client.model, client.batch, self.config, seed=client.seed, threat=client.threat)

    def label(self) -> str:
        return f"mixup α={self.config.alpha:g}"
