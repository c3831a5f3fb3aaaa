"""Update transforms: one registry of what turns a client's batch into the update it shares.

A transform is a class with a `Config` (a frozen dataclass; numbers declare their ranges with
`leakbench.core.ranges.ranged`) and `apply`. Two stages:

- a **client** transform (`makes_update = True`) computes the update from the private batch: FedSGD
  (the default), FedAvg, DP-SGD, MixUp (`fl.mixup`), secure aggregation (`fl.secagg`). A cell has
  exactly one. A client transform may combine the updates of several clients (`clients()`, 1 unless
  it says otherwise): the harness then draws that many disjoint private batches of b images, the
  first exactly the batch a one-client cell draws, and hands them over as one batch of `clients()·b`
  images in client order (client k's images are rows k·b … (k+1)·b − 1), which is also the cell's
  ground truth (`cell.spec.truth_size`).
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

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError, DefenceError
from leakbench.core.registry import Registry
from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.plugins import load_defence_plugins

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim


@dataclass(frozen=True)
class Client:
    """The client's side of one cell: its victim model, its private batch, the seed of its randomness
    (DP noise, FedAvg shuffling, additive noise) and what its update reveals (the threat model).

    When the client transform combines K clients (`UpdateTransform.clients`), `batch` holds their K
    private batches of equal size one after the other."""

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
    paper: ClassVar[Citation | None] = None
    """The paper it comes from (`leakbench.citation`): leaderboards link its label there; None: no link."""
    makes_update: ClassVar[bool] = False
    """True for client transforms (compute the update from the batch); False for defences."""
    config: Any
    """An instance of `Config` (checked when made); each transform narrows the type to its Config."""
    changes_victim: ClassVar[bool] = False
    """True for a defence that changes the victim itself (`victim`): the trained-victim cache keys on it."""
    retired: ClassVar[dict[str, str]] = {}
    """Settings an earlier transform of this name took, each with the line that says where it went
    (`mixup`'s `alpha`: the in-batch form is `mixup-batch` now): `check_retired` refuses them."""

    def __init__(self, config: Any) -> None:
        if not isinstance(config, self.Config):
            raise ConfigError(f"{self.name}: expected a {self.Config.__name__}, got {type(config).__name__}")
        self.config = config

    @abstractmethod
    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        """The update after this transform: a client transform gets None and computes it from the
        batch; a defence gets the update so far."""

    def clients(self) -> int:
        """How many clients' private batches the update combines (1: the cell's own batch only). A
        client transform returning K > 1 gets K batches of b images, concatenated, in `Client.batch`."""
        return 1

    def victim(self, model: ImageVictim, seed: int) -> ImageVictim:
        """The victim the client runs, made from `model` before it is trained and before any update is
        computed (PRECODE inserts its bottleneck; `seed` is the cell's, for any randomness). Default:
        `model` unchanged. A transform that changes it sets `changes_victim = True`."""
        return model

    def label(self) -> str:
        """A short readable name for tables ('prune keep=0.1'): the name and each setting."""
        settings = " ".join(f"{f.name}={_text(getattr(self.config, f.name))}" for f in fields(self.config))
        return f"{self.name} {settings}".strip()

    def described(self) -> dict[str, Any]:
        """Its name and settings as plain data (`{"name": ..., setting: value}`): what an update lists
        when the threat model says the defence is known (`ClientUpdate.defences`)."""
        return {"name": self.name, **asdict(self.config)}

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


def admit_transform(name: str, obj: object) -> bool:
    """A defence entry point's object (`leakbench.plugins`): an UpdateTransform subclass is registered
    under its own `name` (unless it is registered already); anything else is not a defence."""
    if not (isinstance(obj, type) and issubclass(obj, UpdateTransform)):
        return False
    if obj.name not in TRANSFORMS.names() or TRANSFORMS.create(obj.name) is not obj:
        register_transform(obj)
    return True


def list_transforms() -> list[tuple[str, str]]:
    """(name, description) of every update transform: the clients, then the defences (`leakbench list defences`)."""
    entries = TRANSFORMS.entries()
    return [(e.name, e.description) for e in sorted(entries, key=lambda e: not e.factory().makes_update)]


RETIRED: dict[str, tuple[type[UpdateTransform], str]] = {}
"""Retired transform names: name → (the class that reads back cells stored under it, the one-line refusal
a suite or command line naming it gets). `retire_transform` fills it."""


def retire_transform(cls: type[UpdateTransform], message: str) -> None:
    """Retire `cls.name`: a suite or `--defence` naming it is refused with `message` (`refuse_retired`);
    stored cell specs naming it still read back through `cls` (never registered, never listed)."""
    RETIRED[cls.name] = (cls, message)


def refuse_retired(name: str) -> None:
    """A ConfigError (one line: what the name became) when `name` is a retired transform's."""
    if name in RETIRED:
        raise ConfigError(RETIRED[name][1])


def check_retired(name: str, settings: Iterable[str]) -> None:
    """One ConfigError line when `settings` name a setting that transform `name` no longer takes (`retired`):
    a suite (or stored spec) written for the transform that had that name before, never run as the new one."""
    retired = transform_class(name).retired
    for key in settings:
        if key in retired:
            raise ConfigError(f"{name!r} takes no {key!r} any more: {retired[key]}")


def transform_class(name: str) -> type[UpdateTransform]:
    """The transform registered as `name` (a ConfigError naming the known ones if none); a retired name's
    class for stored cells (`RETIRED`). A name registered already (every shipped one) loads no plugin:
    installed defence plugins load only when a name is not."""
    if name in RETIRED:
        return RETIRED[name][0]
    try:
        return TRANSFORMS.entry_as_registered(name).factory()
    except KeyError:
        return TRANSFORMS.create(name)


@dataclass(frozen=True)
class EmptyConfig:
    """No settings."""


@register_transform
class FedSGD(UpdateTransform):
    """FedSGD: the gradient of the mean batch loss (the default client)."""

    paper = Citation("McMahan et al., AISTATS 2017", "https://arxiv.org/abs/1602.05629")
    name = "fedsgd"
    Config = EmptyConfig
    makes_update = True

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return fedsgd_update(client.model, client.batch, client.threat)


@register_transform
class FedSGD64(FedSGD):
    """FedSGD computed in float64: the client casts its model copy and batch to float64 and shares float64 gradients."""

    name = "fedsgd-f64"

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        update = fedsgd_update(client.model, client.batch, client.threat, dtype=torch.float64)
        return dataclasses.replace(update, kind=self.name)


def client_update(transforms: list[UpdateTransform], client: Client) -> ClientUpdate:
    """Apply `transforms` (one client transform first, then the defences in order) for `client`."""
    if not transforms or not transforms[0].makes_update or any(t.makes_update for t in transforms[1:]):
        raise ConfigError("an update needs exactly one client transform (fedsgd, fedavg or dp), first")
    update = None
    for transform in transforms:
        update = applied(transform, update, client)
        if update.defences is not None and transform.name != "fedsgd":  # the threat model: defence known; the
            # client transforms (MixUp α, DP σ and C, FedAvg E/η) too, all but the plain protocol
            update = dataclasses.replace(update, defences=(*update.defences, transform.described()))
    assert update is not None
    return update


def applied(transform: UpdateTransform, update: ClientUpdate | None, client: Client) -> ClientUpdate:
    """`transform.apply(update, client)`, its failure made the transform's: an exception it raises, a
    result that is not a ClientUpdate, or gradients (or shared buffers) holding NaN or ∞ raise one
    DefenceError line naming it and its module (a plugin's). Never the attack's failure: an attack
    handed a broken update would fail, and that failure would be scored as no leakage."""
    from leakbench.fl.model_check import ClientRefused

    try:
        out = transform.apply(update, client)
    except ClientRefused:  # the client declined to share (a defence's verdict, not its failure): the cell's outcome
        raise
    except Exception as exc:  # noqa: BLE001 — trusted client-side code, but any failure of it is reported as its own
        raise DefenceError(f"{transform_role(transform)} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(out, ClientUpdate):
        raise DefenceError(f"{transform_role(transform)} returned a {type(out).__name__}, not a ClientUpdate")
    tensors = {**out.gradients, **(out.buffers or {})}
    broken = [name for name, t in tensors.items() if not (isinstance(t, torch.Tensor) and finite(t))]
    if broken:
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
        raise DefenceError(f"{transform_role(transform)} made an update holding NaN or ∞ (in {shown})")
    return out


def finite(tensor: torch.Tensor) -> bool:
    """Whether every entry of `tensor` is finite. Its sum first (NaN and ±∞ carry into the sum, so a finite
    sum proves it; about 13× cheaper than `isfinite` on 7 M entries, which matters when a defended victim
    trains), the entries themselves only when the sum is not finite (finite values can sum past float32)."""
    return math.isfinite(float(tensor.sum())) or bool(torch.isfinite(tensor).all())


def transform_role(transform: UpdateTransform) -> str:
    """How errors name a transform: "defence 'prune' (leakbench.fl.prune)", "client 'fedavg' (...)",
    with the module that defines it (a plugin's module for a plugin's)."""
    role = "client" if transform.makes_update else "defence"
    module = type(transform).__module__
    origin = module if module.startswith("leakbench.") else f"plugin module {module}"
    return f"{role} {transform.name!r} ({origin})"


LEGACY_CLIENTS = ("fedsgd", "dp", "fedavg")
"""Client transforms a cell names through its own fields (none: FedSGD; `dp`; `fedavg`), never in `defences`."""


@dataclass(frozen=True)
class DefenceSetting:
    """One update transform of a cell's `defences`: a registered transform's name and its Config (frozen,
    so hashable). A defence, or (first, at most one) a client transform other than LEGACY_CLIENTS,
    which replaces the cell's FedSGD client (MixUp, secure aggregation, a plugin's client)."""

    name: str
    config: Any

    @property
    def makes_update(self) -> bool:
        """Whether it is a client transform (computes the update from the batch)."""
        return transform_class(self.name).makes_update

    def transform(self) -> UpdateTransform:
        """The configured transform (a ConfigError for an unknown name or a legacy client)."""
        cls = transform_class(self.name)
        if cls.makes_update and self.name in LEGACY_CLIENTS:
            raise ConfigError(f"{self.name!r} computes the update as the cell's own client setting, not as one "
                              "of its defences")
        return cls(self.config)


def build_transforms(steps: tuple[DefenceSetting, ...]) -> list[UpdateTransform]:
    """The configured transforms of an update's ordered (name, settings) steps (`CellSpec.update`: the
    client first, a legacy client among them too), in order; a ConfigError for an unknown name."""
    return [transform_class(step.name)(step.config) for step in steps]


def check_defences(defences: tuple[DefenceSetting, ...], legacy_client: str | None) -> None:
    """Raise a one-line ConfigError unless `defences` holds at most one client transform, first, and
    none beside a legacy client (`legacy_client`: "dp" or "fedavg" when the cell sets one)."""
    clients = [d.name for d in defences if d.transform().makes_update]
    if len(clients) > 1:
        raise ConfigError(f"an update has one client, not {len(clients)} ({', '.join(clients)})")
    if clients and legacy_client is not None:
        raise ConfigError(f"{clients[0]!r} computes the update itself; it cannot run with {legacy_client}")
    if clients and not defences[0].makes_update:
        raise ConfigError(f"the client transform {clients[0]!r} must come first in the defences")
