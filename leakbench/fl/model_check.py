"""A client that checks the model it receives (issue 46): the defence Fowl et al. and Boenisch et al. discuss against
a malicious server, and the one their attacks are built to survive or not.

The client knows the architecture the federation agreed on (its layers and their shapes: the protocol) and refuses
to train a model of another: it shares no update, so the server gets nothing from it this round. In leakbench the
agreed architecture is the public victim's; a malicious server's model (`server.ModifiedVictim`) carries it as its
`base`. An imprint block (Robbing the Fed) changes the architecture and is refused; trap weights (Boenisch et
al.) keep it and pass — the check is on the architecture, not on the weights' values. `check-weights` checks both:
the agreed architecture, and each parameter's largest |value| at most `max_ratio` times the agreed model's (the
public victim's; in a federation, the last round's), which trap weights at breaching's defaults and fishing's bias
multiplier exceed; `trap-weights-adaptive` scales its traps under the agreed magnitudes, which changes no neuron's
firing. A refused cell is stored as failed, kind "not-applicable", saying the client refused (the attack had no
update), never as an attack that ran and found nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.errors import LeakbenchError
from leakbench.core.ranges import Ranged, ranged
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
        refuse_other_architecture(client.model)
        return update

    def label(self) -> str:
        return "check-model"


def refuse_other_architecture(model: nn.Module) -> None:
    """ClientRefused unless `model` has the agreed architecture (its `base`'s when it wraps one)."""
    agreed = getattr(model, "base", model)
    received, expected = architecture(model), architecture(agreed)
    if received != expected:
        extra = [name for name, _ in received if (name, dict(received)[name]) not in expected]
        raise ClientRefused(f"the client refused the server's model: its architecture is not the agreed one "
                            f"({len(received)} parameters for {len(expected)}; not agreed: {', '.join(extra[:4])})")


@dataclass(frozen=True)
class CheckWeightsConfig(Ranged):
    """max_ratio: each received parameter's largest |value| may be at most this times the agreed model's (a parameter
    that is all zeros there: times the agreed model's largest |value| of any parameter)."""

    max_ratio: float = ranged(10.0, 1, 1e6)


@register_transform
class CheckWeights(UpdateTransform):
    """The client shares its update only when the model it received has the agreed architecture and no parameter
    larger than `max_ratio` times the agreed one's."""

    name = "check-weights"
    paper: ClassVar[Citation | None] = Citation("Garov et al., arXiv 2023", "https://arxiv.org/abs/2306.03013")
    """Client-side checks of a received model, the paper that argues every earlier malicious-server attack fails them;
    this magnitude rule and its ratio are leakbench's."""
    Config = CheckWeightsConfig
    config: CheckWeightsConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None, "check-weights is a defence: it follows the client's update"
        refuse_other_architecture(client.model)
        agreed: dict[str, float] = getattr(client.model, "agreed_max", {})
        largest = max(agreed.values(), default=0.0)
        for name, parameter in client.model.named_parameters():
            if name not in agreed:
                continue  # the agreed model itself (an honest server's): nothing to compare
            reference = agreed[name] or largest
            got = float(parameter.detach().abs().max()) if parameter.numel() else 0.0
            if got > self.config.max_ratio * reference:
                raise ClientRefused(f"the client refused the server's model: {name.removeprefix('base.')} reaches "
                                    f"|{got:.3g}|, over {self.config.max_ratio:g} × the agreed model's {reference:.3g}")
        return update

    def label(self) -> str:
        return f"check-weights ×{self.config.max_ratio:g}"
