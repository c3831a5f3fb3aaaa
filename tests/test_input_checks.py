"""Issue 22, bad input beyond numeric ranges (those: tests/test_ranges.py): duplicate `--param` keys,
inversion that inverts nothing, `noise_scale` without noise, absurd grid sizes, overlong names and
paths, suite names reserved for the leaderboard's pages, a leaderboard over files leakbench did not
write, plugins that exit or interrupt at import or register odd names. Library calls only (fast); the
command line runs them in `benchmarks/fault_check.py --only item:22` (tests/test_fault_check_inputs.py)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from leakbench.attacks.inversion import inverts
from leakbench.cell.spec import CellSpec, spec_dict, spec_from_dict
from leakbench.cli import parse_params
from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.limits import MAX_COMPONENT, check_writable_dir
from leakbench.core.registry import Registry
from leakbench.harness.rescore import rescore_run
from leakbench.harness.suite import load_suite
from leakbench.plugins import load_plugin
from leakbench.records.folders import folder_name
from leakbench.records.runs import read_run_manifest
from leakbench.reporting.leaderboard import write_leaderboard
from leakbench.reporting.target import RESERVED_NAMES, check_report_target

SUITE = 'name = "{name}"\ndataset = "embedded"\nattacks = {attacks}\nbatch_sizes = [1]\nwidth = 32\ndepth = 3\n'


def _suite(tmp_path: Path, extra: str = "", *, name: str = "checks", attacks: str = '["spear"]'):
    path = tmp_path / "suite.toml"
    path.write_text(SUITE.format(name=name, attacks=attacks) + extra)
    return load_suite(path)


def test_a_param_given_twice_is_refused() -> None:
    assert parse_params(["max_draws=1", "chunk=2"]) == {"max_draws": 1, "chunk": 2}
    with pytest.raises(ConfigError, match="--param max_draws is given twice"):
        parse_params(["max_draws=1", "max_draws=2"])


def test_inversion_applies_to_inner_layers_of_layer_attacks_only() -> None:
    assert inverts("spear", 2) and inverts("cpa", 3)
    assert not inverts("spear", 1) and not inverts("ig", 2) and not inverts("dlg", 1)


@pytest.mark.parametrize("extra, attacks, match", [
    ("inversion = { steps = 5 }\n", '["spear"]', "inverts nothing"),  # layer 1 only
    ("layers = [2]\ninversion = { steps = 5 }\n", '["ig"]', "inverts nothing"),  # no layer setting
    ('noise_scale = "max"\n', '["spear"]', "noise_scale"),
    ('noise = [0.0]\nnoise_scale = "max"\n', '["spear"]', "noise_scale"),
    ("grid_images = 1000000000\n", '["spear"]', "grid_images"),
    ("grid_seed = 1e400\n", '["spear"]', "grid_seed"),
    ("fedavg = [{epochs = 1000000000, minibatch = 0, lr = 0.1}]\n", '["spear"]', "epochs"),
    ("layers = [2]\ninversion = { steps = 1_000_000_000_000 }\n", '["spear"]', "steps"),
])
def test_suite_refuses(tmp_path: Path, extra: str, attacks: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _suite(tmp_path, extra, attacks=attacks)


MANIFEST = json.dumps({"suite": "checks", "grid_seed": 0, "grid_images": 2, "cell_revisions": {"abc": 1},
                       "cells": [{"cell_id": "0123456789abcdef", "batch_size": 2, "grid_selection": [0, 1]}]})


@pytest.mark.parametrize("old, new, key", [
    ('"grid_seed": 0', '"grid_seed": 1e400', "grid_seed"),  # issue 41: an OverflowError traceback before
    ('"grid_seed": 0', '"grid_seed": -1', "grid_seed"),
    ('"grid_seed": 0', '"grid_seed": 0.5', "grid_seed"),
    ('"grid_images": 2', '"grid_images": 0', "grid_images"),
    ('"batch_size": 2', '"batch_size": 1e400', "batch_size"),
    ('"batch_size": 2', '"batch_size": 2, "truth_size": 1e400', "truth_size"),
    ('"abc": 1', '"abc": "many"', "cell_revisions"),
    ('"suite": "checks"', '"suite": "checks", "suite_text": 5', "suite_text"),
])
def test_numbers_of_a_stored_run_manifest_are_checked(tmp_path: Path, old: str, new: str, key: str) -> None:
    """A run manifest read back (`report`, `rescore`) with a number out of its type or range: one line."""
    (tmp_path / "manifest.json").write_text(MANIFEST)
    assert read_run_manifest(tmp_path)["grid_seed"] == 0
    (tmp_path / "manifest.json").write_text(MANIFEST.replace(old, new))
    for read in (read_run_manifest, rescore_run):
        with pytest.raises(LeakbenchError, match=f"manifest.json.*{key}") as error:
            read(tmp_path)
        assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("field, value", [("seed", 1e400), ("seed", -1), ("seed", 2**63), ("batch_size", "2"),
                                          ("batch_size", 1e400), ("width", 10**30), ("layer", 2**64),
                                          ("image_size", 0.5), ("dp", "σ"), ("depth", True)])
def test_a_stored_cell_spec_is_checked(field: str, value: object) -> None:
    """A cell manifest's spec read back (`rescore`, grids) with a value of the wrong type or range: one line."""
    good = spec_dict(CellSpec("spear", "embedded", 2, width=32, depth=3))
    assert spec_from_dict(good) == CellSpec("spear", "embedded", 2, width=32, depth=3)
    with pytest.raises(ConfigError) as error:
        spec_from_dict({**good, field: value})
    assert field.replace("_", " ") in str(error.value) and "\n" not in str(error.value)


def test_suite_accepts_what_does_something(tmp_path: Path) -> None:
    assert len(_suite(tmp_path, "layers = [1, 2]\ninversion = { steps = 5 }\n").cells) == 2
    assert _suite(tmp_path, 'noise = [0.0, 1e-4]\nnoise_scale = "max"\ngrid_images = 1024\n').grid_images == 1024


def test_long_names_and_paths_are_refused(tmp_path: Path) -> None:
    folder_name("x" * 100, "name")
    with pytest.raises(ConfigError, match="at most 100 characters"):
        folder_name("x" * 101, "name")
    with pytest.raises(ConfigError, match="name"):
        _suite(tmp_path, name="x" * 300)
    check_writable_dir(tmp_path / ("y" * MAX_COMPONENT), "--out")
    with pytest.raises(ConfigError, match=r"--out: the name y+… is 201 bytes long"):
        check_writable_dir(tmp_path / ("y" * (MAX_COMPONENT + 1)) / "z", "--out")
    with pytest.raises(ConfigError, match="--reports: the path is"):
        check_writable_dir(tmp_path.joinpath(*["d" * 100] * 40), "--reports")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.toml"]


def test_suite_names_of_the_leaderboard_pages_are_reserved(tmp_path: Path) -> None:
    assert RESERVED_NAMES == {"leaderboard", "leaderboard-timing"}
    for name in RESERVED_NAMES:
        with pytest.raises(ConfigError, match="reserved"):
            check_report_target(tmp_path, name)
    check_report_target(tmp_path, "leaderboards")


def test_leaderboard_never_replaces_a_users_page(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    page = tmp_path / "reports" / "leaderboard-timing.md"
    page.write_text("# my timings\n")
    with pytest.raises(ConfigError, match=r"leaderboard-timing\.md exists and was not written by leakbench"):
        write_leaderboard(tmp_path / "results", tmp_path / "reports")
    assert page.read_text() == "# my timings\n"


@pytest.mark.parametrize("content, match", [("garbage", "not a readable Parquet table"),
                                            ("foreign", "not a leakbench table")])
def test_leaderboard_over_foreign_tables_is_one_line(tmp_path: Path, content: str, match: str) -> None:
    run = tmp_path / "results" / "theirs"
    run.mkdir(parents=True)
    for name in ("cells.parquet", "records.parquet"):
        if content == "garbage":
            (run / name).write_text("not parquet")
        else:
            pd.DataFrame({"loss": [0.5]}).to_parquet(run / name)
    with pytest.raises(ConfigError, match=match):
        write_leaderboard(tmp_path / "results", tmp_path / "reports")
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow
@pytest.mark.parametrize("body, match", [("import sys\nsys.exit(3)\n", "SystemExit: 3"),
                                         ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
                                         ("raise SystemExit\n", "SystemExit")])
def test_a_plugin_exiting_at_import_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      body: str, match: str) -> None:
    module = f"plug_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=f"plugin '{module}' cannot be loaded: {match}"):
        load_plugin(module)
    assert module not in sys.modules


@pytest.mark.parametrize("name", ["odd name", "a/b", "../x", "Upper", "-dash", "", "x" * 65, "tab\tname", "<b>"])
def test_registered_names_must_be_safe(name: str) -> None:
    registry: Registry[int] = Registry("attack")
    with pytest.raises(ConfigError, match=r"attack name .* is not allowed"):
        registry.register(name, lambda: 1, "odd")
    registry.register("ok-name_1.2", lambda: 1, "fine")
    assert registry.names() == ["ok-name_1.2"]
