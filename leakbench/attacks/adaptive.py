"""Attacks that adapt to the defence: leakbench's adaptive forms of the baselines (not published attacks).

Three families, each its plain attack when the threat model withholds the defence (`defence_known`
False, or the defence not listed in `ClientUpdate.defences`): the masked variants (zeroing defences,
below), the PRECODE-aware variants (`ig-precode`, `dlg-precode`: PRECODE section) and SPEAR followed by
un-mixing for the in-batch MixUp (`spear-unmix`: MixUp section). The dequantising variants (`ig-dequant`,
`dlg-dequant`: matched to the intervals a known quantiser's levels allow) live in `attacks/dequant.py`.

A zeroing defence — gradient pruning (`leakbench.fl.prune`), Soteria (`leakbench.fl.soteria`) —
replaces shared entries by exact zeros. Plain gradient matching then asks the dummy batch to produce
zero gradient there too, which a real batch does not: the zeros pull the reconstruction off. The
masked variants compare only the entries the defence left non-zero (the attacker sees which entries
are exactly 0).

What counts as zeroed depends on the threat model (`ThreatModel.defence_known`):

- defence known (`ClientUpdate.defences` lists the defences applied): the exact zeros of the tensors
  a listed zeroing defence acts on — every tensor for `prune`, the defended layer's weight for
  `soteria` and `soteria-first`; with no zeroing defence listed, nothing is masked (the variant is its plain form);
- defence unknown: nothing is masked (the variant is its plain form). Masking every exact zero was
  tried and measured (embedded, FC-6 w200 at init, b = 1): the zeros of an undefended update are
  information (inputs of ReLUs that are off), and dropping them took DLG from 48.8 to 3.4 dB.

So the variants are the adaptive attack of the threat model `threat = [{ defence = "known" }]`, and
their plain forms otherwise. Their Config is the plain attack's.

SPEAR's adaptive forms live beside SPEAR (`attacks/spear/adaptive.py`): `spear-approx` answers its best
unverified batch under noise, DP and quantisation, `spear-masked` completes the entries a zeroing defence
set to 0 (docs/reference/spear.md). What plain SPEAR does under quantisation and `soteria-first`, measured
before they existed (σ₁₇/σ₁ of layer 1's gradient, the failed checks): docs/notebook/defences.md.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from leakbench.attacks.base import Attack, Reconstruction
from leakbench.attacks.gradient_matching import DeepLeakageAttack, InvertingGradientsAttack
from leakbench.attacks.registry import register_attack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig
from leakbench.fl.update import ClientUpdate
from leakbench.models.precode import PrecodeVictim

ZEROING = ("prune", "soteria", "soteria-first")
"""The shipped defences that replace shared entries by exact zeros."""


def zeroed_tensors(update: ClientUpdate) -> set[str]:
    """Names of the shared tensors whose exact zeros a defence may have made (see the module's doc)."""
    if update.defences is None:
        return set()
    names: set[str] = set()
    for defence in update.defences:
        if defence["name"] == "prune":
            names |= set(update.gradients)
        elif defence["name"] in ("soteria", "soteria-first"):
            names.add(_soteria_weight(update, defence))
    return names


def _soteria_weight(update: ClientUpdate, defence: dict[str, Any]) -> str:
    from leakbench.fl.soteria import defended_layer, described_layer

    weight, _ = update.model.layer_param_names(defended_layer(update.model, described_layer(defence)))
    return weight


def nonzero_masks(update: ClientUpdate) -> dict[str, torch.Tensor]:
    """For each tensor a defence may have zeroed: True where its shared entry is not exactly 0."""
    return {name: update.gradients[name] != 0 for name in sorted(zeroed_tensors(update)) if name in update.gradients}


@register_attack
class MaskedInvertingGradients(InvertingGradientsAttack):
    """Inverting Gradients matching only the entries a zeroing defence left non-zero (leakbench's adaptive
    form, not published): cosine distance restricted to those entries, everything else as `ig`."""

    name = "ig-masked"
    adapts_to = frozenset(ZEROING)
    description = ("Inverting Gradients restricted to the entries a pruning defence left non-zero "
                   "(leakbench's adaptive form, not published)")

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        return nonzero_masks(update)


@register_attack
class MaskedDeepLeakage(DeepLeakageAttack):
    """Deep Leakage from Gradients matching only the entries a zeroing defence left non-zero (leakbench's
    adaptive form, not published): L2 distance restricted to those entries, everything else as `dlg`."""

    name = "dlg-masked"
    adapts_to = frozenset(ZEROING)
    description = ("Deep Leakage from Gradients restricted to the entries a pruning defence left non-zero "
                   "(leakbench's adaptive form, not published)")

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        return nonzero_masks(update)


# --------------------------------------------------------------------------- PRECODE


def bottleneck_tensors(update: ClientUpdate) -> set[str]:
    """Names of the shared tensors of PRECODE's bottleneck (encoder, decoder) and of the layers after it
    (the classifier), when the threat model lists `precode` among the update's defences; else none.

    Their gradients follow the client's sampling noise ε, which the attacker's copy of the model does not
    replay (`leakbench.fl.precode`), so matching them pulls the dummy batch towards the wrong ε. The
    layers before the bottleneck see ε only through the backward pass of its small σ."""
    if update.defences is None or not any(d["name"] == "precode" for d in update.defences):
        return set()
    model = update.model
    if not isinstance(model, PrecodeVictim):
        return set()
    prefix = f"base.{model.out_path}."  # the head that holds the bottleneck and the classifier
    return {name for name in update.gradients if name.startswith(prefix)}


def dropped_masks(update: ClientUpdate) -> dict[str, torch.Tensor]:
    """Masks that drop every entry of the bottleneck's and later layers' tensors (`bottleneck_tensors`)."""
    return {name: torch.zeros_like(update.gradients[name], dtype=torch.bool)
            for name in sorted(bottleneck_tensors(update))}


@register_attack
class PrecodeInvertingGradients(InvertingGradientsAttack):
    """Inverting Gradients matching only the layers before PRECODE's bottleneck (leakbench's adaptive form,
    not published; the idea — leave out the bottleneck's and later layers' gradients — is Scheliga et al.'s
    follow-up analysis of PRECODE): everything else as `ig`, labels still read from the classifier."""

    name = "ig-precode"
    adapts_to = frozenset({"precode"})
    description = ("Inverting Gradients on the gradients of the layers before PRECODE's bottleneck only, as "
                   "Scheliga et al. drop the rest (leakbench's adaptive form, not published)")

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        return dropped_masks(update)


@register_attack
class PrecodeDeepLeakage(DeepLeakageAttack):
    """Deep Leakage from Gradients matching only the layers before PRECODE's bottleneck (leakbench's adaptive
    form, not published): everything else as `dlg`, except the labels. With the classifier's gradient out of
    the matching, DLG's soft labels lose their strongest signal (measured, CIFAR-10 FC-6 w200 b = 1, K = 256,
    seed 0: 6.5 dB with optimised soft labels, 69.5 dB with recovered ones), so where the bottleneck is
    dropped the labels are the given ones or recovered from the classifier's gradient (`label_strategy`),
    whatever `optimize_labels` says; the stats' `label_strategy` records it."""

    name = "dlg-precode"
    adapts_to = frozenset({"precode"})
    description = ("Deep Leakage from Gradients on the gradients of the layers before PRECODE's bottleneck "
                   "only, as Scheliga et al. drop the rest, labels from the classifier's gradient "
                   "(leakbench's adaptive form, not published)")

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        return dropped_masks(update)

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        if self.config.optimize_labels and bottleneck_tensors(update):
            return type(self)(dataclasses.replace(self.config, optimize_labels=False)).reconstruct(update, seed=seed)
        return super().reconstruct(update, seed=seed)


# --------------------------------------------------------------------------- in-batch MixUp


IN_BATCH_MIXUP = ("mixup-batch", "mixup")
"""The names the in-batch MixUp (`leakbench.fl.mixup`: two images of the batch per mixture) goes by; a
`mixup` entry counts only with the in-batch form's settings (α alone), not the k-image form's."""


def in_batch_mixup(update: ClientUpdate) -> bool:
    """Whether the update lists the in-batch MixUp among its transforms (defence known)."""
    return update.defences is not None and any(
        d["name"] in IN_BATCH_MIXUP and set(d) == {"name", "alpha"} for d in update.defences)


def _differences(images: torch.Tensor) -> torch.Tensor:
    """(b, C, H, W) → (b, m): every image's horizontal and vertical neighbour differences, flattened (a
    linear map, so the mixtures' differences are the same mixture of the images' differences)."""
    dx = images[..., :, 1:] - images[..., :, :-1]
    dy = images[..., 1:, :] - images[..., :-1, :]
    return torch.cat([dx.flatten(1), dy.flatten(1)], dim=1)


def fast_ica(signals: torch.Tensor, *, iterations: int = 400, tol: float = 1e-9) -> torch.Tensor:
    """The (k, k) unmixing matrix W of symmetric FastICA with the log-cosh contrast (Hyvärinen, 1999) for
    `signals` (k, m), k mixtures of m samples: W·signals has rows as independent (non-Gaussian) as it can.
    Deterministic: starts at the whitening itself (identity rotation)."""
    x = signals.to(torch.float64)
    x = x - x.mean(dim=1, keepdim=True)
    cov = x @ x.T / x.shape[1]
    evals, evecs = torch.linalg.eigh(cov)
    whiten = evecs @ torch.diag(evals.clamp_min(evals.max() * 1e-12).rsqrt()) @ evecs.T
    z = whiten @ x
    rot = torch.eye(x.shape[0], dtype=x.dtype)
    for _ in range(iterations):
        g = torch.tanh(rot @ z)
        new = g @ z.T / z.shape[1] - torch.diag((1 - g.pow(2)).mean(dim=1)) @ rot
        u, _, vh = torch.linalg.svd(new)  # symmetric decorrelation: (new newᵀ)^(-1/2) new
        new = u @ vh
        change = float((torch.diag(new @ rot.T).abs() - 1).abs().max())
        rot = new
        if change < tol:
            break
    unmixing: torch.Tensor = rot @ whiten
    return unmixing


def unmix(mixtures: torch.Tensor) -> torch.Tensor:
    """The images behind `mixtures` (b, C, H, W), each a convex combination of the images (rows of the
    mixing matrix A sum to 1; in-batch MixUp: 2 non-zeros per row), in some order.

    ICA (`fast_ica`) on the mixtures' neighbour differences (sparse, far from Gaussian, and nearly
    independent between different images) gives W with W·A = D·P (D diagonal, P a permutation); A·1 = 1
    makes D's diagonal W·1, so the images are D⁻¹·W·mixtures, scale and sign included. Then `keep_pure`:
    a mixture that is one image alone (π(i) = i, or λ_i ≈ 1) replaces that image's estimate. Pixel values
    are not clamped here."""
    flat = mixtures.to(torch.float64).flatten(1)
    w = fast_ica(_differences(mixtures.to(torch.float64)))
    scale = w.sum(dim=1, keepdim=True)
    tiny = scale.abs() < 1e-12
    scale = torch.where(tiny, torch.ones_like(scale), scale)
    return keep_pure(flat, (w @ flat) / scale).reshape(mixtures.shape).to(mixtures.dtype)


PURE_TOL = 0.02
"""A mixture whose fitted weight on one image is within this of 1 is taken as that image alone (`keep_pure`).
Measured on CIFAR-10 batches (b = 8, α = 1, seeds 0–9): 0.02 made 4 of 7 fixed points exact and lowered no
image's PSNR; 0.05 lowered one seed's worst image by 1.6 dB."""


def keep_pure(mixtures: torch.Tensor, images: torch.Tensor, tol: float = PURE_TOL) -> torch.Tensor:
    """`images` (b, n), estimated from `mixtures` (b, n), with every image that a mixture holds alone (its
    least-squares weight in mixtures ≈ A·images within `tol` of 1) replaced by that mixture: exact where
    the ICA estimate is only close."""
    weights = torch.linalg.lstsq(images.T, mixtures.T).solution.T  # mixtures ≈ weights · images
    out = images.clone()
    for row in range(weights.shape[0]):
        col = int(weights[row].abs().argmax())
        if abs(float(weights[row, col]) - 1.0) < tol:
            out[col] = mixtures[row]
    return out


@register_attack
class SpearUnmix(Attack[SpearConfig]):
    """SPEAR, then un-mixing of the mixtures it recovers when the update lists the in-batch MixUp
    (leakbench's adaptive form, not published). Under the in-batch MixUp the attacked layer's gradient is
    that of the b mixtures x̃_i = λ_i x_i + (1 − λ_i) x_π(i), so SPEAR's exact answer is the mixtures; λ and
    π are the client's secret, the scheme is known. `unmix` estimates the mixing. Anything else (defence
    unknown, no in-batch MixUp, a layer above 1, an incomplete or failed SPEAR): SPEAR's answer as it is.
    SPEAR runs by composition: the registered `spear` with this attack's Config."""

    name = "spear-unmix"
    adapts_to = frozenset({"mixup-batch"})  # a `mixup` cell is the k-image form: nothing to un-mix in the batch
    paper = SpearAttack.paper
    requires = SpearAttack.requires
    description = ("SPEAR, then un-mixing of the recovered MixUp mixtures by ICA on their edges "
                   "(leakbench's adaptive form, not published)")
    Config = SpearConfig

    def check_update(self, update: ClientUpdate) -> None:
        SpearAttack(self.config).check_update(update)

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        spear = SpearAttack(self.config).reconstruct(update, seed=seed)
        if not in_batch_mixup(update) or self.config.layer != 1:
            return spear
        if spear.status != "ok" or spear.images is None or spear.features is None:
            return spear  # fewer mixtures than images: the mixing is not invertible from them
        start = time.perf_counter()
        mixtures = update.model.denormalize(spear.features.to(torch.float64))
        try:
            images = unmix(mixtures).clamp(0, 1).to(torch.float32)
        except RuntimeError as exc:  # torch's LinAlgError: a decomposition that did not converge; SPEAR's answer stands
            return dataclasses.replace(spear, stats={**spear.stats, "unmixed": False, "unmix_error": str(exc)})
        stats = {**spear.stats, "unmixed": True, "unmix_seconds": time.perf_counter() - start}
        return Reconstruction(status="ok", space="image", images=images, layer=1, stats=stats)


PLAIN = {"ig-masked": "ig", "dlg-masked": "dlg", "ig-precode": "ig", "dlg-precode": "dlg", "spear-unmix": "spear",
         "ig-dequant": "ig", "dlg-dequant": "dlg"}  # the last two: `leakbench.attacks.dequant`
"""Each adaptive variant's plain form: what it is where the threat model withholds the defence."""
ADAPTIVE = tuple(PLAIN)
"""The adaptive variants' names (the default suite runs their plain forms, not them)."""

__all__ = ["ADAPTIVE", "IN_BATCH_MIXUP", "PLAIN", "ZEROING", "MaskedDeepLeakage", "MaskedInvertingGradients",
           "PrecodeDeepLeakage", "PrecodeInvertingGradients", "SpearUnmix", "bottleneck_tensors", "dropped_masks",
           "fast_ica", "in_batch_mixup", "keep_pure", "nonzero_masks", "unmix", "zeroed_tensors"]
