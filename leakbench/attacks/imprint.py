"""Robbing the Fed's imprint attack (Fowl, Geiping, Czaja, Goldblum, Goldstein, ICLR 2022), a malicious server's.

The server puts an *imprint block* in front of the victim: a linear layer of k "bins", every row the same linear
query q of the (normalised, flattened) image, with biases −e_i at increasing bin edges e_0 < … < e_{k−1}, then a
ReLU and a linear layer back to the image's size (`leakbench.server.ModifiedVictim`). Row i is active for the
images with q(x) > e_i, so the gradient of row i's weights is Σ_{n: q(x_n) > e_i} c_n x_n and of its bias
Σ c_n (c_n: the loss's derivative in that image's bin activations, the same for every bin). Differences of
consecutive rows leave the images whose query falls between two edges; a bin that holds one image gives it
exactly: x = Δ∇W_i / Δ∇b_i. With secure aggregation the K clients' mean is the same sum over K·b images.

Written from breaching (JonasGeiping/breaching, commit 8bd99d52, 2024-04-17) and run beside it
(`benchmarks/imprint_breaching.py`): `cases/malicious_modifications/imprint.py` `ImprintBlock`
(cumulative structure, `connection="linear"`: `linear0` rows = the query × gain, biases −edges × gain,
`linear2` weights 1/gain and bias its PyTorch default init minus the edges' mean; edges −10 then the standard
normal's — Laplace(0, 1/√2)'s for the `fourier` query — quantiles i/k), `attacks/analytic_attack.py`
`ImprintAttacker` (differences, the hits of every nonzero bias difference, `reduce_hits`) with the defaults of
`config/case/server/malicious-model-rtf.yaml` (64 bins, fourier mode 32, gain 1) and
`config/attack/imprint.yaml` (`breach_reduction = "weight"`, `breach_padding = true`).

Deviations, each a setting at breaching's value by default: `query_mean`, `query_std` place the edges at
quantiles of N(μ, σ²) (of the Laplace of that mean and variance for `fourier`) instead of the standard
distribution — the query's distribution as a server estimates it on public data (Fowl et al. assume the server
knows it; breaching's standard one fits ImageNet's per-channel normalisation, not every victim's; leakbench's
suites say which public data gave μ and σ). `block` sits before the victim's first layer, on the normalised image
(breaching: `position` None, the same place). Randomness (the `randn` query, `linear2`'s init) is drawn from the
attack's seed, not from the global generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch

from leakbench.attacks.base import AGGREGATES, Reconstruction, Requirements
from leakbench.attacks.malicious import MaliciousAttack
from leakbench.attacks.registry import register_attack
from leakbench.attacks.row_reads import padded_answer
from leakbench.core.citation import Citation
from leakbench.core.ranges import Ranged, chosen, ranged
from leakbench.fl.update import ClientUpdate
from leakbench.models.base import ImageVictim
from leakbench.server.model import MAX_BLOCK, ServerModel

FIRST_EDGE = -10.0
"""breaching's lowest edge in units of the query's spread ("-Inf is not great here", NormalDist().cdf(10) ≈ 1)."""


@dataclass(frozen=True)
class ImprintConfig(Ranged):
    """The server's block and the attack's reading of it.

    bins: k, the block's width.
    linfunc: the query (avg: mean of the normalised image; fourier: one DCT-II mode, `mode`; randn: a random
        direction).
    mode: the DCT-II mode of the fourier query.
    gain: the block's scale (its first layer × gain, its second ÷ gain).
    query_mean / query_std: where the server believes the query's values lie (breaching: 0, 1).
    reduction: which hits to keep when there are more than the batch (weight: smallest |mean Δ∇W|; bias:
        smallest |Δ∇b|: breaching's rules; signal: largest |Δ∇b|, leakbench's, for a noised update where every
        bin is a hit).
    padding: pad a batch with fewer hits with blank (mean) images, as breaching does."""

    bins: int = ranged(64, 2, MAX_BLOCK)
    linfunc: str = chosen("fourier", "fourier", "avg", "randn")
    mode: int = ranged(32, 0, 1 << 20)
    gain: float = ranged(1.0, 0, 1e6, low_open=True)
    query_mean: float = ranged(0.0, -1e6, 1e6)
    query_std: float = ranged(1.0, 0, 1e6, low_open=True)
    reduction: str = chosen("weight", "weight", "bias", "signal")
    padding: bool = True


@register_attack
class Imprint(MaliciousAttack[ImprintConfig]):
    name = "imprint"
    description = "Robbing the Fed (Fowl et al. 2022): a malicious server's imprint block reads images out of bins"
    paper = Citation("Fowl et al., ICLR 2022", "https://openreview.net/forum?id=fyLvHzEssH")
    Config = ImprintConfig
    requires = Requirements(batch_size=True)
    aware_of = AGGREGATES  # the K clients' mean is one sum over K·b images to the block: read as it is

    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        cfg = self.config
        d = math.prod(model.input_shape)
        generator = torch.Generator().manual_seed(seed)
        edges = bin_edges(cfg)
        query = linear_query(cfg, d, generator)
        bound = 1 / math.sqrt(cfg.bins)  # nn.Linear's default bias init of linear2, as breaching leaves it
        bias2 = (torch.rand(d, generator=generator) * 2 - 1) * bound - edges.mean()
        return ServerModel(cfg.bins, {
            "block.0.weight": (query * cfg.gain).repeat(cfg.bins, 1).float(),
            "block.0.bias": (-edges * cfg.gain).float(),
            "block.2.weight": torch.full((d, cfg.bins), 1 / cfg.gain),
            "block.2.bias": bias2.float()})

    def budget(self) -> str:
        """The block's size, its query and the server's belief about the query (the attack has no search budget)."""
        cfg = self.config
        query = f"fourier mode {cfg.mode}" if cfg.linfunc == "fourier" else cfg.linfunc
        gain = f", gain {cfg.gain:g}" if cfg.gain != 1 else ""
        return f"{cfg.bins:,} bins, {query}, μ {cfg.query_mean:g} σ {cfg.query_std:g}{gain}"

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        assert update.batch_size is not None  # Requirements(batch_size=True), checked by the harness
        if "block.0.weight" not in update.gradients or "block.0.bias" not in update.gradients:
            return Reconstruction.failed("the update holds no imprint block's gradients (the model was not the "
                                         "server's)", failure="not-applicable")
        weight, bias = bin_differences(update.gradients["block.0.weight"], update.gradients["block.0.bias"])
        hits = torch.nonzero(bias != 0).flatten()
        rows = weight[hits] / bias[hits, None]
        kept = reduce_hits(rows, weight[hits], bias[hits], update.batch_size, self.config.reduction)
        padded = max(0, update.batch_size - len(kept)) if self.config.padding else 0
        stats = {"hits": len(hits), "kept": len(kept), "padded": padded}
        if not len(kept):
            return Reconstruction.failed("no bin of the imprint block holds an image (every bias difference is 0)",
                                         failure="not-applicable", stats=stats)
        if len(kept) + padded < update.batch_size:  # without padding: fewer rows than the batch, none verified
            return Reconstruction.failed(f"{len(kept)} hits for a batch of {update.batch_size} (padding off)",
                                         failure="not-applicable", stats=stats)
        images = update.model.denormalize(kept.to(torch.float32)).flatten(1)
        answer = padded_answer(update.model, images, update.batch_size, self.config.padding)
        return Reconstruction(status="ok", space="image", images=answer, stats=stats)


def bin_edges(cfg: ImprintConfig) -> torch.Tensor:
    """The k increasing edges: FIRST_EDGE, then the quantiles i/k (i = 1 … k−1) of the query's distribution as the
    server believes it (normal; Laplace for `fourier`, breaching's `_get_bins`), scaled to `query_mean`, `query_std`."""
    from scipy.stats import laplace  # scipy's quantiles, as breaching calls them (its import takes a while: lazy)

    mass = [i / cfg.bins for i in range(1, cfg.bins)]
    quantiles = laplace(loc=0.0, scale=1 / math.sqrt(2)).ppf(mass).tolist() if cfg.linfunc == "fourier" \
        else [NormalDist().inv_cdf(p) for p in mass]
    return torch.tensor([FIRST_EDGE, *quantiles], dtype=torch.float64) * cfg.query_std + cfg.query_mean


def linear_query(cfg: ImprintConfig, d: int, generator: torch.Generator) -> torch.Tensor:
    """One row of the block's first layer: the linear query of `cfg.linfunc` on d inputs (breaching's
    `_init_linear_function`, its normalisations included: "dont ask about the 4")."""
    if cfg.linfunc == "avg":
        return torch.full((d,), 1 / d, dtype=torch.float64)
    if cfg.linfunc == "fourier":
        return torch.cos(math.pi / d * (torch.arange(d, dtype=torch.float64) + 0.5) * cfg.mode) / d \
            * max(cfg.mode, 0.33) * 4
    row = torch.randn(d, generator=generator, dtype=torch.float64)
    return (row - row.mean()) / row.std() / math.sqrt(d)


def bin_differences(weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The cumulative block's gradients turned into per-bin sums: row i minus row i − 1 (row 0 as it is)."""
    weight, bias = weight.clone(), bias.clone()
    weight[1:] -= weight[:-1].clone()
    bias[1:] -= bias[:-1].clone()
    return weight, bias


def reduce_hits(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, n: int, rule: str) -> torch.Tensor:
    """At most `n` of the hits `rows` (breaching's `reduce_hits`): all when there are no more; else the n with the
    smallest |mean Δ∇W| (`weight`) or |Δ∇b| (`bias`), or the largest |Δ∇b| (`signal`: the bins that hold images
    stand out of the noise)."""
    if len(rows) <= n:
        return rows
    score = weight.mean(dim=1).abs() if rule == "weight" else bias.abs()
    return rows[torch.topk(score, n, largest=rule == "signal").indices]


@dataclass(frozen=True)
class ImprintAdaptiveConfig(ImprintConfig):
    """Robbing the Fed's settings but a block amplified against additive noise (leakbench's adaptive form).

    gain: 1e-8: the block's gradients grow as 1/gain (its second layer's weights are 1/gain), so the bins that
        hold an image stand far out of additive noise of any std the defences ship (≤ 1e-2).
    reduction: signal: keep the bins of the largest |Δ∇b| (under noise every bin is a hit).
    """

    gain: float = ranged(1e-8, 0, 1e6, low_open=True)
    reduction: str = chosen("signal", "weight", "bias", "signal")


@register_attack
class ImprintAdaptive(Imprint):
    """Robbing the Fed against a noised update: the server, knowing the client adds noise to what it shares, sends
    the block amplified (gain 1e-8) and keeps the bins that stand out of the noise. Leakbench's adaptive form, not
    Fowl et al.'s: the published attack (`imprint`, gain 1) is what the noise stops. Clipping (DP-SGD) bounds each
    sample's gradient whatever the gain, so it adapts to `noise` only."""

    name = "imprint-adaptive"
    description = "Robbing the Fed's block amplified against additive noise (leakbench's adaptive form)"
    Config = ImprintAdaptiveConfig
    adapts_to = frozenset({"noise"})
