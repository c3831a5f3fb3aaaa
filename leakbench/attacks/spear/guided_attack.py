"""Guided SPEAR as a registered attack: run a guide attack on the same update, then SPEAR led by it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from leakbench.attacks.base import Reconstruction
from leakbench.attacks.spear.attack import ChunkSource, SpearAttack, SpearConfig, StatsFn
from leakbench.attacks.spear.deflation import SampleState
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fastfit import FitCache, fit_once_normal
from leakbench.attacks.spear.guide_fits import fit_guide_patterns
from leakbench.attacks.spear.guided import Guide, guided_chunk, make_guide
from leakbench.attacks.spear.residual import ResidualGuides
from leakbench.attacks.spear.state import SearchSettings
from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate
from leakbench.harness.limits import MAX_WIDTH
from leakbench.ranges import ranged

MAX_POOL = 1000.0
"""pool_start and pool_growth: at most 1000 (a pool never holds more than the live neurons)."""
MAX_ROUNDS = 10**4
"""Chunks without a sample before a residual guide, and guide-pattern refit rounds."""


@dataclass(frozen=True)
class GuidedSpearConfig(SpearConfig):
    """SPEAR's hyperparameters plus the guide's.

    guide: registered attack whose reconstruction predicts the ReLU patterns (it sees only the
        update, like every attack); "cpa" is fast and accurate enough at b = 50–100.
    guide_options: that attack's hyperparameters (its `layer` is set to SPEAR's); CPA on layer 1
        defaults to the derivative prefilter.
    pool_start: each guide draws its rows among its pool_start·(rows needed) most confidently
        inactive neurons at first.
    pool_growth: the pool grows by this factor after every chunk in which the guide is not
        matched to a found sample.
    refine_first: try each guide's whole pool as a zero set before drawing subsets of it (guided.py).
    Once every unmatched guide's pool holds all live neurons, SPEAR's own routes (`sampler`) go on.
    fast_fit: next-layer fits by normal equations, each (pattern, free rows) fitted once per search
        (fastfit.py; leakbench addition, issue 16); same accepted samples, far cheaper at b ≥ 150.
    residual_after / residual_max_missing: residual guides (residual.py; leakbench addition, issue 16):
        once the guide in use went residual_after guided chunks without a new sample and at most
        residual_max_missing samples are missing, follow a new guide made from the residual problem
        of the missing samples (FastICA on the deflated factor L N); 0 missing turns it off.
    residual_from_b: residual guides only for b ≥ this (below it, b ≤ 100 keeps the draws measured
        before; at embedded b = 8, layer 3, they cost the chunk that found the last sample).
    pattern_fit_rounds / pattern_fit_from_b: guide-pattern fits (guide_fits.py; leakbench addition,
        issue 16): for b ≥ pattern_fit_from_b, before any draw, fit a sample to each guide's whole
        predicted ReLU pattern and refit with the fitted sample's own pattern, pattern_fit_rounds
        times; 0 rounds turns it off.
    """

    guide: str = "cpa"
    guide_options: dict[str, Any] = field(default_factory=dict)
    pool_start: float = ranged(1.5, 1, MAX_POOL)
    pool_growth: float = ranged(1.25, 1, MAX_POOL, low_open=True)
    refine_first: bool = False
    fast_fit: bool = True
    residual_after: int = ranged(2, 1, MAX_ROUNDS)
    residual_max_missing: int = ranged(48, 0, MAX_WIDTH)
    residual_from_b: int = ranged(128, 1, MAX_WIDTH)
    pattern_fit_rounds: int = ranged(10, 0, MAX_ROUNDS)
    pattern_fit_from_b: int = ranged(128, 1, MAX_WIDTH)
    attack_name: ClassVar[str] = "spear-guided"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.guide in ("spear", "spear-guided"):
            raise ConfigError(f"spear-guided: the guide must be another attack, got {self.guide!r}")
        check_guide(self)


class GuidedSpearAttack(SpearAttack):
    name = "spear-guided"
    description = ("SPEAR with draws led by another attack's approximate reconstruction (default CPA); "
                   "exact or reported failed, for batches past b ≈ 25")
    Config = GuidedSpearConfig

    def _chunk_source(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                      settings: SearchSettings, gen: torch.Generator) -> tuple[ChunkSource | None, StatsFn]:
        cfg = self.config
        start = time.perf_counter()
        features, reason = self.guide_features(update, seed)
        seconds = time.perf_counter() - start
        if features is None:
            return None, lambda: {"guide": cfg.guide, "guide_seconds": seconds, "guide_failed": reason}
        guide = make_guide(problem, features, cfg.pool_start)
        guides = ResidualGuides(problem, guide, tol, seed, cfg.pool_start, cfg.residual_after,
                                cfg.residual_max_missing if problem.b >= cfg.residual_from_b else 0)
        cache = FitCache() if cfg.fast_fit else None
        pattern_fits = {"patterns": 0, "found": 0, "seconds": 0.0}

        def source(state: SampleState) -> bool:
            if cfg.fast_fit and state.fit_cache is None:
                state.fit_solver, state.fit_cache = fit_once_normal, cache
            if guide.calls == 0 and cfg.pattern_fit_rounds > 0 and problem.b >= cfg.pattern_fit_from_b:
                begin = time.perf_counter()
                pattern_fits["patterns"] = fit_guide_patterns(problem, guide, state, cfg.residual_tol,
                                                              cfg.pattern_fit_rounds, settings.max_seconds)
                pattern_fits["found"] = int(state.samples.shape[0])
                pattern_fits["seconds"] = time.perf_counter() - begin
            return guided_chunk(problem, guides.guide(state.samples), tol, state, settings, gen, cfg.residual_tol,
                                cfg.pool_growth, cfg.refine_first)

        def stats() -> dict[str, Any]:
            out = guide_stats(cfg.guide, seconds, guide)
            out.update({"residual_guides": guides.made, "residual_guide_seconds": guides.seconds,
                        "residual_guided_draws": guides.draws + (guides.current.draws if guides.made else 0),
                        "fits_skipped": cache.skipped if cache is not None else 0,
                        "pattern_fit_patterns": pattern_fits["patterns"], "pattern_fit_found": pattern_fits["found"],
                        "pattern_fit_seconds": pattern_fits["seconds"]})
            return out

        return source, stats

    def guide_features(self, update: ClientUpdate, seed: int) -> tuple[torch.Tensor | None, str]:
        """The guide's reconstruction of this layer's inputs (b, n), or None and why it failed.

        Public so that a benchmark can measure the guide's quality, or substitute a controlled guide.
        """
        from leakbench.attacks import create_attack  # the registry imports this module

        cfg = self.config
        rec: Reconstruction = create_attack(cfg.guide, **guide_options(cfg)).reconstruct(update, seed=seed)
        if rec.status != "ok":
            return None, rec.reason
        if rec.features is not None and rec.layer == cfg.layer:
            return rec.features, ""
        if rec.images is None:
            return None, f"guide {cfg.guide} answered neither images nor layer-{cfg.layer} features"
        with torch.no_grad():
            return update.model.layer_inputs(rec.images, cfg.layer).flatten(1), ""


def guide_options(cfg: GuidedSpearConfig) -> dict[str, Any]:
    """The guide attack's hyperparameters: `guide_options`, its `layer` set to SPEAR's, CPA's prefilter default."""
    from leakbench.attacks import attack_class  # the registry imports this module

    options = dict(cfg.guide_options)
    if attack_class(cfg.guide).layered:
        options["layer"] = cfg.layer
    if cfg.guide == "cpa" and cfg.layer == 1 and options.get("method", "fastica") == "fastica":
        options.setdefault("prefilter", "derivative")  # the prefilter is FastICA's (CPAConfig refuses it otherwise)
    return options


def check_guide(cfg: GuidedSpearConfig) -> None:
    """Refuse, when the config is built (so at parse time), a guide that is not a registered attack, and
    guide_options that are not a table or that the guide's own Config refuses (unknown keys, wrong types)."""
    from leakbench.attacks import attack_class  # the registry imports this module
    from leakbench.settings import build_config

    if not isinstance(cfg.guide, str):
        raise ConfigError(f"spear-guided: guide must be an attack name, got {cfg.guide!r}")
    if not isinstance(cfg.guide_options, dict):
        raise ConfigError(f"spear-guided: guide_options must be a table of the guide's hyperparameters, "
                          f"got {cfg.guide_options!r}")
    if "layer" in cfg.guide_options:
        raise ConfigError("spear-guided: guide_options cannot set 'layer' (the guide attacks SPEAR's layer)")
    try:
        cls = attack_class(cfg.guide)
        build_config(cls.Config, guide_options(cfg))
    except ConfigError as exc:
        raise ConfigError(f"spear-guided: guide {cfg.guide!r}: {exc}") from None


def guide_stats(name: str, seconds: float, guide: Guide) -> dict[str, Any]:
    return {"guide": name, "guide_seconds": seconds, "guided_draws": guide.draws,
            "guides_matched": guide.matched}
