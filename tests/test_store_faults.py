"""Store, run and executor faults (issue 12, items 1–4 and 9): foreign folders are never replaced,
names read from disk are checked, damaged cells are detected and recomputed, duplicate cells are
refused, and an interrupted process pool stops at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd
import pytest
from conftest import CELL_FILES, load_benchmark, reference_run, run_cli_many

from leakbench.core.errors import ConfigError, LeakbenchWarning
from leakbench.harness import executors, interrupts
from leakbench.harness import suite as suite_module
from leakbench.harness.executors import Task
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import load_suite
from leakbench.records import folders
from leakbench.records.runs import read_run_manifest, records_difference
from leakbench.reporting.report import write_report

SUITE = """\
name = "tiny"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [1, 2]
layers = [1, 2]
width = 32
depth = 3
grid_images = 2
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of SUITE (4 cells: b ∈ {1, 2} × layers {1, 2}); its suite file is beside it."""
    return reference_run(tmp_path_factory, SUITE, "ref")


def _copy_run(reference: Path, tmp_path: Path) -> Path:
    """A copy of the reference run folder under tmp_path/res/tiny, and its suite file at tmp_path/suite.toml."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "suite.toml").write_text(SUITE)
    return Path(shutil.copytree(reference, tmp_path / "res" / "tiny"))


def _cell(run_dir: Path, batch_size: int, layer: int = 1) -> Path:
    cells = pd.read_parquet(run_dir / "cells.parquet")
    row = cells[(cells["batch_size"] == batch_size) & (cells["layer"] == layer)]
    return run_dir / "cells" / row["cell_id"].iloc[0]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bad_input(proc: subprocess.CompletedProcess[str], mention: str = "") -> str:
    """Exit 2, exactly one `leakbench: error:` line on stderr, nothing on stdout."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakbench: error:"), proc.stderr
    assert mention in lines[0] and proc.stdout == ""
    return lines[0]


# --------------------------------------------------------------------------- 1: never delete a user's files


ATTACK = ["attack", "--attack", "spear", "--batch-size", "2", "--width", "32", "--depth", "3", "--json"]


@pytest.mark.slow
def test_attack_out_replaces_only_leakbench_output(tmp_path: Path, reference: Path) -> None:
    """A non-empty --out that is not a leakbench cell folder is refused untouched; an earlier output is replaced."""
    foreign, lone_png, own, legacy = (tmp_path / k for k in ("foreign", "lone_png", "own", "legacy"))
    foreign.mkdir()
    (foreign / "notes.txt").write_text("precious\n")
    (foreign / "summary.json").write_text('{"mine": 1}\n')
    lone_png.mkdir()
    (lone_png / "grid.png").write_bytes(b"my holiday photo")
    shutil.copytree(_cell(reference, 1), own)
    shutil.copytree(_cell(reference, 1), legacy)
    (legacy / "seal.json").unlink()  # written before seals existed
    before = {k: _tree(tmp_path / k) for k in ("foreign", "lone_png")}
    done = run_cli_many({k: ([*ATTACK, "--out", str(tmp_path / k)], tmp_path)
                         for k in ("foreign", "lone_png", "own", "legacy")})
    for key in ("foreign", "lone_png"):
        _bad_input(done[key], "not a leakbench cell folder")
        assert _tree(tmp_path / key) == before[key]
    for key in ("own", "legacy"):
        assert done[key].returncode == 0, done[key].stderr[-3000:]
        assert sorted(p.name for p in (tmp_path / key).iterdir()) == sorted([*CELL_FILES, "grid.png"])
        assert json.loads((tmp_path / key / "summary.json").read_text())["batch_size"] == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_report_refuses_a_foreign_report_folder_or_page(tmp_path: Path, reference: Path) -> None:
    folder, page = tmp_path / "folder", tmp_path / "page"
    (folder / "tiny" / "figures").mkdir(parents=True)
    (folder / "tiny" / "notes.txt").write_text("precious\n")
    (folder / "tiny" / "figures" / "layer.png").write_bytes(b"mine")
    page.mkdir()
    (page / "tiny.md").write_text("# my own notes\n")
    before = {k: _tree(tmp_path / k) for k in ("folder", "page")}
    done = run_cli_many({k: (["report", str(reference), "--reports", str(tmp_path / k)], tmp_path)
                         for k in ("folder", "page")})
    assert "notes.txt" in _bad_input(done["folder"], "did not write")
    assert "tiny.md" in _bad_input(done["page"], "not written by leakbench")
    for key in ("folder", "page"):
        assert _tree(tmp_path / key) == before[key]


@pytest.mark.slow
def test_run_refuses_a_foreign_report_folder_before_running(tmp_path: Path) -> None:
    (tmp_path / "suite.toml").write_text(SUITE)
    (tmp_path / "rep" / "tiny").mkdir(parents=True)
    (tmp_path / "rep" / "tiny" / "notes.txt").write_text("precious\n")
    done = run_cli_many({"run": (["run", str(tmp_path / "suite.toml"), "--out", str(tmp_path / "res"),
                                  "--reports", str(tmp_path / "rep")], tmp_path)})
    _bad_input(done["run"], "notes.txt")
    assert not (tmp_path / "res").exists()
    assert _tree(tmp_path / "rep") == {"tiny/notes.txt": b"precious\n"}


@pytest.mark.slow
def test_report_replaces_its_own_report_and_a_legacy_one(tmp_path: Path, reference: Path) -> None:
    reports = tmp_path / "rep"
    write_report(reference, reports)
    marker = json.loads((reports / "tiny" / "report.json").read_text())
    assert set(marker["files"]) == set(_tree(reports / "tiny"))
    write_report(reference, reports)  # its own report: replaced
    (reports / "tiny" / "report.json").unlink()  # a report written before markers: figures and grids only
    write_report(reference, reports)
    assert (reports / "tiny" / "report.json").is_file()
    assert sorted(p.name for p in reports.iterdir()) == ["tiny", "tiny.html", "tiny.md"]


@pytest.mark.slow
def test_run_refuses_foreign_files_in_a_cell_folder(tmp_path: Path, reference: Path) -> None:
    run_dir = _copy_run(reference, tmp_path)
    (_cell(run_dir, 2) / "notes.txt").write_text("precious\n")
    before = _tree(run_dir)
    with pytest.raises(ConfigError, match=r"notes\.txt"):
        run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res", resume=False)
    assert _tree(run_dir) == before


@pytest.mark.slow
def test_only_leakbench_temporary_folders_are_removed(tmp_path: Path, reference: Path) -> None:
    """A marked temporary folder is removed, and so is an empty one named exactly as `temp_folder` names it
    (a command killed before it wrote the marker); a user's folder named like one (with or without files,
    also through a linked cells/) is not."""
    run_dir = _copy_run(reference, tmp_path)
    cells = run_dir / "cells"
    elsewhere = Path(shutil.move(cells, tmp_path / "elsewhere"))
    cells.symlink_to(elsewhere)
    name = _cell(run_dir, 1).name
    mine, empty = cells / ".backup", cells / f".{name}.tmp-mine"
    named_like = cells / f".{name}.tmp-x"
    partial, moved = cells / f".{name}.tmp-ab12_x", cells / f".{name}.old-123"
    unmarked, unmarked_full = cells / f".{name}.tmp-ab12_x9z", cells / f".{name}.tmp-cd34_y0w"
    for folder in (mine, empty, named_like, partial, moved, unmarked, unmarked_full):
        folder.mkdir()
    (mine / "keep.txt").write_text("mine\n")
    (named_like / "records.parquet").write_text("mine\n")
    (unmarked_full / "notes.txt").write_text("mine\n")
    for folder in (partial, moved):
        (folder / "records.parquet").write_bytes(b"half")
        (folder / folders.TEMP_MARKER).write_text("")
    assert run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res").ran == 0
    assert (mine / "keep.txt").read_text() == "mine\n" and (named_like / "records.parquet").read_text() == "mine\n"
    assert empty.is_dir() and not partial.exists() and not moved.exists() and not unmarked.exists()
    assert (unmarked_full / "notes.txt").read_text() == "mine\n"


@pytest.mark.slow
def test_an_interrupted_report_leaves_nothing_a_later_report_keeps(tmp_path: Path, reference: Path) -> None:
    """A report killed mid-way leaves its marked staging folder; the next report of the suite removes it
    (and only it: a user's folder named like one stays)."""
    reports = tmp_path / "rep"
    staging = folders.temp_folder(reports / "tiny")  # as a report killed while drawing leaves it
    (staging / "figures").mkdir()
    users = reports / ".tiny.tmp-user"
    users.mkdir()
    (users / "notes.txt").write_text("mine\n")
    write_report(reference, reports)
    assert not staging.exists() and (users / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in reports.iterdir()) == [".tiny.tmp-user", "tiny", "tiny.html", "tiny.md"]
    assert folders.TEMP_MARKER not in json.loads((reports / "tiny" / "report.json").read_text())["files"]


# --------------------------------------------------------------------------- 2: names read from disk


@pytest.mark.slow
@pytest.mark.parametrize("field,value", [("suite", "./../../x/victim"), ("cell_id", "../../../outside")])
def test_report_refuses_unsafe_names_in_the_manifest(tmp_path: Path, reference: Path, field: str, value: str) -> None:
    run_dir = _copy_run(reference, tmp_path / "a" / "b")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if field == "suite":
        manifest["suite"] = value
    else:
        manifest["cells"][0]["cell_id"] = value
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    before = _tree(tmp_path)
    rep = tmp_path / "a" / "b" / "rep"
    done = run_cli_many({"report": (["report", str(run_dir), "--reports", str(rep)], tmp_path)})
    assert "must be a folder name" in _bad_input(done["report"], value)
    assert _tree(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("selection", [[0, 2], [-1], [0, 0], ["0"], 3])
def test_report_refuses_a_grid_selection_outside_the_batch(tmp_path: Path, reference: Path, selection) -> None:
    """A manifest whose grid selection names no image of the batch (b = 2 here) is refused in one line."""
    from leakbench.core.errors import LeakbenchError

    run_dir = _copy_run(reference, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    cell = next(c for c in manifest["cells"] if c["batch_size"] == 2)
    cell["grid_selection"] = selection
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LeakbenchError, match=f"cell {cell['cell_id']}: grid_selection"):
        write_report(run_dir, tmp_path / "rep")
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_suite_names_and_stored_names_share_one_check(tmp_path: Path, reference: Path) -> None:
    assert suite_module.folder_name is folders.folder_name
    (tmp_path / "s.toml").write_text(SUITE.replace('name = "tiny"', 'name = "../up"'))
    with pytest.raises(ConfigError, match="key 'name' must be a folder name"):
        load_suite(tmp_path / "s.toml")
    run_dir = _copy_run(reference, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "suite": "a/b"}))
    with pytest.raises(ConfigError, match="'suite' must be a folder name"):
        read_run_manifest(run_dir)


# --------------------------------------------------------------------------- 3: damaged cells


DAMAGE = load_benchmark("resume_check").DAMAGE
"""Ways a stored image cell gets damaged (shared with the corrupt-and-resume check)."""


def _damage(run_dir: Path, kind: str, *, legacy: bool = False) -> Path:
    """Damage the b=2 image cell (with the b=1 cell as the 'other' one); `legacy` drops every seal first."""
    if legacy:  # a folder from before seals and stored reconstructions
        if "reconstruction" in kind:
            pytest.skip("legacy cell folders hold no stored reconstruction")
        for name in ("seal.json", "reconstruction.npz", "attack.json"):
            for path in run_dir.glob(f"cells/*/{name}"):
                path.unlink()
    cell = _cell(run_dir, 2)
    DAMAGE[kind](cell, _cell(run_dir, 1))
    return cell


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True], ids=["sealed", "legacy"])
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_cell_is_recomputed_on_resume(tmp_path: Path, reference: Path, kind: str, legacy: bool) -> None:
    run_dir = _copy_run(reference, tmp_path)
    cell = _damage(run_dir, kind, legacy=legacy)
    with pytest.warns(LeakbenchWarning, match=f"cell {cell.name} .* is damaged .*recomputing it"):
        sweep = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res")
    assert (sweep.ran, sweep.skipped) == (1, 3)
    assert sweep.cells["cell_id"].is_unique and len(sweep.cells) == 4
    assert records_difference(run_dir, reference) == ""
    assert sorted(p.name for p in cell.iterdir()) == CELL_FILES
    assert not [p for p in (run_dir / "cells").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_report_leaves_out_a_damaged_cell(tmp_path: Path, reference: Path, kind: str) -> None:
    run_dir = _copy_run(reference, tmp_path)
    cell = _damage(run_dir, kind)
    with pytest.warns(LeakbenchWarning, match=f"cell {cell.name} .* is damaged"):
        text = write_report(run_dir, tmp_path / "rep").read_text()
    assert f"3 of 4 planned cells finished (1 damaged, left out: {cell.name})" in text
    table = text.split("## All cells")[1].split("## ")[0]
    assert cell.name not in table and sum(line.startswith("| spear |") for line in table.splitlines()) == 3


@pytest.mark.slow
def test_legacy_cells_without_seals_are_read_and_not_rerun(tmp_path: Path, reference: Path) -> None:
    run_dir = _copy_run(reference, tmp_path)
    for name in ("seal.json", "reconstruction.npz", "attack.json"):  # as stored before seals and reconstructions
        for path in run_dir.glob(f"cells/*/{name}"):
            path.unlink()
    sweep = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res")
    assert (sweep.ran, sweep.skipped) == (0, 4)
    assert records_difference(run_dir, reference) == ""


@pytest.mark.slow
def test_a_sealed_folder_that_lost_its_seal_is_damaged(tmp_path: Path, reference: Path) -> None:
    run_dir = _copy_run(reference, tmp_path)
    (_cell(run_dir, 2) / "seal.json").unlink()
    with pytest.warns(LeakbenchWarning, match="seal.json is missing"):
        sweep = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res")
    assert (sweep.ran, sweep.skipped) == (1, 3)


@pytest.mark.slow
def test_report_cli_on_damaged_cells_warns_one_line_each(tmp_path: Path, reference: Path) -> None:
    run_dir = _copy_run(reference, tmp_path)
    damaged = [_damage(run_dir, "truncated_records").name]
    DAMAGE["truncated_records"](_cell(run_dir, 1, layer=2), _cell(run_dir, 1))
    damaged.append(_cell(run_dir, 1, layer=2).name)
    done = run_cli_many({"report": (["report", str(run_dir), "--reports", str(tmp_path / "rep")], tmp_path)})
    proc = done["report"]
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(ln.startswith("leakbench: warning: cell ") for ln in lines), proc.stderr
    assert sorted(ln.split()[3] for ln in lines) == sorted(damaged)
    assert proc.stdout.startswith("wrote ")


# --------------------------------------------------------------------------- 4: duplicate cells


@pytest.mark.parametrize("line,key", [
    ('attacks = ["spear", "spear"]', "attacks"),
    ("batch_sizes = [1, 2, 1]", "batch_sizes"),
    ("seeds = [0, 0]", "seeds"),
    ("layers = [1, 1]", "layers"),
    ('datasets = ["embedded", "embedded"]', "datasets"),
    ('dp = ["none", "none"]', "dp"),
    ("dp = [{sigma = 0.1, clip = 1.0}, {sigma = 0.1, clip = 1.0, delta = 1e-5}]", "dp"),
    ('fedavg = [{epochs = 1, minibatch = 0, lr = 0.1}, {epochs = 1, minibatch = 0, lr = 0.1}]', "fedavg"),
])
def test_duplicate_axis_values_are_refused(tmp_path: Path, line: str, key: str) -> None:
    replaced = "dataset" if key == "datasets" else key.split(" ")[0]
    text = "".join(ln + "\n" for ln in SUITE.splitlines() if ln.split(" ")[0] != replaced) + line + "\n"
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(ConfigError, match=f"key '{key}' lists .* twice"):
        load_suite(tmp_path / "s.toml")


@pytest.mark.slow
def test_run_with_duplicate_attacks_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "suite.toml").write_text(SUITE.replace('attacks = ["spear"]', 'attacks = ["spear", "spear"]'))
    done = run_cli_many({"run": (["run", str(tmp_path / "suite.toml"), "--out", str(tmp_path / "res"),
                                  "--reports", str(tmp_path / "rep")], tmp_path)})
    _bad_input(done["run"], "'attacks' lists 'spear' twice")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.toml"]


@pytest.mark.slow
def test_another_suite_of_the_same_name_is_refused(tmp_path: Path, reference: Path) -> None:
    """A different suite named like the stored one, into the same --out: refused before anything runs or is
    written (its cells would leave the stored ones in no table)."""
    run_dir = _copy_run(reference, tmp_path)
    (tmp_path / "other.toml").write_text(SUITE.replace("batch_sizes = [1, 2]", "batch_sizes = [2]"))
    before = _tree(run_dir)
    with pytest.raises(ConfigError, match="holds 2 finished cells that suite 'tiny' does not plan"):
        run_sweep(str(tmp_path / "other.toml"), out=tmp_path / "res")
    assert _tree(run_dir) == before


def test_a_suite_run_into_a_folder_another_run_is_writing_is_refused(tmp_path: Path) -> None:
    """Two suites of one name run at the same time into one --out (issue 41: both exited 0 and the one
    that finished last left the other's cells in no table): the second is refused in one line while
    the first holds the run folder, before it writes anything; the first's empty folder is removed
    again when it stops before writing."""
    (tmp_path / "a.toml").write_text(SUITE)
    (tmp_path / "b.toml").write_text(SUITE.replace("batch_sizes = [1, 2]", "batch_sizes = [3]"))
    refused: list[str] = []

    def second_run(suite: object) -> None:  # the first sweep has passed its checks and is about to run
        with pytest.raises(ConfigError) as error:
            run_sweep(str(tmp_path / "b.toml"), out=tmp_path / "res")
        refused.append(str(error.value))
        raise KeyboardInterrupt  # stop the first one here too: nothing runs

    with pytest.raises(KeyboardInterrupt):
        run_sweep(str(tmp_path / "a.toml"), out=tmp_path / "res", before_run=second_run)
    assert refused and "is being written by another leakbench command" in refused[0] and "\n" not in refused[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.toml", "b.toml"]


@pytest.mark.slow
def test_report_of_a_run_that_planned_a_cell_twice(tmp_path: Path, reference: Path) -> None:
    """Run folders stored before duplicates were refused list a cell twice in their manifest: reported once."""
    run_dir = _copy_run(reference, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "cells": manifest["cells"] * 2}))
    text = write_report(run_dir, tmp_path / "rep").read_text()
    assert "4 of 4 planned cells finished;" in text
    table = text.split("## All cells")[1].split("## ")[0]
    assert sum(line.startswith("| spear |") for line in table.splitlines()) == 4


# --------------------------------------------------------------------------- 9: Ctrl-C with a process pool


@pytest.mark.slow
def test_pool_interrupt_stops_at_once(tmp_path: Path) -> None:
    """Ctrl-C (here: raised as the first cell reports) cancels what is queued and ends the running workers."""
    from pool_helpers import slow_task

    tasks = [Task(spec=0.2 if i == 0 else 6.0, out=tmp_path / str(i), selection=(), grid_seed=0) for i in range(6)]

    raised: list[float] = []

    def interrupt(summary: dict) -> None:
        raised.append(time.monotonic())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        executors._pool(tasks, interrupt, 2, work=slow_task)
    assert time.monotonic() - raised[0] < 3.0  # task 1 had about 6 s left: it was not waited for
    time.sleep(1.0)  # a queued task would have started by now
    started = sorted(p.parent.name for p in tmp_path.glob("*/started"))
    finished = sorted(p.parent.name for p in tmp_path.glob("*/finished"))
    assert started == ["0", "1"] and finished == ["0"]


@pytest.mark.slow
def test_a_pool_worker_killed_from_outside_costs_its_cells_a_rerun_not_the_run(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The OOM killer ends a pool worker mid-cell (CI stop 51: BrokenProcessPool, the run's traceback, exit 1):
    the unfinished cells run again in a fresh pool and each finished cell is reported once; a worker that keeps
    dying still ends the run (`POOL_RESTARTS`)."""
    from pool_helpers import killed_always_task, killed_once_task

    tasks = [Task(spec=-0.5 if i == 1 else 0.5, out=tmp_path / str(i), selection=(), grid_seed=0) for i in range(4)]
    reported: list[str] = []
    executors._pool(tasks, lambda summary: reported.append(summary["name"]), 2, work=killed_once_task)
    assert sorted(reported) == ["0", "1", "2", "3"]
    assert sorted(p.parent.name for p in tmp_path.glob("*/finished")) == ["0", "1", "2", "3"]
    assert "a pool worker died" in capfd.readouterr().err

    with pytest.raises(BrokenProcessPool):
        executors._pool([Task(spec=0, out=tmp_path / "always", selection=(), grid_seed=0)], lambda summary: None, 1,
                        work=killed_always_task)
    assert capfd.readouterr().err.count("a pool worker died") == executors.POOL_RESTARTS


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stop_signals_end_the_pool_like_ctrl_c(tmp_path: Path, sig: int) -> None:
    """SIGTERM / SIGHUP to the sweep's process (`kill PID`) raise `Terminated`: the pool's workers are ended at
    once (none left, no cell finished after it), and the previous handler is back afterwards."""
    from pool_helpers import slow_task

    tasks = [Task(spec=8.0, out=tmp_path / str(i), selection=(), grid_seed=0) for i in range(4)]
    before = {child.pid for child in multiprocessing.active_children()}  # another test's, ended or not
    inherited = signal.signal(sig, signal.SIG_DFL)  # under `nohup` SIGHUP is ignored, and stays so by design
    try:
        timer = threading.Timer(3.0, os.kill, (os.getpid(), sig))
        timer.start()
        with pytest.raises(interrupts.Terminated) as stopped, interrupts.stop_signals_as_interrupt():
            executors._pool(tasks, lambda summary: None, 2, work=slow_task)
        assert stopped.value.signum == sig
        deadline = time.monotonic() + 5.0  # a worker killed while it was still starting is reaped a moment later
        while [c for c in multiprocessing.active_children() if c.pid not in before] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [child for child in multiprocessing.active_children() if child.pid not in before] == []
        assert not list(tmp_path.glob("*/finished"))
        assert signal.getsignal(sig) is signal.SIG_DFL
    finally:
        signal.signal(sig, inherited)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_the_earlier_report(tmp_path: Path, reference: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`report` running out of space while it writes: exit 2, one `leakbench: error:` line, the earlier report
    whole (neither page replaced, no staging folder left). `fault_check.py` does it on a real full tmpfs."""
    import errno

    from leakbench import cli
    from leakbench.reporting import report as report_module

    reports = tmp_path / "rep"
    write_report(reference, reports)
    before = _tree(reports)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(reports / "tiny.html"))

    monkeypatch.setattr(report_module, "html_document", full)
    capsys.readouterr()
    assert cli.main(["report", str(reference), "--reports", str(reports)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakbench: error: No space left on device writing"), err
    assert _tree(reports) == before and not [p for p in reports.iterdir() if p.name.startswith(".")]
