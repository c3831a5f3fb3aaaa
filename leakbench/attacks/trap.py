"""Trap weights (Boenisch, Dziedzic, Schuster, Shamsabadi, Shumailov, Papernot, "When the Curious Abandon Honesty:
Federated Learning Is Not Private", EuroS&P 2023), a malicious server's.

The server keeps the victim's architecture (no imprint block: `ServerModel(block=0)`) and sends new weights for its
first linear layer, z = W x + b on the flattened image, followed by a ReLU. Each row is a *trap*: its entries
are random, about half of them negative, the positive ones scaled down by the "scale factor" s < 1 against the
negative ones, so that on non-negative inputs (pixels) the row's pre-activation is negative for most images and
neuron i fires for only a few images of a batch. The gradient of row i's weights is Σ_{n: z_i(x_n) > 0} c_n x_n
and of its bias Σ c_n (c_n: the loss's derivative in the neuron's pre-activation for image n, times 1/b): a neuron
that fires for exactly one image gives it exactly, x = ∇W_i / ∇b_i; one that fires for several gives a mixture.

Modification, as breaching (JonasGeiping/breaching, commit 8bd99d52, 2024-04-17) builds it in
`breaching/cases/malicious_modifications/imprint.py`, `CuriousAbandonHonesty._init_trap_weights` ("Replicates the
attack of Boenisch et al."; "mu, sigma and scale_factor control the attack as described in the paper"), with the
defaults of `config/case/server/malicious-model-cah.yaml` (`sigma: 0.5`, `scale_factor: 0.95`, `mu: 0`): per row,
a random permutation of the d inputs splits them into ⌊d/2⌋ negative and ⌊d/2⌋ positive positions; ⌊d/2⌋
magnitudes m_j = |N(0, σ²)| are drawn, the negative positions get −m_j and the positive ones s·m_j (the same
magnitudes, scaled: every row sums to −(1 − s) Σ m_j < 0, so on non-negative inputs the negative side dominates).
Scaling the positive side by s is scaling the negative side by 1/s against it: the rows are the same up to a
positive factor, which changes neither which neurons fire nor the images read back. `scale_factor` is the paper's
scale factor at breaching's released default, 0.95; the paper's text (its section on trap weights and the value
it reports) could not be checked for this port: no copy of it was at hand, only breaching's code. `sigma`
scales every entry alike and changes no neuron's activation pattern either.

Deviations, each a setting:
- `space` ("pixels", the default): the trap acts on the image's pixels in [0, 1], non-negative inputs, on which
  a row whose negative side dominates is negative for most images. leakbench's victims normalise inside the model,
  so the first layer sees u = (x − μ)/σ_v (the victim's public constants); the server folds them in: it sends
  W = σ_v·T and b = μ·T·1, so that W u + b = T x for the trap rows T. "normalised": the trap acts on u itself with
  a zero bias, as breaching places its block (on the normalised input, `mu` = 0); on inputs centred at 0 the
  scale factor then barely biases the sign and a neuron fires for more than half of the images (58–68 % on
  CIFAR-10, FC-6, seeds 0–1, against 1.5–3.7 % for "pixels"), so that almost no neuron isolates an image past
  b = 8.
- d odd: the one input left over after the ⌊d/2⌋ pairs gets a 0 weight (breaching leaves it uninitialised).
- Randomness (permutations, magnitudes) is drawn from the attack's seed (a `torch.Generator`), not from the global
  generator; the other layers keep the public victim's values (breaching's `model_gain` 1 leaves them too).

Extraction (`reconstruct`), on the first layer's gradients (∇W: width × d, ∇b: width):
1. candidates: every row with ∇b_i ≠ 0 (the paper's and breaching's rule: a neuron that fired), each read as
   u_i = ∇W_i / ∇b_i (in float64) and denormalised to an image (`update.model.denormalize`);
2. range (leakbench's): a candidate with a pixel outside [−`range_margin`, 1 + `range_margin`] is dropped (a
   single image lies in [0, 1] up to rounding; mixtures whose coefficients differ in sign usually leave it);
3. deduplication (leakbench's; several neurons can trap the same image): candidates are taken in order of
   increasing |∇b_i| (ties: neuron order); one within `dedup_tol` (largest pixel difference) of a kept
   candidate joins it, adding to its *support* (the number of neurons that gave it); otherwise it is kept;
4. if more distinct candidates than the batch: the batch size of them with the largest support (a single image
   is trapped by more neurons than any one set of several images when neurons fire rarely, and two neurons firing
   for the same images mix them with coefficients that differ from neuron to neuron, except where those images'
   loss derivatives are proportional — same label, same downstream ReLU pattern —: then their mixtures agree
   too, with a support of a few), ties broken by the smaller |∇b| of the kept row (breaching's `reduce_hits`
   rule "bias", "optimal for clean data": a neuron's |∇b| sums the |c_n| of the images it fires for when their
   signs agree, so a mixture's tends to be larger; on CIFAR-10, FC-6 w1000, b = 64, seeds 0–5 it found 202 images
   where the larger |∇b| first found 170, of 214 among all candidates);
5. fewer: padded with blank rows (the mean image, 0 before denormalising) when `padding`, as breaching's
   `breach_padding` does; no candidate at all: a failed answer, not applicable.
Answer rows come in order of the rule of step 4, padding last. `stats`: fired (rows with ∇b ≠ 0), in_range,
distinct (after deduplication), multi (distinct candidates of support > 1), kept, padded, rows (the neuron of each
kept answer row, in answer order), support (each kept row's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from leakbench.attacks.base import Reconstruction, Requirements
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
class TrapConfig(Ranged):
    """Trap-weight settings (breaching's defaults where it has them).

    scale_factor: s, the positive entries of a row are s × the negative ones' magnitudes (the paper's scale factor;
        breaching: 0.95; smaller: neurons fire for fewer images).
    sigma: the magnitudes' scale, |N(0, σ²)| (breaching: 0.5; it changes no neuron's activation pattern).
    space: where the trap acts (pixels: the image in [0, 1], the victim's normalisation folded into the layer;
        normalised: the normalised input with a zero bias, as breaching).
    range_margin: a candidate with a pixel outside [−margin, 1 + margin] is dropped (a large value: no filter).
    dedup_tol: two candidates whose largest pixel difference is at most this are one image.
    padding: pad a batch with fewer distinct candidates with blank (mean) images, as breaching does.
    """

    scale_factor: float = ranged(0.95, 0, 1, low_open=True)
    sigma: float = ranged(0.5, 0, 1e6, low_open=True)
    space: str = chosen("pixels", "pixels", "normalised")
    range_margin: float = ranged(1e-3, 0, 1e6)
    dedup_tol: float = ranged(1 / 255, 0, 1)
    padding: bool = True


@register_attack
class TrapWeights(MaliciousAttack[TrapConfig]):
    name = "trap-weights"
    description = ("When the Curious Abandon Honesty (Boenisch et al. 2023): a malicious server's trap weights in "
                   "the first layer isolate single images")
    paper = Citation("Boenisch et al., EuroS&P 2023", "https://arxiv.org/abs/2112.02918")
    Config = TrapConfig
    requires = Requirements(batch_size=True)

    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        cfg = self.config
        weight_name, bias_name = model.layer_param_names(1)
        params = dict(model.named_parameters())
        weight = params.get(weight_name)
        d = math.prod(model.input_shape)
        if weight is None or weight.dim() != 2 or weight.shape[1] != d or bias_name not in params:
            raise ConfigError("trap weights need a victim whose first layer is linear on the flattened image "
                              f"({d} inputs) with a bias")
        trap = trap_rows(weight.shape[0], d, cfg.scale_factor, cfg.sigma, torch.Generator().manual_seed(seed))
        if cfg.space == "pixels":  # W u + b = T x for u = (x − μ)/σ_v
            layer_weight, layer_bias = trap * model.std, trap.sum(dim=1) * model.mean
        else:
            layer_weight, layer_bias = trap, torch.zeros(weight.shape[0], dtype=torch.float64)
        return ServerModel(0, {f"base.{weight_name}": layer_weight.float(), f"base.{bias_name}": layer_bias.float()})

    def budget(self) -> str:
        """The trap's scale factor (the attack has no search budget)."""
        return f"scale factor {self.config.scale_factor:g}"

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        weight, bias = update.model.layer_param_names(1)
        if weight not in update.gradients or bias not in update.gradients:
            raise ConfigError("the update holds no gradients of the victim's first layer")

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        assert update.batch_size is not None  # Requirements(batch_size=True), checked by the harness
        cfg, b = self.config, update.batch_size
        weight_name, bias_name = update.model.layer_param_names(1)
        reads = row_reads(update.model, update.gradients[weight_name], update.gradients[bias_name], cfg.range_margin)
        fired, images = reads.rows, reads.images
        kept, support = deduplicate(images, reads.strength, cfg.dedup_tol)
        distinct = len(kept)
        order = sorted(range(distinct), key=lambda k: (-support[k], k))  # `kept` comes by increasing |∇b|
        chosen_rows = [kept[k] for k in order[:b]]
        padded = max(0, b - len(chosen_rows)) if cfg.padding else 0
        stats = {"fired": reads.active, "in_range": len(fired), "distinct": distinct,
                 "multi": sum(1 for s in support if s > 1), "kept": len(chosen_rows), "padded": padded,
                 "rows": [int(fired[k]) for k in chosen_rows], "support": [support[k] for k in order[:b]]}
        if not chosen_rows:
            return Reconstruction.failed("no neuron of the trapped layer gives an image (no nonzero bias gradient "
                                         "whose row reads as one in [0, 1])", failure="not-applicable", stats=stats)
        if len(chosen_rows) < b and not cfg.padding:
            return Reconstruction.failed(f"{len(chosen_rows)} distinct images for a batch of {b} (padding off)",
                                         failure="not-applicable", stats=stats)
        answer = padded_answer(update.model, images[chosen_rows], b, cfg.padding)
        return Reconstruction(status="ok", space="image", images=answer, stats=stats)



@register_attack
class TrapWeightsAdaptive(TrapWeights):
    """Trap weights against a client that checks weight magnitudes (`check-weights`): the traps as `trap-weights`
    draws them, the layer's weight and bias then scaled by one positive factor so that neither exceeds the public
    model's largest |value| (any `max_ratio` ≥ 1 lets them through). A positive factor changes no neuron's firing
    and no single image's read ∇W_i / ∇b_i; the later layers see a smaller first-layer output, so the loss
    derivatives change, and with them which mixtures look alike and the order of ties (CIFAR-10, b = 64, seeds
    0–2: 38.5 % exact where `trap-weights` undefended finds 40.6 %). Leakbench's adaptive form, not the paper's."""

    name = "trap-weights-adaptive"
    description = ("trap weights scaled under the public model's weight magnitudes (leakbench's adaptive form against "
                   "a client that checks them)")
    adapts_to = frozenset({"check-weights"})

    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        sent = super().modify(model, seed=seed)
        public = dict(model.named_parameters())
        factor = min(float(public[name.removeprefix("base.")].detach().abs().max()) / float(value.abs().max())
                     for name, value in sent.values.items() if float(value.abs().max()) > 0)
        if factor >= 1:
            return sent
        return ServerModel(0, {name: value * factor for name, value in sent.values.items()})

def trap_rows(width: int, d: int, scale_factor: float, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """`width` trap rows on `d` inputs (float64): per row a random permutation, its first ⌊d/2⌋ positions get
    −m_j and the next ⌊d/2⌋ get scale_factor·m_j, with m_j = |N(0, sigma²)| drawn per row (breaching's
    `_init_trap_weights`); the position left over when d is odd gets 0."""
    half = d // 2
    magnitudes = (torch.randn(width, half, generator=generator, dtype=torch.float64) * sigma).abs()
    rows = torch.zeros(width, d, dtype=torch.float64)
    for i in range(width):
        order = torch.randperm(d, generator=generator)
        rows[i, order[:half]] = -magnitudes[i]
        rows[i, order[half:2 * half]] = scale_factor * magnitudes[i]
    return rows
