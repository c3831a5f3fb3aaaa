"""The attack worker (issues 14, 22): its guard's rules, a worker that dies or is killed, a fresh
worker for every cell, and replies that are plain data, checked."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from leakbench.api import scoped_attack
from leakbench.attacks import Attack, Reconstruction
from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell
from leakbench.harness.isolation import Guard, WorkerDied, check_reply
from leakbench.harness.sandbox import isolation_level


@pytest.fixture
def guard(tmp_path: Path) -> Guard:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.png").write_bytes(b"")
    return Guard([str(tmp_path / "data")])


@pytest.mark.parametrize("event, args", [
    ("open", ("{root}/data/x.png", "r", 0)),
    ("open", ("{root}/data", "r", os.O_RDONLY)),  # the root itself (a directory descriptor)
    ("open", ("{root}", "r", os.O_RDONLY)),  # a directory above it: dir_fd would reach the root
    ("os.listdir", ("{root}/data",)),
    ("os.scandir", ("{root}/data",)),
    ("os.link", ("{root}/data/x.png", "/tmp/y")),
    ("open", ("{root}/link.png", "r", 0)),  # a symbolic link into the root
    ("open", (f"/proc/{os.getppid()}/environ", "r", 0)),
    ("subprocess.Popen", ("cat", ["cat"], None, None)),
    ("os.system", (b"cat x",)),
])
def test_guard_refuses(guard: Guard, tmp_path: Path, event: str, args: tuple) -> None:
    (tmp_path / "link.png").symlink_to(tmp_path / "data" / "x.png")
    args = tuple(a.format(root=tmp_path) if isinstance(a, str) else a for a in args)
    with pytest.raises(PermissionError):
        guard(event, args)


@pytest.mark.parametrize("event, args", [
    ("open", ("{root}/other.txt", "r", 0)),
    ("os.listdir", ("{root}",)),  # imports list the folders above a root
    ("open", ("{root}", None, getattr(os, "O_TMPFILE", 0) | os.O_RDWR)),  # tempfile's anonymous files
    ("open", ("/proc/self/status", "r", 0)),
    ("open", (3, "r", 0)),  # a descriptor: opened before
])
def test_guard_allows(guard: Guard, tmp_path: Path, event: str, args: tuple) -> None:
    guard(event, tuple(a.format(root=tmp_path) if isinstance(a, str) else a for a in args))


@dataclass(frozen=True)
class ExitConfig:
    """code: the exit code the attack ends its process with."""

    code: int = 3


class ExitAttack(Attack):
    name, description, Config = "test-exit", "ends its own process (test)", ExitConfig

    def reconstruct(self, update, *, seed):
        os._exit(self.config.code)


class PidAttack(Attack):
    name, description, Config = "test-pid", "reports its process id (test)", ExitConfig

    def reconstruct(self, update, *, seed):
        shape = (update.batch_size, *update.model.input_shape)
        return Reconstruction("ok", "image", images=torch.zeros(shape), stats={"pid": os.getpid()})


@pytest.fixture
def scoped() -> Iterator[None]:
    with scoped_attack(ExitAttack), scoped_attack(PidAttack):
        yield


SMALL = {"dataset": "embedded", "batch_size": 2, "width": 16, "depth": 3}


@pytest.mark.slow
def test_a_worker_that_dies_gives_a_failed_cell_and_the_next_cell_runs(scoped: None) -> None:
    s = run_cell(CellSpec(attack="test-exit", **SMALL)).summary
    assert s["status"] == "failed", s["reason"]
    assert "attack process ended before it answered (exit code 3)" in s["reason"], s["reason"]
    assert s["failure"] == "error"
    assert run_cell(CellSpec(attack="test-pid", **SMALL)).summary["status"] == "ok"


@pytest.mark.slow
def test_every_cell_gets_a_fresh_worker_that_is_not_this_process(scoped: None) -> None:
    pids = [run_cell(CellSpec(attack="test-pid", seed=s, **SMALL)).summary["attack_stats"]["pid"] for s in range(3)]
    assert len(set(pids)) == 3 and os.getpid() not in pids


@pytest.mark.slow
def test_records_say_what_isolated_the_attack(scoped: None) -> None:
    result = run_cell(CellSpec(attack="test-pid", **SMALL))
    assert result.summary["isolation"] == isolation_level()
    assert set(result.records["isolation"]) == {isolation_level()}
    assert run_cell(CellSpec(attack="test-pid", **SMALL), isolate=False).summary["isolation"].startswith("not isolated")


class KilledAttack(Attack):
    """Killed by SIGKILL, as the OOM killer would kill it."""

    name, description, Config = "test-killed", "killed by the OS (test)", ExitConfig

    def reconstruct(self, update, *, seed):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_worker_killed_from_outside_is_retried_not_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker is "killed" (the real kill is the next test's); a fresh one answers."""
    from leakbench.harness import isolation

    real, tries = isolation.AttackWorker.run, []

    def killed_once(self, job, update, hidden, limit=None):
        tries.append(self.pid)
        if len(tries) == 1:
            self.stop(kill=True)
            raise WorkerDied("the attack process ended before it answered (killed by SIGKILL)", -9)
        return real(self, job, update, hidden, limit)

    monkeypatch.setattr(isolation.AttackWorker, "run", killed_once)
    with scoped_attack(PidAttack):
        s = run_cell(CellSpec(attack="test-pid", **SMALL)).summary
    assert s["status"] == "ok" and len(set(tries)) == 2 and s["attack_stats"]["pid"] == tries[1]


@pytest.mark.slow
def test_a_worker_that_cannot_sandbox_itself_stops_the_run_and_stores_nothing(tmp_path: Path) -> None:
    """The worker's first message says whether its sandbox holds (sent before any attack code runs); a
    worker that could not apply it (here: its scratch folder is gone) is the machine's fault, not the
    attack's: SandboxFailed (one line), never a failed cell."""
    from leakbench.harness import isolation
    from leakbench.harness.cell import attack_job
    from leakbench.harness.victim import prepare

    spec = CellSpec(attack="test-pid", **SMALL)
    with scoped_attack(PidAttack):
        _, _, update = prepare(spec)
        worker = isolation.workers().take()
        os.rmdir(worker.scratch)
        worker.scratch = str(tmp_path / "gone")
        with pytest.raises(isolation.SandboxFailed, match=r"the sandbox could not be applied: .*No such file"):
            worker.run(attack_job(spec), update, [])


@pytest.mark.slow
def test_a_worker_killed_every_time_is_a_failed_cell_not_a_stop_of_the_run() -> None:
    """An attack that kills itself (or is killed by the OOM killer each try) fails its own cell, three
    tries later; it cannot stop the run (issue 41: nothing an attack does stops the suite)."""
    with scoped_attack(KilledAttack):
        s = run_cell(CellSpec(attack="test-killed", **SMALL)).summary
    assert s["status"] == "failed" and "SIGKILL" in s["reason"] and "3 times" in s["reason"], s["reason"]


def _reply(**arrays: np.ndarray) -> tuple[dict, bytes]:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    meta = {"status": "ok", "reason": "", "space": "image", "layer": None, "stats": {}, "seconds": 0.1,
            "hyperparameters": {}, "isolation": ""}
    return meta, buffer.getvalue()


class _Update:
    class model:  # lower case: the attributes the check reads
        input_shape = (3, 4, 4)

        @staticmethod
        def parameters() -> Iterator[torch.Tensor]:
            return iter([torch.zeros(8, 48)])


@pytest.mark.parametrize("arrays, why", [
    ({"images": np.full((2, 3, 4, 4), 0.5, np.float64)}, "dtype"),
    ({"images": np.full((2, 3, 5, 4), 0.5, np.float32)}, "the model takes"),
    ({"images": np.full((2, 3, 4, 4), 2.0, np.float32)}, "outside"),
    ({"images": np.full((2, 3, 4, 4), np.nan, np.float32)}, "not finite"),
    ({"features": np.zeros((2, 3, 1), np.float32)}, "shape"),
    ({"images": np.array([object()], dtype=object)}, "dtype object"),  # never unpickled
])
def test_a_malformed_reply_is_refused(arrays: dict, why: str) -> None:
    meta, npz = _reply(**arrays)
    out = check_reply(meta, npz, _Update(), 1)
    assert out.reconstruction.status == "failed" and "reply was refused" in out.reconstruction.reason
    assert why in out.reconstruction.reason, out.reconstruction.reason


def test_a_well_formed_reply_is_read_and_metadata_is_checked() -> None:
    meta, npz = _reply(images=np.full((2, 3, 4, 4), 0.5, np.float32))
    assert check_reply(meta, npz, _Update(), 1).reconstruction.status == "ok"
    assert check_reply({**meta, "seconds": float("nan")}, npz, _Update(), 1).reconstruction.status == "failed"
    assert check_reply({**meta, "extra": 1}, npz, _Update(), 1).reconstruction.status == "failed"


def _dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_scratch_folders_of_ended_harnesses_are_swept_and_nothing_else(tmp_path: Path) -> None:
    from leakbench.harness.isolation import SCRATCH_PREFIX, sweep_scratch

    dead = _dead_pid()
    folders = {f"{SCRATCH_PREFIX}{dead}-a1": True, f"{SCRATCH_PREFIX}{os.getpid()}-b2": False,
               f"{SCRATCH_PREFIX}x7k2q9zz": True, f"{SCRATCH_PREFIX}old": False, f"other-{dead}-c3": False}
    for name in folders:
        (tmp_path / name).mkdir()
    for name in (f"{SCRATCH_PREFIX}{dead}-a1", f"{SCRATCH_PREFIX}old", f"other-{dead}-c3"):
        (tmp_path / name / "file").write_text("x")
    kept = tmp_path / "kept"
    (kept / "inside").mkdir(parents=True)
    (tmp_path / f"{SCRATCH_PREFIX}{dead}-link").symlink_to(kept)
    assert sweep_scratch(str(tmp_path)) == 2
    assert {p.name for p in tmp_path.iterdir()} == {n for n, gone in folders.items() if not gone} | {
        "kept", f"{SCRATCH_PREFIX}{dead}-link"}
    assert (kept / "inside").is_dir()


def test_a_sweep_passes_over_folders_another_sweep_removed_first(tmp_path: Path, monkeypatch) -> None:
    """A pool's workers start together and each sweeps the temp folder: a folder listed by one and removed by
    the other before it is looked at must be passed over. It used to raise FileNotFoundError in the pool's
    initializer: a traceback on stderr and a broken pool (issue 46's red CI, `interrupt_jobs_2`)."""
    import contextlib

    from leakbench.harness import isolation
    from leakbench.harness.isolation import SCRATCH_PREFIX, sweep_scratch

    dead = _dead_pid()
    names = [f"{SCRATCH_PREFIX}{dead}-a1", f"{SCRATCH_PREFIX}{dead}-b2", f"{SCRATCH_PREFIX}{dead}-c3"]
    for name in names:
        (tmp_path / name).mkdir()
    with os.scandir(tmp_path) as listing:
        listed = list(listing)  # the first sweep's listing, taken before the other sweep ran
    sweep_scratch(str(tmp_path))  # the other sweep removes everything first
    monkeypatch.setattr(isolation.os, "scandir", lambda root: contextlib.nullcontext(iter(listed)))
    assert sweep_scratch(str(tmp_path)) == 0


@pytest.mark.parametrize(("owner", "kept"), [("\u00b2", True), ("\u0663", True), ("9" * 30, False)])
def test_a_scratch_name_whose_owner_is_no_pid_does_not_stop_the_sweep(tmp_path: Path, owner: str, kept: bool) -> None:
    """Names a user may have made: a Unicode digit (`str.isdigit` is true, `int` refuses "²") is an old-style name
    (kept unless empty); a number no pid can be (`os.kill` overflows) names no running harness (removed)."""
    from leakbench.harness.isolation import SCRATCH_PREFIX, sweep_scratch

    folder = tmp_path / f"{SCRATCH_PREFIX}{owner}-x1"
    (folder / "inside").mkdir(parents=True)
    assert sweep_scratch(str(tmp_path)) == (0 if kept else 1)
    assert folder.exists() == kept


@pytest.mark.slow
def test_a_killed_harness_leaves_a_scratch_folder_the_next_one_removes(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    code = ("import time; from leakbench.harness.isolation import workers; "
            "print(workers().take().scratch, flush=True); time.sleep(120)")
    from conftest import cli_env

    env = {**cli_env(), "TMPDIR": str(tmp_path)}
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert harness.stdout is not None
    scratch = Path(harness.stdout.readline().strip())
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    assert scratch.parent == tmp_path and scratch.is_dir()
    from leakbench.harness.isolation import sweep_scratch

    assert sweep_scratch(str(tmp_path)) == 1 and not scratch.exists()
