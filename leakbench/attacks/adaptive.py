"""Attacks that adapt to the defence: leakbench's adaptive forms of the baselines (not published attacks).

Three families, each its plain attack when the threat model withholds the defence (`defence_known`
False, or the defence not listed in `ClientUpdate.defences`): the masked variants (zeroing defences,
below), the PRECODE-aware variants (`ig-precode`, `dlg-precode`: PRECODE section) and SPEAR followed by
un-mixing for the in-batch MixUp (`spear-unmix`: MixUp section). A fourth, SPEAR followed by a per-image
estimate for Huang et al.'s MixUp (`spear-demix`: last section), has no plain form: where the defence is not
known to be that MixUp it answers "not applicable". The dequantising variants (`ig-dequant`, `dlg-dequant`:
matched to the intervals a known quantiser's levels allow) live in `attacks/dequant.py`.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from leakbench.attacks.base import Attack, Reconstruction
from leakbench.attacks.gradient_matching import DeepLeakageAttack, InvertingGradientsAttack
from leakbench.attacks.registry import register_attack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig
from leakbench.core.ranges import chosen
from leakbench.fl.mixup import MIXUP_K_STREAM, OWN_WEIGHT
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


# --------------------------------------------------------------------------- Huang et al.'s MixUp


@dataclass(frozen=True)
class SpearDemixConfig(SpearConfig):
    """SPEAR's settings, and how `spear-demix` estimates each private image from its mixture (ablations).

    own_weight: "soft-label" (each mixture's class weights, read from the classifier's gradient, condition
        the estimate) or "prior" (the mixing law's mean for every mixture).
    estimate: "lmmse" (the linear least-squares estimate of the private image: gain λ₁ / Σ_j λ_j² about
        the mean) or "debias" (the expected partner contribution removed, then divided by λ₁: gain 1/λ₁).
    """

    own_weight: str = chosen("soft-label", "soft-label", "prior")
    estimate: str = chosen("lmmse", "lmmse", "debias")


LAW_DRAWS = 20_000
"""Mixtures drawn from the public mixing law to condition the estimate on (`simulate_law`)."""
NEIGHBOURS = 200
"""Simulated mixtures whose soft labels are nearest a recovered mixture's: their mean gain is its gain."""


def huang_mixup(update: ClientUpdate) -> dict[str, Any] | None:
    """The settings (k, cap, sign_flip) of Huang et al.'s MixUp when the update lists it (defence known), else None."""
    if update.defences is None:
        return None
    return next((d for d in update.defences if d["name"] == "mixup" and "k" in d), None)


def simulate_law(k: int, cap: float, classes: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`draws` mixtures of the public law (`fl.mixup`: Dirichlet(3, 1, …, 1) redrawn while its largest entry
    exceeds `cap`; each image's class uniform among `classes`, as in a balanced pool): their coefficients
    (draws, k), the private image's first, and their soft labels (draws, classes)."""
    rng = np.random.default_rng([seed, MIXUP_K_STREAM])
    weights = [OWN_WEIGHT] + [1.0] * (k - 1)
    kept: list[np.ndarray] = []
    total, tries = 0, 0
    while total < draws:
        tries += 1
        if tries > 1000:
            raise ValueError(f"mixup k={k} cap={cap:g}: the law's draws almost never meet the cap")
        lam = rng.dirichlet(weights, size=4 * draws)
        lam = lam[lam.max(axis=1) <= cap]
        kept.append(lam)
        total += len(lam)
    coefficients = np.concatenate(kept)[:draws]
    labels = rng.integers(0, classes, size=coefficients.shape)
    soft = np.zeros((draws, classes))
    np.add.at(soft, (np.repeat(np.arange(draws), k), labels.reshape(-1)), coefficients.reshape(-1))
    return coefficients, soft


def gain(coefficients: np.ndarray, estimate: str) -> np.ndarray:
    """Per mixture, the factor its deviation from the mean is scaled by: 1/λ₁ ("debias"), or λ₁ / Σ_j λ_j²
    ("lmmse": the least-squares estimate of x₁ from λ₁x₁ + Σ_{j≥2} λ_j x_j when the k images are independent
    with one covariance, whatever it is)."""
    own = coefficients[:, 0]
    return np.asarray(1.0 / own if estimate == "debias" else own / (coefficients**2).sum(axis=1))


def soft_labels(update: ClientUpdate, images: torch.Tensor) -> torch.Tensor:
    """The soft labels (b, classes) the client's update was computed with, for its mixtures `images` (b, C, H,
    W): the classifier's gradients are (1/b) (P − Ỹ)ᵀ [H 1] (P the softmax, H its inputs, both known from the
    model and the mixtures), linear in Ỹ; least squares over the weight and the bias."""
    model = update.model
    weight, bias = model.layer_param_names(model.depth)
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        x = images.to(dtype)
        probs = torch.softmax(model(x), dim=1).to(torch.float64)
        inputs = model.layer_inputs(x, model.depth).flatten(1).to(torch.float64)
    design = torch.cat([inputs, torch.ones(len(inputs), 1, dtype=torch.float64)], dim=1)  # (b, d + 1)
    grads = torch.cat([update.gradients[weight].to(torch.float64),
                       update.gradients[bias].to(torch.float64)[:, None]], dim=1)  # (classes, d + 1)
    residual = torch.linalg.lstsq(design.T, len(images) * grads.T).solution  # (b, classes) = P − Ỹ
    labels: torch.Tensor = probs - residual
    return labels


def mixture_gains(soft: torch.Tensor | None, k: int, cap: float, classes: int, estimate: str,
                  seed: int) -> torch.Tensor:
    """Each mixture's gain (`gain`) as the mean over the law's simulated mixtures whose sorted soft labels are
    nearest its own (`NEIGHBOURS` of `LAW_DRAWS`); `soft` None: the law's mean gain for every mixture."""
    coefficients, law_soft = simulate_law(k, cap, classes, LAW_DRAWS, seed)
    gains = gain(coefficients, estimate)
    if soft is None:
        return torch.tensor([float(gains.mean())], dtype=torch.float64)
    law = torch.as_tensor(np.sort(law_soft, axis=1))
    seen = soft.to(torch.float64).sort(dim=1).values
    nearest = torch.cdist(seen, law).topk(NEIGHBOURS, dim=1, largest=False).indices
    return torch.as_tensor(gains)[nearest].mean(dim=1)


def demix(mixtures: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """Private images estimated from their `mixtures` (b, C, H, W) in pixel space: mean + gain × (mixture − mean),
    the mean per channel over every mixture (an estimate of the data's mean, as the partners are drawn from the
    client's data: x̃ − (1 − λ₁)·mean ≈ λ₁ x), then clamped to [0, 1]."""
    mean = mixtures.mean(dim=(0, 2, 3), keepdim=True)
    shape = (-1,) + (1,) * (mixtures.dim() - 1)
    return (mean + gains.reshape(shape).to(mixtures.dtype) * (mixtures - mean)).clamp(0, 1)


@register_attack
class SpearDemix(Attack[SpearDemixConfig]):
    """SPEAR, then a per-image estimate of each private image from its recovered mixture under Huang et al.'s
    MixUp (leakbench's adaptive form, not published). The attacked layer's gradient is that of the b mixtures
    x̃_i = λ_i1 x_i + Σ_j λ_ij x_p(i,j), so SPEAR recovers the mixtures exactly; the partners come from the
    client's whole local data (not the batch) and are its secret with λ. What the threat model makes public:
    the mixing law (k, Dirichlet(3, 1, …), cap) and the model. The attack reads each mixture's soft label
    from the classifier's gradient (`soft_labels`), takes the law's expected gain given it (`mixture_gains`)
    and scales each mixture's deviation from the data mean by it (`demix`). Not applicable (failed,
    "not-applicable") where its assumptions fail: defence unknown, no k-image `mixup` listed, InstaHide sign
    flips, a layer above 1. SPEAR runs by composition: the registered `spear` with this Config's SPEAR part."""

    name = "spear-demix"
    adapts_to = frozenset({"mixup"})
    paper = SpearAttack.paper
    requires = SpearAttack.requires
    description = ("SPEAR, then each private image estimated from its recovered MixUp (Huang et al.) mixture, "
                   "weighted by the soft label read from the classifier's gradient (leakbench's adaptive form, "
                   "not published)")
    Config = SpearDemixConfig

    def _spear(self) -> SpearAttack:
        spear_fields = {f.name for f in dataclasses.fields(SpearConfig)}
        return SpearAttack(SpearConfig(**{n: getattr(self.config, n) for n in spear_fields}))

    def check_update(self, update: ClientUpdate) -> None:
        self._spear().check_update(update)

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        law = huang_mixup(update)
        why = ("the defence is unknown" if update.defences is None else
               "the update lists no k-image mixup" if law is None else
               "InstaHide sign flips hide each mixture's sign" if law.get("sign_flip") else
               "the mixtures are layer 1's inputs only" if self.config.layer != 1 else "")
        if why:
            return Reconstruction.failed(f"spear-demix does not apply: {why}", failure="not-applicable")
        assert law is not None
        spear = self._spear().reconstruct(update, seed=seed)
        if spear.status != "ok" or spear.features is None:
            return spear  # the mixtures are not all known: SPEAR's answer (partial or failed) stands
        start = time.perf_counter()
        mixtures = update.model.denormalize(spear.features.to(torch.float64))
        classes = int(update.gradients[update.model.layer_param_names(update.model.depth)[1]].shape[0])
        soft = soft_labels(update, mixtures) if self.config.own_weight == "soft-label" else None
        gains = mixture_gains(soft, int(law["k"]), float(law["cap"]), classes, self.config.estimate, seed)
        images = demix(mixtures, gains.expand(len(mixtures)))
        stats = {**spear.stats, "demixed": True, "demix_seconds": time.perf_counter() - start,
                 "gain_mean": float(gains.mean())}
        return Reconstruction(status="ok", space="image", images=images.to(torch.float32), layer=1, stats=stats)


PLAIN = {"ig-masked": "ig", "dlg-masked": "dlg", "ig-precode": "ig", "dlg-precode": "dlg", "spear-unmix": "spear",
         "ig-dequant": "ig", "dlg-dequant": "dlg"}  # the last two: `leakbench.attacks.dequant`
"""Each adaptive variant's plain form: what it is where the threat model withholds the defence."""
ADAPTIVE = tuple(PLAIN)
"""The adaptive variants' names (the default suite runs their plain forms, not them)."""

__all__ = ["ADAPTIVE", "IN_BATCH_MIXUP", "PLAIN", "ZEROING", "MaskedDeepLeakage", "MaskedInvertingGradients",
           "PrecodeDeepLeakage", "PrecodeInvertingGradients", "SpearDemix", "SpearDemixConfig", "SpearUnmix",
           "bottleneck_tensors", "demix", "dropped_masks", "fast_ica", "huang_mixup", "in_batch_mixup", "keep_pure",
           "mixture_gains", "nonzero_masks", "simulate_law", "soft_labels", "unmix", "zeroed_tensors"]
