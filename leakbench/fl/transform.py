"""Update transforms: one registry of what turns a client's batch into the update it shares.

A transform is a class with a `Config` (a frozen dataclass; numbers declare their ranges with
`leakbench.ranges.ranged`) and `apply`. Two stages:

- a **client** transform (`makes_update = True`) computes the update from the private batch: FedSGD
  (the default), FedAvg, DP-SGD. A cell has exactly one.
- a **defence** (`makes_update = False`) changes an update already computed: additive noise, and
  whatever a plugin adds. A cell applies its defences in order after its client transform.

Each transform declares its record columns (`columns`) and a short label (`label`) that reports use
to keep its cells apart from the others (tables, leaderboard, grids). A new defence is one file:

    @dataclass(frozen=True)
    class PruneConfig(Ranged):
        keep: float = ranged(0.1, 0, 1, low_open=True)

    class Prune(UpdateTransform):
        name = "prune"
        Config = PruneConfig
        def apply(self, update, client): ...

    register_transform(Prune)

shipped in leakbench, or in another package under the entry-point group `leakbench.defences`
(`name = "package.module"` or `"package.module:Class"`), or named in a suite's `defence_plugins`.
Defence code runs in the harness, on the client's side (like a dataset loader), never in the
attack worker; its `apply` sees the batch because a client does.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.plugins import load_defence_plugins
from leakbench.registry import Registry

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim


@dataclass(frozen=True)
class Client:
    """The client's side of one cell: its victim model, its private batch, the seed of its randomness
    (DP noise, FedAvg shuffling, additive noise) and what its update reveals (the threat model)."""

    model: ImageVictim
    batch: Batch
    seed: int
    threat: ThreatModel


class UpdateTransform(ABC):
    """One way of making or changing a client's update, configured by an instance of `Config`."""

    name: ClassVar[str]
    """Its registered name: a suite's `defences = [{ name = "...", ... }]` and the records."""
    Config: ClassVar[type]
    """Its settings: a frozen dataclass (numbers with declared ranges)."""
    makes_update: ClassVar[bool] = False
    """True for client transforms (compute the update from the batch); False for defences."""
    config: Any
    """An instance of `Config` (checked when made); each transform narrows the type to its Config."""
    changes_victim: ClassVar[bool] = False
    """True for a defence that changes the victim itself (`victim`): the trained-victim cache keys on it."""

    def __init__(self, config: Any) -> None:
        if not isinstance(config, self.Config):
            raise ConfigError(f"{self.name}: expected a {self.Config.__name__}, got {type(config).__name__}")
        self.config = config

    @abstractmethod
    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        """The update after this transform: a client transform gets None and computes it from the
        batch; a defence gets the update so far."""

    def victim(self, model: ImageVictim, seed: int) -> ImageVictim:
        """The victim the client runs, made from `model` before it is trained and before any update is
        computed (PRECODE inserts its bottleneck; `seed` is the cell's, for any randomness). Default:
        `model` unchanged. A transform that changes it sets `changes_victim = True`."""
        return model

    def label(self) -> str:
        """A short readable name for tables ('prune keep=0.1'): the name and each setting."""
        settings = " ".join(f"{f.name}={_text(getattr(self.config, f.name))}" for f in fields(self.config))
        return f"{self.name} {settings}".strip()

    def columns(self) -> dict[str, Any]:
        """Its record columns: `NAME_FIELD` (name with '-' and '.' as '_') per setting."""
        prefix = self.name.replace("-", "_").replace(".", "_")
        return {f"{prefix}_{key}": value for key, value in asdict(self.config).items()}


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) and math.isfinite(value) else str(value)


TRANSFORMS: Registry[type[UpdateTransform]] = Registry("update transform", on_first_use=load_defence_plugins)
"""Every update transform by name: the shipped ones (`leakbench.fl`) and the defence plugins."""


def register_transform(cls: type[UpdateTransform]) -> type[UpdateTransform]:
    """Register `cls` under its `name` (its docstring's first line is its description)."""
    if not (isinstance(cls, type) and issubclass(cls, UpdateTransform)):
        raise ConfigError(f"{cls!r} is not an UpdateTransform subclass")
    description = (cls.__doc__ or cls.name).strip().splitlines()[0]
    TRANSFORMS.register(cls.name, lambda: cls, description)
    return cls


def list_transforms() -> list[tuple[str, str]]:
    """(name, description) of every update transform: the clients, then the defences (`leakbench list defences`)."""
    entries = TRANSFORMS.entries()
    return [(e.name, e.description) for e in sorted(entries, key=lambda e: not e.factory().makes_update)]


def transform_class(name: str) -> type[UpdateTransform]:
    """The transform registered as `name` (a ConfigError naming the known ones if none)."""
    return TRANSFORMS.create(name)


@dataclass(frozen=True)
class EmptyConfig:
    """No settings."""


@register_transform
class FedSGD(UpdateTransform):
    """FedSGD: the gradient of the mean batch loss (the default client)."""

    name = "fedsgd"
    Config = EmptyConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return fedsgd_update(client.model, client.batch, client.threat)


def client_update(transforms: list[UpdateTransform], client: Client) -> ClientUpdate:
    """Apply `transforms` (one client transform first, then the defences in order) for `client`."""
    if not transforms or not transforms[0].makes_update or any(t.makes_update for t in transforms[1:]):
        raise ConfigError("an update needs exactly one client transform (fedsgd, fedavg or dp), first")
    update = None
    for transform in transforms:
        update = transform.apply(update, client)
    assert update is not None
    return update


@dataclass(frozen=True)
class DefenceSetting:
    """One defence of a cell: a registered transform's name and its Config (frozen, so hashable)."""

    name: str
    config: Any

    def transform(self) -> UpdateTransform:
        """The configured defence (a ConfigError when `name` is not a defence)."""
        cls = transform_class(self.name)
        if cls.makes_update:
            raise ConfigError(f"{self.name!r} computes the update (a client transform), it is not a defence")
        return cls(self.config)
