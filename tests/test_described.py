"""Plugin attacks as the harness knows them (issue 22): described by the attack worker as JSON and
rebuilt as stand-ins. Every shipped attack, round-tripped, gives the same hyperparameters, help,
ranges and requirements, and a stand-in never runs."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from leakbench.attacks import ATTACKS, Attack, attack_class, build_config
from leakbench.attacks.described import describe, described_attack
from leakbench.attacks.params import param_lines
from leakbench.core.errors import ConfigError, LeakbenchError


@pytest.mark.parametrize("name", ATTACKS.names())
def test_a_described_attack_has_the_real_ones_settings(name: str) -> None:
    real = attack_class(name)
    stand_in = described_attack(json.loads(json.dumps(describe(real))))  # through JSON, as from the worker
    assert stand_in.name == real.name and stand_in.requires == real.requires
    assert stand_in.layered == real.layered and stand_in.reconstructs(2) == real.reconstructs(2)
    assert asdict(stand_in.Config()) == json.loads(json.dumps(asdict(real.Config()), default=list)) or \
        asdict(stand_in.Config()) == asdict(real.Config())
    assert param_lines(stand_in.Config) == param_lines(real.Config)
    if real.budget is Attack.budget:  # an overridden budget() is code the stand-in does not have
        assert stand_in(stand_in.Config()).budget() == real(real.Config()).budget()


@pytest.mark.slow
def test_a_described_attack_refuses_what_the_real_one_refuses_and_never_runs() -> None:
    stand_in = described_attack(json.loads(json.dumps(describe(attack_class("spear")))))
    with pytest.raises(ConfigError, match="max_draws"):
        build_config(stand_in.Config, {"max_draws": 10**13})
    with pytest.raises(ConfigError, match="sampler must be one of 'auto', 'zeros'"):
        build_config(stand_in.Config, {"sampler": "road"})
    with pytest.raises(LeakbenchError, match="only in the sandboxed attack worker"):
        stand_in(stand_in.Config()).reconstruct(None, seed=0)


def test_a_described_type_that_would_run_code_is_replaced(tmp_path) -> None:
    """A malicious worker's description never puts code where `typing.get_type_hints` evaluates it."""
    import typing

    mark = tmp_path / "ran"
    data = json.loads(json.dumps(describe(attack_class("spear"))))
    data["fields"][0]["type"] = f'__import__("pathlib").Path("{mark}").touch()'
    stand_in = described_attack(data)
    typing.get_type_hints(stand_in.Config)
    assert not mark.exists()
