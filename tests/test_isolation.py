"""The attack worker (issue 14): its guard's rules, a worker that dies, and one worker for many cells."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from leakbench.api import scoped_attack
from leakbench.attacks import Attack, Reconstruction
from leakbench.harness.cell import CellSpec, run_cell
from leakbench.harness.isolation import Guard, shared_worker


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


def test_a_worker_that_dies_gives_a_failed_cell_and_the_next_cell_runs(scoped: None) -> None:
    s = run_cell(CellSpec(attack="test-exit", **SMALL)).summary
    assert s["status"] == "failed" and "attack process ended (exit code 3)" in s["reason"], s["reason"]
    assert run_cell(CellSpec(attack="test-pid", **SMALL)).summary["status"] == "ok"


def test_one_worker_serves_every_cell_and_is_not_this_process(scoped: None) -> None:
    pids = {run_cell(CellSpec(attack="test-pid", seed=s, **SMALL)).summary["attack_stats"]["pid"] for s in range(3)}
    assert len(pids) == 1 and os.getpid() not in pids
    assert shared_worker()._proc is not None and shared_worker()._proc.pid in pids
