"""Settings dataclasses from plain data: the one coercer of every Config.

`build_config(Config, {key: value})` makes an attack's Config from `--param` / a suite's
`[hyperparameters.X]`, and a suite's `dp`, `fedavg`, `inversion`, `train` and `defences` tables
(`what` names them in messages): unknown and missing keys, wrong types (ints accepted, and stored, as
floats for float fields, so `1` and `1.0` are one cell) and values outside a field's declared range
or choices (`leakbench.core.ranges`, for any Config, plugins' too) are one ConfigError line.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, Field
from typing import Any, TypeVar

from leakbench.core.errors import ConfigError
from leakbench.core.ranges import check_ranges

SIMPLE = {"bool": bool, "int": int, "float": float, "str": str, "dict": dict, "list": list, "tuple": tuple}
WORDS = {bool: "boolean", int: "integer", float: "number", str: "string"}
C = TypeVar("C")


def build_config(config_cls: type[C], overrides: dict[str, Any], what: str = "hyperparameter") -> C:
    """Instantiate `config_cls` with `overrides` (see the module docstring); `what` is the word for a key
    in messages ("hyperparameter", "key"). Its keys are the dataclass fields (a ClassVar is none)."""
    if not dataclasses.is_dataclass(config_cls):
        raise ConfigError(f"{config_cls.__name__} is not a dataclass: it has no settings to build")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    known = {name for name, f in fields.items() if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown {_names(what, unknown)} for {config_cls.__name__} "
                          f"(known: {', '.join(sorted(known))})")
    missing = [name for name in sorted(known - set(overrides)) if field_default(fields[name]) is MISSING]
    if missing:
        raise ConfigError(f"missing {_names(what, missing)} for {config_cls.__name__}")
    kinds = _field_kinds(config_cls)
    config = config_cls(**{
        key: _coerce(config_cls.__name__, what, key, value, kinds.get(key), field_default(fields[key]))
        for key, value in overrides.items()})
    check_ranges(config)  # a Config that is not `Ranged` (a plugin's) is checked here, at parse time
    return config


def _names(what: str, names: list[str]) -> str:
    """"key 'a'" or "keys 'a', 'b'"."""
    return f"{what}{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"


def field_default(f: Field[Any]) -> Any:
    """A field's default value, also for fields with a default factory (dicts, lists); MISSING for none."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _field_kinds(config_cls: type) -> dict[str, type]:
    """Each field's plain type (bool, int, float, str, dict, list, tuple) where its annotation names one."""
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # noqa: BLE001  (a plugin's annotation that does not evaluate: fall back to the defaults)
        hints = {}
    return {name: hint for name, hint in hints.items() if hint in SIMPLE.values()}


def _coerce(owner: str, what: str, key: str, value: Any, kind: type | None, default: Any) -> Any:
    """Check `value` against the field's annotated type, else its default's (ints accepted for floats)."""
    kind = kind or (type(default) if default is not MISSING and type(default) in SIMPLE.values() else None)
    if kind in (dict, list, tuple):
        ok = isinstance(value, kind) or (kind is tuple and isinstance(value, list))
        if not ok:
            shape = "table (JSON object)" if kind is dict else "list"
            raise ConfigError(f"{what} {key}={value!r} of {owner} must be a {shape}")
        return tuple(value) if kind is tuple else value
    if kind is None:
        return value
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ConfigError(f"{what} {key}={value!r} of {owner} must be a {WORDS.get(kind, kind.__name__)}")
    return value
