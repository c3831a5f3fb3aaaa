"""Suite axes declared once (`leakbench.cell.axes`): the suite's keys, list checks, duplicates, cell count and
product, the `leakbench attack` flags, plan words, record columns and report labels derive from `AXES`.

Each derivation is checked with a toy axis added to the declaration (`bn_modes`, over the existing `CellSpec`
field `bn_mode`) and nothing else: what a new axis gets without any other edit.
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from leakbench.cell import axes
from leakbench.cell.axes import AXES, Axis, Flag
from leakbench.cell.spec import CellSpec, cell_columns, cell_id, cell_settings
from leakbench.core.errors import ConfigError
from leakbench.harness.suite import load_suite, plan_lines, suite_keys
from leakbench.reporting.aggregate import with_model

BASE = 'name = "axes"\ndataset = "embedded"\nattacks = ["cpa"]\nbatch_sizes = [2, 4]\nwidth = 32\ndepth = 3\n'


def _bn_mode(value: Any, where: str, raw: Any) -> str:
    if value not in ("eval", "train"):
        raise ConfigError(f"{where} must be \"eval\" or \"train\", got {value!r}")
    return str(value)


TOY = Axis("bn_modes", "bn_mode", "BatchNorm mode", default=("eval",), parse=_bn_mode, legacy=False,
           flag=Flag("--bn-mode", "toy: BatchNorm mode", str, "eval"))
"""A toy axis declared after the stored ones: the client's BatchNorm mode as an axis of its own."""


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Axis:
    monkeypatch.setattr(axes, "AXES", (*AXES, TOY))
    return TOY


def _load(tmp_path: Path, extra: str = "") -> Any:
    path = tmp_path / "suite.toml"
    path.write_text(BASE + extra)
    return load_suite(path)


def test_a_declared_axis_is_a_suite_key_crossed_innermost(tmp_path: Path, toy: Axis) -> None:
    suite = _load(tmp_path, 'bn_modes = ["eval", "train"]\nseeds = [0, 1]\n')
    assert "bn_modes" in suite_keys()
    assert [(c.batch_size, c.seed, c.bn_mode) for c in suite.cells] == [
        (b, s, m) for b in (2, 4) for s in (0, 1) for m in ("eval", "train")]
    assert len({cell_id(c) for c in suite.cells}) == 8


def test_without_its_declaration_the_key_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'bn_modes'"):
        _load(tmp_path, 'bn_modes = ["eval", "train"]\n')


@pytest.mark.parametrize("extra,message", [
    ("bn_modes = []", "key 'bn_modes' must list at least one level"),
    ('bn_modes = ["eval", "eval"]', "key 'bn_modes' lists 'eval' twice"),
    ('bn_modes = ["sideways"]', "key 'bn_modes[0]' must be \"eval\" or \"train\", got 'sideways'"),
    ('bn_modes = "eval"', "key 'bn_modes' must be a list"),
])
def test_a_declared_axis_is_checked_as_declared(tmp_path: Path, toy: Axis, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra + "\n")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_cell_count_is_the_product_of_the_levels(tmp_path: Path, toy: Axis,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    extra = ('bn_modes = ["eval", "train"]\nseeds = [0, 1, 2]\nnoise = [0.0, 1e-4]\n'
             'threat = ["default", {labels = "known"}]\n')
    suite = _load(tmp_path, extra)
    assert len(suite.cells) == math.prod((2, 2, 3, 2, 2))  # batch sizes, bn modes, seeds, noise, threat
    monkeypatch.setattr("leakbench.harness.suite.MAX_CELLS", len(suite.cells) - 1)
    with pytest.raises(ConfigError, match=f"expands to {len(suite.cells)} cells"):
        _load(tmp_path, extra)


def test_the_default_level_is_the_spec_default() -> None:
    """Every axis's default levels set `CellSpec`'s defaults (a suite leaving the key out runs them)."""
    defaults = {f.name: f.default for f in fields(CellSpec)}
    for one in AXES:
        if one.scope != "suite":
            assert {k: defaults[k] for k in axes.default_fields([one])} == axes.default_fields([one]), one.key
        assert one.field in defaults, one.key


def test_every_declared_column_is_a_record_column() -> None:
    """What an axis declares it records is what `cell_columns` writes for a cell away from the defaults."""
    from leakbench.fl import DPConfig, FedAvgConfig
    from leakbench.fl.transform import DefenceSetting, transform_class

    prune = DefenceSetting("prune", transform_class("prune").Config(fraction=0.5))
    written = {*cell_columns(CellSpec("cpa", "embedded", 2, dp=DPConfig(sigma=1.0, clip=1.0), noise=0.0)),
               *cell_columns(CellSpec("cpa", "embedded", 2, fedavg=FedAvgConfig(epochs=1), noise=1e-4,
                                      defences=(prune,), defence_known=True, bn_mode="train", train_epochs=1))}
    for one in AXES:
        assert set(one.record_columns()) <= written, one.key


def test_attack_flags_come_from_the_declaration(toy: Axis) -> None:
    from leakbench.cli import build_parser

    attack = next(a for a in build_parser()._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
                  if a.prog.endswith(" attack"))
    options = {s for action in attack._actions for s in action.option_strings}
    assert {"--attack", "--dataset", "--batch-size", "--layer", "--seed", "--train-epochs", "--bn-mode"} <= options
    args = attack.parse_args(["--attack", "cpa", "--batch-size", "2", "--bn-mode", "train"])
    assert axes.flag_fields(args) == {"bn_mode": "train"}
    args = attack.parse_args(["--attack", "cpa", "--batch-size", "2", "--bn-mode", "up"])
    with pytest.raises(ConfigError, match="--bn-mode must be \"eval\" or \"train\", got 'up'"):
        axes.check_flags(args)
    args = attack.parse_args(["--attack", "cpa", "--batch-size", "2", "--seed", "-1"])
    with pytest.raises(ConfigError, match=r"--seed must be an integer in \[0, 2\^63\), got -1"):
        axes.check_flags(args)


def test_a_declared_axis_is_recorded_planned_and_reported(tmp_path: Path, toy: Axis) -> None:
    suite = _load(tmp_path, 'bn_modes = ["eval", "train"]\n')
    at_default, trained = suite.cells[:2]
    assert "bn_mode" not in axes.record_columns(at_default) and axes.record_columns(trained) == {"bn_mode": "train"}
    assert "bn_mode=train" in cell_settings(trained) and "bn_mode=eval" not in cell_settings(at_default)
    assert any(line.endswith("bn_mode=train") for line in plan_lines(suite))
    assert axes.report_labels()["bn_mode"] == "BatchNorm mode" and axes.baselines() == {"bn_mode": "eval"}
    cells = pd.DataFrame({"cell_id": ["a", "b"], "bn_mode": [None, "train"]})
    assert list(axes.with_defaults(cells)["bn_mode"]) == ["eval", "train"]
    assert list(axes.level_words(axes.with_defaults(cells))) == ["", " · bn_mode=train"]
    stored = cells.assign(arch="fc", depth=3, width=32, client="fedsgd")
    assert list(with_model(stored)["client"]) == ["fedsgd", "fedsgd · bn_mode=train"]  # never pooled in tables


def test_the_report_tables_are_the_declared_ones() -> None:
    from leakbench.reporting.report import AXES as REPORT_AXES

    assert REPORT_AXES == axes.report_labels()
    assert list(REPORT_AXES) == ["batch_size", "layer", "dp", "client", "model"]  # the report's order, as before


def test_every_axis_level_is_a_cell_of_its_own(tmp_path: Path) -> None:
    """Two levels of any axis are two cells, with two ids (seeds too: tables pool them, ids do not)."""
    suite = _load(tmp_path, 'seeds = [0, 1]\ntrain_epochs = [0, 1]\nnoise = [0.0, 1e-4]\n'
                            'threat = ["default", {labels = "known"}]\n')
    ids = [cell_id(c) for c in suite.cells]
    assert len(ids) == len(set(ids)) == 2 * 2 * 2 * 2 * 2
