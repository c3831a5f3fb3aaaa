"""DP-SGD client updates (Opacus semantics) and their privacy cost from Opacus's RDP accountant.

One DP-SGD step on a batch of b samples: per-sample gradients of the loss, each sample's whole
gradient (all parameters together) clipped to L2 norm C, summed, Gaussian noise N(0, σ²C²) added
to every coordinate, divided by b. ε is what `steps` such steps at sampling rate q cost under
(ε, δ)-DP, by Opacus's Rényi-DP accountant; σ = 0 gives ε = ∞.

`convention = "cpa"` is the Cocktail Party Attack code's DP level instead (Kariyappa et al., ICML
2023, released code): the clipped per-sample gradients are averaged and N(0, σ²C²) is added to the
mean, not divided by b — at the same σ, b times Opacus's noise std. On the sum that is noise of std
(σ·b)·C, so its ε is the accountant's at the effective noise multiplier σ·b (and depends on b).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import MAX_NOISE_STD, MAX_WEIGHT, REQUIRED, Ranged, chosen, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim

ACCOUNTANT = "opacus-rdp"
"""Name of the accountant recorded with every ε."""

MAX_CLIP = 1e12
"""The clipping norm C: at most 10^12 (a huge C clips nothing: plain noisy FedSGD)."""
MIN_CLIP = 1e-30
"""The clipping norm C: at least 10^-30. The clip factor C/‖g‖ is applied in float32, whose smallest
normal number is 1.2·10^-38: a smaller C rounds every clipped gradient to 0, not to norm C."""
MAX_DP_STEPS = 10**9
"""DP-SGD steps the accountant composes: at most 10^9."""

CONVENTIONS = ("opacus", "cpa")
"""Where the noise goes: on the sum (Opacus; divided by b with it) or on the mean (the CPA code's)."""

CLIP_EPS = 1e-6
"""Opacus's guard in the clip factor C / (‖g‖ + 1e-6)."""

DP_EPSILON_LIMIT = 100.0
"""Above this ε a DP-SGD level gives no meaningful guarantee (e^100 bounds nothing): it is labelled
"clipping + noise", not DP (`level_label`). Practical DP-SGD reports ε ≤ 10 (Abadi et al. 2016: 2 and 8)."""


@dataclass(frozen=True)
class DPConfig(Ranged):
    """One DP-SGD setting.

    sigma: noise multiplier σ (noise std is σ·C, at most 10^6: `ranges.MAX_NOISE_STD`); 0 means clipping only.
    clip: per-sample clipping norm C (10^-30 … 10^12: `MIN_CLIP`, `MAX_CLIP`).
    delta: δ of the (ε, δ) guarantee.
    q: sampling rate (batch size / dataset size) the accountant assumes.
    steps: number of DP-SGD steps the accountant composes.
    convention: "opacus" (noise N(0, σ²C²) on the sum of clipped gradients, then divided by b) or
        "cpa" (the CPA code's: the same noise added to their mean, b times Opacus's std at equal σ).
    """

    sigma: float = ranged(REQUIRED, 0, MAX_WEIGHT)
    clip: float = ranged(REQUIRED, MIN_CLIP, MAX_CLIP)
    delta: float = ranged(1e-5, 0, 1, low_open=True, high_open=True)
    q: float = ranged(0.01, 0, 1, low_open=True)
    steps: int = ranged(1, 1, MAX_DP_STEPS)
    convention: str = chosen("opacus", *CONVENTIONS)
    owner: ClassVar[str] = "dp"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sigma * self.clip > MAX_NOISE_STD:
            raise ConfigError(f"dp: the noise std σ·C = {self.sigma * self.clip:g} (sigma {self.sigma:g} × clip "
                              f"{self.clip:g}) must be at most 10^6: a larger std leaves no signal and overflows "
                              "float32 updates (a C that clips nothing goes with σ = 0 or a small σ)")

    def epsilon(self, batch_size: int | None = None) -> float:
        """ε after `steps` steps at rate q and noise σ (Opacus RDP accountant); ∞ when σ = 0. The "cpa"
        convention needs `batch_size` b: its noise on the sum has the effective multiplier σ·b."""
        return epsilon(self.noise_multiplier(batch_size), self.q, self.steps, self.delta)

    def noise_multiplier(self, batch_size: int | None = None) -> float:
        """The noise std on the sum of clipped gradients over C: σ (Opacus), σ·b (the CPA code's)."""
        if self.convention == "opacus":
            return self.sigma
        if batch_size is None:
            raise ConfigError("dp: the CPA convention's ε depends on the batch size; none was given")
        return self.sigma * batch_size

    def label(self) -> str:
        """A short readable name, e.g. 'σ=0.01 C=1' ('(CPA code) σ=0.01 C=1' in the CPA convention)."""
        return ("(CPA code) " if self.convention == "cpa" else "") + f"σ={self.sigma:g} C={self.clip:g}"


CLIPPING_NOISE = "clipping + noise"
"""What a DP-SGD level past `DP_EPSILON_LIMIT` is called."""
LEVEL_PREFIXES = ("DP ", CLIPPING_NOISE + " ")
"""How a DP-SGD level's label starts (`level_label`)."""


def epsilon_text(value: float) -> str:
    """ε as tables show it: 3 significant digits, '∞' for an unbounded one."""
    return "∞" if math.isinf(value) else f"{value:.3g}"


def accounting_text(value: float, q: float | None, steps: int | None) -> str:
    """'ε=0.956 at q=0.01, T=1 step': an ε with the sampling rate and the number of steps it was computed for
    ('ε=…' alone when they are not known, as for a stored cell without them)."""
    if q is None or steps is None or math.isnan(q):
        return f"ε={epsilon_text(value)}"
    return f"ε={epsilon_text(value)} at q={q:g}, T={steps:,} step{'' if steps == 1 else 's'}"


def level_label(setting: str, value: float | None, q: float | None = None, steps: int | None = None) -> str:
    """The label of a DP-SGD level with its privacy accounting: 'DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)'
    (`setting` is `DPConfig.label`: 'σ=1 C=1'); a level whose ε exceeds `DP_EPSILON_LIMIT` (or is ∞: σ = 0)
    is 'clipping + noise σ=0.01 C=1 (ε=5.56e+03 at q=0.01, T=1 step)': no DP guarantee worth the name.
    Without an ε (None or NaN: the CPA convention without a batch size) 'DP σ=… C=…'."""
    if value is None or math.isnan(value):
        return f"DP {setting}"
    kind = "DP" if value <= DP_EPSILON_LIMIT else CLIPPING_NOISE
    return f"{kind} {setting} ({accounting_text(value, q, steps)})"


def epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """ε of `steps` Poisson-subsampled Gaussian steps, from Opacus's RDPAccountant; ∞ where its bound
    overflows (σ near 0, as for σ = 0)."""
    if sigma == 0:
        return math.inf
    import warnings

    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(sigma, q, steps)]
    with warnings.catch_warnings():  # "optimal order is the smallest alpha": ε is huge, the bound loose
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float(accountant.get_epsilon(delta=delta))
        except (ZeroDivisionError, OverflowError):  # σ so small (1e-300) that the RDP terms overflow: no bound
            return math.inf


def per_sample_gradients(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    """dL_i/dθ for every sample i (leading batch dimension), via torch.func vmap(grad)."""
    params = {name: p.detach() for name, p in model.named_parameters()}
    dtype = next(iter(params.values())).dtype

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, p, (x.unsqueeze(0),))
        return nn.functional.cross_entropy(logits, y.unsqueeze(0))

    per_sample: dict[str, torch.Tensor] = vmap(grad(loss), in_dims=(None, 0, 0))(params, batch.images.to(dtype),
                                                                                  batch.labels)
    return per_sample


def clip_and_noise(per_sample: dict[str, torch.Tensor], dp: DPConfig, seed: int) -> dict[str, torch.Tensor]:
    """Clip each sample's whole gradient to norm C, sum, add N(0, σ²C²) noise, divide by b (the CPA
    convention: divide by b, then add the noise)."""
    names = list(per_sample)
    b = per_sample[names[0]].shape[0]
    squared = sum(g.reshape(b, -1).pow(2).sum(1) for g in per_sample.values())
    assert isinstance(squared, torch.Tensor)  # a sum of tensors: the victim has parameters
    norms = torch.sqrt(squared)
    factor = (dp.clip / (norms + CLIP_EPS)).clamp(max=1.0)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in names:
        g = per_sample[name]
        summed = torch.einsum("i,i...->...", factor.to(g.dtype), g)
        noise = torch.randn(summed.shape, generator=gen, dtype=g.dtype) * (dp.sigma * dp.clip)
        out[name] = summed / b + noise if dp.convention == "cpa" else (summed + noise) / b
    return out


def dp_update(model: ImageVictim, batch: Batch, dp: DPConfig, *, seed: int,
              threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """One DP-SGD client update of `model` on `batch` (the model is copied, not modified).

    The noise is drawn from `seed`: the same seed gives the same update.
    """
    public = copy.deepcopy(model)
    public.zero_grad(set_to_none=True)
    gradients = clip_and_noise(per_sample_gradients(public, batch), dp, seed)
    return ClientUpdate(
        model=public.requires_grad_(False).eval(),
        gradients={name: g.detach().clone() for name, g in gradients.items()},
        threat=threat,
        batch_size=batch.size if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        kind="dp-sgd",
    )


def dp_columns(dp: DPConfig | None, batch_size: int | None = None) -> dict[str, Any]:
    """σ, C, δ, q, steps, ε and the accountant of a DP setting, and a readable label (no DP: σ, C, q, δ
    NaN, ε ∞). The CPA convention adds `dp_convention` (left out for Opacus's, so records of cells
    stored before it existed stay as they were); its ε needs `batch_size` (NaN without it)."""
    if dp is None:
        nan = math.nan
        return {"dp": "none", "dp_sigma": nan, "dp_clip": nan, "dp_delta": nan, "dp_q": nan, "dp_steps": 0,
                "dp_epsilon": math.inf, "dp_accountant": "none"}
    cpa = dp.convention == "cpa"
    eps = math.nan if cpa and batch_size is None else dp.epsilon(batch_size)
    return {"dp": dp.label(), "dp_sigma": dp.sigma, "dp_clip": dp.clip, "dp_delta": dp.delta, "dp_q": dp.q,
            "dp_steps": dp.steps, "dp_epsilon": eps, "dp_accountant": ACCOUNTANT,
            **({"dp_convention": dp.convention} if cpa else {})}


@register_transform
class DPSGD(UpdateTransform):
    """DP-SGD: one step of per-sample clipping to C and Gaussian noise σ·C (Opacus semantics, or the CPA code's)."""

    paper = Citation("Abadi et al., CCS 2016", "https://arxiv.org/abs/1607.00133")
    name = "dp"
    Config = DPConfig
    config: DPConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return dp_update(client.model, client.batch, self.config, seed=client.seed, threat=client.threat)

    def label(self) -> str:
        """The level with its accounting (`level_label`): 'DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)', or
        'clipping + noise …' past ε = 100 (the CPA convention, whose ε needs the batch size: 'DP …' alone)."""
        cfg = self.config
        eps = cfg.epsilon() if cfg.convention == "opacus" else None
        return level_label(cfg.label(), eps, cfg.q, cfg.steps)

    def columns(self) -> dict[str, Any]:
        return dp_columns(self.config)
