"""spear-dl as a registered attack: SPEAR's deflated search led by dictionary-learning proposals (dl.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.attacks.spear.attack import ChunkSource, SpearAttack, SpearConfig, StatsFn
from leakbench.attacks.spear.deflation import SampleState
from leakbench.attacks.spear.dl import DLCounters, Proposal, dl_chunk
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.state import SearchSettings
from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate
from leakbench.harness.limits import MAX_WIDTH
from leakbench.ranges import chosen, ranged

INITS = ("subsets", "msp", "msp-only")
MAX_PROPOSALS = 10**5
"""starts per round and trim iterations (steps, hold): at most 10^5."""


@dataclass(frozen=True)
class SpearDLConfig(SpearConfig):
    """SPEAR's hyperparameters plus the dictionary-learning proposal's (dl.py).

    init: starting directions: "subsets" (least-energy direction of a random half of the rows,
        then a shrinking trim: leakbench's own), "msp" (ℓ4-MSP, Zhai et al. 2020, then a fixed
        trim) or "msp-only" (ℓ4-MSP's directions as they are, the published method alone).
    starts: directions proposed per round with init "subsets" (MSP always gives one per missing sample).
    keep: the trim, as a fraction of a typical sample's zero rows (the expected zero fraction of
        the live rows, dl.expected_zero_fraction); between ½ (a mixture of two samples) and 1.
    start_keep: the shrinking trim starts from this fraction of the live rows.
    steps / hold: trim iterations while shrinking, then at the final trim.
    min_remaining: below this many missing samples, SPEAR's own draws finish the batch.
    The first-layer gradient alone is not used: proposals are fitted through the next layer's
    gradient (deflation), so the attacked layer must not be the last hidden one with fewer classes than b.
    """

    init: str = chosen("subsets", *INITS)
    starts: int = ranged(32, 1, MAX_PROPOSALS)
    keep: float = ranged(0.7, 0.5, 1, low_open=True)
    start_keep: float = ranged(0.9, 0, 1, low_open=True)
    steps: int = ranged(30, 1, MAX_PROPOSALS)
    hold: int = ranged(15, 0, MAX_PROPOSALS)
    min_remaining: int = ranged(10, 1, MAX_WIDTH)
    attack_name: ClassVar[str] = "spear-dl"

    def __post_init__(self) -> None:
        super().__post_init__()  # the init's choices too (leakbench.ranges)
        ignored = IGNORED_BY_INIT.get(self.init, ())
        changed = [knob for knob in ignored if getattr(self, knob) != SpearDLConfig.__dataclass_fields__[knob].default]
        if changed:
            raise ConfigError(f"spear-dl: init={self.init} ignores {', '.join(changed)}; leave them at their defaults")


IGNORED_BY_INIT = {"msp": ("starts", "start_keep", "steps"),
                   "msp-only": ("starts", "start_keep", "steps", "keep", "hold")}
"""Proposal knobs that an init never reads (setting them raises rather than doing nothing)."""


class SpearDLAttack(SpearAttack):
    name = "spear-dl"
    description = ("SPEAR with candidate columns from sparse dictionary learning (trimmed least squares or "
                   "ℓ4-MSP) instead of random draws; exact or reported failed")
    Config = SpearDLConfig

    def _chunk_source(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                      settings: SearchSettings, gen: torch.Generator) -> tuple[ChunkSource | None, StatsFn]:
        cfg = self.config
        proposal = Proposal(init=cfg.init, starts=cfg.starts, keep=cfg.keep, start_keep=cfg.start_keep,
                            steps=cfg.steps, hold=cfg.hold, min_remaining=cfg.min_remaining)
        counters = DLCounters()

        def source(state: SampleState) -> bool:
            return dl_chunk(problem, tol, state, settings, gen, cfg.residual_tol, proposal, counters)

        return source, lambda: {"dl_init": cfg.init, "dl_rounds": counters.calls, "dl_starts": counters.starts,
                                "dl_found": counters.found}

    def _search(self, problem: LayerProblem, seed: int, update: ClientUpdate
                ) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        if problem.P_next is None:
            return ("spear-dl needs the next layer's weight gradient at rank ≥ b (it fits every proposal "
                    "through it); it is rank-deficient here"), None, {"mode": "none"}
        return super()._search(problem, seed, update)
