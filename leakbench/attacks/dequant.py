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

The loss is the gradient distance (IG's cosine, DLG's L2) between the candidate's gradient r and the point of
the box nearest to it, r clamped to [low, high] (`GradientOracle`'s bounds). For DLG that is the squared
Euclidean distance to the box: zero exactly when r could have produced the shared levels, growing with how far
it lies outside. Why not match the dequantised values, as plain IG/DLG do: stochastic rounding moves each entry
by up to a step at random, so the true gradient almost never equals the shared one; matching it as exact asks
the candidate to reproduce the rounding noise (as matching a pruned zero asks it to reproduce the zero). The
box uses all that the levels say and nothing they do not. (Within the box stochastic rounding favours values
near the level — its likelihood is triangular —; the box loss ignores that, and the bucket norm constraint of
QSGD's l2 scale.)

The bounds apply when the threat model lists a quantiser as the update's last defence; with the defence
unknown, no quantiser, or a defence after it (e.g. secure aggregation summing quantised updates), the variants
are their plain forms.
"""

from __future__ import annotations

from typing import Any

import torch

from leakbench.attacks.gradient_matching import Bounds, DeepLeakageAttack, InvertingGradientsAttack
from leakbench.attacks.registry import register_attack
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


def quantised_bounds(update: ClientUpdate) -> Bounds:
    """For every shared tensor, the (low, high) box its true gradient lay in, given the quantiser the threat
    model lists (`last_quantiser`); empty when none is listed."""
    spec = last_quantiser(update)
    if spec is None:
        return {}
    if spec["name"] == "qsgd":
        return {n: qsgd_bounds(g, spec["levels"], spec["bucket"], spec["norm"]) for n, g in update.gradients.items()}
    return {n: uniform_bounds(g, spec["bits"], spec["mode"]) for n, g in update.gradients.items()}


def _around(q: torch.Tensor, step: torch.Tensor, limit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[q − step, q + step] ∩ [−limit, limit]: where an entry stochastically rounded to q by `step` lay."""
    return torch.maximum(q - step, -limit), torch.minimum(q + step, limit)


def uniform_bounds(q: torch.Tensor, bits: int, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The box behind `q`, shared by uniform-quantise with `bits` in `mode` (module doc)."""
    if mode == "sign":
        return (torch.where(q < 0, -torch.inf, 0.0).to(q.dtype), torch.where(q > 0, torch.inf, 0.0).to(q.dtype))
    scale = q.abs().amax() * (1 + SLACK) if q.numel() else q.new_zeros(())
    return _around(q, 2 * scale / (2**bits - 1), scale)


def bucket_steps(mag: torch.Tensor, levels: int, tol: float = 1e-3) -> torch.Tensor:
    """(buckets, d) magnitudes of QSGD-shared entries (each a whole number l ≤ `levels` of its bucket's step)
    → (buckets, 1) steps: the largest m/k, m the bucket's smallest non-zero magnitude, k = 1 … STEP_TRIES, of
    which every magnitude is a whole multiple (within `tol`) and the largest at most `levels` times; 0 for an
    all-zero bucket, inf where no k fits."""
    big = mag.amax(dim=1)
    m = torch.where(mag > 0, mag, torch.inf).amin(dim=1)
    steps = torch.where(big > 0, torch.inf, 0.0).to(mag.dtype)
    for k in range(1, STEP_TRIES + 1):
        rows = torch.isinf(steps).nonzero().squeeze(1)  # buckets still without a step
        if rows.numel() == 0:
            break
        step = (m[rows] / k).unsqueeze(1)
        ratio = mag[rows] / step
        whole = ((ratio - ratio.round()).abs() <= tol * (1 + ratio)).all(dim=1)
        fits = whole & (big[rows] <= step.squeeze(1) * levels * (1 + SLACK))
        steps[rows[fits]] = step.squeeze(1)[fits]
    return steps.unsqueeze(1)


def qsgd_bounds(q: torch.Tensor, levels: int, bucket: int, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The box behind `q`, shared by QSGD with s = `levels`, buckets of `bucket` entries and scale `norm`
    (module doc)."""
    n = q.numel()
    if n == 0:
        return q.clone(), q.clone()
    d = bucket or n
    padded = torch.cat([q.reshape(-1), q.new_zeros((-n) % d)]).reshape(-1, d).to(torch.float64)
    big = padded.abs().amax(dim=1, keepdim=True)
    step = big / levels if norm == "max" else bucket_steps(padded.abs(), levels)
    step = step * (1 + SLACK)
    low, high = _around(padded, step, step * levels)
    low = torch.where(padded > 0, low.clamp_min(0.0), low)  # the sign is kept
    high = torch.where(padded < 0, high.clamp_max(0.0), high)
    cone = norm != "max" and levels**2 < d  # an all-zero bucket may be a non-zero one rounded down
    unknown = torch.isinf(step) | ((big == 0) & cone)
    low, high = torch.where(unknown, -torch.inf, low), torch.where(unknown, torch.inf, high)
    return (low.reshape(-1)[:n].reshape(q.shape).to(q.dtype), high.reshape(-1)[:n].reshape(q.shape).to(q.dtype))


@register_attack
class DequantInvertingGradients(InvertingGradientsAttack):
    """Inverting Gradients matched to the box of gradients a known quantiser's levels allow (leakbench's adaptive
    form, not published): cosine distance to the nearest point of the box (module doc), everything else as `ig`."""

    name = "ig-dequant"
    adapts_to = QUANTISERS
    description = ("Inverting Gradients matched to the interval each quantised entry's level allows under a known "
                   "QSGD or uniform quantiser (leakbench's adaptive form, not published)")

    def bounds(self, update: ClientUpdate) -> Bounds | None:
        return quantised_bounds(update)


@register_attack
class DequantDeepLeakage(DeepLeakageAttack):
    """Deep Leakage from Gradients matched to the box of gradients a known quantiser's levels allow (leakbench's
    adaptive form, not published): squared distance to the box (module doc), everything else as `dlg`."""

    name = "dlg-dequant"
    adapts_to = QUANTISERS
    description = ("Deep Leakage from Gradients matched to the interval each quantised entry's level allows under "
                   "a known QSGD or uniform quantiser: squared distance to it (leakbench's adaptive form, not "
                   "published)")

    def bounds(self, update: ClientUpdate) -> Bounds | None:
        return quantised_bounds(update)


__all__ = ["QUANTISERS", "DequantDeepLeakage", "DequantInvertingGradients", "bucket_steps", "last_quantiser",
           "qsgd_bounds", "quantised_bounds", "uniform_bounds"]
