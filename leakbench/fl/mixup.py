"""MixUp as a client-side defence: the client computes its FedSGD update on mixed images. Two forms.

`mixup` — as published for gradient inversion by Huang, Gupta, Song, Li and Arora ("Evaluating Gradient
Inversion Attacks and Defenses in Federated Learning", NeurIPS 2021) and run by their released code
(GradAttack, `gradattack/defenses/mixup.py` and `instahide.py`, reimplemented here). Each private image
x_i of the batch is mixed with k − 1 partners drawn from the client's whole local dataset (not only the
batch), the k images of a mixture distinct:

    x̃_i = λ_i1 x_i + Σ_{j=2..k} λ_ij x_p(i,j),   λ_i ~ Dirichlet(3, 1, …, 1), resampled while max_j λ_ij > cap,

and the client's update is the gradient of the soft-label cross-entropy (1/b) Σ_i Σ_j λ_ij CE(f(x̃_i), y_ij)
(GradAttack's `cross_entropy_for_onehot` on labels mixed with the same coefficients). Huang et al. run
k = 4 and cap = 0.65 (GradAttack's `c_2`; its lower bound `c_1` is 0 in every released script, so no
lower bound here), k = 6 combined with gradient pruning. The private image has the Dirichlet's weight 3,
so its coefficient is the largest on average (E λ_i1 = 3/(k + 2): 1/2 at k = 4), not always: GradAttack
enforces no order, only the cap. `sign_flip` adds InstaHide's (Huang, Song, Li, Arora, ICML 2020) random
sign pattern: each entry of the mixed image, as the model normalises it, multiplied by an independent
±1 (x̃ ↦ m + σ ⊙ (x̃ − m) in pixel space, m the victim's normalisation mean).

GradAttack draws each slot from a fresh permutation of the training set every epoch (each image is
used once per slot per epoch); a cell is one round, so here each mixture's k − 1 partners are drawn
uniformly without replacement from the client's local images other than x_i (`Batch.local`: the whole
dataset at init, the attack part for a trained victim; the victim's training steps draw them from its
train part). A partner may be another image of the batch, as in GradAttack. A batch without local data
(one built by hand) mixes within itself.

Threat model: the attacker knows the scheme and k (and cap, sign_flip: the update lists them when the
defence is known), not the coefficients, the partners or the sign pattern, which are the client's
secret randomness (drawn from the cell's seed: same seed, same update). The update's labels, when the
threat model grants them, are the batch's own labels y_i1. The cell is scored against the batch's
ORIGINAL images: what an attack recovers of the mixtures counts only as far as it resembles them.

`mixup-batch` — leakbench's earlier in-batch form (not Huang et al.'s): MixUp (Zhang, Cisse, Dauphin,
Lopez-Paz, "mixup: Beyond Empirical Risk Minimization", ICLR 2018) as a defence, pairs from the batch.
For a batch of b images, from the cell's seed: a permutation π of the batch and λ_i ~ Beta(α, α) per
sample; the update is the gradient of

    (1/b) Σ_i [ λ_i CE(f(x̃_i), y_i) + (1 − λ_i) CE(f(x̃_i), y_π(i)) ],  x̃_i = λ_i x_i + (1 − λ_i) x_π(i).

One λ per sample rather than Zhang et al.'s one per mini-batch: per-sample mixing leaves no sample
unmixed however λ falls. π may map a sample to itself (as Zhang et al.'s `randperm`): that sample is
shared unmixed. Zhang et al. use α = 1 on CIFAR-10 and α ∈ [0.1, 0.4] on ImageNet; the default is 1.
Every image of a mixture is in the batch, so the map from batch to mixtures is an invertible b × b
matrix: an attack that recovers the mixtures can un-mix them.

Both run the client in the threat model's BatchNorm mode and add the victim's own loss term (PRECODE's),
as FedSGD does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import MAX_WEIGHT, Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel, client_mode, shared_buffers

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch, LocalData
    from leakbench.models.base import ImageVictim

MIXUP_STREAM = 0x313C
"""Mixed into the cell's seed so that in-batch MixUp's draws are a stream of their own."""
MIXUP_K_STREAM = 0x4D1C
"""Mixed into the cell's seed so that MixUp's partners, coefficients and signs are a stream of their own."""
OWN_WEIGHT = 3.0
"""The Dirichlet weight of the private image's coefficient (GradAttack: α = [3, 1, …, 1])."""
MAX_K = 64
"""At most 64 images per mixture (Huang et al.: 4 and 6)."""
MAX_TRIES = 100_000
"""Coefficient draws per mixture before giving up on a cap too close to 1/k to be met."""


# --------------------------------------------------------------------------- Huang et al.'s MixUp


@dataclass(frozen=True)
class MixUpConfig(Ranged):
    """MixUp as Huang et al. (NeurIPS 2021) run it.

    k: images per mixture: the private image and k − 1 partners from the client's data (paper: 4; 6 beside pruning).
    cap: the largest coefficient of a mixture is at most cap, above 1/k (paper: 0.65, GradAttack's c_2; 1: no cap).
    sign_flip: InstaHide's random ±1 pattern on every mixed image, about the victim's normalisation mean.
    """

    k: int = ranged(4, 1, MAX_K)
    cap: float = ranged(0.65, 0, 1, low_open=True)
    sign_flip: bool = False
    owner: ClassVar[str] = "mixup"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k > 1 and self.cap <= 1 / self.k:
            raise ConfigError(f"mixup: cap={self.cap:g} must be above 1/k = {1 / self.k:.4g} (k={self.k} "
                              "coefficients that sum to 1 cannot all be at most cap)")


@dataclass(frozen=True)
class Mixing:
    """One round's mixtures: `coefficients` (b, k), row i the weights of mixture i (sum 1, the private
    image's first); `partners` (b, k − 1) positions in the client's local data; `signs` (the mixed images'
    shape, ±1) or None without sign flips."""

    coefficients: torch.Tensor
    partners: torch.Tensor
    signs: torch.Tensor | None


def draw_coefficients(rng: np.random.Generator, k: int, cap: float) -> np.ndarray:
    """One mixture's k coefficients: Dirichlet(3, 1, …, 1), drawn again while the largest exceeds `cap`
    (GradAttack's rule). A ValueError when MAX_TRIES draws all exceed it."""
    weights = [OWN_WEIGHT] + [1.0] * (k - 1)
    for _ in range(MAX_TRIES):
        lam = rng.dirichlet(weights) if k > 1 else np.ones(1)
        if k == 1 or lam.max() <= cap:
            return np.asarray(lam)
    raise ValueError(f"no Dirichlet draw of {k} coefficients met cap={cap:g} in {MAX_TRIES} tries: raise cap")


def draw_partners(rng: np.random.Generator, own: int, size: int, count: int) -> np.ndarray:
    """`count` distinct positions among `size`, none of them `own`, drawn uniformly."""
    picked = rng.choice(size - 1, size=count, replace=False)
    return np.asarray(picked + (picked >= own))


def draw_mixing(own: np.ndarray, pool_size: int, config: MixUpConfig, seed: int,
                image_shape: tuple[int, ...]) -> Mixing:
    """The mixtures of a batch whose images sit at positions `own` of a local pool of `pool_size` images,
    drawn from `seed`: per mixture its partners, then its coefficients; then the signs (when flipped)."""
    if pool_size < config.k:
        raise ValueError(f"mixup k={config.k} mixes {config.k} distinct images; the client holds {pool_size}")
    rng = np.random.default_rng([seed, MIXUP_K_STREAM])
    partners = np.stack([draw_partners(rng, int(i), pool_size, config.k - 1) for i in own])
    coefficients = np.stack([draw_coefficients(rng, config.k, config.cap) for _ in own])
    signs = None
    if config.sign_flip:
        signs = torch.as_tensor(rng.integers(0, 2, size=(len(own), *image_shape)) * 2 - 1)
    return Mixing(torch.as_tensor(coefficients), torch.as_tensor(partners, dtype=torch.long).reshape(len(own), -1),
                  signs)


def local_pool(batch: Batch) -> tuple[LocalData, np.ndarray]:
    """The client's local data (every image it holds) and the positions of the batch's images in it:
    `batch.local` when the batch carries it, else the batch itself."""
    from leakbench.datasets.base import LocalData

    if batch.local is None:
        return LocalData(batch.images, batch.labels, np.arange(batch.size)), np.arange(batch.size)
    local, indices = batch.local, np.asarray(batch.indices, dtype=np.int64)
    own = np.minimum(np.searchsorted(local.indices, indices), len(local) - 1)
    if not np.array_equal(local.indices[own], indices):
        raise ValueError("the batch's images are not among its local data")
    return local, own


def mixtures(batch: Batch, mixing: Mixing, local: LocalData, mean: float,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The mixed images (sign-flipped about `mean` when `mixing.signs`) and their soft labels (b, classes):
    the batch's own images with the first coefficients, the partners (positions in `local`) with the others."""
    lam = mixing.coefficients.to(dtype)
    shape = (-1,) + (1,) * (batch.images.dim() - 1)
    images = lam[:, 0].reshape(shape) * batch.images.to(dtype)
    targets = lam[:, :1] * nn.functional.one_hot(batch.labels, batch.num_classes).to(dtype)
    for j in range(mixing.partners.shape[1]):
        rows = torch.as_tensor(local.indices[mixing.partners[:, j].numpy()], dtype=torch.long)
        images = images + lam[:, j + 1].reshape(shape) * local.images[rows].to(dtype)
        targets = targets + lam[:, j + 1:j + 2] * nn.functional.one_hot(local.labels[rows], batch.num_classes).to(dtype)
    if mixing.signs is not None:
        images = mean + mixing.signs.to(dtype) * (images - mean)
    return images, targets


def mixup_update(model: ImageVictim, batch: Batch, config: MixUpConfig, *, seed: int,
                 threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """Huang et al.'s MixUp client update of `model` on `batch`, its partners from the batch's local data (the
    model is copied, not modified); same seed, same update."""
    local, own = local_pool(batch)
    mixing = draw_mixing(own, len(local), config, seed, tuple(batch.images.shape[1:]))

    def loss(work: nn.Module) -> torch.Tensor:
        dtype = next(work.parameters()).dtype
        images, targets = mixtures(batch, mixing, local, float(getattr(work, "mean", 0.0)), dtype)
        return nn.functional.cross_entropy(work(images), targets)  # soft labels: Σ_j λ_ij CE(·, y_ij), mean over i

    return client_gradient(model, batch, threat, loss, "mixup")


# --------------------------------------------------------------------------- in-batch MixUp (leakbench's)


@dataclass(frozen=True)
class MixUpBatchConfig(Ranged):
    """In-batch MixUp's mixing.

    alpha: α of λ ~ Beta(α, α) (Zhang et al.: 1 on CIFAR-10, 0.1–0.4 on ImageNet); larger mixes more.

    Small α keeps λ near 0 or 1 (little mixing), α = 1 is λ uniform, large α pushes λ to 1/2 (the
    strongest mixing).
    """

    alpha: float = ranged(1.0, 0, MAX_WEIGHT, low_open=True)
    owner: ClassVar[str] = "mixup-batch"


def mixing(batch_size: int, alpha: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(λ, π) for a batch of `batch_size`: λ_i ~ Beta(α, α) and a permutation π, drawn from `seed`."""
    rng = np.random.default_rng([seed, MIXUP_STREAM])
    lam = torch.as_tensor(rng.beta(alpha, alpha, size=batch_size))
    perm = torch.as_tensor(rng.permutation(batch_size), dtype=torch.long)
    return lam, perm


def mixed_loss(model: nn.Module, batch: Batch, lam: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The mean in-batch MixUp loss of `model` on `batch` mixed with λ and π (the module docstring's formula)."""
    dtype = next(model.parameters()).dtype
    images, lam = batch.images.to(dtype), lam.to(dtype)
    shape = (-1,) + (1,) * (images.dim() - 1)
    mixed = lam.reshape(shape) * images + (1 - lam.reshape(shape)) * images[perm]
    logits = model(mixed)
    own = nn.functional.cross_entropy(logits, batch.labels, reduction="none")
    other = nn.functional.cross_entropy(logits, batch.labels[perm], reduction="none")
    return (lam * own + (1 - lam) * other).mean()


def mixup_batch_update(model: ImageVictim, batch: Batch, config: MixUpBatchConfig, *, seed: int,
                       threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """The in-batch MixUp client update of `model` on `batch` (the model is copied, not modified); same seed,
    same update."""
    lam, perm = mixing(batch.size, config.alpha, seed)
    return client_gradient(model, batch, threat, lambda work: mixed_loss(work, batch, lam, perm), "mixup-batch")


# --------------------------------------------------------------------------- shared


def client_gradient(model: ImageVictim, batch: Batch, threat: ThreatModel,
                    loss: Callable[[nn.Module], torch.Tensor], kind: str) -> ClientUpdate:
    """The update whose gradients are those of `loss` (of the client's working copy of `model`, in the
    threat model's BatchNorm mode) plus the victim's own term (PRECODE's KL, as `training_loss`)."""
    from leakbench.models.base import ImageVictim

    work = client_mode(copy.deepcopy(model), threat)  # BatchNorm in the client's mode, as FedSGD
    work.zero_grad(set_to_none=True)
    params = dict(work.named_parameters())
    value = loss(work)
    penalty = work.penalty() if isinstance(work, ImageVictim) else None
    grads = torch.autograd.grad(value if penalty is None else value + penalty, list(params.values()))
    return ClientUpdate(
        model=copy.deepcopy(model).requires_grad_(False).eval(),
        gradients={name: g.detach().clone() for name, g in zip(params, grads, strict=True)},
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        kind=kind,
        buffers=shared_buffers(work, threat),
    )


@register_transform
class MixUp(UpdateTransform):
    """MixUp as Huang et al. (NeurIPS 2021, GradAttack): k images from the client's data, Dirichlet(3,1,…), capped."""

    paper = Citation("Huang et al., NeurIPS 2021", "https://arxiv.org/abs/2112.00059")
    name = "mixup"
    Config = MixUpConfig
    config: MixUpConfig
    makes_update = True
    retired: ClassVar[dict[str, str]] = {
        "alpha": 'in-batch MixUp (two images of the batch, λ ~ Beta(α, α)) is now named "mixup-batch": write '
                 '{ name = "mixup-batch", alpha = … }; "mixup" is Huang et al.\'s (k, cap, sign_flip)'}

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return mixup_update(client.model, client.batch, self.config, seed=client.seed, threat=client.threat)

    def label(self) -> str:
        flip = " sign-flip" if self.config.sign_flip else ""
        return f"mixup k={self.config.k} cap={self.config.cap:g}{flip}"


@register_transform
class MixUpBatch(UpdateTransform):
    """In-batch pairwise MixUp (Zhang et al. 2018 as a defence; leakbench's variant, not Huang et al.'s)."""

    paper = Citation("Zhang et al., ICLR 2018", "https://arxiv.org/abs/1710.09412")
    name = "mixup-batch"
    Config = MixUpBatchConfig
    config: MixUpBatchConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return mixup_batch_update(client.model, client.batch, self.config, seed=client.seed, threat=client.threat)

    def label(self) -> str:
        return f"mixup-batch α={self.config.alpha:g}"
