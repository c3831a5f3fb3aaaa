"""The one order of setting levels in every table and figure: numbers compared as numbers.

A level is a label such as 'noise σ=1e-05', 'DP σ=0.1 C=1 (ε=80.6)', 'prune p=0.9', 'secagg K=8',
'quantise 4-bit' or 'precode beta=0.001 bottleneck=16'. Sorted as text, 1e-05 comes after 0.0001 and
bottleneck=256 before bottleneck=64; `level_key` splits a label into text and numbers and compares the
numbers numerically ('∞' as infinity), so levels read from weakest to strongest within a defence. The
undefended level ('none', 'fedsgd', the empty label) comes first.

    >>> sorted(["noise σ=0.001", "noise σ=1e-05", "noise σ=0.0001"], key=level_key)
    ['noise σ=1e-05', 'noise σ=0.0001', 'noise σ=0.001']
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable
from typing import TypeVar

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


def ordered(levels: Iterable[T]) -> list[T]:
    """The distinct `levels` in `level_key` order (ties, if any, by their text)."""
    return sorted(set(levels), key=lambda v: (level_key(v), str(v)))


__all__ = ["level_key", "ordered"]
