"""Data identity (issue 42): an `imagefolder` cell's id names the files its data root serves (a fingerprint of
their paths and contents), so two folders of the same layout never share ids, and the reports and the
leaderboard keep them apart; a folder moved elsewhere keeps its ids; every other dataset's ids stay."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from leakbench import api
from leakbench.cell.spec import CellSpec, cell_id
from leakbench.citation import registered_papers
from leakbench.core.errors import ConfigError, DatasetError
from leakbench.datasets import load_dataset
from leakbench.harness.suite import load_suite, plan_lines
from leakbench.reporting.leaderboard import write_leaderboard

SUITE = ('name = "{name}"\ndataset = "imagefolder"\nimage_size = 16\nattacks = ["spear"]\nbatch_sizes = [1]\n'
         'width = 32\ndepth = 3\n')


def image_root(root: Path, seed: int) -> Path:
    """An imagefolder data root: classes 'a' and 'b', files 0.png and 1.png each (the same layout for every
    seed), random pixels drawn from `seed`."""
    rng = np.random.default_rng(seed)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / label / f"{i}.png")
    return root


def suite_ids(tmp_path: Path, data_root: Path) -> list[str]:
    """The cell ids of the test suite planned on `data_root`."""
    suite = tmp_path / "ids.toml"
    suite.write_text(SUITE.format(name="ids"))
    return [cell_id(spec) for spec in load_suite(suite, data_root=str(data_root)).cells]


def test_two_folders_of_the_same_layout_get_different_ids(tmp_path: Path) -> None:
    """Same class folders, same file names, other pixels: other cell ids (both planned, no cell run)."""
    train, test = image_root(tmp_path / "train", 0), image_root(tmp_path / "test", 1)
    assert set(suite_ids(tmp_path, train)).isdisjoint(suite_ids(tmp_path, test))
    plans = [plan_lines(load_suite(_suite(tmp_path, "plan"), data_root=str(root))) for root in (train, test)]
    assert plans[0] != plans[1] and all(" data=" in line for plan in plans for line in plan if "spear" in line)


def test_a_moved_folder_keeps_its_ids(tmp_path: Path) -> None:
    """Identity by content, not by path: the same files under another path (copied, so with other
    modification times too) give the same ids; one changed pixel gives others."""
    original = image_root(tmp_path / "data", 0)
    ids = suite_ids(tmp_path, original)
    moved = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(original, moved)
    shutil.rmtree(original)
    assert suite_ids(tmp_path, moved) == ids
    pixels = np.asarray(Image.open(moved / "b" / "1.png")).copy()
    pixels[0, 0, 0] ^= 1
    Image.fromarray(pixels).save(moved / "b" / "1.png")
    assert set(suite_ids(tmp_path, moved)).isdisjoint(ids)


def test_the_fingerprint_is_of_the_files_the_loader_serves(tmp_path: Path) -> None:
    """Files the loader skips (hidden ones, other suffixes) change nothing; a PUBLIC marker (which changes the
    images' trust) does; the loaded dataset carries the fingerprint that the cells' ids hash."""
    from leakbench.datasets import data_fingerprint

    root = image_root(tmp_path / "data", 0)
    before = data_fingerprint("imagefolder", root)
    assert before is not None and re.fullmatch(r"[0-9a-f]{16}", before)
    assert load_dataset("imagefolder", data_root=root).fingerprint == before
    (root / "a" / "notes.txt").write_text("not an image")
    (root / "b" / ".hidden.png").write_bytes(b"skipped")
    assert data_fingerprint("imagefolder", root) == before
    (root / "PUBLIC").write_text("")
    assert data_fingerprint("imagefolder", root) != before


def test_other_datasets_have_no_fingerprint(tmp_path: Path) -> None:
    """Only a dataset whose data root is a user's folder of images is fingerprinted: the ids of embedded,
    digits, MNIST, TinyImageNet and CIFAR-10 cells stay as they were (the golden id tests guard them)."""
    from leakbench.datasets import data_fingerprint

    for name in ("embedded", "digits", "mnist", "tinyimagenet", "cifar10"):
        assert data_fingerprint(name, tmp_path) is None
    assert load_dataset("embedded").fingerprint == ""


def test_a_cell_refuses_a_data_root_whose_files_changed(tmp_path: Path) -> None:
    """A cell planned on one folder and given another (a resumed run, a rescore with --data-root) is one
    DatasetError line, never a record of other images under its id."""
    from leakbench.harness.victim import victim

    root = image_root(tmp_path / "data", 0)
    spec = load_suite(_suite(tmp_path, "refuse"), data_root=str(root)).cells[0]
    shutil.rmtree(root)
    image_root(root, 1)
    with pytest.raises(DatasetError, match="does not serve the files the cell was planned on"):
        victim(spec, with_model=False)


def _suite(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SUITE.format(name=name))
    return path


@pytest.mark.slow
def test_two_folders_give_two_leaderboard_rows_and_labelled_reports(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """A training and a test split of the same layout, one run each into one results folder: different cell
    ids, two spear rows on the leaderboard (in two tables, each naming its folder's fingerprint), and each
    report names its own. Resuming a run on the other folder is refused (on the same ids it would have
    skipped every cell as done and reported the first folder's images), and so is rescoring it there (one
    line, exit 2, nothing written)."""
    train, test = image_root(tmp_path / "train", 0), image_root(tmp_path / "test", 1)
    out, reports = tmp_path / "res", tmp_path / "rep"
    api.run(_suite(tmp_path, "on-train"), data_root=str(train), out=out, reports=reports, progress=False)
    api.run(_suite(tmp_path, "on-test"), data_root=str(test), out=out, reports=reports, progress=False)
    ids = {run: set(pd.read_parquet(out / run / "cells.parquet")["cell_id"]) for run in ("on-train", "on-test")}
    assert ids["on-train"].isdisjoint(ids["on-test"])
    stored = {run: pd.read_parquet(out / run / "cells.parquet")["data_fingerprint"].unique().tolist()
              for run in ("on-train", "on-test")}
    assert len(stored["on-train"]) == len(stored["on-test"]) == 1 and stored["on-train"] != stored["on-test"]

    write_leaderboard(out, tmp_path / "board", registered_papers())
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    tables = [part for part in board.split("\n## ") if part.startswith("Attacks per threat model")]
    spear_rows = [line for t in tables for line in t.splitlines() if line.startswith("| ") and "spear" in line]
    assert len(spear_rows) == 2, board
    for run in ("on-train", "on-test"):
        label = f"imagefolder ({stored[run][0][:8]})"
        assert sum(t.startswith(f"Attacks per threat model: {label} ") for t in tables) == 1, board
        assert label in (reports / f"{run}.md").read_text()

    with pytest.raises(ConfigError, match="finished cells that suite 'on-train' does not plan"):
        api.run(_suite(tmp_path, "on-train"), data_root=str(test), out=out, reports=reports, progress=False)
    stored_files = {p: p.read_bytes() for p in (out / "on-train").rglob("*") if p.is_file()}
    proc = cli(["rescore", out / "on-train", "--data-root", test, "--reports", tmp_path / "rep2"], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "does not serve the files the cell was planned on" in proc.stderr
    assert not (tmp_path / "rep2").exists()
    assert {p: p.read_bytes() for p in (out / "on-train").rglob("*") if p.is_file()} == stored_files


def test_a_malformed_stored_fingerprint_is_one_line() -> None:
    """A manifest's `data_fingerprint` that is not 16 hex digits is refused as any malformed spec is."""
    from leakbench.cell.spec import spec_from_dict

    with pytest.raises(ConfigError, match="data fingerprint must be 16 hex digits"):
        spec_from_dict({"attack": "spear", "dataset": "imagefolder", "batch_size": 1, "data_fingerprint": "../x"})


def test_trained_victims_of_two_folders_are_two_cache_entries(tmp_path: Path) -> None:
    """The victim cache's key names the folder's fingerprint: a victim trained on one folder is never reused
    for another of the same size and shape; a cell of a published dataset keeps the key it had."""
    from leakbench.harness.victim import victim_key

    train, test = image_root(tmp_path / "train", 0), image_root(tmp_path / "test", 1)
    suite = tmp_path / "trained.toml"
    suite.write_text(SUITE.format(name="trained") + "train_epochs = [1]\n")
    keys = [victim_key(spec, load_dataset("imagefolder", data_root=root, image_size=16))
            for root in (train, test) for spec in load_suite(suite, data_root=str(root)).cells]
    assert keys[0] != keys[1] and {k["data_fingerprint"] for k in keys} == {
        load_dataset("imagefolder", data_root=root).fingerprint for root in (train, test)}
    embedded = CellSpec(attack="spear", dataset="embedded", batch_size=1, train_epochs=1)
    assert "data_fingerprint" not in victim_key(embedded, load_dataset("embedded"))
