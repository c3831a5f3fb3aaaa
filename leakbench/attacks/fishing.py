"""Fishing for User Data, class fishing (Wen, Geiping, Fowl, Goldblum, Goldstein, "Fishing for User Data in
Large-Batch Federated Learning via Gradient Magnification", ICML 2022), a malicious server's.

The server keeps the victim's architecture (`ServerModel(block=0)`) and sends new values for its last linear layer
(logits z = W h + b on the last hidden features h) so that the gradient of the batch's mean loss comes from the
images of one target class t alone. Every non-target row of W is 0 and its bias large (B), the target row is a
constant (a) and keeps its bias: z_c = B for c ≠ t, z_t = a Σ_j h_j + b_t ≪ B. The softmax puts p_t ≈ e^(z_t − B)/(C−1)
on the target class — 0 in floating point for any z_t well below B — and 1/(C−1) on the others. The loss's
derivative in h is Wᵀ(p − onehot(y)) = a (p_t − [y = t]) 1: exactly 0 for an image of another class (its non-target
rows are 0, its p_t underflows), −a for one of class t. So every gradient below the last layer is the gradient of the
target-class images alone (their loss scaled by their share of the batch), and the last layer's bias gradient of
class t is (Σ_n p_t(x_n) − n_t)/b = −n_t/b: the server reads how many images of class t the batch held.

Modification, as breaching (JonasGeiping/breaching, commit 8bd99d52, 2024-04-17) builds it in
`breaching/cases/servers.py`, `MaliciousClassParameterServer.reconfigure_for_class_attack` (the last two parameters
of the model: the weight masked to 0 but the target classes' rows set to `class_multiplier`, the bias set to
`bias_multiplier` but the target classes' kept), with the defaults of `config/case/server/malicious-fishing.yaml`
(`target_cls_idx: 0`, `class_multiplier: 0.5`, `bias_multiplier: 1000`). The other parameters keep the public
victim's values. Breaching's reading of the result for one image (`classattack_utils.reconstruct_feature`: the last
layer's ∇W_t / ∇b_t, the target images' mean feature) goes to an optimisation-based attack on that gradient; the
paper's next step, *feature fishing* (`reconfigure_for_feature_attack`, `feat_multiplier: 300`, a threshold on one
feature estimated from other users' updates, then a binary search over repeated queries), splits a class that
several images share: it is not implemented here (one query per cell, no other users).

Deviations:
- The target class is fixed in advance (`target_class`, a class label; breaching's default class 0 too): the server
  does not know the labels. Breaching's protocol first queries the user honestly and reads the labels from the
  update's metadata (`query_once_for_labels: true`), then fishes the `target_cls_idx`-th class present; here the
  batch may hold no image of the target class, and the attack then finds nothing (a failed answer, not applicable).
- Extraction is analytic, on leakbench's FC victims, instead of an optimisation on the fished gradient: the first
  layer is z₁ = W₁ u + b₁ on the normalised, flattened image u, so for an image n its gradient is δ_{n,i} u_n in row i
  and δ_{n,i} in bias i; with the target-class images the only source, a row i that one such image alone drives
  (∇b₁_i ≠ 0) gives it exactly: u = ∇W₁_i / ∇b₁_i (every active row the same image when the batch held one image of
  class t). Rows that several target images drive give mixtures whose coefficients vary from row to row.

Extraction (`reconstruct`), leakbench's rules:
1. reads: every row of layer 1 with ∇b₁_i ≠ 0 (*active*), u_i = ∇W₁_i / ∇b₁_i in float64, denormalised to an image
   (`update.model.denormalize`); a read with a pixel outside [−`range_margin`, 1 + `range_margin`] is dropped;
2. consensus: reads within `dedup_tol` (largest pixel difference) of one another are one candidate, its *support*
   the number of rows that gave it (`row_reads.deduplicate`, in order of increasing |∇b₁|): one image alone in the
   target class is one candidate supported by every active row; a mixture is seldom repeated by another row;
3. count: the number of target-class images, m = round(−b · ∇b_L,t) from the last layer's bias gradient (exact
   without a defence), clipped to [1, b]; the answer keeps up to m candidates of support ≥ `min_support`, largest
   support first (ties: the smaller |∇b₁|);
4. fallback (`fallback`, "median" by default): when no candidate is kept but some read is in range (every row
   driven by several images of the class: a class of many images in a large batch), the answer is one row, the
   per-pixel median of the in-range reads: a mixture of the class's images (breaching's protocol would go on to
   feature fishing there); "none": a failed answer, not applicable;
5. padding: the answer is padded to the batch size with blank rows (the mean image, 0 before denormalising) when
   `padding`, as imprint and breaching's `breach_padding`; no candidate kept: a failed answer, not applicable —
   always so when the batch held no image of the target class (no row of layer 1 is active then). Scoring pairs
   exact rows first (`metrics.matching.match_exact_first`), so a blank row never takes an exact read's image from
   it (CIFAR-10, FC-6 w200, b = 8, seed 2: the one image of class 0 read exactly, which the least-MSE matching used
   before issue 46's second session scored 0).
`stats`: target_count (m before clipping: the server's count of target-class images), active (rows with ∇b₁ ≠ 0),
in_range, distinct, kept, padded, support (each kept candidate's), spread (the largest pixel difference between an
in-range read and the per-pixel median of the in-range reads: 0 up to rounding when one image is the update's only
source), mixture (whether the reads say several target images: a count above 1 or a spread above `dedup_tol`),
median (whether the answer is step 4's median).

Several images of the target class: a row of layer 1 that one of them alone drives (its ReLU off for the others)
still gives that image exactly, and every such row gives the same: the consensus of step 2 returns each image of
the class that has at least `min_support` such rows (on FC-3 w64, 8×8 images, batches of 4–8 with 2–4 images of
the class: all of them, exact). Rows driven by several images give mixtures that no other row repeats, except
where those images' downstream ReLU patterns agree (FC-2: the fished row is constant, so every row's coefficients
are the images' activation indicators, and rows driven by the same images repeat their mixture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from leakbench.attacks.base import AGGREGATES, Reconstruction, Requirements
from leakbench.attacks.malicious import MaliciousAttack
from leakbench.attacks.registry import register_attack
from leakbench.attacks.row_reads import deduplicate, padded_answer, row_reads
from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import Ranged, chosen, ranged
from leakbench.fl.update import ClientUpdate
from leakbench.models.base import ImageVictim
from leakbench.server.model import ServerModel


@dataclass(frozen=True)
class FishingConfig(Ranged):
    """Class-fishing settings (breaching's defaults where it has them).

    target_class: the class whose images the server fishes (a label; breaching's `target_cls_idx`: 0).
    class_multiplier: the value of every weight of the target class's row of the last layer (breaching: 0.5).
    bias_multiplier: the bias of every other class, whose weights are 0 (breaching: 1000; large: their softmax
        saturates and their images' gradient vanishes).
    range_margin: a row's read with a pixel outside [−margin, 1 + margin] is dropped (a large value: no filter).
    dedup_tol: two reads whose largest pixel difference is at most this are one candidate.
    min_support: the fewest rows of layer 1 that must give a candidate for it to be kept (1: every read).
    fallback: when no candidate is kept but rows are active (median: answer the reads' per-pixel median, a mixture
        of the target class's images; none: a failed answer, not applicable).
    padding: pad the answer to the batch size with blank (mean) images, as breaching does.
    """

    target_class: int = ranged(0, 0, 1 << 20)
    class_multiplier: float = ranged(0.5, -1e6, 1e6)
    bias_multiplier: float = ranged(1000.0, 0, 1e6, low_open=True)
    range_margin: float = ranged(1e-3, 0, 1e6)
    dedup_tol: float = ranged(1 / 255, 0, 1)
    min_support: int = ranged(2, 1, 1 << 20)
    fallback: str = chosen("median", "median", "none")
    padding: bool = True


@register_attack
class Fishing(MaliciousAttack[FishingConfig]):
    name = "fishing"
    description = ("Fishing for User Data (Wen et al. 2022): a malicious server's last layer silences every class "
                   "but one, whose images the first layer then gives")
    paper = Citation("Wen et al., ICML 2022", "https://arxiv.org/abs/2202.00580")
    Config = FishingConfig
    requires = Requirements(batch_size=True)
    aware_of = AGGREGATES  # the K clients' mean is one batch of K·b images: its target-class images are fished alike

    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        """Deterministic: the last layer's new values depend on the model's shapes and the Config (no randomness)."""
        cfg = self.config
        weight_name, bias_name = model.layer_param_names(model.depth)
        params = dict(model.named_parameters())
        weight, bias = params.get(weight_name), params.get(bias_name)
        if weight is None or bias is None or weight.dim() != 2 or bias.shape != weight.shape[:1]:
            raise ConfigError("class fishing needs a victim whose last layer is linear with a bias")
        classes = weight.shape[0]
        if not cfg.target_class < classes:
            raise ConfigError(f"target_class {cfg.target_class} is not a class of the victim (0 … {classes - 1})")
        new_weight = torch.zeros(weight.shape, dtype=torch.float32)
        new_weight[cfg.target_class] = cfg.class_multiplier
        new_bias = torch.full((classes,), cfg.bias_multiplier, dtype=torch.float32)
        new_bias[cfg.target_class] = bias.detach()[cfg.target_class].float()
        return ServerModel(0, {f"base.{weight_name}": new_weight, f"base.{bias_name}": new_bias})

    def budget(self) -> str:
        """The fished class (the attack has no search budget)."""
        return f"class {self.config.target_class}"

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        d = math.prod(update.model.input_shape)
        names = update.model.layer_param_names(1) + update.model.layer_param_names(update.model.depth)
        if any(name not in update.gradients for name in names):
            raise ConfigError("the update holds no gradients of the victim's first or last layer")
        if update.gradients[names[0]].dim() != 2 or update.gradients[names[0]].shape[1] != d:
            raise ConfigError(f"fishing reads images from a first layer linear on the flattened image ({d} inputs)")

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        assert update.batch_size is not None  # Requirements(batch_size=True), checked by the harness
        cfg, b = self.config, update.batch_size
        weight_name, bias_name = update.model.layer_param_names(1)
        last_bias = update.gradients[update.model.layer_param_names(update.model.depth)[1]].detach().double()
        count = -b * float(last_bias[cfg.target_class]) if cfg.target_class < len(last_bias) else 0.0
        reads = row_reads(update.model, update.gradients[weight_name], update.gradients[bias_name], cfg.range_margin)
        images = reads.images
        spread = float((images - images.median(dim=0).values).abs().max()) if len(images) else 0.0
        kept, support = deduplicate(images, reads.strength, cfg.dedup_tol)
        wanted = min(max(round(count), 1), b)
        order = [k for k in sorted(range(len(kept)), key=lambda k: (-support[k], k)) if support[k] >= cfg.min_support]
        chosen_rows = [kept[k] for k in order[:wanted]]
        median = not chosen_rows and len(images) > 0 and cfg.fallback == "median"
        if median:  # no image alone in any two rows: the reads' per-pixel median, a mixture of the class's images
            images = torch.cat([images, images.median(dim=0, keepdim=True).values])
            chosen_rows = [len(images) - 1]
        padded = max(0, b - len(chosen_rows)) if cfg.padding else 0
        stats: dict[str, Any] = {
            "target_count": round(count, 3) + 0.0, "active": reads.active, "in_range": len(reads.rows),
            "distinct": len(kept), "kept": len(chosen_rows), "padded": padded,
            "support": [support[k] for k in order[:wanted]], "spread": spread,
            "mixture": round(count) > 1 or spread > cfg.dedup_tol, "median": median}
        if not chosen_rows:
            why = ("no row of layer 1 is active: the update holds no image of the target class" if not stats["active"]
                   else f"no read of layer 1 in the pixel range is repeated by {cfg.min_support} rows (fallback "
                   f"{cfg.fallback})")
            return Reconstruction.failed(why, failure="not-applicable", stats=stats)
        if len(chosen_rows) < b and not cfg.padding:
            return Reconstruction.failed(f"{len(chosen_rows)} images for a batch of {b} (padding off)",
                                         failure="not-applicable", stats=stats)
        answer = padded_answer(update.model, images[chosen_rows], b, cfg.padding)
        return Reconstruction(status="ok", space="image", images=answer, stats=stats)
