"""The malicious-server attack contract (issue 46): an attack that chooses the model the client trains.

A `MaliciousAttack` has two halves. `modify(model, seed=...)` is the server's modification: it gets the public
victim (as the server holds it: trained or at init) and returns a `leakbench.server.ServerModel` — an imprint
block in front of the victim and/or new weights, as plain arrays. `reconstruct(update, seed=...)` is the attack on
the update the client computed on that model (the update's `model` is the modified victim, so the attack reads
what it planted from the model itself, as the server would). The harness runs each half in a sandboxed worker of
its own (`harness.server`): neither ever holds the batch or reaches a data location, by construction.

Cells of such an attack record `server = "malicious"` (`server_columns`); reports and the leaderboard keep them on
a board of their own, apart from every honest-server result (docs/reference/threat-models.md).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from leakbench.attacks.base import Attack, ConfigT
from leakbench.core.server import HONEST, MALICIOUS, SERVER_COLUMN
from leakbench.models.base import ImageVictim
from leakbench.server.model import ServerModel


class MaliciousAttack(Attack[ConfigT]):
    """Base of the attacks of a malicious server: `modify` (what the server sends) and `reconstruct`."""

    server: ClassVar[str] = MALICIOUS

    @abstractmethod
    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        """The model the server sends in place of `model` (the public victim), drawing randomness from `seed`.
        It never sees a batch: whatever it returns depends on the model, the Config and the seed alone."""


def is_malicious(attack: type[Attack] | Attack) -> bool:
    """Whether `attack` (a class or an instance) is a malicious server's (it modifies the model it sends)."""
    return getattr(attack, "server", HONEST) == MALICIOUS


def server_columns(attack: str) -> dict[str, Any]:
    """The record column of a cell's server threat model: {"server": "malicious"} for a malicious server's attack
    `attack` (a registered name), nothing for an honest one (so records of every honest cell stay as they were)."""
    from leakbench.attacks.registry import attack_class
    from leakbench.core.errors import ConfigError

    try:
        cls = attack_class(attack)
    except ConfigError:  # an attack evaluated unregistered (`api.evaluate`) or no longer installed: honest
        return {}
    return {SERVER_COLUMN: MALICIOUS} if is_malicious(cls) else {}
