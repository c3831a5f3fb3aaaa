"""The attack palette: one fixed colour per shipped attack, distinct, and a stable one for any other name."""

from __future__ import annotations

import re

from leakbench.attacks import ATTACKS
from leakbench.reporting.palette import SHIPPED, colour, hashed


def test_every_shipped_attack_has_its_own_fixed_colour() -> None:
    names = set(ATTACKS.names())
    missing = sorted(n for n in names if n not in SHIPPED)
    assert not missing, f"attacks without a fixed colour in reporting/palette.py: {missing}"
    assert len(set(SHIPPED.values())) == len(SHIPPED), "two attacks share a colour"


def test_unknown_attack_gets_a_stable_hex_colour() -> None:
    first = colour("my-plugin-attack")
    assert re.fullmatch(r"#[0-9a-f]{6}", first)
    assert first == colour("my-plugin-attack") == hashed("my-plugin-attack")
    assert colour("another-attack") != first
    assert colour("spear") == SHIPPED["spear"]
