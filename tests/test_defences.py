"""Update transforms and the `defences` axis (issue 23): a defence is one file, from a plugin too, and it
shows up as its own columns and its own rows through run → report → leaderboard."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from leakbench.cell.spec import CellSpec, cell_id, spec_dict, spec_from_dict
from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.fl import TRANSFORMS
from leakbench.fl.transform import DefenceSetting, transform_class
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import load_suite
from leakbench.harness.victim import prepare

PLUGIN = '''
"""A defence in one file: gradient pruning (keep the largest `keep` fraction of each shared tensor)."""
from dataclasses import dataclass, replace

import torch

from leakbench.fl import UpdateTransform, register_transform
from leakbench.core.ranges import Ranged, ranged


@dataclass(frozen=True)
class PruneConfig(Ranged):
    keep: float = ranged(0.1, 0, 1, low_open=True)


@register_transform
class Prune(UpdateTransform):
    """Gradient pruning: zero all but the largest |entries| of each shared tensor."""

    name = "test-prune"
    Config = PruneConfig

    def apply(self, update, client):
        grads = {}
        for name, g in update.gradients.items():
            k = max(1, int(self.config.keep * g.numel()))
            cut = g.abs().flatten().kthvalue(g.numel() - k + 1).values
            grads[name] = torch.where(g.abs() >= cut, g, torch.zeros_like(g))
        return replace(update, gradients=grads, kind=update.kind + "+prune")
'''

BROKEN = '''
"""A defence plugin that fails: it raises, or returns NaN, ∞ or no update at all (issue 41)."""
from dataclasses import dataclass, replace

import torch

from leakbench.fl import UpdateTransform, register_transform
from leakbench.core.ranges import Ranged, chosen


@dataclass(frozen=True)
class BrokenConfig(Ranged):
    mode: str = chosen("raise", "raise", "nan", "inf", "none")


@register_transform
class Broken(UpdateTransform):
    """A defence that fails as its mode says."""

    name = "test-broken"
    Config = BrokenConfig

    def apply(self, update, client):
        if self.config.mode == "raise":
            raise RuntimeError("the defence broke")
        if self.config.mode == "none":
            return None
        value = float(self.config.mode)
        return replace(update, gradients={n: torch.full_like(g, value) for n, g in update.gradients.items()})
'''

BASE = """
name = "defences"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [2]
width = 32
depth = 3
grid_images = 2
"""
SPEAR_BUDGET = "[hyperparameters.spear]\nmax_draws = 20000\n"


@pytest.fixture(scope="module")
def prune_plugin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The module name of a one-file defence plugin on the import path (registered once per session)."""
    folder = tmp_path_factory.mktemp("defence_plugin")
    (folder / "leakbench_test_prune.py").write_text(PLUGIN)
    sys.path.insert(0, str(folder))
    return "leakbench_test_prune"


@pytest.fixture(scope="module")
def broken_plugin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The module name of a failing defence plugin (`BROKEN`), imported (registered once per session)."""
    folder = tmp_path_factory.mktemp("broken_plugin")
    (folder / "leakbench_test_broken.py").write_text(BROKEN)
    sys.path.insert(0, str(folder))
    importlib.import_module("leakbench_test_broken")
    return "leakbench_test_broken"


def _suite(tmp_path: Path, extra: str, name: str = "suite.toml") -> Path:
    path = tmp_path / name
    path.write_text(BASE + textwrap.dedent(extra) + SPEAR_BUDGET)
    return path


def _ids(path: Path) -> list[str]:
    return [cell_id(c) for c in load_suite(path).cells]


def test_shipped_transforms_are_registered() -> None:
    assert {"fedsgd", "fedavg", "dp", "noise"} <= set(TRANSFORMS.names())


@pytest.mark.parametrize(("legacy", "axis"), [
    ('noise = [0.0, 1e-4]\nnoise_scale = "max"\n',
     'defences = ["none", { name = "noise", sigma = 1e-4, scale = "max" }]\n'),
    ('dp = ["none", { sigma = 1e-2, clip = 1.0 }]\n',
     'defences = ["none", { name = "dp", sigma = 1e-2, clip = 1.0 }]\n'),
    ('fedavg = ["none", { epochs = 2, minibatch = 1, lr = 0.1 }]\n',
     'defences = ["none", { name = "fedavg", epochs = 2, minibatch = 1, lr = 0.1 }]\n'),
])
def test_the_defences_axis_keeps_the_cells_of_the_old_keys(tmp_path: Path, legacy: str, axis: str) -> None:
    assert _ids(_suite(tmp_path, legacy, "a.toml")) == _ids(_suite(tmp_path, axis, "b.toml"))


@pytest.mark.parametrize(("extra", "message"), [
    ('defences = [{ name = "nope" }]\n', "unknown update transform 'nope'"),
    ('defences = [{ sigma = 1.0 }]\n', "with a 'name'"),
    ('defences = [{ name = "fedsgd" }]\n', "default client"),
    ('defences = [{ name = "noise", sigma = -1.0 }]\n', "sigma"),
    ('defences = [{ name = "noise", sigma = 1e-3, bogus = 1 }]\n', "bogus"),
    ('defences = [[{ name = "dp", sigma = 1.0, clip = 1.0 }, { name = "noise", sigma = 1e-3 }]]\n',
     "DP-SGD runs alone"),
    ('defences = ["none", "none"]\n', "twice"),
    ('defences = []\n', "at least one level"),
    ('defences = ["none"]\nnoise = [0.0]\n', "not both"),
])
def test_malformed_defences_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite(_suite(tmp_path, extra))


def test_a_defence_plugin_cell_round_trips_its_spec(tmp_path: Path, prune_plugin: str) -> None:
    path = _suite(tmp_path, f'defence_plugins = ["{prune_plugin}"]\n'
                            'defences = [[{ name = "noise", sigma = 1e-4 }, { name = "test-prune", keep = 0.5 }]]\n')
    (spec,) = load_suite(path).cells
    assert spec.noise == 1e-4 and [d.name for d in spec.defences] == ["test-prune"]
    assert spec_from_dict(spec_dict(spec)) == spec
    assert cell_id(spec) != cell_id(CellSpec("spear", "embedded", 2, width=32, depth=3, noise=1e-4,
                                             hyperparameters={"max_draws": 20000}))


def test_a_defence_plugin_gets_its_own_columns_and_rows(tmp_path: Path, prune_plugin: str) -> None:
    """One file registers a defence; a suite names it; its cells carry its columns and its label, and
    the report and the leaderboard give it rows of its own (never pooled with the undefended cells)."""
    from leakbench.cli import main

    path = _suite(tmp_path, f'defence_plugins = ["{prune_plugin}"]\n'
                            'defences = ["none", { name = "test-prune", keep = 0.5 }]\n')
    assert main(["run", str(path), "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")]) == 0
    run = tmp_path / "res" / "defences"
    records, cells = pd.read_parquet(run / "records.parquet"), pd.read_parquet(run / "cells.parquet")
    assert list(records.groupby("cell_id", sort=False)["test_prune_keep"].first().fillna(-1)) == [-1, 0.5]
    assert sorted(cells["defence"].fillna("none")) == ["none", "test-prune keep=0.5"]
    report = (tmp_path / "rep" / "defences.md").read_text()
    assert "| fedsgd + test-prune keep=0.5 |" in report and "| fedsgd |" in report
    assert main(["leaderboard", "--results", str(tmp_path / "res"), "--reports", str(tmp_path / "board")]) == 0
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "· defence: test-prune keep=0.5\n" in board and "· defence: none\n" in board
    # rescoring loads the run's defence plugin again (its cells' specs name it) and gives the same records
    stored = records.copy()
    assert main(["rescore", str(run), "--reports", str(tmp_path / "rep2")]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(run / "records.parquet"), stored)


@pytest.mark.parametrize(("mode", "what"), [("raise", "raised RuntimeError: the defence broke"),
                                            ("nan", "made an update holding NaN or ∞ (in body.0.weight, "),
                                            ("inf", "made an update holding NaN or ∞"),
                                            ("none", "returned a NoneType, not a ClientUpdate")])
def test_a_failing_defence_is_the_defences_failure(broken_plugin: str, mode: str, what: str) -> None:
    """Issue 41: a defence plugin that raised gave a traceback; one that returned NaN was stored as the
    attack's failure (scored as no leakage). Either is now one line naming the defence, its plugin and
    the cell, before any attack sees the update."""
    defence = DefenceSetting("test-broken", transform_class("test-broken").Config(mode=mode))
    spec = CellSpec("spear", "embedded", 2, width=32, depth=3, defences=(defence,))
    with pytest.raises(LeakbenchError) as error:
        prepare(spec)
    message = str(error.value)
    assert message.startswith(f"cell {cell_id(spec)} (spear embedded b=2 ")
    assert f"defence 'test-broken' (plugin module {broken_plugin}) {what}" in message
    assert "the run stops here" in message and "\n" not in message


@pytest.mark.slow
def test_a_run_stopped_by_a_defence_resumes_once_it_is_fixed(tmp_path: Path, broken_plugin: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The run stops at the failing defence's cell (one line, exit 2 from the CLI); the cells finished
    before it are kept, and the same suite, its defence fixed, runs that cell alone: nothing lost, nothing
    run twice, and no cell stored as an attack's failure for the defence's fault."""
    path = _suite(tmp_path, f'defence_plugins = ["{broken_plugin}"]\n'
                            'defences = ["none", { name = "test-broken", mode = "nan" }]\n')
    with pytest.raises(LeakbenchError, match=r"defence 'test-broken' .* made an update holding NaN"):
        run_sweep(str(path), out=tmp_path / "res")
    run = tmp_path / "res" / "defences"
    assert len([p for p in (run / "cells").iterdir() if not p.name.startswith(".")]) == 1
    broken = sys.modules[broken_plugin].Broken
    monkeypatch.setattr(broken, "apply", lambda self, update, client: update)  # the plugin, fixed
    sweep = run_sweep(str(path), out=tmp_path / "res")
    assert (sweep.ran, sweep.skipped) == (1, 1)
    assert list(sweep.cells["status"]) == ["ok", "ok"]


def test_rescore_imports_only_the_plugins_its_cells_name(tmp_path: Path) -> None:
    """A run records every plugin its process had loaded (another suite's too, run in the same notebook or
    test session); rescoring it elsewhere needs only those its cells' specs name. One that is named and gone
    is one ConfigError line naming it."""
    from leakbench.harness.rescore import load_client_plugins, spec_names

    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "manifest.json").write_text(json.dumps(
        {"spec": {"dataset": "embedded", "defences": [{"name": "gone-used", "config": {"keep": 0.5}}]}}))
    used = spec_names([cell, tmp_path / "no-such-cell"])
    assert {"embedded", "gone-used"} <= used
    gone_unused = {"module": "leakbench_gone_unused", "defences": ["gone-unused"], "datasets": []}
    gone_used = {"module": "leakbench_gone_used", "defences": ["gone-used"], "datasets": []}
    load_client_plugins({"plugins": [gone_unused]}, used)
    with pytest.raises(ConfigError, match="'leakbench_gone_used' cannot be loaded: ModuleNotFoundError"):
        load_client_plugins({"plugins": [gone_unused, gone_used]}, used)
