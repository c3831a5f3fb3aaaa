"""Suite keys added for the review: arch, fedavg levels, inversion; malformed ones fail in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakbench.cell.spec import cell_id
from leakbench.core.errors import ConfigError
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
    ('arch = "vgg-x"', "arch"), ('arch = "conv"\nlayers = [1]', "layers"),
    ('fedavg = ["often"]', "fedavg[0]"), ("fedavg = [{epochs = 0}]", "epochs"),
    ("fedavg = [{epochs = 1, speed = 2}]", "speed"), ("inversion = {steps = -1}", "steps"),
    ('inversion = {steps = 5, prior = "tv"}', "prior"),
    ('dp = ["none"]\nfedavg = ["none"]', "not both"),
])
def test_malformed_keys_name_the_key(tmp_path: Path, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra + "\n")
    assert key in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["paper/fedavg", "paper/dp", "paper/conv", "paper/conv-embedded",
                                  "paper/layers-images"])
def test_shipped_review_suites_parse(name: str) -> None:
    suite = load_suite(find_suite(name))
    assert suite.cells


@pytest.mark.slow
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


# --------------------------------------------------------------------------- the models axis (issue 15)

DEFAULT_IDS_SHA256 = "9d7058f04ed5152fba6a213ad2da836639af39c20455fa7a3512f77a1129a9a5"
"""sha256 of the 168 cell ids of the default suite as it was until issue 25 (tests/golden/default-168.toml,
kept verbatim), in plan order, joined by spaces, before the models axis."""


def test_default_suite_cells_unchanged_by_the_models_axis() -> None:
    import hashlib

    ids = [cell_id(c) for c in load_suite(Path(__file__).parent / "golden" / "default-168.toml").cells]
    assert len(ids) == 168 and hashlib.sha256(" ".join(ids).encode()).hexdigest() == DEFAULT_IDS_SHA256


def test_models_entries_are_zipped_and_take_the_first_attackable_layer(tmp_path: Path) -> None:
    suite = _load(tmp_path, 'models = [{width = 32, depth = 3}, {arch = "conv", width = 16}, '
                            '{width = 24, depth = 2, train_epochs = 1}]\n')
    got = [(c.attack, c.arch, c.width, c.depth, c.layer, c.train_epochs) for c in suite.cells]
    assert got == [("cpa", "fc", 32, 3, 1, 0), ("cpa", "conv", 16, 3, 2, 0), ("cpa", "fc", 24, 2, 1, 1),
                   ("ig", "fc", 32, 3, 1, 0), ("ig", "conv", 16, 3, 1, 0), ("ig", "fc", 24, 2, 1, 1)]
    assert len({cell_id(c) for c in suite.cells}) == 6
    assert suite.cells[2].recipe is not None and suite.cells[0].recipe is None


def test_models_keys_fall_back_to_the_top_level(tmp_path: Path) -> None:
    suite = _load(tmp_path, "width = 48\ntrain_epochs = [0, 2]\nlayers = [1]\n"
                            "models = [{depth = 2}, {depth = 4}]\n")
    cpa = [(c.width, c.depth, c.train_epochs) for c in suite.cells if c.attack == "cpa"]
    assert cpa == [(48, 2, 0), (48, 2, 2), (48, 4, 0), (48, 4, 2)]  # top-level train_epochs crosses each model
    assert len(suite.cells) == 8


def test_one_model_entry_is_the_top_level_model(tmp_path: Path) -> None:
    plain = _load(tmp_path, 'width = 64\ndepth = 4\nlayers = [1, 2]\ntrain_epochs = [0, 1]\n')
    entry = _load(tmp_path, 'layers = [1, 2]\ntrain_epochs = [0, 1]\nmodels = [{width = 64, depth = 4}]\n')
    empty = _load(tmp_path, 'width = 64\ndepth = 4\nlayers = [1, 2]\ntrain_epochs = [0, 1]\nmodels = [{}]\n')
    ids = [cell_id(c) for c in plain.cells]
    assert len(ids) == 6 and ids == [cell_id(c) for c in entry.cells] == [cell_id(c) for c in empty.cells]


BAD_MODELS = {
    "empty": ("models = []", "models"),
    "not a table": ("models = [3]", "models[0]"),
    "unknown key": ("models = [{widht = 32}]", "widht"),
    "string width": ('models = [{width = "32"}]', "width"),
    "bool depth": ("models = [{depth = true}]", "depth"),
    "zero width": ("models = [{width = 0}]", "width"),
    "deep": ("models = [{depth = 100000}]", "depth"),
    "bad arch": ('models = [{arch = "vgg-x"}]', "arch"),
    "bad epochs": ("models = [{train_epochs = -1}]", "train_epochs"),
    "layer not in a model": ("layers = [3]\nmodels = [{depth = 6}, {depth = 3}]", "layer 3"),
    "conv layer 1": ('layers = [1]\nmodels = [{depth = 6}, {arch = "conv"}]', "layers"),
    "epochs twice": ("train_epochs = [0, 1]\nmodels = [{train_epochs = 1}]", "train_epochs"),
    "same model twice": ("width = 32\nmodels = [{depth = 3}, {width = 32, depth = 3}]", "twice"),
    "recipe untrained": ('train = {lr = 0.01}\nmodels = [{depth = 3}]', "train"),
    "not a list": ("models = {depth = 3}", "models"),
}


@pytest.mark.parametrize("key", list(BAD_MODELS))
def test_malformed_models_are_refused(tmp_path: Path, key: str) -> None:
    extra, named = BAD_MODELS[key]
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra + "\n")
    assert named in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["unknown key", "layer not in a model", "epochs twice"])
def test_cli_refuses_malformed_models_writing_nothing(tmp_path: Path, key: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    path = tmp_path / "suite.toml"
    path.write_text(BASE + BAD_MODELS[key][0] + "\n")
    rc = main(["run", str(path), "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("leakbench: error: suite ")
    assert BAD_MODELS[key][1] in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.toml"]


def test_paper_baselines_sweeps_two_models() -> None:
    cells = load_suite(find_suite("paper/baselines")).cells
    assert {(c.arch, c.depth, c.width) for c in cells} == {("fc", 2, 256), ("fc", 6, 200)}
    assert {c.attack for c in cells} == {"spear", "cpa", "cpa-derivative", "ig", "dlg"}
    assert sorted({c.batch_size for c in cells}) == [1, 4, 8, 16, 32, 64] and len(cells) == 60
    assert {c.layer for c in cells} == {1}


ADAPTIVE = """\
name = "adaptive"
dataset = "embedded"
attacks = ["ig", "ig-masked"]
batch_sizes = [1]
defences = ["none", { name = "prune", fraction = 0.5 }, { name = "noise", sigma = 1e-3 }]
threat = ["default", { defence = "known" }]
"""


def test_adaptive_only_runs_an_adaptive_attack_where_it_adapts(tmp_path: Path) -> None:
    """`adaptive_only = true`: ig-masked (adapts to prune) runs only against prune with the defence known; the
    plain attack runs everywhere; without the key every combination is a cell; a non-boolean is refused."""
    path = tmp_path / "suite.toml"
    path.write_text(ADAPTIVE)
    every = load_suite(path).cells
    path.write_text(ADAPTIVE + "adaptive_only = true\n")
    kept = load_suite(path).cells
    assert len(every) == 12 and len([c for c in kept if c.attack == "ig"]) == 6
    [masked] = [c for c in kept if c.attack == "ig-masked"]
    assert masked.defence_known and [d.name for d in masked.defences] == ["prune"]
    path.write_text(ADAPTIVE + "adaptive_only = 1\n")
    with pytest.raises(ConfigError, match=r"adaptive_only.*true or false"):
        load_suite(path)
