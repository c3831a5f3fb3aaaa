"""The attack registry, `ATTACKS`, and its functions, in a module of their own: the shipped attacks
register through `register_attack` without importing the package that imports them (`leakbench.attacks`
re-exports all of it and registers the shipped attacks when imported)."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from leakbench.attacks.base import Attack
from leakbench.core.errors import ConfigError
from leakbench.core.registry import Registry
from leakbench.core.settings import build_config
from leakbench.plugins import load_attack_plugins

ATTACKS: Registry[type[Attack]] = Registry("attack", on_first_use=load_attack_plugins)  # entry-point plugins


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Class decorator: register `cls` under `cls.name` (a duplicate name, or a Config that is not a
    dataclass, raises a ConfigError: plugins register through here too)."""
    if not is_dataclass(getattr(cls, "Config", None)):
        raise ConfigError(f"attack {getattr(cls, 'name', cls.__name__)!r}: its Config must be a dataclass "
                          "(fields with defaults, documented in its docstring)")
    ATTACKS.register(cls.name, lambda: cls, cls.description)
    return cls


def attack_class(name: str) -> type[Attack]:
    return ATTACKS.create(name)


def create_attack(name: str, **hyperparameters: Any) -> Attack:
    """Build attack `name` with its Config defaults overridden by `hyperparameters`."""
    cls = attack_class(name)
    return cls(build_config(cls.Config, hyperparameters))


def attack_budget(name: str, hyperparameters: dict[str, Any]) -> str:
    """The budget of attack `name` as stored in a record (its full hyperparameters), in words;
    '' when the attack is not registered here (a plugin not installed) or the values do not fit.
    A stored field this version's Config no longer has (a record older than a knob's removal) is left
    out, so old records keep their budget."""
    try:
        cls = attack_class(name)
        known = {f.name for f in fields(cls.Config)}
        return cls(build_config(cls.Config, {k: v for k, v in hyperparameters.items() if k in known})).budget()
    except (ConfigError, TypeError, ValueError):
        return ""


def list_attacks() -> list[tuple[str, str]]:
    return [(e.name, e.description) for e in ATTACKS.entries()]


def admit_attack(name: str, obj: object) -> bool:
    """An attack entry point's object (`leakbench.plugins`): an Attack subclass is registered under its
    own `name` (unless it is registered already); anything else is not an attack."""
    if not (isinstance(obj, type) and issubclass(obj, Attack)):
        return False
    if obj.name not in ATTACKS.names() or ATTACKS.create(obj.name) is not obj:
        register_attack(obj)
    return True
