"""Cocktail Party Attack (Kariyappa et al., ICML 2023): blind source separation of a linear layer's gradient.

For `z = W x + c` and the mean batch loss, `dL/dW = Σ_i δ_i x_iᵀ` and `dL/dc = Σ_i δ_i`: each row of
the weight gradient is a mixture of the b inputs, with the pixels as samples. ICA unmixes the rows
into b sources, each one input up to sign, scale and offset; the bias gradient fixes all three
without any oracle (notes/baselines.md):

    G ≈ A (S + μ 1ᵀ)   (A: m×b mixing, S: b×d centred sources, mean = A μ)
    solve A α = dL/dc and A μ = mean  →  x_k = (S_k + μ_k) / α_k.

Whatever unmixing is found, this gives affine combinations of the true inputs whose weights sum
to one; a perfect unmixing gives the inputs themselves.

Two unmixing methods: scikit-learn's FastICA (`fastica`), or the official code's objective
(`official`: whiten to b dims, learn a b×b unmixing with Adam on a decorrelation penalty plus
total variation). The official evaluation fixes signs with the ground truth; this one never does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from leakbench.attacks.base import AGGREGATES, Attack, Checkpoints, Reconstruction, Requirements
from leakbench.attacks.ica import fastica
from leakbench.attacks.registry import register_attack
from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_DEPTH
from leakbench.core.ranges import MAX_LR, MAX_SECONDS, MAX_STEPS, MAX_WEIGHT, Ranged, chosen, ranged
from leakbench.fl.update import ClientUpdate
from leakbench.progress import steps as progress_steps

MAX_TEMPERATURE = 500.0
"""The decorrelation temperature T: exp(T·|cos|) overflows float64 past T ≈ 709."""


@dataclass(frozen=True)
class CPAConfig(Ranged):
    """Cocktail Party Attack hyperparameters.

    layer: linear layer (1-based) whose weight gradient is unmixed; layer 1 gives images, a
        deeper layer gives its (post-ReLU) input features.
    method: "fastica" (scikit-learn FastICA, logcosh, unit-variance whitening) or "official"
        (the released code's objective: decorrelation + TV, optimised with Adam).
    max_iter: FastICA's iteration cap; reaching it is reported as `converged: False`.
    tol: FastICA's convergence tolerance.
    iterations: Adam steps of the official objective (the paper runs 25,000).
    lr: Adam step size of the official objective (paper: 1e-3).
    decor: weight of the decorrelation term mean(exp(T·|cos|) − 1) (paper, TinyImageNet FC-2: 1.47).
    temperature: T in that term (paper: 12.4; bounded so that exp(T) stays finite in float64).
    tv: weight of the total-variation prior on the sources viewed as images (paper: 3.1; layer 1 only).
    prefilter: "none" (the paper: ICA on the raw gradient rows) or "derivative" (fastica, layer 1
        only: estimate the unmixing on the rows' horizontal and vertical pixel differences, then
        apply it to the raw rows). Mixing commutes with any linear filter over pixels, and image
        derivatives are far more non-Gaussian and less correlated across images than raw pixels,
        which FastICA needs; not part of the published attack.
    max_seconds: fastica only; 0 (the published attack): scikit-learn's estimator, unbounded. Above 0: a wall-clock
        bound on FastICA (whitening included; at least 5 iterations run), reported as `timed_out` — leakbench's
        addition for CPA as spear-guided's guide (attacks/ica.py).
    whiten_solver: fastica only; scikit-learn's whitening solver: "svd" (its default) or "eigh" (the features'
        Gram matrix: 3× faster at 24,192 × 2,000).
    """

    layer: int = ranged(1, 1, MAX_DEPTH)
    method: str = chosen("fastica", "fastica", "official")
    max_iter: int = ranged(1000, 1, MAX_STEPS)
    tol: float = ranged(1e-4, 0, 1, low_open=True)
    iterations: int = ranged(2000, 1, MAX_STEPS)
    lr: float = ranged(1e-3, 0, MAX_LR, low_open=True)
    decor: float = ranged(1.47, 0, MAX_WEIGHT)
    temperature: float = ranged(12.4, 0, MAX_TEMPERATURE, low_open=True)
    tv: float = ranged(3.1, 0, MAX_WEIGHT)
    prefilter: str = chosen("none", "none", "derivative")
    max_seconds: float = ranged(0.0, 0, MAX_SECONDS)
    whiten_solver: str = chosen("svd", "svd", "eigh")

    def __post_init__(self) -> None:
        super().__post_init__()  # declared ranges and choices (leakbench.core.ranges)
        if self.prefilter == "derivative" and (self.method != "fastica" or self.layer != 1):
            raise ConfigError(f"cpa: prefilter 'derivative' needs method 'fastica' on layer 1, "
                              f"got method {self.method!r} on layer {self.layer}")


@register_attack
class CPAAttack(Attack[CPAConfig]):
    name = "cpa"
    aware_of = AGGREGATES  # the aggregate of K clients is one batch of K·b: CPA separates it as it is
    paper = Citation("Kariyappa et al., ICML 2023", "https://arxiv.org/abs/2209.05578")
    description = ("Cocktail Party Attack: ICA unmixing of a linear layer's weight gradient, "
                   "bias gradient fixes sign/scale")
    Config = CPAConfig
    requires = Requirements(batch_size=True)

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        cfg = self.config
        model = update.model
        if not hasattr(model, "layer_param_names") or not hasattr(model, "denormalize"):
            raise ConfigError("cpa needs a victim exposing layer_param_names() and denormalize() (e.g. FCNet)")
        if cfg.prefilter == "derivative" and len(getattr(model, "input_shape", ())) != 3:
            raise ConfigError("cpa: prefilter 'derivative' needs method 'fastica' on layer 1 of an image model")
        weight, bias = model.layer_param_names(cfg.layer)
        if weight not in update.gradients or bias not in update.gradients:
            raise ConfigError(f"cpa needs the weight and bias gradients of layer {cfg.layer}")
        m, n = update.gradients[weight].shape
        assert update.batch_size is not None  # Requirements(batch_size=True): checked by super().check_update
        b = int(update.batch_size)
        if b > min(m, n):
            raise ConfigError(f"cpa can unmix at most min(width, input size) = {min(m, n)} sources; "
                              f"got batch size {b} at layer {cfg.layer}")

    def budget(self) -> str:
        cfg = self.config
        return f"{cfg.iterations:,} steps" if cfg.method == "official" else f"FastICA ≤ {cfg.max_iter:,} iterations"

    def reconstruct(self, update: ClientUpdate, *, seed: int, checkpoints: Checkpoints | None = None
                    ) -> Reconstruction:
        """The unmixed batch. `checkpoints` (method "official" only) reports the answer after chosen
        Adam steps along the run; each equals the answer of a run with `iterations` set to that step."""
        self.check_update(update)
        cfg = self.config
        if checkpoints is not None and cfg.method != "official":
            raise ConfigError("cpa: checkpoints need method 'official' (FastICA has no steps to report)")
        start = time.perf_counter()
        model = update.model
        weight, bias = model.layer_param_names(cfg.layer)
        G = update.gradients[weight].detach().to(torch.float64).cpu().numpy()
        g = update.gradients[bias].detach().to(torch.float64).cpu().numpy()
        assert update.batch_size is not None  # checked by check_update
        b = int(update.batch_size)
        space = self.reconstructs(cfg.layer)
        stats: dict[str, Any] = {"method": cfg.method}
        try:
            if b == 1:
                X, more = _closed_form_single(G, g)
            elif cfg.method == "fastica":
                shape = tuple(model.input_shape) if cfg.prefilter == "derivative" else None
                X, more = _fastica(G, g, b, seed, cfg, shape)
            else:
                shape = tuple(model.input_shape) if cfg.layer == 1 and hasattr(model, "input_shape") else None
                on_step = None
                if checkpoints is not None:
                    def on_step(step: int, X_step: np.ndarray, info: dict[str, Any]) -> None:
                        checkpoints.report(step, self._answer(model, X_step, {**stats, **info}, start))
                X, more = _official(G, g, b, cfg, shape, checkpoints.steps if checkpoints else (), on_step)
        except (ValueError, np.linalg.LinAlgError, RuntimeError) as exc:
            stats["seconds"] = time.perf_counter() - start
            return Reconstruction.failed(f"cpa: unmixing failed ({exc})", failure="error", space=space, layer=cfg.layer,
                                         stats=stats)
        return self._answer(model, X, {**stats, **more}, start)

    def _answer(self, model: Any, X: np.ndarray, stats: dict[str, Any], start: float) -> Reconstruction:
        """The Reconstruction of unmixed inputs X (b, d): images on layer 1, features deeper."""
        layer = self.config.layer
        stats["seconds"] = time.perf_counter() - start
        if not np.isfinite(X).all():
            return Reconstruction.failed("cpa: recovered inputs are not finite (a source scale is zero)",
                                         failure="verification", space=self.reconstructs(layer), layer=layer,
                                         stats=stats)
        dtype = next(model.parameters()).dtype
        feats = torch.from_numpy(X).to(dtype)
        if layer != 1:
            return Reconstruction(status="ok", space="feature", features=feats, layer=layer, stats=stats)
        images = model.denormalize(feats).to(torch.float32).clamp(0.0, 1.0)
        return Reconstruction(status="ok", space="image", images=images, features=feats, layer=1, stats=stats)


# --------------------------------------------------------------------------- unmixing


def _closed_form_single(G: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """b = 1: every row is g[r]·x; least squares over all rows, x = gᵀG / gᵀg (weights g[r]²)."""
    denom = float(g @ g)
    if denom == 0.0:
        raise ValueError("the bias gradient is zero; no row carries the input")
    x = (g @ G) / denom
    return x[None, :], {"converged": True, "closed_form": True, "iterations": 0}


def sources_to_inputs(S: np.ndarray, A: np.ndarray, mean: np.ndarray, g: np.ndarray
                      ) -> tuple[np.ndarray, dict[str, Any]]:
    """Undo sign, scale and offset of centred sources S (b×d) with mixing A (m×b), row mean `mean`.

    Solves A α = g (bias gradient) and A μ = mean in least squares; x_k = (S_k + μ_k) / α_k.
    """
    alpha, *_ = np.linalg.lstsq(A, g, rcond=None)
    mu, *_ = np.linalg.lstsq(A, mean, rcond=None)
    X = (S + mu[:, None]) / alpha[:, None]
    g_norm = float(np.linalg.norm(g)) or 1.0
    info = {
        "bias_residual": float(np.linalg.norm(A @ alpha - g)) / g_norm,
        "min_abs_scale": float(np.abs(alpha).min()),
        "scale_spread": float(np.abs(alpha).max() / max(np.abs(alpha).min(), 1e-300)),
    }
    return X, info


def _fastica(G: np.ndarray, g: np.ndarray, b: int, seed: int, cfg: CPAConfig,
             derivative_shape: tuple[int, ...] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """FastICA with rows of G as mixtures (features) and pixels as samples: fit on Gᵀ (d×m).

    With `derivative_shape` (C, H, W), the unmixing is learnt on the rows' pixel differences and
    applied to the raw, centred rows.
    """
    # Dead neurons give all-zero rows; they carry nothing, and scikit-learn's whitening multiplies
    # the PCA basis by sign(u[0]) — the first feature's loadings — which wipes a component when
    # that feature is an all-zero row (sign 0). Keep the live rows, the largest first.
    norms = np.linalg.norm(G, axis=1)
    live = np.flatnonzero((norms > 0) | (g != 0))
    live = live[np.argsort(-norms[live], kind="stable")]
    if live.size < b:
        raise ValueError(f"only {live.size} non-zero gradient rows for {b} sources")
    G, g = G[live], g[live]
    learnt_on = G if derivative_shape is None else pixel_differences(G, derivative_shape)
    ica = fastica(learnt_on.T, b, seed=seed, max_iter=cfg.max_iter, tol=cfg.tol, max_seconds=cfg.max_seconds,
                  whiten_solver=cfg.whiten_solver)
    mean = G.mean(axis=1)  # the rows' pixel means (ica.mean on the raw route)
    S = ica.components @ (G - mean[:, None])  # (b, d) centred sources
    X, info = sources_to_inputs(S, ica.mixing, mean, g)
    info.update({"converged": ica.converged, "iterations": ica.iterations, "live_rows": int(live.size)})
    if ica.timed_out:
        info["timed_out"] = True
    return X, info


def _official(G: np.ndarray, g: np.ndarray, b: int, cfg: CPAConfig, shape: tuple[int, ...] | None,
              report_steps: Collection[int] = (),
              on_step: Callable[[int, np.ndarray, dict[str, Any]], None] | None = None,
              ) -> tuple[np.ndarray, dict[str, Any]]:
    """The released CPA objective: centre, whiten to b dims, Adam on decorrelation + TV of W_hat.

    After each step count in `report_steps`, `on_step(step, X, info)` gets the inputs that stopping
    there would give (computed from a copy of the unmixing; the run goes on unchanged).
    """
    Xg = torch.from_numpy(G)
    mu_rows = Xg.mean(dim=1, keepdim=True)
    Xc = Xg - mu_rows
    cov = Xc @ Xc.T / max(Xc.shape[1] - 1, 1)
    evals, evecs = torch.linalg.eigh(cov)
    top = torch.argsort(evals.abs(), descending=True)[:b]
    lam = evals[top].abs()
    U = evecs[:, top]  # (m, b)
    eps = 1e-20
    W_w = torch.diag(1.0 / (lam.sqrt() + eps)) @ U.T  # (b, m)
    X_w = (W_w @ Xc).to(torch.float32)  # (b, d)
    offset = (W_w @ mu_rows).to(torch.float32)  # (b, 1): whitened row mean
    W_hat = torch.eye(b, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([W_hat], lr=cfg.lr)
    tv_shape = shape if cfg.tv > 0 and shape is not None and len(shape) == 3 else None  # TV of (C, H, W) images
    first = last = float("nan")

    def unmixed(steps_done: int) -> tuple[np.ndarray, dict[str, Any]]:
        with torch.no_grad():
            Wn = (W_hat / (W_hat.norm(dim=-1, keepdim=True) + eps)).to(torch.float64)
            unmix = Wn @ W_w  # (b, m)
            S = (unmix @ Xc).numpy()  # centred sources
            A = torch.linalg.pinv(unmix).numpy()  # (m, b) mixing
        X, info = sources_to_inputs(S, A, mu_rows[:, 0].numpy(), g)
        info.update({"converged": bool(np.isfinite(last)), "iterations": steps_done, "initial_loss": first,
                     "final_loss": last})
        return X, info

    for step in progress_steps(range(cfg.iterations), total=cfg.iterations, desc="cpa Adam steps"):
        opt.zero_grad()
        Wn = W_hat / (W_hat.norm(dim=-1, keepdim=True) + eps)
        loss = cfg.decor * (torch.exp(cfg.temperature * (Wn @ Wn.T).abs()) - 1).mean()
        if tv_shape is not None:
            S_hat = Wn @ X_w + Wn @ offset
            loss = loss + cfg.tv * total_variation(S_hat.view(b, *tv_shape))
        loss.backward()
        opt.step()
        if step == 0:
            first = float(loss.detach())
        last = float(loss.detach())
        if on_step is not None and step + 1 in report_steps:
            on_step(step + 1, *unmixed(step + 1))
    return unmixed(cfg.iterations)


def pixel_differences(G: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Rows of G viewed as images (C, H, W): their horizontal and vertical differences, concatenated."""
    img = G.reshape(G.shape[0], *shape)
    dx = (img[..., :, 1:] - img[..., :, :-1]).reshape(G.shape[0], -1)
    dy = (img[..., 1:, :] - img[..., :-1, :]).reshape(G.shape[0], -1)
    return np.concatenate([dx, dy], axis=1)


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV of (b, C, H, W): mean |horizontal diff| + mean |vertical diff| (the official form)."""
    dx = (x[:, :, :, :-1] - x[:, :, :, 1:]).abs().mean() if x.shape[-1] > 1 else x.new_zeros(())
    dy = (x[:, :, :-1, :] - x[:, :, 1:, :]).abs().mean() if x.shape[-2] > 1 else x.new_zeros(())
    return dx + dy


__all__ = ["CPAAttack", "CPAConfig", "sources_to_inputs", "total_variation"]
