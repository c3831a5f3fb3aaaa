"""`leakbench rescore`: records re-derived from stored reconstructions alone, identical when nothing changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import reference_run

from leakbench.harness import cell as cell_module
from leakbench.harness.rescore import rescore_run
from leakbench.records.artifacts import load_attack_output

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow

SUITE = """\
name = "rescore"
dataset = "embedded"
attacks = ["spear", "ig"]
batch_sizes = [1, 2]
layers = [1, 2]
width = 32
depth = 3
grid_images = 2
inversion = { steps = 5 }
[hyperparameters.spear]
max_draws = 20000
[hyperparameters.ig]
iterations = 3
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reference_run(tmp_path_factory, SUITE, "rescore")


def _no_attacks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("rescore ran attack code")
    monkeypatch.setattr(cell_module, "attack_cell", refuse)
    monkeypatch.setattr(cell_module, "configure_attack", refuse)
    monkeypatch.setattr(cell_module, "run_isolated", refuse)  # the attack worker


def test_rescore_gives_identical_records_without_running_an_attack(run_dir: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "rescore"
    shutil.copytree(run_dir, copy)
    for path in copy.glob("*.parquet"):
        path.unlink()  # consolidated tables are rebuilt from the cells
    _no_attacks(monkeypatch)
    rescore_run(copy)
    for name in ("records.parquet", "cells.parquet"):  # cells: seconds included
        pd.testing.assert_frame_equal(pd.read_parquet(copy / name), pd.read_parquet(run_dir / name))
    for cell in (run_dir / "cells").iterdir():
        for name in ("summary.json", "attack.json", "reconstruction.npz"):
            assert (copy / "cells" / cell.name / name).read_bytes() == (cell / name).read_bytes(), (cell.name, name)


def test_rescore_picks_up_a_changed_reconstruction(run_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring reads the stored arrays: altering them changes the records (the step is not a no-op)."""
    copy = tmp_path / "rescore"
    shutil.copytree(run_dir, copy)
    cells = pd.read_parquet(run_dir / "cells.parquet")
    target = cells[(cells["attack"] == "spear") & (cells["layer"] == 1) & (cells["batch_size"] == 2)]["cell_id"].iloc[0]
    folder = copy / "cells" / target
    with np.load(folder / "reconstruction.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays["images"] = np.clip(arrays["images"] + 0.05, 0, 1).astype(np.float32)
    np.savez(folder / "reconstruction.npz", **arrays)
    _no_attacks(monkeypatch)
    records, _ = rescore_run(copy)
    mine = records[records["cell_id"] == target]
    assert not mine["exact"].any() and (mine["psnr"] < 40).all()


def test_stored_reconstruction_is_what_the_attack_returned(run_dir: Path) -> None:
    cells = pd.read_parquet(run_dir / "cells.parquet")
    for _, cell in cells.iterrows():
        output = load_attack_output(run_dir / "cells" / cell["cell_id"])
        meta = json.loads((run_dir / "cells" / cell["cell_id"] / "attack.json").read_text())
        assert meta["status"] == cell["status"] and output.reconstruction.space == cell["space"]
        if cell["space"] == "image" and cell["status"] == "ok":
            images = output.reconstruction.images
            assert images.dtype.is_floating_point and images.shape[0] == cell["batch_size"]
            assert float(images.min()) >= 0 and float(images.max()) <= 1
        if cell["space"] == "feature" and cell["status"] == "ok":
            assert output.reconstruction.features.shape[0] == cell["batch_size"]
            assert output.inverted is not None  # inversion = {steps = 5}
        assert not (run_dir / "cells" / cell["cell_id"] / "truth.npz").exists()
