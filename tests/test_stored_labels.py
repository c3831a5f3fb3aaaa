"""Issue 42: reports and the leaderboard read labels, papers and budgets from the stored records, never
from a registry. A run that used a victim plugin, a defence plugin and an attack plugin (each with its
paper) and a dataset plugin is reported and ranked in a fresh process without any of them importable: the
victim keeps its name, the defence and the attack their papers, the levels their order.

The run is made once per module (about 60 s): a subprocess with the plugins' folder on PYTHONPATH. The
fast tests below check the pieces on tables made here, and that a run stored before the labels existed (the
golden records, no cell folders) still reports as it did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import CLI_TIMEOUT_S, REPO_ROOT

from leakbench.core.citation import Citation, Papers, stored_citation
from leakbench.records.labels import labels_data, stored_columns, stored_papers
from leakbench.reporting.aggregate import model_order, with_model
from leakbench.reporting.leaderboard import board_order, level_papers, load_results
from leakbench.reporting.order import defence_levels, level_key, level_sorter, update_key

GOLDEN = REPO_ROOT / "tests" / "golden"

VICTIM = '''\
"""A victim plugin: a small MLP built from torch modules only (nothing of this module is pickled)."""
from collections import OrderedDict

from torch import nn

from leakbench.models import VictimFactory, register_victim


def build(input_shape, num_classes, width, depth):
    c, h, w = input_shape
    return nn.Sequential(OrderedDict(flat=nn.Flatten(), fc1=nn.Linear(c * h * w, 24), relu=nn.ReLU(),
                                     fc2=nn.Linear(24, num_classes)))


register_victim("bncnn", VictimFactory(build=build, linear_layers=("fc1", "fc2"), relu_after=("fc1",),
                                       description="a tiny MLP from a plugin"))
'''

DEFENCE = '''\
"""A defence plugin with a paper: every gradient tensor times a factor."""
import dataclasses
from dataclasses import dataclass

from leakbench.citation import Citation
from leakbench.fl import UpdateTransform
from leakbench.fl.transform import register_transform
from leakbench.core.ranges import Ranged, ranged


@dataclass(frozen=True)
class ScaleConfig(Ranged):
    """factor: multiply every gradient by it."""

    factor: float = ranged(1.0, 0.0, 100.0)


@register_transform
class Scale(UpdateTransform):
    name = "gscale"
    Config = ScaleConfig
    paper = Citation("Doe et al., PLUG 2030", "https://example.org/gscale")

    def apply(self, update, client):
        return dataclasses.replace(update, gradients={k: g * self.config.factor for k, g in update.gradients.items()})
'''

ATTACK = '''\
"""An attack plugin with a paper: every image mid-grey."""
from dataclasses import dataclass

import torch

from leakbench.attacks import Attack, Reconstruction, register_attack
from leakbench.citation import Citation


@dataclass(frozen=True)
class GreyConfig:
    """level: the grey level of every image."""

    level: float = 0.5


@register_attack
class Grey(Attack):
    name = "grey-guess"
    description = "every image mid-grey"
    Config = GreyConfig
    paper = Citation("Roe et al., PLUG 2031", "https://example.org/grey")

    def reconstruct(self, update, *, seed):
        images = torch.full((int(update.batch_size), *update.model.input_shape), self.config.level)
        return Reconstruction(status="ok", space="image", images=images, layer=1)
'''

DATASET = '''\
"""A dataset plugin: 16 random 3×8×8 images, 2 classes."""
import torch

from leakbench.datasets import DATASETS, ImageDataset


def load(*, data_root=None, image_size=None):
    images = torch.rand(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    return ImageDataset(name="tinyflat", images=images, labels=torch.arange(16) % 2, num_classes=2)


DATASETS.register("tinyflat", load, "a dataset plugin: 16 random images")
'''

SUITE = '''\
name = "plugged"
victim_plugins = ["bncnn_victim"]
defence_plugins = ["scale_defence"]
plugins = ["grey_attack"]
dataset_plugins = ["tinyflat_data"]
datasets = ["embedded", "tinyflat"]
arch = "bncnn"
layer = 2
attacks = ["spear", "grey-guess"]
batch_sizes = [1]
defences = ["none", { name = "gscale", factor = 10.0 }, { name = "gscale", factor = 2.0 }]
'''


def _leakbench(cwd: Path, *args: str, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(str(p) for p in (*path, REPO_ROOT))}
    env.pop("LEAKBENCH_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "leakbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding res/plugged, run with the three plugins importable; they are deleted afterwards."""
    root = tmp_path_factory.mktemp("labels")
    plugins = root / "plugins"
    plugins.mkdir()
    for name, source in (("bncnn_victim", VICTIM), ("scale_defence", DEFENCE), ("grey_attack", ATTACK),
                         ("tinyflat_data", DATASET)):
        (plugins / f"{name}.py").write_text(source)
    (root / "suite.toml").write_text(SUITE)
    proc = _leakbench(root, "run", "suite.toml", "--out", "res", "--reports", "rep", path=(plugins,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for module in plugins.iterdir():  # uninstalled: no process below can import them
        module.unlink() if module.is_file() else None
    return root


@pytest.mark.slow
def test_the_records_keep_the_update_the_victim_and_the_papers(run: Path) -> None:
    cells = run / "res" / "plugged" / "cells"
    summaries = [json.loads((c / "summary.json").read_text()) for c in sorted(cells.iterdir())]
    scaled = [s for s in summaries if s["attack"] == "spear" and s.get("defence") == "gscale factor=2"
              and s["dataset"] == "embedded"]
    assert len(scaled) == 1
    labels = scaled[0]["labels"]
    assert labels["victim"] == "bncnn"
    assert labels["update"] == [["fedsgd", {}], ["gscale", {"factor": 2.0}]]
    assert labels["papers"]["update"]["gscale"] == {"short": "Doe et al., PLUG 2030", "url": "https://example.org/gscale"}
    grey = next(s for s in summaries if s["attack"] == "grey-guess")
    assert grey["labels"]["papers"]["attack"] == {"short": "Roe et al., PLUG 2031", "url": "https://example.org/grey"}


@pytest.mark.slow
def test_report_without_the_plugins(run: Path) -> None:
    proc = _leakbench(run, "report", "res/plugged", "--reports", "again")
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (run / "again" / "plugged.md").read_text()
    assert "bncnn" in page and "gscale factor=10" in page
    assert page.index("gscale factor=2") < page.index("gscale factor=10")  # 2 before 10: numbers as numbers
    start = page.index("## Comparison grids")  # the defence plugin's cells too; the dataset plugin's: none
    grids = page[start:page.find("\n## ", start) % (len(page) + 1)]
    assert "gscale" in grids and "No grids for tinyflat: unknown dataset 'tinyflat'" in grids
    assert "embedded" in grids and "tinyflat · bncnn" not in grids
    unranked = page[page.index("## Not ranked"):]  # the plugin attack behind the plugin defence: by level too
    assert unranked.index("| gscale factor=2 | grey-guess |") < unranked.index("| gscale factor=10 | grey-guess |")


@pytest.mark.slow
def test_leaderboard_without_the_plugins(run: Path) -> None:
    proc = _leakbench(run, "leaderboard", "--results", "res", "--reports", "board")
    assert proc.returncode == 0, proc.stderr[-3000:]
    board = (run / "board" / "leaderboard.md").read_text()
    assert "embedded · bncnn · layer 2 · defence: gscale factor=2" in board
    assert board.index("defence: gscale factor=2\n") < board.index("defence: gscale factor=10\n")
    assert "https://example.org/gscale" in board  # the defence's paper, from the records
    assert "tinyflat · bncnn · layer 2 · defence: gscale factor=10" in board  # the dataset plugin's cells
    html = (run / "board" / "leaderboard.html").read_text()
    assert "https://example.org/grey" in html  # the attack plugin's paper (its cells stand under 'not ranked'
    # behind the plugin defence, ranked on the undefended board)


PAPER = Citation("Doe et al., PLUG 2030", "https://example.org/gscale")


def _cells(*cells: tuple[str, str, list[list[object]]]) -> pd.DataFrame:
    """Cells as a report reads them: (client label, defence label, stored update) each, plugin victim 'bncnn'."""
    rows = [{"cell_id": f"c{i}", "attack": "spear", "arch": "bncnn", "depth": 3, "width": 200, "train_epochs": 0,
             "client": client, "defence": defence, "dp": "none", "threat": "default",
             **stored_columns({"labels": labels_data("bncnn", [(n, s) for n, s in update], None,
                                                     {"gscale": PAPER})})}
            for i, (client, defence, update) in enumerate(cells)]
    return pd.DataFrame(rows)


def test_levels_are_ordered_by_their_stored_values_not_their_labels() -> None:
    """Two labels that read in the other order as text ('gscale x-a' < 'gscale x-b'): the stored factors
    (1 for x-b, 2 for x-a) decide; the undefended update comes first."""
    cells = with_model(_cells(("fedsgd", "gscale x-a", [["fedsgd", {}], ["gscale", {"factor": 2.0}]]),
                              ("fedsgd", "gscale x-b", [["fedsgd", {}], ["gscale", {"factor": 1.0}]]),
                              ("fedsgd", "", [["fedsgd", {}]])))
    levels = list(defence_levels(cells))
    assert levels == ["gscale x-a", "gscale x-b", "none"]
    assert sorted(levels, key=level_key) == ["none", "gscale x-a", "gscale x-b"]  # the text rule
    assert sorted(levels, key=level_sorter(cells)) == ["none", "gscale x-b", "gscale x-a"]
    assert list(cells["model"]) == ["bncnn"] * 3  # the stored name: no registry knows 'bncnn' here
    assert update_key([("fedsgd", {})]) < update_key([("fedsgd", {})], "labels known")


def test_papers_are_found_by_transform_name_from_the_records() -> None:
    """A label that does not start with its transform's name ('Scaled ×2') still finds the paper the cells
    stored; FedSGD, which the level does not name, cites nothing."""
    cells = _cells(("fedsgd", "Scaled ×2", [["fedsgd", {}], ["gscale", {"factor": 2.0}]]))
    papers = stored_papers(list(cells["attack"]), list(cells["papers"]))
    assert papers == Papers({}, {"gscale": PAPER})
    assert level_papers("Scaled ×2", cells, papers) == [("gscale", PAPER)]
    assert level_papers("Scaled ×2", cells.drop(columns="update"), papers) == []  # the label's text finds none


def test_a_run_stored_before_the_labels_reports_as_before(tmp_path: Path) -> None:
    """The golden records (no cell folders, so no stored labels): victims named by the registry, levels in
    the text order."""
    run = tmp_path / "res" / "axes-client"
    run.mkdir(parents=True)
    for table in ("records.parquet", "cells.parquet"):
        (run / table).write_bytes((GOLDEN / "axes-client" / table).read_bytes())
    _, cells = load_results(tmp_path / "res")
    assert set(cells["update"]) == {""} and set(cells["victim"]) == {""}
    assert "FC-3 w64" in set(cells["model"])  # the registry's name, as before
    rank = {m: i for i, m in enumerate(model_order(cells))}
    keys = board_order(cells)
    assert len({k[3] for k in keys}) >= 3
    assert keys == sorted(keys, key=lambda k: (k[0], rank[k[1]], *[level_key(v) for v in k[2:]]))  # the text rule


def test_a_paper_from_data_links_only_to_http() -> None:
    """Papers read back from records or from a plugin attack's description (the sandboxed worker's word) are
    links on the leaderboard's page: only http(s) ones are taken."""
    from leakbench.attacks import attack_class
    from leakbench.attacks.described import describe, described_attack

    bad = {"short": "x", "url": "javascript:alert(1)"}
    assert stored_citation(bad) is None and stored_citation({"short": "x", "url": "https://e.org/"}) is not None
    assert stored_papers(["a"], [json.dumps({"attack": bad, "update": {"t": bad}})]) == Papers()
    spear = attack_class("spear")
    assert spear.paper is not None and described_attack(describe(spear)).paper == spear.paper
    assert described_attack({**describe(spear), "paper": bad}).paper is None
