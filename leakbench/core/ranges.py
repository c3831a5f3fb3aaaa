"""Declared ranges of numeric settings and choices of string settings: one declaration per field,
checked wherever a Config is made.

A numeric field of a settings dataclass (an attack's Config, `DPConfig`, `FedAvgConfig`,
`InversionConfig`, `TrainRecipe`) declares its range where it is declared:

    max_draws: int = ranged(200_000_000, 1, 10**12)
    keep: float = ranged(0.7, 0.5, 1, low_open=True)

`ranged` is `dataclasses.field` with the range in the field's metadata. A Config that derives from
`Ranged` checks every field on construction (`check_ranges`), and `leakbench.core.settings.build_config`
checks any Config (plugins' too) the same way, so `--param`, a suite's `[hyperparameters.X]` table and
`create_attack` refuse NaN, ±inf, an integer past int64 and a value outside its range with one line,
before any cell runs. Upper bounds are generous but finite: a budget of 10^12 steps is refused up
front rather than run into a time-out. A string field with a fixed set of values declares them the
same way, and is checked in the same places:

    method: str = chosen("fastica", "fastica", "official")

`leakbench show attack NAME` prints each range and each field's choices.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from leakbench.core.errors import ConfigError

INT64 = 2**63
"""Integers without a declared range still lie in (−2^63, 2^63): torch and numpy hold them as int64."""

REQUIRED: Any = MISSING
"""`ranged(REQUIRED, …)`: a field without a default."""

MAX_SECONDS = 604_800.0
"""A time budget: at most one week."""
MAX_STEPS = 10**7
"""Optimiser steps (Adam, L-BFGS, FastICA iterations, inversion steps): at most 10^7 (published
budgets are 300–25,000; 10^7 steps is days on a CPU)."""
MAX_LR = 100.0
"""Learning rates lie in (0, 100]."""
MAX_WEIGHT = 1e6
"""Weights of loss terms and tolerance multipliers: at most 10^6."""
MAX_NOISE_STD = 1e6
"""Gaussian noise a defence adds to an update (the `noise` defence's σ; DP-SGD's σ·C on the sum): a std
of at most 10^6. Gradient entries of the victims are ≲ 10^3, so at 10^6 no signal is left to measure;
past it the update heads for float32's limit (3.4·10^38: σ = 10^300 made every entry ∞, and attacks
square and sum entries, which overflows from about 10^19), where a cell would fail for the numbers, not
for the attack."""


@dataclass(frozen=True)
class Range:
    """An interval [low, high] of a numeric field; `low_open` / `high_open` exclude an end."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def text(self) -> str:
        """The interval as written in help and errors, e.g. `[1, 10^12]` or `(0, 1]`."""
        low, high = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{low}{_number(self.low)}, {_number(self.high)}{high}"


def ranged(default: Any, low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Any:
    """A dataclass field with `default` (`REQUIRED`: none) and the declared range [low, high] (ends
    excluded when open)."""
    rng = Range(low, high, low_open, high_open)
    if default is REQUIRED:
        return field(metadata={"range": rng})
    if not (_is_number(default) and default in rng):
        raise ValueError(f"default {default!r} outside its declared range {rng.text()}")
    return field(default=default, metadata={"range": rng})


def field_range(f: Any) -> Range | None:
    """The range a dataclass field declares (None when it declares none)."""
    rng: Range | None = f.metadata.get("range")
    return rng


def chosen(default: str, *choices: str) -> Any:
    """A dataclass field with `default` whose value must be one of `choices` (the default among them)."""
    if default not in choices:
        raise ValueError(f"default {default!r} not among its declared choices {choices!r}")
    return field(default=default, metadata={"choices": tuple(choices)})


def field_choices(f: Any) -> tuple[str, ...] | None:
    """The values a dataclass field declares as its only valid ones (None when it declares none)."""
    choices: tuple[str, ...] | None = f.metadata.get("choices")
    return choices


def check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise one ConfigError line when `value` is not one of the declared `choices`."""
    if not (isinstance(value, str) and value in choices):
        raise ConfigError(f"{owner}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


class Ranged:
    """Mixin of settings dataclasses: every field is checked against its declared range on construction
    (a subclass defining `__post_init__` calls `super().__post_init__()` first). Errors name the
    class attribute `owner` (or `attack_name`) when the class sets one, else the class."""

    def __post_init__(self) -> None:
        check_ranges(self)


def check_ranges(config: Any) -> None:
    """Raise one ConfigError line for the first field of the dataclass instance `config` whose value
    lies outside its declared range or choices; without either, a float must be finite and an int
    within int64."""
    owner = getattr(config, "attack_name", None) or getattr(config, "owner", None) or type(config).__name__
    for f in fields(config):
        choices = field_choices(f)
        if choices is not None:
            check_choice(owner, f.name, getattr(config, f.name), choices)
        else:
            check_value(owner, f.name, getattr(config, f.name), field_range(f), integer=_is_int_field(f))


def check_value(owner: str, name: str, value: Any, rng: Range | None, *, integer: bool = False) -> None:
    """One field's value. With a declared range `rng`: a finite real number (an integer when `integer`)
    inside it. Without one: a float must be finite and an int within int64; other values are left to
    the field's own checks."""
    if rng is None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{owner}: {name} must be a finite number, got {value!r}")
        if _is_number(value) and isinstance(value, int) and not -INT64 < value < INT64:
            raise ConfigError(f"{owner}: {name} must fit a 64-bit integer, got {value!r}")
        return
    number = _is_number(value) and (not integer or isinstance(value, int))
    if not (number and (isinstance(value, int) or math.isfinite(value)) and value in rng):
        raise ConfigError(f"{owner}: {name} must be {'an integer' if integer else 'a number'} in {rng.text()}, "
                          f"got {value!r}")


def range_text(f: Any) -> str:
    """' in [low, high]' for a field with a declared range, ' in {a, b}' for one with declared choices,
    else ''."""
    rng, choices = field_range(f), field_choices(f)
    if choices is not None:
        return f" in {{{', '.join(choices)}}}"
    return f" in {rng.text()}" if rng is not None else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int_field(f: Any) -> bool:
    """An int field: annotated `int` (a string under postponed annotations) or with an int default."""
    return f.type in (int, "int") or (type(f.default) is int)


def _number(value: float) -> str:
    """10^k for large powers of ten, else the shortest form (`1e-05`, `0.5`, `65536`)."""
    if isinstance(value, int) or float(value).is_integer():
        v = int(value)
        if v >= 10**6 and str(v).rstrip("0") == "1":
            return f"10^{len(str(v)) - 1}"
        if v >= 2**20 and v & (v - 1) == 0:
            return f"2^{v.bit_length() - 1}"
        return str(v)
    return f"{value:g}"
