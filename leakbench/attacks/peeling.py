"""LT-code peeling (Shariati & Alambardar Meybodi, arXiv:2609.09659, 2026), passive form: the peeling decoder.

Written from the paper's equations (§II-B, §V); its deduplication and certificate follow the released code
(commit df2c313 of SaeedShariati/Gradient-Inversion-via-LT-Codes, `trapweights.IterativeSubtractionAttack`) step
for step. For the first linear layer z = W₁x + b₁ followed by a ReLU and the batch-mean cross-entropy, neuron j's
gradient row and bias entry are

    G[j] = Σ_{i ∈ A_j} c_ij x_i,    h[j] = Σ_{i ∈ A_j} c_ij      (A_j: the samples that activate j)   (Eq. 7)

so a neuron activated by exactly one sample (degree 1, a "singleton") gives it exactly: r[j] = G[j] / h[j]
(Eq. 9). The decoder (Algorithm 1) repeats:

1. a candidate r[j] for every live neuron (|h[j]| > `ratio_tol`); candidates whose image leaves the data range
   [0, 1] by more than `range_margin` are dropped before certification (§VII);
2. deduplication (§V-C), in neuron order as the released code: a candidate within `dedup_tol` of an earlier
   kept one is that one again; otherwise, within `dedup_tol` of a sample already recovered, it is dropped;
   otherwise it is kept, with its neuron as its source row;
3. certificate and label (Eqs. 12–14), the released code's `_row_fit`: for a candidate x̂ the server's own
   forward pass gives the sensitivity a genuine sample of label ℓ would have on neuron j,
   (1/B)[(Jᵀp)_j − J[ℓ, j]] with J = ∂u/∂z at x̂. The rows examined are S = the live neurons x̂ itself fires
   (z_j(x̂) > 0, |h[j]| > `ratio_tol`) and its source row; a row *fits* when its best label's residual
   |prediction − h[j]| is below `cert_tol`. The source row must fit; the label ŷ is the one most fitting rows
   vote for (ties: the smaller summed residual), and x̂ is accepted when ε = ‖residuals of ŷ over the fitting
   rows‖ < `cert_tol`. A near-copy of a sample (a neuron where a second sample adds a tiny coefficient) fits
   that sample's own degree-1 rows only approximately, and its many small residuals add up past `cert_tol`;
4. peeling (Eqs. 15–16): the accepted samples' own first-layer gradient, (1/B) Σ ℓ(x̂, ŷ) differentiated
   in (W₁, b₁), is subtracted from (G, h); the residual has the same form over the samples not yet
   recovered, and may hold new singletons;

until an iteration certifies nothing new, or after `max_iters` iterations. No ground truth: the certificate is
the only check, so a certified vector can still be a false accept (a linear combination that fits, or a sample
certified twice where float32 noise defeats the deduplication). The harness counts those: answer rows that its
matching pairs with no batch image exactly (`benchmarks/peer_side_by_side.py`).

The tolerances and the iteration cap are the released code's defaults (float64 arithmetic, its §VIII); the
range filter of step 1 is the paper's (§VII), which the released code does not apply; leakbench adds nothing to
the algorithm. When no neuron isolates a sample the attack fails as not applicable (no degree-1 row), not as an
answer of 0 %. The paper's active variants (trap weights, Soliton-Free, Soliton-Data) modify the model and are
not this attack.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from leakbench.attacks.base import AGGREGATES, Attack, Reconstruction, Requirements
from leakbench.attacks.registry import register_attack
from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import MAX_SECONDS, Ranged, ranged
from leakbench.fl.update import ClientUpdate
from leakbench.models.base import ImageVictim

JACOBIAN_VALUES = 2**24
"""Candidates are certified in chunks whose Jacobians ∂u/∂z (chunk × classes × width) hold at most this many
float64 values (128 MiB)."""


@dataclass(frozen=True)
class PeelingConfig(Ranged):
    """LT-code peeling hyperparameters (the released code's defaults, for float64 gradients).

    ratio_tol: a neuron is live, and gives a candidate G[j]/h[j], when |h[j]| exceeds this.
    cert_tol: the certificate (Eq. 14): a candidate is accepted when the residual ε of its best label is below this.
    dedup_tol: candidates closer than this (Euclidean, in the attacked layer's input space) are one (§V-C).
    range_margin: a candidate whose image leaves [−margin, 1 + margin] in any pixel is dropped before
        certification (§VII: "candidates lying outside the data range").
    range_filter: False drops that filter (every finite candidate is certified), as the released code does: its
        side-by-side twin (`benchmarks/peer_side_by_side.py --attacks peeling-as-released`).
    max_iters: at most this many iterations (the released code's safety cap on the cascade).
    max_seconds: time budget; past it the attack answers with the samples certified so far.
    """

    ratio_tol: float = ranged(1e-10, 0, 1)
    cert_tol: float = ranged(1e-8, 0, 1, low_open=True)
    dedup_tol: float = ranged(1e-6, 0, 1)
    range_margin: float = ranged(0.1, 0, 10)
    range_filter: bool = True
    max_iters: int = ranged(30, 1, 10**6)
    max_seconds: float = ranged(900.0, 0, MAX_SECONDS, low_open=True)


@dataclass
class Residual:
    """What the decoder peels: the first layer's residual weight gradient G (width × inputs) and bias gradient h
    (float64), the victim's float64 copy that certifies and subtracts, and the batch size B."""

    G: torch.Tensor
    h: torch.Tensor
    net: Any
    """An FC victim (`logits_from`, `linear_layers`), float64."""
    weight: torch.Tensor
    bias: torch.Tensor
    B: int

    def sensitivities(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For candidates x (M × inputs): the pre-activations z (M × width), Jᵀp (M × width) and
        J (M × classes × width), J = ∂u/∂z at each."""
        z = (x @ self.weight.T + self.bias).requires_grad_(True)
        u = self.net.logits_from(z, 1)
        p = torch.softmax(u.detach(), dim=1)
        rows = [torch.autograd.grad(u[:, k].sum(), z, retain_graph=k + 1 < u.shape[1])[0] for k in range(u.shape[1])]
        J = torch.stack(rows, dim=1)
        return z.detach(), torch.einsum("mk,mkn->mn", p, J), J

    def subtract(self, x: torch.Tensor, labels: torch.Tensor) -> None:
        """Peel the samples x with labels: subtract their first-layer gradient of (1/B) Σ ℓ(x, y) (Eq. 15–16)."""
        weight = self.weight.detach().requires_grad_(True)
        bias = self.bias.detach().requires_grad_(True)
        u = self.net.logits_from(x @ weight.T + bias, 1)
        loss = nn.functional.cross_entropy(u, labels, reduction="sum") / self.B
        dG, dh = torch.autograd.grad(loss, [weight, bias])
        self.G -= dG
        self.h -= dh


@dataclass
class Peeled:
    """The decoder's outcome: recovered inputs (k × inputs) with labels and certificate residuals, per iteration
    the samples it certified, and why it stopped."""

    inputs: list[torch.Tensor] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    eps: list[float] = field(default_factory=list)
    per_iteration: list[int] = field(default_factory=list)
    candidates: int = 0
    rejected: int = 0
    stop: str = ""


@register_attack
class PeelingAttack(Attack[PeelingConfig]):
    name = "peeling"
    paper = Citation("Shariati & Alambardar Meybodi, arXiv 2026", "https://arxiv.org/abs/2609.09659")
    description = ("LT-code peeling (Shariati & Alambardar Meybodi, arXiv:2609.09659): degree-1 neurons give a sample "
                   "as dL/dW_j / dL/db_j, certified, peeled off")
    Config = PeelingConfig
    requires = Requirements(linear_relu_layer=True, batch_size=True)
    aware_of = AGGREGATES  # the aggregate of K clients is one batch of K·b: it is peeled as it is

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        model = update.model
        if not all(hasattr(model, name) for name in ("logits_from", "linear_layers", "denormalize")):
            raise ConfigError("peeling needs an FC victim (logits_from, linear_layers, denormalize: fc, lt-mlp)")
        weight, bias = model.layer_param_names(1)
        if weight not in update.gradients or bias not in update.gradients:
            raise ConfigError("peeling needs the first layer's weight and bias gradients")

    def budget(self) -> str:
        return f"{self.config.max_seconds:g} s"

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        """The certified samples of the peeling decoder (deterministic: `seed` is not used)."""
        self.check_update(update)
        start = time.perf_counter()
        assert update.batch_size is not None  # Requirements(batch_size=True)
        residual = residual_of(update)
        peeled = peel(residual, update.model, self.config, start)
        stats: dict[str, Any] = {"certified": len(peeled.inputs), "iterations": len(peeled.per_iteration),
                                 "per_iteration": peeled.per_iteration, "candidates": peeled.candidates,
                                 "rejected_last": peeled.rejected, "labels": peeled.labels,
                                 "max_certified_eps": max(peeled.eps, default=0.0), "stop": peeled.stop,
                                 "seconds": time.perf_counter() - start}
        return answer(update, peeled, stats)


def residual_of(update: ClientUpdate) -> Residual:
    """The decoder's starting point: the update's first-layer gradients in float64 and a float64 copy of the victim."""
    model = update.model
    weight_name, bias_name = model.layer_param_names(1)
    net: Any = copy.deepcopy(model).to(torch.float64).eval().requires_grad_(False)  # an FC victim: check_update
    first = net.linear_layers()[0]
    assert update.batch_size is not None
    return Residual(G=update.gradients[weight_name].detach().to("cpu", torch.float64).clone(),
                    h=update.gradients[bias_name].detach().to("cpu", torch.float64).clone(),
                    net=net, weight=first.weight.detach(), bias=first.bias.detach(), B=int(update.batch_size))


def peel(res: Residual, model: ImageVictim, cfg: PeelingConfig, start: float) -> Peeled:
    """Algorithm 1: candidates, deduplication, certificate, peeling, until an iteration certifies nothing."""
    out = Peeled()
    while True:
        if time.perf_counter() - start > cfg.max_seconds:
            out.stop = "budget"
            return out
        if len(out.per_iteration) >= cfg.max_iters:
            out.stop = "max iterations"
            return out
        rows, cands = candidates(res, model, cfg)
        out.candidates += int(rows.numel())
        kept = deduplicated(cands, torch.stack(out.inputs) if out.inputs else None, cfg.dedup_tol)
        if not kept:
            out.stop = "no candidate"
            return out
        reps = cands[kept]
        labels, eps = certified(res, reps, rows[kept], cfg)
        accepted = torch.nonzero(eps < cfg.cert_tol).flatten()
        out.rejected = len(kept) - int(accepted.numel())
        if not accepted.numel():
            out.stop = "nothing certified"
            return out
        res.subtract(reps[accepted], labels[accepted])
        out.inputs += list(reps[accepted])
        out.labels += [int(y) for y in labels[accepted]]
        out.eps += [float(e) for e in eps[accepted]]
        out.per_iteration.append(int(accepted.numel()))


def candidates(res: Residual, model: ImageVictim, cfg: PeelingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The live neurons (|h| > ratio_tol) whose ratio G[j]/h[j] is finite and, with `range_filter`, lies in the data
    range (its image within [−margin, 1 + margin]): their indices and the ratios (Eq. 9), in neuron order."""
    live = torch.nonzero(res.h.abs() > cfg.ratio_tol).flatten()
    ratios = res.G[live] / res.h[live, None]
    inside = torch.isfinite(ratios).all(dim=1)
    if cfg.range_filter:
        images = model.denormalize(ratios).flatten(1)
        inside &= (images >= -cfg.range_margin).all(dim=1) & (images <= 1 + cfg.range_margin).all(dim=1)
    return live[inside], ratios[inside]


def deduplicated(cands: torch.Tensor, known: torch.Tensor | None, tol: float) -> list[int]:
    """The candidates kept (§V-C), in order, as the released code keeps them: a candidate within `tol` of an
    earlier kept one is that one again; otherwise one within `tol` of a `known` (recovered) sample is dropped;
    otherwise it is kept."""
    n_known = 0 if known is None else len(known)
    points = cands if known is None else torch.cat([known, cands])
    close: dict[int, list[int]] = {}
    for i, k in close_pairs(points, tol):
        close.setdefault(k, []).append(i)  # i < k: an earlier point
    kept: set[int] = set()
    for k in range(n_known, len(points)):
        earlier = close.get(k, [])
        if any(i in kept for i in earlier) or any(i < n_known for i in earlier):
            continue  # a kept candidate again, or a recovered sample again
        kept.add(k)
    return sorted(k - n_known for k in kept)


def close_pairs(points: torch.Tensor, tol: float) -> list[tuple[int, int]]:
    """Every pair (i, k), i < k, of rows of `points` closer than `tol` (Euclidean). Rows are sorted along one
    fixed random direction, which brings any two within `tol` within `tol` of each other there; only those
    pairs are measured (O(M·F) rather than the M² distances)."""
    direction = torch.randn(points.shape[1], generator=torch.Generator().manual_seed(0), dtype=points.dtype)
    position = points @ (direction / torch.linalg.vector_norm(direction))
    order = torch.argsort(position).tolist()
    sorted_position = position[order].tolist()
    pairs = []
    for a in range(len(order)):
        for c in range(a + 1, len(order)):
            if sorted_position[c] - sorted_position[a] >= tol:
                break
            i, k = order[a], order[c]
            if float(torch.linalg.vector_norm(points[i] - points[k])) < tol:
                pairs.append((min(i, k), max(i, k)))
    return pairs


def certified(res: Residual, reps: torch.Tensor, sources: torch.Tensor,
              cfg: PeelingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The released code's certificate (`_row_fit`) of each candidate x̂ with its source row: its label ŷ and ε,
    ε = ∞ when the source row does not fit (see the module docstring, step 3). Rows: the live neurons x̂ fires
    and the source row; the residual of label ℓ on row j is |(1/B)[(Jᵀp)_j − J[ℓ, j]] − h[j]|."""
    labels, eps = [], []
    width, classes = res.G.shape[0], int(res.net.linear_layers()[-1].weight.shape[0])
    chunk = max(1, JACOBIAN_VALUES // (classes * width))
    live = res.h.abs() > cfg.ratio_tol
    for lo in range(0, len(reps), chunk):
        z, Jp, J = res.sensitivities(reps[lo:lo + chunk])
        src = sources[lo:lo + chunk]
        rows = (z > 0) & live
        rows[torch.arange(len(src)), src] = True
        residual = ((Jp[:, None, :] - J) / res.B - res.h).abs()  # M × classes × width
        best, vote = residual.min(dim=1)  # each row's best label and its residual
        fits = rows & (best < cfg.cert_tol)
        ballot = torch.zeros(len(src), classes, dtype=torch.float64)
        counts = ballot.scatter_add(1, vote, fits.to(torch.float64))  # M × classes: fitting rows voting for each
        summed = ballot.scatter_add(1, vote, torch.where(fits, best, 0.0))  # and their summed residuals
        top = counts == counts.max(dim=1, keepdim=True).values
        label = torch.where(top, summed, torch.inf).argmin(dim=1)  # ties: the smaller sum, then the smaller label
        picked = residual.gather(1, label[:, None, None].expand(-1, 1, width))[:, 0]
        norm = torch.linalg.vector_norm(torch.where(fits, picked, 0.0), dim=1)
        source_fits = fits[torch.arange(len(src)), src]
        labels.append(label)
        eps.append(torch.where(source_fits, norm, torch.inf))
    return torch.cat(labels), torch.cat(eps)


def answer(update: ClientUpdate, peeled: Peeled, stats: dict[str, Any]) -> Reconstruction:
    """The Reconstruction: failed (not applicable) when nothing was certified — no neuron isolates a sample —
    or (budget) when time ran out first; the certified samples as images otherwise, partial when fewer than B."""
    B = int(update.batch_size or 0)
    k = len(peeled.inputs)
    if not k:
        if peeled.stop == "budget":
            return Reconstruction.failed("peeling: the time budget ran out before a sample was certified",
                                         failure="budget", stats=stats)
        seen = f"none of {peeled.candidates} candidates passed the certificate" if peeled.candidates else \
            "no live neuron gave a candidate in the data range"
        return Reconstruction.failed(f"peeling: no degree-1 neuron ({seen}): no neuron fires for exactly one "
                                     "sample", failure="not-applicable", stats=stats)
    model = update.model
    images = model.denormalize(torch.stack(peeled.inputs)).clamp(0.0, 1.0).to(torch.float32)
    if k >= B:
        reason = "" if k == B else f"certified {k} samples for a batch of {B}: at least {k - B} are false accepts"
        return Reconstruction(status="ok", space="image", images=images, layer=1, reason=reason, stats=stats)
    why = "time budget" if peeled.stop == "budget" else \
        f"the iteration cap ({len(peeled.per_iteration)} iterations)" if peeled.stop == "max iterations" else \
        f"the cascade stalled after {len(peeled.per_iteration)} iterations: no neuron isolates a remaining sample"
    return Reconstruction.partial(why, space="image", images=images, layer=1, stats=stats)


__all__ = ["PeelingAttack", "PeelingConfig", "peel"]
