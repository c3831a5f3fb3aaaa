"""Suite keys added for the review: arch, fedavg levels, inversion; malformed ones fail in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakbench.errors import ConfigError
from leakbench.harness.cell import cell_id
from leakbench.harness.suite import find_suite, load_suite

BASE = """\
name = "axes"
dataset = "embedded"
attacks = ["cpa", "ig"]
batch_sizes = [4]
"""


def _load(tmp_path: Path, extra: str):
    path = tmp_path / "suite.toml"
    path.write_text(BASE + extra)
    return load_suite(path)


def test_conv_suite_defaults_to_the_first_fc_layer(tmp_path: Path) -> None:
    suite = _load(tmp_path, 'arch = "conv"\ninversion = {steps = 5}\n')
    cpa, ig = suite.cells
    assert (cpa.arch, cpa.depth, cpa.layer, cpa.inversion.steps) == ("conv", 3, 2, 5)
    assert (ig.arch, ig.layer, ig.inversion) == ("conv", 1, None)  # image attacks: nothing to invert


def test_fedavg_levels_are_an_axis(tmp_path: Path) -> None:
    suite = _load(tmp_path, 'fedavg = ["none", {epochs = 5, minibatch = 1, lr = 0.01}]\n')
    levels = [c.fedavg for c in suite.cells if c.attack == "cpa"]
    assert levels[0] is None and (levels[1].epochs, levels[1].minibatch, levels[1].lr) == (5, 1, 0.01)
    assert len({cell_id(c) for c in suite.cells}) == 4


@pytest.mark.parametrize("extra,key", [
    ('arch = "resnet"', "arch"), ('arch = "conv"\nlayers = [1]', "layers"),
    ('fedavg = ["often"]', "fedavg[0]"), ("fedavg = [{epochs = 0}]", "epochs"),
    ("fedavg = [{epochs = 1, speed = 2}]", "speed"), ("inversion = {steps = -1}", "steps"),
    ('inversion = {steps = 5, prior = "tv"}', "prior"),
    ('dp = ["none"]\nfedavg = ["none"]', "not both"),
])
def test_malformed_keys_name_the_key(tmp_path: Path, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra + "\n")
    assert key in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["paper/fedavg", "paper/dp", "paper/conv", "paper/conv-embedded", "paper/layers-images"])
def test_shipped_review_suites_parse(name: str) -> None:
    suite = load_suite(find_suite(name))
    assert suite.cells


def test_fedavg_sweep_reports_a_client_table(tmp_path: Path) -> None:
    from leakbench.harness.run import run_sweep
    from leakbench.reporting.report import write_report

    path = tmp_path / "suite.toml"
    path.write_text('name = "fa"\ndataset = "embedded"\nattacks = ["cpa"]\nbatch_sizes = [2]\nwidth = 32\ndepth = 3\n'
                    'fedavg = ["none", {epochs = 2, minibatch = 1, lr = 0.1}]\n')
    sweep = run_sweep(str(path), out=tmp_path / "res")
    assert sorted(sweep.records["client"].unique()) == ["E=2 mb=1 η=0.1", "fedsgd"]
    report = write_report(sweep.run_dir, tmp_path / "rep").read_text()
    assert "By client" in report and "E=2 mb=1 η=0.1" in report
