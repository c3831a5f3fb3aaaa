"""Gradient-matching baselines: Inverting Gradients (`ig`) and Deep Leakage from Gradients (`dlg`).

Both optimise dummy images so that the public model's gradient on them matches the shared one.
They work with any `nn.Module` victim that takes images in [0, 1] (shape from `model.input_shape`)
and is trained with the mean cross-entropy, as `leakbench.fl.update.fedsgd_update` computes it.

Dummy images live in the victim's normalised coordinates `z`, image = mean + std·z, with the
victim's scalar `mean`/`std` attributes when it has them (FCNet) and 0.5/0.5 otherwise; this is
breaching's convention ("data is initialised inside the network normalisation"), so a step
size or a standard-normal start means the same as there.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from leakbench.attacks.base import AGGREGATES, Attack, Checkpoints, ConfigT, Reconstruction, Requirements
from leakbench.attacks.cpa import total_variation
from leakbench.attacks.labels import STRATEGIES, find_last_layer, recover_labels
from leakbench.attacks.registry import register_attack
from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import MAX_LR, MAX_STEPS, MAX_WEIGHT, Ranged, chosen, ranged
from leakbench.fl.update import ClientUpdate
from leakbench.progress import steps as progress_steps

MAX_RESTARTS = 1000
"""Independent starts of Inverting Gradients."""
MAX_INNER = 10**4
"""L-BFGS function evaluations per step, and its memory (history_size)."""

GradientDistance = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], torch.Tensor]
Bounds = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Parameter name → (low, high), entrywise bounds of its true gradient (`GradientOracle`)."""


# --------------------------------------------------------------------------- gradient distances


def _total(terms: Iterable[torch.Tensor]) -> torch.Tensor:
    """`sum(terms)`, which is a tensor: there is at least one parameter gradient."""
    total = sum(terms)
    if not isinstance(total, torch.Tensor):
        raise ConfigError("no parameter gradients to compare")
    return total


def cosine_distance(rec: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """1 − cosine similarity of the concatenation of all parameter gradients (breaching's form)."""
    dot = _total((r * t).sum() for r, t in zip(rec, target, strict=True))
    rec_norm = _total(r.pow(2).sum() for r in rec).sqrt()
    target_norm = _total(t.pow(2).sum() for t in target).sqrt()
    return 1.0 - dot / (rec_norm * target_norm).clamp_min(torch.finfo(rec_norm.dtype).tiny)


def l2_distance(rec: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """Summed squared difference of all parameter gradients (DLG's distance)."""
    return _total((r - t).pow(2).sum() for r, t in zip(rec, target, strict=True))


# --------------------------------------------------------------------------- image priors


def padded_total_variation(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """breaching's TV of (b, C, H, W): forward differences with zero padding past the last row and
    column (there the difference is −x), mean over all b·C·H·W pixels of (|dx| + ε) + (|dy| + ε).

    breaching computes it as a 3×3 convolution with padding 1 (`TotalVariation`, inner and outer
    exponent 1); unlike `total_variation`, the border pixels' own values count, and both directions
    share one mean over H·W positions.
    """
    zero_col = x.new_zeros((*x.shape[:-1], 1))
    zero_row = x.new_zeros((*x.shape[:-2], 1, x.shape[-1]))
    dx = torch.cat([x[..., :, 1:], zero_col], dim=-1) - x
    dy = torch.cat([x[..., 1:, :], zero_row], dim=-2) - x
    return ((dx.abs() + eps) + (dy.abs() + eps)).mean()


TV_FORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "inversefed": total_variation, "breaching": padded_total_variation}
"""IG's total-variation forms: the original inversefed code's mean|dx| + mean|dy| (leakbench's
default, also CPA's), or breaching's zero-padded convolution form."""


# --------------------------------------------------------------------------- the differentiable victim


class GradientOracle:
    """A private, differentiable copy of the public model with the shared gradients as targets, in
    the mode the threat model says the client used (BatchNorm on the dummy batch's statistics in
    train mode).

    `masks` (parameter name → boolean tensor of its shape) restricts the comparison to the entries
    marked True in those tensors (the adaptive variants, `leakbench.attacks.adaptive`); the others
    are compared whole. `bounds` (parameter name → (low, high) of its shape) replaces that tensor's target by a
    box of possible true gradients: the candidate's gradient is compared with the point of the box nearest to
    it, itself clamped to [low, high] (`leakbench.attacks.dequant`), so it costs nothing inside the box.
    """

    def __init__(self, update: ClientUpdate, masks: dict[str, torch.Tensor] | None = None,
                 bounds: Bounds | None = None) -> None:
        self.model = copy.deepcopy(update.model).train(update.threat.bn_mode == "train")
        named = dict(self.model.named_parameters())
        self.names = [n for n in named if n in update.gradients]
        if not self.names:
            raise ConfigError("the update holds no gradient of any model parameter")
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.params = [named[n].requires_grad_(True) for n in self.names]
        self.dtype = self.params[0].dtype
        self.targets = [update.gradients[n].detach().to(self.dtype) for n in self.names]
        self.masks = [None if masks is None or n not in masks else masks[n].to(self.dtype) for n in self.names]
        self.targets = [t if m is None else t * m for t, m in zip(self.targets, self.masks, strict=True)]
        self.bounds = [None if bounds is None or n not in bounds else
                       (bounds[n][0].to(self.dtype), bounds[n][1].to(self.dtype)) for n in self.names]
        shape = getattr(update.model, "input_shape", None)
        if shape is None:
            raise ConfigError("gradient matching needs the victim's image shape (`model.input_shape`)")
        self.image_shape = tuple(int(s) for s in shape)
        mean, std = getattr(update.model, "mean", 0.5), getattr(update.model, "std", 0.5)
        scalar = isinstance(mean, (int, float)) and isinstance(std, (int, float)) and std > 0
        self.mean, self.std = (float(mean), float(std)) if scalar else (0.5, 0.5)
        self.z_low, self.z_high = (0.0 - self.mean) / self.std, (1.0 - self.mean) / self.std

    def images(self, z: torch.Tensor) -> torch.Tensor:
        return self.mean + self.std * z

    def gradients(self, z: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """dL/dθ of the mean cross-entropy at images(z); differentiable in z (create_graph)."""
        loss = F.cross_entropy(self.model(self.images(z)), labels)
        return torch.autograd.grad(loss, self.params, create_graph=True)

    def distance(self, z: torch.Tensor, labels: torch.Tensor, fn: GradientDistance) -> torch.Tensor:
        rec = [g if m is None else g * m for g, m in zip(self.gradients(z, labels), self.masks, strict=True)]
        return fn(rec, self.matched(rec))

    def matched(self, rec: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """What the candidate's gradients `rec` are compared with: the shared gradients, or for a tensor with
        bounds the point of its box nearest to `rec` (differentiable: the exact gradient of the distance)."""
        return [t if b is None else torch.clamp(r, b[0], b[1])
                for r, t, b in zip(rec, self.targets, self.bounds, strict=True)]


def _labels(update: ClientUpdate, b: int, strategy: str) -> tuple[torch.Tensor, str]:
    if update.labels is not None:
        return update.labels.detach().to(torch.int64).clone(), "given"
    return recover_labels(update.model, update.gradients, b, strategy)


def _check_batch(update: ClientUpdate) -> int:
    assert update.batch_size is not None  # Requirements(batch_size=True): checked by Attack.check_update first
    b = int(update.batch_size)
    if b < 1:
        raise ConfigError(f"batch size must be at least 1, got {b}")
    if update.labels is not None and int(update.labels.numel()) != b:
        raise ConfigError(f"{update.labels.numel()} labels given for batch size {b}")
    return b


def _finish(oracle: GradientOracle, z: torch.Tensor) -> torch.Tensor:
    """Final images: the candidate mapped to [0, 1], non-finite pixels set to grey."""
    x = oracle.images(z.detach()).to(torch.float32)
    return torch.nan_to_num(x, nan=0.5, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)


# --------------------------------------------------------------------------- Inverting Gradients


@dataclass(frozen=True)
class IGConfig(Ranged):
    """Inverting Gradients (Geiping et al., 2020) as breaching's `invertinggradients.yaml` sets it.

    iterations: Adam steps per restart (breaching: 24,000; the default here is CPU-sized).
    restarts: independent random starts; the one with the lowest gradient loss (cosine
        distance, without TV) is returned — never chosen by the ground truth.
    step_size: Adam learning rate, in the victim's normalised units (breaching: 0.1).
    tv: weight of the total-variation prior on the normalised candidate (breaching: 0.2).
    tv_form: "inversefed" (the original Inverting Gradients code: mean |dx| + mean |dy| over the
        image's inner differences) or "breaching" (breaching's zero-padded 3×3 convolution: mean
        over all pixels of |dx| + |dy|, border pixels' values included); see TV_FORMS.
    signed: apply Adam to the sign of the gradient (breaching's `signed: hard`).
    boxed: project the candidate onto valid pixels [0, 1] after every step.
    decay: learning rate ×0.1 at 3/8, 5/8 and 7/8 of the iterations (breaching's `step-lr`).
    label_strategy: how labels are recovered when the threat model withholds them:
        "bias-corrected" (breaching's default) or "uniform-counts" (see leakbench.attacks.labels).
    """

    iterations: int = ranged(500, 1, MAX_STEPS)
    restarts: int = ranged(1, 1, MAX_RESTARTS)
    step_size: float = ranged(0.1, 0, MAX_LR, low_open=True)
    tv: float = ranged(0.2, 0, MAX_WEIGHT)
    tv_form: str = chosen("inversefed", *TV_FORMS)
    signed: bool = True
    boxed: bool = True
    decay: bool = True
    label_strategy: str = chosen("bias-corrected", *STRATEGIES)


class _GradientMatchingAttack(Attack[ConfigT]):
    """Shared checks of the gradient-matching attacks: the batch (step counts, label strategy: declared
    ranges and choices of the Config)."""

    requires = Requirements(batch_size=True)
    aware_of = AGGREGATES  # the aggregate of K clients is one batch of K·b: a dummy batch of K·b matches it

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        _check_batch(update)

    def _begin(self, update: ClientUpdate, seed: int) -> tuple[float, int, GradientOracle, torch.Generator]:
        """Check the update; return the start time, batch size, gradient oracle and seeded generator."""
        self.check_update(update)
        start = time.perf_counter()
        assert update.batch_size is not None  # checked by check_update
        oracle = GradientOracle(update, self.masks(update), self.bounds(update))
        return start, int(update.batch_size), oracle, torch.Generator().manual_seed(seed)

    def masks(self, update: ClientUpdate) -> dict[str, torch.Tensor] | None:
        """The entries of each shared tensor the attack compares (None: all of them; the adaptive
        variants restrict it)."""
        return None

    def bounds(self, update: ClientUpdate) -> Bounds | None:
        """Boxes of possible true gradients for some shared tensors (None: the shared values are the targets;
        the dequantising variants, `leakbench.attacks.dequant`, read them from a known quantiser)."""
        return None


@register_attack
class InvertingGradientsAttack(_GradientMatchingAttack[IGConfig]):
    name = "ig"
    paper = Citation("Geiping et al., NeurIPS 2020", "https://arxiv.org/abs/2003.14053")
    description = "Inverting Gradients: cosine gradient matching + TV, signed Adam, box constraint, restarts"
    Config = IGConfig

    def reconstruct(self, update: ClientUpdate, *, seed: int, checkpoints: Checkpoints | None = None
                    ) -> Reconstruction:
        """The best restart's images. `checkpoints` (one restart only) reports, after chosen steps, the
        answer so far along this run — not what a shorter budget would give, since the step-size
        decay (`decay`) is placed at fractions of `iterations`."""
        cfg = self.config
        if checkpoints is not None and cfg.restarts != 1:
            raise ConfigError("ig: checkpoints need restarts = 1 (they report one run)")
        start, b, oracle, gen = self._begin(update, seed)
        labels, strategy = _labels(update, b, cfg.label_strategy)
        on_step = None
        if checkpoints is not None:
            def on_step(step: int, z: torch.Tensor, loss: float) -> None:
                stats = {"label_strategy": strategy, "labels": labels.tolist(), "final_loss": loss,
                         "iterations": step, "seconds": time.perf_counter() - start}
                checkpoints.report(step, Reconstruction(status="ok", space="image", images=_finish(oracle, z),
                                                        stats=stats))
        trials: list[dict[str, Any]] = []
        for _ in range(cfg.restarts):
            z0 = torch.randn((b, *oracle.image_shape), generator=gen, dtype=oracle.dtype)
            trials.append(self._trial(oracle, labels, z0, checkpoints.steps if checkpoints else (), on_step))
        finite = [t for t in trials if torch.isfinite(torch.as_tensor(t["final_loss"]))]
        stats: dict[str, Any] = {"label_strategy": strategy, "labels": labels.tolist(),
                                 "restart_losses": [t["final_loss"] for t in trials]}
        if not finite:
            stats["seconds"] = time.perf_counter() - start
            return Reconstruction.failed("ig: the gradient loss is non-finite in every restart", failure="error",
                                         stats=stats)
        best = min(finite, key=lambda t: t["final_loss"])
        stats.update({"initial_loss": best["initial_loss"], "final_loss": best["final_loss"],
                      "iterations": cfg.iterations, "restarts": cfg.restarts,
                      "seconds": time.perf_counter() - start})
        return Reconstruction(status="ok", space="image", images=_finish(oracle, best["z"]), stats=stats)

    def _trial(self, oracle: GradientOracle, labels: torch.Tensor, z0: torch.Tensor,
               report_steps: Collection[int] = (),
               on_step: Callable[[int, torch.Tensor, float], None] | None = None) -> dict[str, Any]:
        """One restart. After each step count in `report_steps`, `on_step(step, z, gradient loss)` gets
        the candidate that stopping there would return (the run goes on unchanged)."""
        cfg = self.config
        tv = TV_FORMS[cfg.tv_form]

        def objective_of(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            grad_loss = oracle.distance(z, labels, cosine_distance)
            return grad_loss, (grad_loss + cfg.tv * tv(z) if cfg.tv > 0 else grad_loss)

        def answer(best_z: torch.Tensor, best_obj: float, z: torch.Tensor) -> torch.Tensor:
            """The best of the scored candidates and the current one (not scored yet)."""
            last_obj = objective_of(z)[1]
            return z.detach().clone() if torch.isfinite(last_obj) and float(last_obj.detach()) < best_obj else best_z

        z = z0.clone()
        if cfg.boxed:  # the start the attack would output before any step
            z.clamp_(oracle.z_low, oracle.z_high)
        z.requires_grad_(True)
        opt = torch.optim.Adam([z], lr=cfg.step_size)
        milestones = sorted({max(1, int(cfg.iterations * f)) for f in (3 / 8, 5 / 8, 7 / 8)})
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1) if cfg.decay else None
        best_z, best_obj, initial = z.detach().clone(), float("inf"), float("nan")
        for it in progress_steps(range(cfg.iterations), total=cfg.iterations, desc="ig Adam steps"):
            opt.zero_grad(set_to_none=True)
            grad_loss, objective = objective_of(z)
            value = float(objective.detach())
            if it == 0:
                initial = float(grad_loss.detach())
            if not torch.isfinite(objective):
                break
            if value < best_obj:
                best_obj, best_z = value, z.detach().clone()
            (gz,) = torch.autograd.grad(objective, [z])
            z.grad = gz.sign() if cfg.signed else gz
            opt.step()
            if sched is not None:
                sched.step()
            if cfg.boxed:
                with torch.no_grad():
                    z.clamp_(oracle.z_low, oracle.z_high)
            if on_step is not None and it + 1 in report_steps:
                chosen = answer(best_z, best_obj, z)
                on_step(it + 1, chosen, float(oracle.distance(chosen.clone(), labels, cosine_distance).detach()))
        best_z = answer(best_z, best_obj, z)  # the last step's candidate has not been scored yet
        final = float(oracle.distance(best_z.clone(), labels, cosine_distance).detach())
        return {"z": best_z, "initial_loss": initial, "final_loss": final}


# --------------------------------------------------------------------------- Deep Leakage from Gradients


@dataclass(frozen=True)
class DLGConfig(Ranged):
    """Deep Leakage from Gradients (Zhu et al., 2019).

    iterations: L-BFGS steps (DLG: 300; the default here is CPU-sized).
    inner_iterations: function evaluations L-BFGS may spend inside one step (torch's default 20,
        as in the DLG code).
    lr: L-BFGS learning rate (DLG: 1).
    optimize_labels: optimise soft labels jointly (softmax of dummy logits), as DLG does; when
        False, use the given labels or recover them from the last layer (iDLG-style).
    label_strategy: recovery rule when optimize_labels is False and labels are withheld.
    history_size: L-BFGS memory.
    """

    iterations: int = ranged(100, 1, MAX_STEPS)
    inner_iterations: int = ranged(20, 1, MAX_INNER)
    lr: float = ranged(1.0, 0, MAX_LR, low_open=True)
    optimize_labels: bool = True
    history_size: int = ranged(100, 1, MAX_INNER)
    label_strategy: str = chosen("bias-corrected", *STRATEGIES)


@register_attack
class DeepLeakageAttack(_GradientMatchingAttack[DLGConfig]):
    name = "dlg"
    paper = Citation("Zhu et al., NeurIPS 2019", "https://arxiv.org/abs/1906.08935")
    description = "Deep Leakage from Gradients: L2 gradient matching, L-BFGS on dummy images and soft labels"
    Config = DLGConfig

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        cfg = self.config
        start, b, oracle, gen = self._begin(update, seed)
        z = torch.randn((b, *oracle.image_shape), generator=gen, dtype=oracle.dtype).requires_grad_(True)
        variables = [z]
        stats: dict[str, Any] = {}
        if cfg.optimize_labels:
            num_classes = find_last_layer(update.model, update.gradients).num_classes
            logits = torch.randn((b, num_classes), generator=gen, dtype=oracle.dtype).requires_grad_(True)
            variables.append(logits)
            stats["label_strategy"] = "optimized (soft labels, softmax of dummy logits)"

            def targets() -> torch.Tensor:
                return F.softmax(logits, dim=-1)
        else:
            hard, strategy = _labels(update, b, cfg.label_strategy)
            stats["label_strategy"] = strategy

            def targets() -> torch.Tensor:
                return hard

        opt = torch.optim.LBFGS(variables, lr=cfg.lr, max_iter=cfg.inner_iterations,
                                history_size=cfg.history_size)

        def closure() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = oracle.distance(z, targets(), l2_distance)
            grads = torch.autograd.grad(loss, variables)
            for v, gv in zip(variables, grads, strict=True):
                v.grad = gv
            return loss

        def current_loss() -> float:
            return float(oracle.distance(z, targets(), l2_distance).detach())

        initial = current_loss()
        best_loss, best_z, steps = initial, z.detach().clone(), 0
        for _ in progress_steps(range(cfg.iterations), total=cfg.iterations, desc="dlg L-BFGS steps"):
            opt.step(closure)
            steps += 1
            loss = current_loss()
            if not torch.isfinite(torch.as_tensor(loss)) or not torch.isfinite(z).all():
                stats["diverged_at_step"] = steps
                break
            if loss < best_loss:
                best_loss, best_z = loss, z.detach().clone()
        stats.update({"initial_loss": initial, "final_loss": best_loss, "iterations": steps,
                      "seconds": time.perf_counter() - start})
        if cfg.optimize_labels:
            stats["labels"] = sorted(int(c) for c in logits.detach().argmax(dim=-1))
        if not torch.isfinite(torch.as_tensor(initial)) and best_loss == initial:
            return Reconstruction.failed("dlg: the gradient distance is non-finite", failure="error", stats=stats)
        return Reconstruction(status="ok", space="image", images=_finish(oracle, best_z), stats=stats)


__all__ = ["TV_FORMS", "Bounds", "DLGConfig", "DeepLeakageAttack", "GradientOracle", "IGConfig",
           "InvertingGradientsAttack", "cosine_distance", "l2_distance", "padded_total_variation"]
