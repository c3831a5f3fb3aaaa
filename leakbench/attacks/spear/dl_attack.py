"""spear-dl as a registered attack: SPEAR's deflated search led by dictionary-learning proposals (dl.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.attacks.spear.attack import DeflatedSpear, SpearConfig
from leakbench.attacks.spear.dl import DLTrims, Proposal
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.scheduler import ProposalSource
from leakbench.attacks.spear.state import FAILURE_STAT, SearchSettings
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import chosen, ranged
from leakbench.fl.update import ClientUpdate

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
    steps / hold: trim iterations while shrinking, then at the final trim.
    (The trim's start and the number of missing samples below which SPEAR's own draws finish the
    batch are fixed: tolerances.py, dl_start_keep and dl_min_remaining.)
    The first-layer gradient alone is not used: proposals are fitted through the next layer's
    gradient (deflation), so the attacked layer must not be the last hidden one with fewer classes than b.
    """

    init: str = chosen("subsets", *INITS)
    starts: int = ranged(32, 1, MAX_PROPOSALS)
    keep: float = ranged(0.7, 0.5, 1, low_open=True)
    steps: int = ranged(30, 1, MAX_PROPOSALS)
    hold: int = ranged(15, 0, MAX_PROPOSALS)
    attack_name: ClassVar[str] = "spear-dl"

    def __post_init__(self) -> None:
        super().__post_init__()  # the init's choices too (leakbench.core.ranges)
        ignored = IGNORED_BY_INIT.get(self.init, ())
        changed = [knob for knob in ignored if getattr(self, knob) != SpearDLConfig.__dataclass_fields__[knob].default]
        if changed:
            raise ConfigError(f"spear-dl: init={self.init} ignores {', '.join(changed)}; leave them at their defaults")


IGNORED_BY_INIT = {"msp": ("starts", "steps"),
                   "msp-only": ("starts", "steps", "keep", "hold")}
"""Proposal knobs that an init never reads (setting them raises rather than doing nothing)."""


class SpearDLAttack(DeflatedSpear[SpearDLConfig]):
    name = "spear-dl"
    description = ("SPEAR with candidate columns from sparse dictionary learning (trimmed least squares or "
                   "ℓ4-MSP) instead of random draws; exact, partial (the samples verified one by one) "
                   "or reported failed")
    Config = SpearDLConfig

    def _sources(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                 settings: SearchSettings) -> tuple[list[ProposalSource], dict[str, Any]]:
        cfg = self.config
        t = settings.tolerances
        proposal = Proposal(init=cfg.init, starts=cfg.starts, keep=cfg.keep, start_keep=t.dl_start_keep,
                            steps=cfg.steps, hold=cfg.hold, min_remaining=t.dl_min_remaining)
        return [DLTrims(proposal)], {}

    def _search(self, problem: LayerProblem, seed: int, update: ClientUpdate
                ) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        if problem.P_next is None:
            return ("spear-dl needs the next layer's weight gradient at rank ≥ b (it fits every proposal "
                    "through it); it is rank-deficient here"), None, {"mode": "none", FAILURE_STAT: "not-applicable"}
        return super()._search(problem, seed, update)
