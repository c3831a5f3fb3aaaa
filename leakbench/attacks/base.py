"""The attack contract: every attack receives a `ClientUpdate` and returns a `Reconstruction`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import MISSING, asdict, dataclass
from typing import Any, Callable, ClassVar

from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate
from leakbench.ranges import check_ranges
from leakbench.reconstruction import Reconstruction, Space, Status  # noqa: F401 (re-exported: the attack contract)


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
    report: Callable[[int, "Reconstruction"], None]

    def __contains__(self, step: int) -> bool:
        return step in self.steps


class Attack(ABC):
    """Base class: a frozen-dataclass `Config` with defaults, a name, a description."""

    name: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type]
    requires: ClassVar[Requirements] = Requirements()

    def __init__(self, config: Any | None = None) -> None:
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
            parts.append(f"{cfg['iterations']:,} steps" + (f" × {cfg['restarts']}" if cfg.get("restarts", 1) != 1 else ""))
        if "max_draws" in cfg:
            parts.append(f"{cfg['max_draws']:,} draws")
        if "max_seconds" in cfg:
            parts.append(f"{cfg['max_seconds']:g} s")
        return ", ".join(parts)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"


def build_config(config_cls: type, overrides: dict[str, Any]) -> Any:
    """Instantiate `config_cls` with `overrides`, rejecting unknown keys, wrong types and values outside
    a field's declared range (`leakbench.ranges`; NaN, ±inf and integers past int64 for any Config,
    plugins' too) with a clear message."""
    known = set(config_cls.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown hyperparameter(s) {', '.join(unknown)} for {config_cls.__name__} "
                          f"(known: {', '.join(sorted(known))})")
    fields = config_cls.__dataclass_fields__
    config = config_cls(**{key: _coerce(config_cls.__name__, key, value, _default(fields[key]))
                           for key, value in overrides.items()})
    check_ranges(config)  # a Config that is not `Ranged` (a plugin's) is checked here, at parse time
    return config


def _default(f: Any) -> Any:
    """A field's default value, also for fields with a default factory (dicts, lists)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _coerce(owner: str, key: str, value: Any, default: Any) -> Any:
    """Check `value` against the type of the field's default (ints accepted for floats)."""
    if isinstance(default, (dict, list, tuple)):
        ok = isinstance(value, type(default)) or (isinstance(default, tuple) and isinstance(value, list))
        value = tuple(value) if ok and isinstance(default, tuple) else value
        if not ok:
            kind = "table (JSON object)" if isinstance(default, dict) else "list"
            raise ConfigError(f"hyperparameter {key}={value!r} of {owner} must be a {kind}")
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        raise ConfigError(f"hyperparameter {key}={value!r} of {owner} must be a {type(default).__name__}")
    return value
