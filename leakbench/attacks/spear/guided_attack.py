"""Guided SPEAR as a registered attack: run a guide attack on the same update, then SPEAR led by it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from leakbench.attacks.base import Reconstruction
from leakbench.attacks.spear.attack import DeflatedSpear, SpearConfig
from leakbench.attacks.spear.descent import GuideDescent, RowSpaceDescent
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.guided import GuidePool, PatternFits, make_guide
from leakbench.attacks.spear.guided_columns import ColumnGuides
from leakbench.attacks.spear.residual import ResidualGuides
from leakbench.attacks.spear.scheduler import ProposalSource
from leakbench.attacks.spear.state import SPENT_STAT, SearchSettings
from leakbench.attacks.spear.tolerances import TOLERANCES, Tolerances
from leakbench.core.errors import ConfigError
from leakbench.fl.update import ClientUpdate


@dataclass(frozen=True)
class GuidedSpearConfig(SpearConfig):
    """SPEAR's hyperparameters plus the guide's (the guides' schedule constants: tolerances.py).

    guide: registered attack whose reconstruction predicts the ReLU patterns (it sees only the
        update, like every attack); "cpa" is fast and accurate enough at b = 50–100.
    guide_options: that attack's hyperparameters (its `layer` is set to SPEAR's); CPA on layer 1
        defaults to the derivative prefilter.
    refine_first: try each guide's whole pool as a zero set before drawing subsets of it (guided.py).
    Once every unmatched guide's pool holds all live neurons, SPEAR's own sources (`sampler`) go on.
    """

    guide: str = "cpa"
    guide_options: dict[str, Any] = field(default_factory=dict)
    refine_first: bool = False
    attack_name: ClassVar[str] = "spear-guided"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.guide in ("spear", "spear-guided"):
            raise ConfigError(f"spear-guided: the guide must be another attack, got {self.guide!r}")
        check_guide(self)


class GuidedSpearAttack(DeflatedSpear[GuidedSpearConfig]):
    name = "spear-guided"
    description = ("SPEAR with draws led by another attack's approximate reconstruction (default CPA); "
                   "exact, partial (the samples verified one by one) or reported failed, for batches past b ≈ 25")
    Config = GuidedSpearConfig

    def _sources(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                 settings: SearchSettings) -> tuple[list[ProposalSource], dict[str, Any]]:
        """Guide-pattern fits (guided.PatternFits), then row-space descent from the estimates of the guides still
        unmatched (descent.GuideDescent), then the guide pools (the first guide, then residual guides), then row-space
        descent from random starts (descent.py: from 48 visible samples, once a sample is found)."""
        cfg = self.config
        features, stats = self._guide(update, seed, settings)
        if features is None:
            return [], stats
        t = settings.tolerances
        guide = make_guide(problem, features, t.pool_start)
        guides = ResidualGuides(problem, guide, tol, seed, t.pool_start, t.residual_after,
                                t.residual_max_missing if problem.b >= t.residual_from_b else 0)
        rounds = t.pattern_fit_rounds if problem.b >= t.pattern_fit_from_b else 0
        descent = GuideDescent(guide)
        sources: list[ProposalSource] = [PatternFits(guide, rounds, pause=descent.has_starts), descent,
                                         GuidePool(guides, t.pool_growth, cfg.refine_first), RowSpaceDescent()]
        return sources, stats

    def _column_sources(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                        settings: SearchSettings) -> tuple[ColumnGuides | None, dict[str, Any]]:
        """The guide's proposals for the column search (guided_columns.ColumnGuides, leakbench's guided column search),
        where the next layer's gradient has rank below b (FC-2)."""
        features, stats = self._guide(update, seed, settings)
        if features is None:
            return None, stats
        guide = make_guide(problem, features, settings.tolerances.pool_start)
        bound = guide_seconds(settings)

        def more(run: int) -> torch.Tensor | None:  # the guide from another seed, when the search stalls
            return self.guide_features(update, seed + 1000 * (run + 1), bound)[0]

        return ColumnGuides(guide, more=more), stats

    def _guide(self, update: ClientUpdate, seed: int, settings: SearchSettings
               ) -> tuple[torch.Tensor | None, dict[str, Any]]:
        """The guide's features under its share of the time cap (`guide_seconds`), and the stats that record it: its
        name and seconds (`state.SPENT_STAT`, charged to the search's cap), why it failed, and its own budget figures
        (FastICA's iterations; `guide_timed_out` when its clock, not its iteration budget, stopped it — an answer
        that then depends on the machine's speed)."""
        start = time.perf_counter()
        features, reason, own = self.guide_features(update, seed, guide_seconds(settings))
        stats: dict[str, Any] = {"guide": self.config.guide, SPENT_STAT: time.perf_counter() - start}
        stats.update({f"guide_{key}": own[key] for key in ("iterations", "timed_out") if key in own})
        if features is None:
            stats["guide_failed"] = reason
        return features, stats

    def guide_features(self, update: ClientUpdate, seed: int, max_seconds: float = 0.0
                       ) -> tuple[torch.Tensor | None, str, dict[str, Any]]:
        """The guide's reconstruction of this layer's inputs (b, n), or None and why it failed, and the guide's stats;
        `max_seconds` > 0 bounds a guide that takes a bound (`bounded_guide_options`).

        Public so that a benchmark can measure the guide's quality, or substitute a controlled guide.
        """
        from leakbench.attacks.registry import create_attack

        cfg = self.config
        options = bounded_guide_options(cfg, max_seconds, int(update.batch_size or 0))
        rec: Reconstruction = create_attack(cfg.guide, **options).reconstruct(update, seed=seed)
        if rec.status != "ok":
            return None, rec.reason, rec.stats
        if rec.features is not None and rec.layer == cfg.layer:
            return rec.features, "", rec.stats
        if rec.images is None:
            return None, f"guide {cfg.guide} answered neither images nor layer-{cfg.layer} features", rec.stats
        with torch.no_grad():
            return update.model.layer_inputs(rec.images, cfg.layer).flatten(1), "", rec.stats


def guide_options(cfg: GuidedSpearConfig) -> dict[str, Any]:
    """The guide attack's hyperparameters: `guide_options`, its `layer` set to SPEAR's, CPA's prefilter default."""
    from leakbench.attacks.registry import attack_class

    options = dict(cfg.guide_options)
    if attack_class(cfg.guide).layered:
        options["layer"] = cfg.layer
    if cfg.guide == "cpa" and cfg.layer == 1 and options.get("method", "fastica") == "fastica":
        options.setdefault("prefilter", "derivative")  # the prefilter is FastICA's (CPAConfig refuses it otherwise)
    return options


def guide_seconds(settings: SearchSettings) -> float:
    """The guide's share of the time cap (`guide_time_share` of what is left of `max_seconds`)."""
    return settings.tolerances.guide_time_share * settings.search_seconds


def bounded_guide_options(cfg: GuidedSpearConfig, max_seconds: float, b: int,
                          tolerances: Tolerances = TOLERANCES) -> dict[str, Any]:
    """`guide_options` with CPA's FastICA for a batch of b given its budget — at most `guide_ica_work` / b²
    iterations, and `max_seconds` (> 0) on its clock — and whitened by "eigh" (3× faster than scikit-learn's default
    "svd" at 24,192 × 2,000; attacks/ica.py), unless `guide_options` sets them."""
    from leakbench.attacks.cpa import CPAConfig

    options = guide_options(cfg)
    if max_seconds > 0 and cfg.guide == "cpa" and options.get("method", "fastica") == "fastica":
        most = tolerances.guide_ica_work // max(b, 1) ** 2
        options.setdefault("max_iter", max(1, min(CPAConfig().max_iter, most)))
        options.setdefault("max_seconds", max_seconds)
        options.setdefault("whiten_solver", "eigh")
    return options


def check_guide(cfg: GuidedSpearConfig) -> None:
    """Refuse, when the config is built (so at parse time), a guide that is not a registered attack, and
    guide_options that are not a table or that the guide's own Config refuses (unknown keys, wrong types)."""
    from leakbench.attacks.registry import attack_class
    from leakbench.core.settings import build_config

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
