"""The trust model in the records and the tables (issue 41): whose code a cell ran (shipped, plugin or
evaluated attack; shipped or plugin defence), whether its images are public, third-party leaderboard rows
marked verified (private images) or unverified (public images), and a third-party defence paired with a
third-party attack kept out of every ranking. Synthetic run folders (fast); the example plugin end to end is
in tests/test_plugins.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl.transform import FedSGD, UpdateTransform
from leakbench.records.runs import read_run
from leakbench.records.trust import UNKNOWN, UNVERIFIED, VERIFIED
from leakbench.reporting.leaderboard import write_leaderboard
from leakbench.reporting.trust import ATTACK_CODE, UNRANKED_TITLE

CELL = {"width": 200, "depth": 6, "layer": 1, "seed": 0, "dp": "none", "dp_sigma": np.nan, "dp_clip": np.nan,
        "dp_epsilon": np.inf, "arch": "fc", "client": "fedsgd", "status": "ok", "reason": "", "seconds": 1.0,
        "space": "image", "inversion_steps": 0, "isolation": "landlock+seccomp", "batch_size": 2, "failures": 0}


def _write_run(root: Path, name: str, cells: list[dict], *, manifests: dict[str, dict] | None = None) -> None:
    """A run folder holding `cells` (each: cell_id, attack, dataset, exact fraction, optional columns) with two
    images per cell, and cell folders holding the given manifests."""
    run = root / name
    run.mkdir(parents=True)
    rows, records = [], []
    for c in cells:
        exact = c.pop("exact")
        rows.append({**CELL, "suite": name, **c})
        records += [{"cell_id": c["cell_id"], "exact": i < exact * 2, "psnr": np.inf if i < exact * 2 else 20.0,
                     "ssim": 0.5, "lpips": 0.1, "rel_error": np.nan, "status": "ok", "space": "image"}
                    for i in range(2)]
    pd.DataFrame(rows).to_parquet(run / "cells.parquet")
    pd.DataFrame(records).to_parquet(run / "records.parquet")
    for cid, manifest in (manifests or {}).items():
        (run / "cells" / cid).mkdir(parents=True)
        (run / "cells" / cid / "manifest.json").write_text(json.dumps(manifest))


def _cell(cid: str, attack: str, dataset: str, exact: float, origin: str = "shipped", images: str = "public",
          defence: str | None = None, defence_origin: str = "shipped") -> dict:
    return {"cell_id": cid, "attack": attack, "dataset": dataset, "exact": exact, "defence": defence,
            "attack_origin": origin, "defence_origin": defence_origin, "images": images}


def _tables(markdown: str) -> dict[str, str]:
    return {part.split("\n", 1)[0]: part for part in markdown.split("\n## ")[1:]}


def _rows(section: str) -> list[dict[str, str]]:
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[1:]]


@pytest.fixture
def board(tmp_path: Path) -> dict[str, str]:
    """A leaderboard of shipped spear, a plugin attack on public (embedded) and on private (imagefolder)
    images, an evaluated attack, and a plugin defence (`quant`) against spear and against the plugin attack."""
    _write_run(tmp_path / "res", "s", [
        _cell("a", "spear", "embedded", 1.0), _cell("b", "mean-image", "embedded", 0.5, "plugin"),
        _cell("c", "spear", "imagefolder", 1.0, images="private"),
        _cell("d", "mean-image", "imagefolder", 0.5, "plugin", "private"),
        _cell("e", "spear", "embedded", 1.0, defence="quant bits=4", defence_origin="plugin"),
        _cell("f", "mean-image", "embedded", 1.0, "plugin", defence="quant bits=4", defence_origin="plugin")])
    _write_run(tmp_path / "res", "s--grey", [_cell("g", "grey", "embedded", 0.0, "evaluated")])
    write_leaderboard(tmp_path / "res", tmp_path / "rep")
    return _tables((tmp_path / "rep" / "leaderboard.md").read_text())


def test_third_party_rows_are_marked_verified_only_on_private_images(board: dict[str, str]) -> None:
    public = board["Attacks per threat model: embedded · FC-6 w200 · layer 1 · defence: none"]
    marks = {row["attack"]: row[ATTACK_CODE] for row in _rows(public)}
    assert marks == {"spear": "shipped", "mean-image": f"plugin: {UNVERIFIED}", "grey": f"evaluated: {UNVERIFIED}"}
    private = board["Attacks per threat model: imagefolder · FC-6 w200 · layer 1 · defence: none"]
    assert {row["attack"]: row[ATTACK_CODE] for row in _rows(private)} == {
        "spear": "shipped", "mean-image": f"plugin: {VERIFIED}"}


def test_a_third_party_defence_with_a_third_party_attack_is_ranked_nowhere(board: dict[str, str]) -> None:
    defended = board["Attacks per threat model: embedded · FC-6 w200 · layer 1 · defence: quant bits=4"]
    assert [row["attack"] for row in _rows(defended)] == ["spear"]  # its pairing with mean-image: not ranked
    assert ATTACK_CODE not in _rows(defended)[0]  # a table of shipped attacks only carries no mark
    ranking = next(s for t, s in board.items() if t.startswith("Defences ranked"))
    quant = next(row for row in _rows(ranking) if row["defence"] == "quant bits=4")
    # 100 % exact behind the plugin defence: it would be the worst leakage; the level says it never ran there
    assert quant["worst non-adaptive attack"] == "spear" and "not run: grey, mean-image" in quant["verdict"]
    [unranked] = [s for t, s in board.items() if t.startswith(UNRANKED_TITLE)]
    [row] = _rows(unranked)
    assert (row["attack"], row["defence"], row["exact %"]) == ("mean-image", "quant bits=4", "100")
    assert "could hand it to a third-party attack written to read it" in unranked


def test_records_stored_before_the_trust_columns_get_them_from_their_manifests(tmp_path: Path) -> None:
    """Old cells: a plugin's attack (the manifest's `plugins` name it), a shipped one, a plugin defence, an
    `api.evaluate` run (SUITE--NAME), a run from before plugins (no `plugins` key) and a cell without a
    manifest ('unknown'); `imagefolder` images were never declared ('unknown')."""
    def old(cid: str, attack: str, dataset: str = "embedded") -> dict:
        cell = _cell(cid, attack, dataset, 1.0)
        for key in ("attack_origin", "defence_origin", "images"):
            del cell[key]
        return cell

    plugins = [{"module": "p.attack", "distribution": "p", "version": "1", "attacks": ["mine"], "datasets": []},
               {"module": "p.defence", "distribution": "p", "version": "1", "attacks": [], "datasets": [],
                "defences": ["quant"]}]
    quantised = {"plugins": plugins, "spec": {"attack": "spear", "defences": [{"name": "quant", "config": {}}]}}
    _write_run(tmp_path, "old", [old("a", "mine"), old("b", "spear"), old("c", "spear"), old("d", "spear"),
                                 old("e", "spear", "imagefolder")],
               manifests={"a": {"plugins": plugins}, "b": {"plugins": plugins}, "c": quantised, "d": {}})
    _write_run(tmp_path, "old--grey", [old("g", "grey")], manifests={"g": {"plugins": []}})
    cells = pd.concat([read_run(tmp_path / "old").cells, read_run(tmp_path / "old--grey").cells])
    found = {r.cell_id: (r.attack_origin, r.defence_origin, r.images) for r in cells.itertuples()}
    assert found == {"a": ("plugin", "shipped", "public"), "b": ("shipped", "shipped", "public"),
                     "c": ("shipped", "plugin", "public"), "d": ("shipped", "shipped", "public"),
                     "e": (UNKNOWN, UNKNOWN, UNKNOWN), "g": ("evaluated", "shipped", "public")}


def test_imagefolder_images_are_private_unless_the_folder_says_public(tmp_path: Path) -> None:
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        Image.fromarray(np.full((8, 8, 3), 40 if label == "a" else 200, np.uint8)).save(tmp_path / label / "0.png")
    folder = load_dataset("imagefolder", data_root=tmp_path, image_size=8)
    assert not folder.public and not sample_batch(folder, 2, 0).public
    (tmp_path / "PUBLIC").write_text("a copy of a published dataset\n")
    assert load_dataset("imagefolder", data_root=tmp_path, image_size=8).public
    assert load_dataset("digits").public and sample_batch(load_dataset("digits"), 2, 0).public


@dataclass(frozen=True)
class _Nothing:
    """(no settings)"""


class _OutsideDefence(UpdateTransform):
    """A defence defined outside the leakbench package (a plugin's, or a module of the user's)."""

    name = "outside"
    Config = _Nothing


def test_the_harness_tells_shipped_code_from_third_party_code() -> None:
    from leakbench.attacks import attack_class
    from leakbench.attacks.described import describe, described_attack
    from leakbench.harness.fingerprint import attack_origin, code_origin

    spear = attack_class("spear")
    assert attack_origin(spear, evaluated=False) == "shipped"
    assert attack_origin(described_attack({**describe(spear), "name": "x", "module": "leakbench.attacks.spear"}),
                         evaluated=False) == "plugin"  # whatever module the worker claims
    assert attack_origin(spear, evaluated=True) == "evaluated"
    assert code_origin(FedSGD) == "shipped" and code_origin(_OutsideDefence) == "plugin"


def test_a_defence_the_strongest_attack_was_kept_from_is_not_ranked_best(tmp_path: Path) -> None:
    """The strongest undefended attack is a plugin's; its cells behind a plugin defence are kept out (a pairing),
    so the defence was never measured against it: it ranks after the undefended level, not first by absence."""
    _write_run(tmp_path / "res", "s", [
        _cell("a", "mine", "embedded", 1.0, "plugin"), _cell("b", "spear", "embedded", 0.5),
        _cell("c", "mine", "embedded", 1.0, "plugin", defence="quant bits=4", defence_origin="plugin"),
        _cell("d", "spear", "embedded", 0.5, defence="quant bits=4", defence_origin="plugin")])
    write_leaderboard(tmp_path / "res", tmp_path / "rep")
    ranking = next(s for t, s in _tables((tmp_path / "rep" / "leaderboard.md").read_text()).items()
                   if t.startswith("Defences ranked"))
    rows = _rows(ranking)
    assert [(r["rank"], r["defence"]) for r in rows] == [("1", "none"), ("2", "quant bits=4")]
    assert rows[1]["verdict"].startswith("no adaptive attack") and "not run: mine (ranked after" in rows[1]["verdict"]
