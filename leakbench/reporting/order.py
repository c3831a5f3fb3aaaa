"""The one order of setting levels in every table and figure: numbers compared as numbers.

A cell stored with its update as data (`records.labels`: the ordered (transform name, settings) steps) is
ordered by those values (`level_sorter`): a level's key is its steps' names and settings (numbers as
numbers), then its threat model; nothing is read back from its label. The text rule below orders what
carries no stored update: cells stored before it existed, and labels that are not levels.

A level is a label such as 'noise σ=1e-05', 'DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)', 'clipping + noise
σ=0.01 C=1 (ε=5.56e+03 at q=0.01, T=1 step)' (a DP-SGD level past ε = 100: `fl.dp.level_label`), 'prune p=0.9',
'secagg K=8', 'quantise 4-bit' or 'precode beta=0.001 bottleneck=16'. Sorted as text, 1e-05 comes after 0.0001 and
bottleneck=256 before bottleneck=64; `level_key` splits a label into text and numbers and compares the
numbers numerically ('∞' as infinity), so levels read from weakest to strongest within a defence. The
undefended level ('none', 'fedsgd', the empty label) comes first.

    >>> sorted(["noise σ=0.001", "noise σ=1e-05", "noise σ=0.0001"], key=level_key)
    ['noise σ=1e-05', 'noise σ=0.0001', 'noise σ=0.001']
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pandas as pd

from leakbench.records.labels import update_steps

NUMBER = re.compile(r"∞|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
"""A number inside a label: no sign (the '-' of 'FC-6' or '4-bit' is a separator), optional exponent, or ∞."""
UNDEFENDED = frozenset({"", "none", "fedsgd"})
"""Labels of the undefended level, sorted first."""

Token = tuple[int, float, str]
T = TypeVar("T", bound=Hashable)


def level_key(level: object) -> tuple[Token, ...]:
    """Sort key of a level label (or a number, or a tuple of them): text pieces compared as text, numbers as
    numbers, the undefended level first. Two labels with the same key are the same level written the same way."""
    if isinstance(level, tuple):
        return tuple(token for part in level for token in level_key(part))
    if isinstance(level, bool):
        return ((1, float(level), ""),)
    if isinstance(level, int | float):
        return ((1, float(level), ""),) if not math.isnan(level) else ((0, 0.0, ""),)
    text = str(level).strip()
    if text in UNDEFENDED:
        return ((0, 0.0, ""),)
    tokens: list[Token] = []
    at = 0
    for match in NUMBER.finditer(text):
        if match.start() > at:
            tokens.append((2, 0.0, text[at:match.start()]))
        tokens.append((1, math.inf if match.group() == "∞" else float(match.group()), ""))
        at = match.end()
    if at < len(text):
        tokens.append((2, 0.0, text[at:]))
    return tuple(tokens)


def ordered(levels: Iterable[T], key: Callable[[object], tuple[Token, ...]] = level_key) -> list[T]:
    """The distinct `levels` in `key` order (`level_key`, or a run's `level_sorter`; ties by their text)."""
    return sorted(set(levels), key=lambda v: (key(v), str(v)))


NONE = "none"
"""The label of the undefended level (plain FedSGD, no DP, no noise, no defence)."""
DEFAULT_THREAT = "default"
"""The threat model label of a cell whose attacker gets the default (`fl.update.ThreatModel.label`)."""
LEGACY_DP = "dp"
"""The step name of DP-SGD, which the `client` label leaves to the `dp` column."""


def dp_levels(cells: pd.DataFrame) -> pd.Series:
    """Each cell's DP-SGD level with its privacy accounting (`fl.dp.level_label`) from its `dp`, `dp_epsilon`,
    `dp_q` and `dp_steps` columns: 'DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)', 'clipping + noise σ=0.01 C=1
    (ε=5.56e+03 at q=0.01, T=1 step)' past ε = 100; 'DP σ=… C=…' alone for cells stored without an ε; NONE
    for a cell without DP."""
    from leakbench.fl.dp import level_label

    dp = cells["dp"].fillna(NONE).astype(str) if "dp" in cells else pd.Series(NONE, cells.index)

    def column(name: str) -> list[Any]:
        return list(cells[name]) if name in cells else [None] * len(cells)

    labels = [NONE if d == NONE else level_label(d, _number(e), _number(q), None if _number(t) is None else int(t))
              for d, e, q, t in zip(dp, column("dp_epsilon"), column("dp_q"), column("dp_steps"), strict=True)]
    return pd.Series(labels, index=cells.index, dtype=object)


def _number(value: object) -> float | None:
    """A stored number as a float; None for a missing one (None, NaN, not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def defence_levels(cells: pd.DataFrame) -> pd.Series:
    """Each cell's defence level label, from the `client` column `aggregate.with_model` writes (noise,
    defences, threat model after 'fedsgd') and the DP level with its accounting (`dp_levels`)."""
    client = cells["client"].fillna("fedsgd").astype(str) if "client" in cells else pd.Series("fedsgd", cells.index)
    rest = client.str.replace(r"^fedsgd( \+ )?", "", regex=True).str.replace(r"^ · ", "", regex=True)
    dp = dp_levels(cells)
    parts = [[*([d] if d != NONE else []), *([r] if r else [])] for d, r in zip(dp, rest, strict=True)]
    return pd.Series([" + ".join(p) if p else NONE for p in parts], index=cells.index, dtype=object)


def update_key(steps: Sequence[tuple[str, Mapping[str, Any]]], threat: str = DEFAULT_THREAT) -> tuple[Token, ...]:
    """The order of a stored update (`records.labels`) and threat model: the undefended one (FedSGD alone,
    default threat) first; else each step after a leading FedSGD as its name, then each setting's name and
    value (numbers as numbers, a non-finite one stored as null as ∞), then the threat model's label."""
    if [name for name, _ in steps] == ["fedsgd"] and threat == DEFAULT_THREAT:
        return ((0, 0.0, ""),)
    tokens: list[Token] = []
    for i, (name, settings) in enumerate(steps):
        if i == 0 and name == "fedsgd":
            continue
        tokens.append((2, 0.0, name))
        for field in sorted(settings):
            tokens += [(2, 0.0, field), _value_token(settings[field])]
    return (*tokens, *([(2, 0.0, threat)] if threat != DEFAULT_THREAT else []))


def _value_token(value: object) -> Token:
    if value is None:
        return (1, math.inf, "")
    if isinstance(value, bool | int | float):
        return (1, float(value), "") if not math.isnan(value) else (1, math.inf, "")
    return (2, 0.0, str(value))


def level_keys(cells: pd.DataFrame) -> dict[str, tuple[Token, ...]]:
    """The stored order of each `client` label (update without its DP step) and defence level label (all of
    it) of `cells` (with `client` as `aggregate.with_model` makes it): every label of a cell that stored its
    update (`update` column) mapped to its `update_key`; labels of the others are left out (`level_key`)."""
    if "update" not in cells or "client" not in cells:
        return {}
    keys: dict[str, tuple[Token, ...]] = {}
    threats = cells["threat"].fillna(DEFAULT_THREAT).astype(str) if "threat" in cells \
        else pd.Series(DEFAULT_THREAT, cells.index)
    for client, level, text, threat in zip(cells["client"], defence_levels(cells), cells["update"], threats,
                                           strict=True):
        steps = update_steps(text)
        if steps is None:
            continue
        for label, key in ((client, update_key([s for s in steps if s[0] != LEGACY_DP], threat)),
                           (level, update_key(steps, threat))):
            keys[str(label)] = min(key, keys.get(str(label), key))
    return keys


def level_sorter(cells: pd.DataFrame) -> Callable[[object], tuple[Token, ...]]:
    """Sort key of levels (or tuples of them, as `level_key`) for the labels of `cells`: a label whose cells
    stored their update in its stored order (`level_keys`), anything else by `level_key`."""
    keys = level_keys(cells)

    def key(level: object) -> tuple[Token, ...]:
        if isinstance(level, tuple):
            return tuple(token for part in level for token in key(part))
        if isinstance(level, str) and level in keys:
            return keys[level]
        return level_key(level)
    return key


__all__ = ["defence_levels", "dp_levels", "level_key", "level_keys", "level_sorter", "ordered", "update_key"]
