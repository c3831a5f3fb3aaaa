"""Issue 23, validate once: every attack refuses a bad option when it is made (its Config's
construction), not when it first meets an update; string options declare their choices the way
numbers declare ranges (leakbench.core.ranges), and capabilities are class attributes (Attack.layered)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from leakbench.attacks import ATTACKS, attack_class, build_config, create_attack
from leakbench.attacks.params import config_params
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import Ranged, chosen, field_choices
from leakbench.core.settings import field_default as _default

BOGUS = "bogus-value"

STRING_FIELDS = [(name, f.name) for name in ATTACKS.names() for f in fields(attack_class(name).Config)
                 if isinstance(_default(f), str)]
"""(attack, field) for every string field of every registered attack's Config."""


def _shipped(name: str) -> bool:
    return attack_class(name).__module__.startswith("leakbench.")


def test_every_string_field_is_covered() -> None:
    assert {"cpa", "ig", "dlg", "spear"} <= {name for name, _ in STRING_FIELDS}


@pytest.mark.parametrize("name, key", STRING_FIELDS)
def test_a_bogus_string_option_is_refused_at_construction(name: str, key: str) -> None:
    config = attack_class(name).Config
    with pytest.raises(ConfigError, match=key):
        build_config(config, {key: BOGUS})  # --param, a suite's table, create_attack
    if _shipped(name):
        assert issubclass(config, Ranged)
        with pytest.raises(ConfigError, match=key):
            config(**{key: BOGUS})  # the Config itself, however it is made


@pytest.mark.parametrize("name, key", STRING_FIELDS)
def test_a_valid_string_option_is_accepted(name: str, key: str) -> None:
    config = attack_class(name).Config
    field = next(f for f in fields(config) if f.name == key)
    assert getattr(build_config(config, {key: _default(field)}), key) == _default(field)
    for choice in field_choices(field) or ():
        try:
            build_config(config, {key: choice})
        except ConfigError as exc:  # a cross-field rule may refuse it (cpa-released has no derivative prefilter)
            assert "must be one of" not in str(exc), exc


def test_cross_field_rules_are_checked_at_construction() -> None:
    with pytest.raises(ConfigError, match="prefilter 'derivative' needs method 'fastica'"):
        create_attack("cpa", method="official", prefilter="derivative")
    with pytest.raises(ConfigError, match="prefilter 'derivative'"):
        create_attack("cpa-derivative", layer=2)
    create_attack("cpa-derivative", layer=1)


def test_choices_are_printed_with_the_help() -> None:
    lines = {p.name: p.line() for p in config_params(attack_class("cpa").Config)}
    assert lines["method"].startswith("method (str in {fastica, official}, default 'fastica'): ")
    lines = {p.name: p.line() for p in config_params(attack_class("ig").Config)}
    assert lines["label_strategy"].startswith("label_strategy (str in {bias-corrected, uniform-counts}, ")


def test_a_default_outside_its_choices_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="not among"):
        chosen("c", "a", "b")


@pytest.mark.parametrize("name", ATTACKS.names())
def test_layered_is_whether_the_config_has_a_layer(name: str) -> None:
    cls = attack_class(name)
    assert cls.layered == any(f.name == "layer" for f in fields(cls.Config))
    assert cls.reconstructs(1) == "image"
    assert cls.reconstructs(2) == ("feature" if cls.layered else "image")


def test_layered_attacks_are_the_linear_layer_ones() -> None:
    layered = {name for name in ATTACKS.names() if _shipped(name) and attack_class(name).layered}
    assert layered == {"cpa", "cpa-derivative", "cpa-released", "spear", "spear-approx", "spear-dl", "spear-guided",
                       "spear-demix", "spear-masked", "spear-paper", "spear-unmix"}
