"""Issue 22, bad input: every numeric hyperparameter declares its range (leakbench.core.ranges), and values
outside it — NaN, ±inf, past the bounds, integers past int64 — are refused where a Config is built
from user input (`build_config`: `--param`, a suite's `[hyperparameters.X]`, `create_attack`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import pytest

from leakbench.attacks import ATTACKS, attack_class, build_config, create_attack
from leakbench.attacks.inversion import InversionConfig
from leakbench.attacks.params import config_params
from leakbench.core.errors import ConfigError
from leakbench.core.ranges import INT64, Range, check_ranges, field_range, ranged
from leakbench.fl.dp import DPConfig, epsilon
from leakbench.fl.fedavg import FedAvgConfig
from leakbench.fl.noise import NoiseConfig
from leakbench.fl.transform import TRANSFORMS, transform_class
from leakbench.harness.suite import load_suite
from leakbench.models.training import TrainRecipe

SHIPPED = [name for name in ATTACKS.names() if attack_class(name).__module__.startswith("leakbench.")]
SETTINGS = [DPConfig, FedAvgConfig, InversionConfig, TrainRecipe]
DEFENCES = [name for name in TRANSFORMS.names() if transform_class(name).__module__.startswith("leakbench.")]
REQUIRED_SETTINGS = {"noise": {"sigma": 0.0}, "dp": {"sigma": 0.0, "clip": 1.0}}


def _numeric(config: type) -> list:
    """The int and float fields of a Config (bools are not numbers here)."""
    return [f for f in fields(config) if f.type in ("int", "float", int, float)]


def _cases(config: type) -> list[tuple[str, object]]:
    """(field, bad value) pairs: NaN and ±inf for every number, and each side just outside its range."""
    cases: list[tuple[str, object]] = []
    for f in _numeric(config):
        rng = field_range(f)
        integer = f.type in ("int", int)
        cases += [(f.name, math.nan), (f.name, math.inf), (f.name, -math.inf)] if not integer else []
        below = rng.low if rng.low_open else (rng.low - 1 if integer else rng.low - 1e-9 * max(1, abs(rng.low)))
        above = rng.high if rng.high_open else (rng.high + 1 if integer else rng.high * (1 + 1e-9) + 1e-12)
        cases += [(f.name, int(below) if integer else below), (f.name, int(above) if integer else above)]
    return cases


@pytest.mark.parametrize("name", SHIPPED)
def test_every_numeric_field_of_every_attack_declares_a_range(name: str) -> None:
    config = attack_class(name).Config
    missing = [f.name for f in _numeric(config) if field_range(f) is None]
    assert not missing, f"{name}: numeric fields without a declared range: {missing}"
    for f in _numeric(config):  # the defaults themselves lie inside (presets' published values too)
        assert getattr(config(), f.name) in field_range(f), (name, f.name)


@pytest.mark.parametrize("config", SETTINGS, ids=lambda c: c.__name__)
def test_every_numeric_setting_declares_a_range(config: type) -> None:
    assert [f.name for f in _numeric(config) if field_range(f) is None] == []


@pytest.mark.parametrize("name", SHIPPED)
def test_out_of_range_hyperparameters_are_refused(name: str) -> None:
    config = attack_class(name).Config
    for key, value in _cases(config):
        if key == "layer":
            continue  # an axis of the cell, refused as a hyperparameter elsewhere; its range still holds
        with pytest.raises(ConfigError, match=key):
            build_config(config, {key: value})


@pytest.mark.parametrize("config, required", [(DPConfig, {"sigma": 1.0, "clip": 1.0}), (FedAvgConfig, {}),
                                              (InversionConfig, {}), (TrainRecipe, {})],
                         ids=lambda c: getattr(c, "__name__", ""))
def test_out_of_range_settings_are_refused_on_construction(config: type, required: dict) -> None:
    for key, value in _cases(config):
        with pytest.raises(ConfigError, match=key):
            config(**{**required, key: value})


@pytest.mark.parametrize("name", DEFENCES)
def test_every_defence_setting_declares_a_finite_range(name: str) -> None:
    """Issue 41: `noise` declared σ in [0, ∞), so σ = 1e300 made every entry of the update ∞ and was
    stored as the attack's failure. Every shipped update transform's numbers have finite bounds, and
    values past them are refused when the setting is made."""
    config = transform_class(name).Config
    for f in _numeric(config):
        rng = field_range(f)
        assert rng is not None and math.isfinite(rng.low) and math.isfinite(rng.high), (name, f.name)
    for key, value in _cases(config):
        with pytest.raises(ConfigError, match=key):
            config(**{**REQUIRED_SETTINGS.get(name, {}), key: value})


def test_noise_past_what_float32_holds_is_refused(tmp_path) -> None:
    """σ = 1e300 (issue 41) is refused at suite load, in one line saying why; so is DP-SGD's noise std
    σ·C past the same bound, and a clipping norm float32 rounds to 0. A σ so small that the accountant's
    terms overflow gives ε = ∞ (as σ = 0 does), not a ZeroDivisionError."""
    suite = 'name = "s"\ndataset = "embedded"\nattacks = ["spear"]\nbatch_sizes = [1]\n'
    for level in ("noise = [1e300]", 'defences = [{ name = "noise", sigma = 1e300 }]'):
        (tmp_path / "s.toml").write_text(suite + level + "\n")
        with pytest.raises(ConfigError, match=r"noise\[0\]|defences\[0\]") as error:
            load_suite(tmp_path / "s.toml")
        assert "sigma must be a number in [0, 10^6] (a larger std leaves no signal" in str(error.value)
    with pytest.raises(ConfigError, match=r"noise std σ·C = 1e\+18"):
        DPConfig(sigma=1e6, clip=1e12)
    with pytest.raises(ConfigError, match="clip"):
        DPConfig(sigma=1.0, clip=1e-300)
    assert NoiseConfig(sigma=1e6).sigma == 1e6 and DPConfig(sigma=1e-6, clip=1e12).clip == 1e12  # the edges
    assert epsilon(1e-300, 0.01, 1, 1e-5) == math.inf


def test_absurd_budgets_are_refused() -> None:
    for name, params in (("ig", {"iterations": 10**12}), ("cpa", {"iterations": 10**12}),
                         ("spear", {"max_draws": 10**13}), ("dlg", {"history_size": 0}),
                         ("spear", {"max_seconds": 1e9})):
        with pytest.raises(ConfigError, match=next(iter(params))):
            create_attack(name, **params)
    with pytest.raises(ConfigError, match="epochs"):
        FedAvgConfig(epochs=10**9)
    with pytest.raises(ConfigError, match="steps"):
        InversionConfig(steps=10**12)
    with pytest.raises(ConfigError, match="steps"):
        DPConfig(sigma=1.0, clip=1.0, steps=2**64)


def test_in_range_values_pass() -> None:
    create_attack("spear", max_draws=10**12, row_weight_power=100.0, chunk=0)
    create_attack("spear-dl", keep=1.0)
    create_attack("ig", iterations=10**7, tv=0.0)


@dataclass(frozen=True)
class _PluginConfig:
    """A plugin's Config that declares no ranges.

    steps: an int.
    rate: a float.
    """

    steps: int = 3
    rate: float = 0.5


@pytest.mark.parametrize("key, value", [("rate", math.nan), ("rate", -math.inf), ("steps", INT64), ("steps", -INT64)])
def test_a_config_without_ranges_still_refuses_nan_inf_and_int64_overflow(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        build_config(_PluginConfig, {key: value})
    assert build_config(_PluginConfig, {"steps": INT64 - 1, "rate": -1e300}).steps == INT64 - 1


def test_range_text_and_help_lines() -> None:
    assert Range(1, 10**12).text() == "[1, 10^12]"
    assert Range(0, 1, low_open=True).text() == "(0, 1]"
    assert Range(0, 2**63, high_open=True).text() == "[0, 2^63)"
    lines = {p.name: p.line() for p in config_params(attack_class("dlg").Config)}
    assert lines["history_size"].startswith("history_size (int in [1, 10000], default 100): ")
    assert lines["optimize_labels"].startswith("optimize_labels (bool, default True): ")


def test_a_default_outside_its_range_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="outside"):
        ranged(0, 1, 10)


def test_check_ranges_names_the_owner() -> None:
    with pytest.raises(ConfigError, match=r"^fedavg: lr must be a number in \(0, 100\], got 0.0$"):
        FedAvgConfig(lr=0.0)
    with pytest.raises(ConfigError, match=r"^spear-dl: "):
        create_attack("spear-dl", starts=0)
    check_ranges(DPConfig(sigma=0.0, clip=1.0))
