"""The attack contract: every attack receives a `ClientUpdate` and returns a `Reconstruction`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from typing_extensions import TypeVar  # PEP 696 defaults (typing has them from Python 3.13)

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.reconstruction import Reconstruction, Space, Status
from leakbench.fl.update import ClientUpdate

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["AGGREGATES", "Attack", "Checkpoints", "ConfigT", "Reconstruction", "Requirements", "Space",
           "Status"]  # the attack contract

ConfigT = TypeVar("ConfigT", bound="DataclassInstance", default=Any)
"""An attack's Config (a dataclass): `class MyAttack(Attack[MyConfig])` types `self.config` as a `MyConfig`,
and mypy checks that `Config = ...` names that class (or a subclass). A bare `Attack` is `Attack[Any]`: the
same at run time, unchecked."""


@dataclass(frozen=True)
class Requirements:
    """What an attack needs from the threat model; the harness refuses cases that lack it."""

    linear_relu_layer: bool = False
    batch_size: bool = False
    labels: bool = False


@dataclass(frozen=True)
class Checkpoints:
    """Where an iterative attack reports its answer so far, along one run (`benchmarks/budget_curves.py`).

    `report(step, reconstruction)` is called after `step` optimiser steps, for each step in `steps`
    the run reaches. Reporting only reads the attack's state, so its final answer is the same with
    or without checkpoints. Attacks that support it take `reconstruct(..., checkpoints=...)`.
    """

    steps: frozenset[int]
    report: Callable[[int, Reconstruction], None]

    def __contains__(self, step: int) -> bool:
        return step in self.steps


AGGREGATES = frozenset({"secagg"})
"""The defences that only aggregate: with equal batches the server's aggregate is one larger batch's FedSGD
update, so an attack on a batch of the aggregate's size is the defence-aware attack (`Attack.aware_of`)."""


class Attack(ABC, Generic[ConfigT]):
    """Base class: a frozen-dataclass `Config` with defaults, a name, a description.

    Generic in its Config: `class MyAttack(Attack[MyConfig])` with `Config = MyConfig` lets a type
    checker see every `self.config.field` (a subclass that extends the Config is generic itself, as
    `DeflatedSpear[C]` in leakbench.attacks.spear.attack). The type parameter changes nothing at run time.

    Capabilities are class attributes, derived once from the Config when the class is made (plugins'
    stand-ins too, `leakbench.attacks.described`): `layered` — the Config has a `layer` field, so the
    attacked layer is an axis of the cell; `reconstructs(layer)` — the space of the answer there.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Config: type[ConfigT]
    """Its hyperparameters: a frozen dataclass with defaults (a class attribute; not a ClassVar only
    because a ClassVar cannot name the type parameter)."""
    config: ConfigT
    """The instance of `Config` this attack runs with."""
    requires: ClassVar[Requirements] = Requirements()
    paper: ClassVar[Citation | None] = None
    """The paper it comes from (`leakbench.citation`): leaderboards link its name there; None: no link."""
    layered: ClassVar[bool] = False
    """Whether the attack has a layer setting (a `layer` field of its Config): set by `__init_subclass__`."""
    adapts_to: ClassVar[frozenset[str]] = frozenset()
    """The defences (update-transform names, `leakbench.fl.transform`) this attack adapts to when the threat
    model grants it the defence (`ThreatModel.defence_known`): against those, its result is an adaptive
    evaluation of the defence (issue 43). Empty: it attacks every update the same way."""
    aware_of: ClassVar[frozenset[str]] = frozenset()
    """The defences (update-transform names) this attack is aware of by construction: what the defence reveals
    is exactly what the attack already reads, so its plain form is the defence-aware attack. Secure aggregation
    under an honest server (`secagg`): the mean of K clients' FedSGD updates is the update of one batch of
    K·b images (`fl/secagg.py`), which a batch attack given batch size K·b attacks as it is. Unlike
    `adapts_to` it does not restrict where a suite with `adaptive_only` runs the attack; reports count it
    with `adapts_to` (`citation.registered_adaptations`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Derive the capabilities of a class that defines its own Config (others inherit them)."""
        super().__init_subclass__(**kwargs)
        config = vars(cls).get("Config")
        if config is not None and is_dataclass(config):
            cls.layered = any(f.name == "layer" for f in fields(config))

    @classmethod
    def reconstructs(cls, layer: int) -> Space:
        """The space the attack answers in at `layer`: the inputs of an inner layer ("feature") for a
        layered attack at layer ≥ 2, else images."""
        return "feature" if cls.layered and layer >= 2 else "image"

    def __init__(self, config: ConfigT | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @abstractmethod
    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        """Reconstruct the client's batch from `update` alone, drawing randomness from `seed`."""

    def check_update(self, update: ClientUpdate) -> None:
        """Raise ConfigError when `update` does not give what this attack requires (every field of
        `Requirements` is enforced here, the one place; subclasses add their own checks after it)."""
        if self.requires.batch_size and update.batch_size is None:
            raise ConfigError(f"attack {self.name!r} needs the batch size, which the threat model withholds")
        if self.requires.labels and update.labels is None:
            raise ConfigError(f"attack {self.name!r} needs the labels, which the threat model withholds")
        if self.requires.linear_relu_layer:
            check = getattr(update.model, "check_attackable", None)
            if check is None:
                raise ConfigError(f"attack {self.name!r} needs a victim with linear+ReLU layers (check_attackable)")
            check(getattr(self.config, "layer", 1))

    def hyperparameters(self) -> dict[str, Any]:
        return asdict(self.config)

    def budget(self) -> str:
        """The attack's compute budget in words, for tables ("25,000 steps", "300,000 draws, 3600 s");
        from the Config's `iterations` / `restarts` or `max_draws` / `max_seconds` fields by default."""
        cfg = asdict(self.config)
        parts = []
        if "iterations" in cfg:
            restarts = f" × {cfg['restarts']}" if cfg.get("restarts", 1) != 1 else ""
            parts.append(f"{cfg['iterations']:,} steps" + restarts)
        if "max_draws" in cfg:
            parts.append(f"{cfg['max_draws']:,} draws")
        if "max_seconds" in cfg:
            parts.append(f"{cfg['max_seconds']:g} s")
        return ", ".join(parts)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"
