"""Gradient matching against a known quantiser: `ig-dequant`, `dlg-dequant` (leakbench's adaptive forms, not
published).

A quantiser (`leakbench.fl.qsgd`, `leakbench.fl.quantise`) shares, for each gradient entry, a level; knowing
the quantiser (the threat model's `defence_known`), the attacker reads from each level an interval the true
entry lay in — a box of consistent gradients (`quantised_bounds`):

- QSGD (s levels, buckets of d entries, scale S = ‖v‖₂ or max|v|, step Δ = S/s): an entry shared at level l ≥ 1
  was rounded up from (l − 1, l) or down from [l, l + 1) steps, with its sign kept: sign·[(l − 1)Δ, (l + 1)Δ],
  within [−S, S]; a shared zero was rounded down from level 0: [−Δ, Δ]. A bucket shared as all zeros is zero
  when no non-zero bucket can round to all zeros (norm "max", or s² ≥ d: the squared positions sum to s²);
  else it says nothing (|v_i| < ‖v‖/s is a cone, not a box). The update holds the dequantised values
  S·sign·l/s, not S: Δ is read as the bucket's common step (`bucket_steps`), which can only err to a multiple
  of the true step, i.e. a wider, still consistent box.
- uniform-quantise (b bits over ±max|g|, step Δ = 2·max|g|/(2^b − 1), stochastic rounding): [q − Δ, q + Δ]
  within ±max|g| (max|g| is the largest shared |q|: the extreme entry sits on a level); sign mode: the sign's
  half-line, an exact 0 for 0. `quantise` is its retired name (stored cells).

Two ways to match, the setting `fit`:

- "box": the gradient distance (IG's cosine, DLG's L2) between the candidate's gradient r and the point of the
  box nearest to it, r clamped to [low, high] (`GradientOracle`'s bounds). For DLG that is the squared
  Euclidean distance to the box: zero exactly when r could have produced the shared levels, growing with how far
  it lies outside. It uses what the levels say for certain and nothing more — and so throws away that
  stochastic rounding is unbiased and independent entry by entry: a box of ±Δ around every entry is loose,
  and many wrong candidates fit inside it.
- "whitened": the shared (dequantised) values as targets, each tensor weighted by 1/Δ̄, the root mean square
  of its rounding steps (`quantised_weights`; the masks of `GradientOracle`, which scale both sides). Rounding
  noise is zero-mean with variance ≤ Δ²/4 per entry, so least squares against the shared values with each
  entry weighted by its noise level is the (Gaussian) maximum-likelihood fit; one weight per tensor rather
  than per bucket, because QSGD's per-bucket steps span orders of magnitude (they follow each bucket's norm)
  and per-bucket weights made the problem ill-conditioned (measured: IG 10.0 dB, DLG 7.1 dB under qsgd
  s = 256, against 17.5 and 26.2 dB plain). The weights are scaled so the weighted shared gradient keeps its
  norm: DLG's loss keeps its scale, IG's cosine ignores it. The tensors the plain forms weigh alike are now
  weighed by how precisely each was shared.

Which is the default, measured (CIFAR-10, FC-6 w200 at init, layer 1, b = 1 and 16, seeds 0–2, the suite
budgets; docs/notebook/defences.md, 2026-12-06): neither fit beats the plain forms as dequantisation. The box
is weaker than plain matching (b = 1: IG 1.7–4.3 dB, DLG 4.5–10.8 dB lower medians under qsgd). "whitened"
raises IG by 1.5–4.8 dB on every quantised level, but by as much where rounding is negligible (24-bit uniform:
+4.6 dB; qsgd s = 4096: +3.0 dB, and +3.9 dB at b = 16 where qsgd 16 gains 0.4 dB): the gain is the
per-tensor re-weighting, which would help IG without any defence, not dequantisation (run only on defended
levels it would show a quantised level leaking more than the undefended one). Stochastic rounding is unbiased
and independent entry by entry, so least squares against the shared values is already close to what the
levels allow. The default is "box", the form that reads the levels; "whitened" is the measured alternative.

The bounds apply when the threat model lists a quantiser as the update's last defence; with the defence
unknown, no quantiser, or a defence after it (e.g. secure aggregation summing quantised updates), the variants
are their plain forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from leakbench.attacks.gradient_matching import (
    Bounds,
    DeepLeakageAttack,
    DLGConfig,
    IGConfig,
    InvertingGradientsAttack,
)
from leakbench.attacks.registry import register_attack
from leakbench.core.ranges import chosen
from leakbench.fl.update import ClientUpdate

QUANTISERS = frozenset({"qsgd", "uniform-quantise", "quantise"})
"""The quantisers whose levels the variants read (`quantise`: uniform-quantise's retired name, stored cells)."""
SLACK = 1e-5
"""Relative widening of each step and scale: the float32 rounding of the quantiser's own arithmetic."""
STEP_TRIES = 64
"""`bucket_steps` tries the divisors k = 1 … STEP_TRIES of a bucket's smallest non-zero magnitude."""


def last_quantiser(update: ClientUpdate) -> dict[str, Any] | None:
    """The quantiser (name and settings) the update lists as its last defence; None otherwise (module doc)."""
    if not update.defences or update.defences[-1]["name"] not in QUANTISERS:
        return None
    return update.defences[-1]


def _per_tensor(update: ClientUpdate, qsgd_fn: Any, uniform_fn: Any) -> dict[str, Any]:
    """`qsgd_fn(q, levels, bucket, norm)` or `uniform_fn(q, bits, mode)` of every shared tensor q, for the
    quantiser the threat model lists (`last_quantiser`); empty when none is listed."""
    spec = last_quantiser(update)
    if spec is None:
        return {}
    if spec["name"] == "qsgd":
        return {n: qsgd_fn(g, spec["levels"], spec["bucket"], spec["norm"]) for n, g in update.gradients.items()}
    return {n: uniform_fn(g, spec["bits"], spec["mode"]) for n, g in update.gradients.items()}


def quantised_bounds(update: ClientUpdate) -> Bounds:
    """For every shared tensor, the (low, high) box its true gradient lay in (module doc)."""
    return _per_tensor(update, qsgd_bounds, uniform_bounds)


def quantised_weights(update: ClientUpdate) -> dict[str, torch.Tensor]:
    """For every shared tensor, one weight ∝ 1/Δ̄ (module doc, `fit = "whitened"`): Δ̄ the root mean square of
    its entries' rounding steps (those the levels tell; 1 where they tell none), all scaled so that the weighted
    shared gradient keeps its norm (DLG's loss keeps its scale; the cosine ignores it)."""
    steps = _per_tensor(update, qsgd_steps, uniform_steps)
    weights = {n: 1 / _rms_step(step) for n, step in steps.items()}
    plain = sum(float(update.gradients[n].double().pow(2).sum()) for n in weights)
    weighted = sum(float((w * update.gradients[n].double()).pow(2).sum()) for n, w in weights.items())
    scale = (plain / weighted) ** 0.5 if weighted > 0 else 1.0
    return {n: (w * scale).expand(steps[n].shape) for n, w in weights.items()}


def _rms_step(step: torch.Tensor) -> torch.Tensor:
    told = step[(step > 0) & torch.isfinite(step)].double()
    return told.pow(2).mean().sqrt() if told.numel() else step.new_ones((), dtype=torch.float64)


def _around(q: torch.Tensor, step: torch.Tensor, limit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[q − step, q + step] ∩ [−limit, limit]: where an entry stochastically rounded to q by `step` lay."""
    return torch.maximum(q - step, -limit), torch.minimum(q + step, limit)


def uniform_steps(q: torch.Tensor, bits: int, mode: str) -> torch.Tensor:
    """Per entry of `q` (shared by uniform-quantise), its rounding step Δ = 2·max|q|/(2^b − 1); 1 in sign mode
    (the magnitude is gone: the signs are matched as shared)."""
    if mode == "sign":
        return torch.ones_like(q)
    scale = q.abs().amax() if q.numel() else q.new_zeros(())
    step: torch.Tensor = (2 * scale / (2**bits - 1)).expand(q.shape)
    return step


def uniform_bounds(q: torch.Tensor, bits: int, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The box behind `q`, shared by uniform-quantise with `bits` in `mode` (module doc)."""
    if mode == "sign":
        return (torch.where(q < 0, -torch.inf, 0.0).to(q.dtype), torch.where(q > 0, torch.inf, 0.0).to(q.dtype))
    step = uniform_steps(q, bits, mode) * (1 + SLACK)
    return _around(q, step, step * (2**bits - 1) / 2)


def bucket_steps(mag: torch.Tensor, levels: int, tol: float = 1e-3) -> torch.Tensor:
    """(buckets, d) magnitudes of QSGD-shared entries (each a whole number l ≤ `levels` of its bucket's step)
    → (buckets, 1) steps: the largest m/k, m the bucket's smallest non-zero magnitude, k = 1 … STEP_TRIES, of
    which every magnitude is a whole multiple (within `tol` + SLACK·multiple) and the largest at most `levels`
    times; 0 for an all-zero bucket, inf where no k fits. Any step found is l·Δ for a whole l ≥ 1 (m is one):
    at worst a wider box, never a narrower one."""
    big = mag.amax(dim=1)
    m = torch.where(mag > 0, mag, torch.inf).amin(dim=1)
    steps = torch.where(big > 0, torch.inf, 0.0).to(mag.dtype)
    for k in range(1, STEP_TRIES + 1):
        rows = torch.isinf(steps).nonzero().squeeze(1)  # buckets still without a step
        if rows.numel() == 0:
            break
        step = (m[rows] / k).unsqueeze(1)
        ratio = mag[rows] / step
        whole = ((ratio - ratio.round()).abs() <= tol + SLACK * ratio).all(dim=1)  # float32's error grows with l
        fits = whole & (big[rows] <= step.squeeze(1) * levels * (1 + SLACK))
        steps[rows[fits]] = step.squeeze(1)[fits]
    return steps.unsqueeze(1)


def qsgd_steps(q: torch.Tensor, levels: int, bucket: int, norm: str) -> torch.Tensor:
    """Per entry of `q` (shared by QSGD with s = `levels`, buckets of `bucket` entries, scale `norm`), its
    bucket's step Δ (`bucket_steps`; max|q|/s for norm "max"): 0 in a bucket known to be zero, inf where the
    step cannot be read or an all-zero bucket may hide a non-zero one (module doc)."""
    n = q.numel()
    d = bucket or max(n, 1)
    padded = torch.cat([q.reshape(-1), q.new_zeros((-n) % d)]).reshape(-1, d).to(torch.float64)
    big = padded.abs().amax(dim=1, keepdim=True)
    step = big / levels if norm == "max" else bucket_steps(padded.abs(), levels)
    if norm != "max" and levels**2 < d:  # an all-zero bucket may be a non-zero one rounded down: a cone
        step = torch.where(big == 0, torch.inf, step)
    return step.expand(padded.shape).reshape(-1)[:n].reshape(q.shape)


def qsgd_bounds(q: torch.Tensor, levels: int, bucket: int, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The box behind `q`, shared by QSGD with s = `levels`, buckets of `bucket` entries and scale `norm`
    (module doc)."""
    step, wide = qsgd_steps(q, levels, bucket, norm) * (1 + SLACK), q.to(torch.float64)
    low, high = _around(wide, step, step * levels)
    low = torch.where(wide > 0, low.clamp_min(0.0), low)  # the sign is kept
    high = torch.where(wide < 0, high.clamp_max(0.0), high)
    return low.to(q.dtype), high.to(q.dtype)


FITS = ("box", "whitened")
"""How the variants match the candidate's gradient to the quantised one (module doc)."""


@dataclass(frozen=True)
class DequantIGConfig(IGConfig):
    """Inverting Gradients' settings (`IGConfig`) and how the quantised gradient is matched.

    fit: "box" (distance to the box of gradients the levels allow) or "whitened" (each entry weighted by 1/Δ,
        its rounding step, against the shared value); see `leakbench.attacks.dequant`.
    """

    fit: str = chosen("box", *FITS)


@dataclass(frozen=True)
class DequantDLGConfig(DLGConfig):
    """Deep Leakage from Gradients' settings (`DLGConfig`) and how the quantised gradient is matched.

    fit: "box" (squared distance to the box of gradients the levels allow) or "whitened" (each entry weighted
        by 1/Δ, its rounding step, against the shared value); see `leakbench.attacks.dequant`.
    """

    fit: str = chosen("box", *FITS)


def fit_bounds(fit: str, update: ClientUpdate) -> Bounds | None:
    """The boxes for fit "box" (else None)."""
    return quantised_bounds(update) if fit == "box" else None


def fit_weights(fit: str, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
    """The per-entry weights for fit "whitened" (else None): the oracle's masks, which scale both sides."""
    return quantised_weights(update) if fit == "whitened" else None


class DequantFit:
    """What both dequantising attacks add to their plain form: the box (`bounds`) or the per-tensor weights
    (`masks`) of their `fit` setting."""

    config: DequantIGConfig | DequantDLGConfig

    def bounds(self, update: ClientUpdate) -> Bounds | None:
        return fit_bounds(self.config.fit, update)

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        return fit_weights(self.config.fit, update)


@register_attack
class DequantInvertingGradients(DequantFit, InvertingGradientsAttack):
    """Inverting Gradients matched to the box of gradients a known quantiser's levels allow (leakbench's adaptive
    form, not published): cosine distance to the nearest point of the box (module doc), everything else as `ig`."""

    name = "ig-dequant"
    adapts_to = QUANTISERS
    description = ("Inverting Gradients matched to the interval each quantised entry's level allows under a known "
                   "QSGD or uniform quantiser (leakbench's adaptive form, not published)")
    Config = DequantIGConfig
    config: DequantIGConfig


@register_attack
class DequantDeepLeakage(DequantFit, DeepLeakageAttack):
    """Deep Leakage from Gradients matched to the box of gradients a known quantiser's levels allow (leakbench's
    adaptive form, not published): squared distance to the box (module doc), everything else as `dlg`."""

    name = "dlg-dequant"
    adapts_to = QUANTISERS
    description = ("Deep Leakage from Gradients matched to the interval each quantised entry's level allows under "
                   "a known QSGD or uniform quantiser: squared distance to it (leakbench's adaptive form, not "
                   "published)")
    Config = DequantDLGConfig
    config: DequantDLGConfig


__all__ = ["FITS", "QUANTISERS", "DequantDLGConfig", "DequantDeepLeakage", "DequantIGConfig",
           "DequantInvertingGradients", "bucket_steps", "last_quantiser", "qsgd_bounds", "qsgd_steps",
           "quantised_bounds", "quantised_weights", "uniform_bounds", "uniform_steps"]
