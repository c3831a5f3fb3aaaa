"""PRECODE as a defence: the client's victim gets a variational bottleneck before its output layer.

Scheliga, Mäder and Seeland, "PRECODE – A Generic Model Extension to Prevent Deep Gradient
Leakage", WACV 2022 (`leakbench.models.precode` holds the module). Unlike the other defences it
changes the model, not the update: `victim` inserts the bottleneck (init and sampling noise from
the cell's seed) before the victim is trained (with the β·KL term in its loss) and before the
update is computed, and the update's gradients include the KL term's. A suite level:

    defences = ["none", { name = "precode" }, { name = "precode", beta = 0.01, bottleneck = 64 }]

The paper's settings are the defaults (K = 256, β = 0.001); the strength knob is the bottleneck
size K (smaller: less information through) and β (larger: z closer to pure noise).
`apply` gives the attacker's copy of the model a noise stream of its own (seed → ¬seed), so the
public model does not replay the client's ε.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_WIDTH
from leakbench.core.ranges import MAX_WEIGHT, Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate
from leakbench.models.base import ImageVictim
from leakbench.models.precode import PrecodeVictim, add_precode


@dataclass(frozen=True)
class PrecodeConfig(Ranged):
    """PRECODE's variational bottleneck.

    beta: weight of the KL term in the client's loss (paper: 0.001).
    bottleneck: size K of the latent code z (paper: 256).
    """

    beta: float = ranged(0.001, 0, MAX_WEIGHT)
    bottleneck: int = ranged(256, 1, MAX_WIDTH)


@register_transform
class Precode(UpdateTransform):
    """PRECODE (Scheliga et al., WACV 2022): a variational bottleneck before the output layer."""

    paper = Citation("Scheliga et al., WACV 2022", "https://arxiv.org/abs/2108.04725")
    name = "precode"
    Config = PrecodeConfig
    changes_victim = True
    config: PrecodeConfig

    def victim(self, model: ImageVictim, seed: int) -> ImageVictim:
        return add_precode(model, self.config.bottleneck, float(self.config.beta), seed)

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        if not isinstance(update.model, PrecodeVictim):
            raise ConfigError("precode: the victim has no bottleneck (the harness applies `victim` first)")
        public = copy.deepcopy(update.model)
        public.bottleneck.noise_seed = ~public.bottleneck.noise_seed % 2**63
        return dataclasses.replace(update, model=public, kind=f"{update.kind}+precode")
