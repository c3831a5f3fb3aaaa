"""A stored cell is reused only when it was computed from what this run would compute it from (issue 22):
the resolved hyperparameters, the attack's code and the batch's images; another git revision is said."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from conftest import reference_run

from leakbench.core.errors import ConfigError, LeakbenchWarning
from leakbench.harness import fingerprint, reuse
from leakbench.harness import run as run_module
from leakbench.harness.run import run_sweep
from leakbench.records.seal import write_seal
from leakbench.reporting.report import write_report

SUITE = """\
name = "tiny"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [1, 2]
width = 32
depth = 3
grid_images = 2
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reference_run(tmp_path_factory, SUITE, "ref")


def _copy(reference: Path, tmp_path: Path) -> Path:
    (tmp_path / "suite.toml").write_text(SUITE)
    return Path(shutil.copytree(reference, tmp_path / "res" / "tiny"))


def _resume(tmp_path: Path) -> tuple[int, list[str]]:
    """Resume the copied run: cells run now, and the warning lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeakbenchWarning)
        ran = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res").ran
    return ran, [str(w.message) for w in caught if issubclass(w.category, LeakbenchWarning)]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_cells_store_what_they_were_computed_from(reference: Path) -> None:
    for cell in (reference / "cells").iterdir():
        manifest = json.loads((cell / "manifest.json").read_text())
        assert len(manifest["attack_code"]) == 16 and len(manifest["batch_fingerprint"]) == 16


@pytest.mark.slow
def test_unchanged_cells_are_reused_without_a_word(tmp_path: Path, reference: Path) -> None:
    _copy(reference, tmp_path)
    assert _resume(tmp_path) == (0, [])


@pytest.mark.slow
def test_other_resolved_hyperparameters_are_recomputed(tmp_path: Path, reference: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A default changed in the code (here: spear's max_draws as this version resolves it) → recomputed, said once."""
    from leakbench.attacks.spear import SpearAttack

    _copy(reference, tmp_path)
    monkeypatch.setattr(SpearAttack, "hyperparameters", lambda self: {**asdict(self.config), "max_draws": 7})
    ran, said = _resume(tmp_path)
    assert ran == 2 and len(said) == 1 and "resolved hyperparameters differ" in said[0]


@pytest.mark.slow
def test_changed_attack_code_is_recomputed(tmp_path: Path, reference: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _copy(reference, tmp_path)
    monkeypatch.setattr(reuse, "attack_code", lambda cls: "0123456789abcdef")
    ran, said = _resume(tmp_path)
    assert ran == 2 and len(said) == 1 and "attack's code has changed" in said[0]


def test_attack_code_follows_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hash of a plugin attack changes with its file, and SPEAR's covers its whole package."""
    import importlib
    import sys

    from leakbench.attacks.spear import SpearAttack

    plugin = tmp_path / "my_attack_mod.py"
    source = ("from leakbench.attacks.spear import SpearAttack\n"
              "class Mine(SpearAttack):\n    name = 'mine'\n")
    plugin.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    first = fingerprint.attack_code(importlib.import_module("my_attack_mod").Mine)
    plugin.write_text(source + "# changed\n")
    del sys.modules["my_attack_mod"]
    second = fingerprint.attack_code(importlib.import_module("my_attack_mod").Mine)
    assert first != second != fingerprint.attack_code(SpearAttack)
    names = {name for name, _ in fingerprint._source_files(SpearAttack)}
    assert {"spear/attack.py", "spear/deflation.py"} <= names


def _fewer_photos(monkeypatch: pytest.MonkeyPatch) -> None:
    """`embedded` as a wheel without scikit-image serves it: the 2 scikit-learn photos only."""
    from sklearn.datasets import load_sample_images

    from leakbench.datasets import loaders

    only_sklearn = [np.asarray(img) for img in load_sample_images().images]
    monkeypatch.setattr(loaders, "_embedded_photos", lambda: only_sklearn)
    loaders._embedded_cached.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True], ids=["fingerprint", "indices"])
def test_cells_of_other_images_are_refused(tmp_path: Path, reference: Path, monkeypatch: pytest.MonkeyPatch,
                                           legacy: bool) -> None:
    """Another install's `embedded` (other images for the same cell ids): refused in one line, nothing written.
    Cells stored before fingerprints are compared by their dataset indices."""
    from leakbench.datasets import loaders

    run_dir = _copy(reference, tmp_path)
    if legacy:
        for cell in (run_dir / "cells").iterdir():
            manifest = json.loads((cell / "manifest.json").read_text())
            for key in fingerprint.PROVENANCE:
                del manifest[key]
            (cell / "manifest.json").write_text(json.dumps(manifest))
            (cell / "seal.json").unlink()
            write_seal(cell, cell.name)
        assert _resume(tmp_path) == (0, [])  # a legacy cell on the same images is reused
    before = _tree(tmp_path)
    _fewer_photos(monkeypatch)
    try:
        with pytest.raises(ConfigError, match=r"cannot be resumed: cell [0-9a-f]+: its batch"):
            run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res")
    finally:
        loaders._embedded_cached.cache_clear()
    assert _tree(tmp_path) == before


@pytest.mark.slow
def test_another_git_revision_is_said_and_reported(tmp_path: Path, reference: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _copy(reference, tmp_path)
    monkeypatch.setattr(run_module, "git_revision", lambda: "f" * 40)
    ran, said = _resume(tmp_path)
    assert ran == 0 and len(said) == 1 and "2 reused cells were computed at another git revision" in said[0]
    stored = json.loads((next((run_dir / "cells").iterdir()) / "manifest.json").read_text())["git_revision"]
    assert json.loads((run_dir / "manifest.json").read_text())["cell_revisions"] == {stored or "unknown": 2}
    assert f"Git revision {stored or 'unknown'}." in write_report(run_dir, tmp_path / "rep").read_text()


def test_a_cell_whose_victim_trained_otherwise_is_recomputed() -> None:
    """Issue 24: a trained cell with noise, DP or defences now trains its victim under them; a stored cell
    whose victim hash is another one (trained plainly before) is recomputed, one at init is not asked."""
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.victim import load_batch

    batch = load_batch(CellSpec("spear", "embedded", 1))
    stored = {"batch_fingerprint": fingerprint.batch_fingerprint(batch), "attack_code": "c",
              "summary": {"hyperparameters": {}, "victim_hash": "old"}}
    same = fingerprint.resolved({})
    assert reuse.check_stored(stored, same, "c", batch, "old") == ("", "")
    assert reuse.check_stored(stored, same, "c", batch, "")[0] == ""  # at init: no victim to compare
    verdict, why = reuse.check_stored(stored, same, "c", batch, "new")
    assert verdict == "recompute" and "victim was trained otherwise" in why
