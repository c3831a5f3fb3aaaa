"""A client that checks the model it receives (issue 46): the defence Fowl et al. and Boenisch et al. discuss against
a malicious server, and the one their attacks are built to survive or not.

The client knows the architecture the federation agreed on (its layers and their shapes: the protocol) and refuses
to train a model of another: it shares no update, so the server gets nothing from it this round. In leakbench the
agreed architecture is the public victim's; a malicious server's model (`server.ModifiedVictim`) carries it as its
`base`. An imprint block (Robbing the Fed) changes the architecture and is refused; trap weights (Boenisch et
al.) keep it and pass — the check is on the architecture, not on the weights' values. A refused cell is stored as
failed, kind "not-applicable", saying the client refused (the attack had no update), never as an attack that ran
and found nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.errors import LeakbenchError
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate


class ClientRefused(LeakbenchError):
    """The client refused the model it received and shared no update (the message says why)."""


@dataclass(frozen=True)
class CheckModelConfig:
    """No settings: the agreed architecture is the victim's."""


def architecture(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """A model's architecture as the client compares it: its parameters' names (without a wrapper's prefix) and shapes,
    in order."""
    return [(name.removeprefix("base."), tuple(p.shape)) for name, p in model.named_parameters()]


@register_transform
class CheckModel(UpdateTransform):
    """The client shares its update only when the model it received has the agreed architecture."""

    name = "check-model"
    paper: ClassVar[Citation | None] = Citation("Fowl et al., ICLR 2022", "https://openreview.net/forum?id=fyLvHzEssH")
    Config = CheckModelConfig
    config: CheckModelConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None, "check-model is a defence: it follows the client's update"
        agreed = getattr(client.model, "base", client.model)
        received, expected = architecture(client.model), architecture(agreed)
        if received != expected:
            extra = [name for name, _ in received if (name, dict(received)[name]) not in expected]
            raise ClientRefused(f"the client refused the server's model: its architecture is not the agreed one "
                                f"({len(received)} parameters for {len(expected)}; not agreed: "
                                f"{', '.join(extra[:4])})")
        return update

    def label(self) -> str:
        return "check-model"
