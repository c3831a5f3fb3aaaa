"""Issue 41: the doors left in the attack worker's sandbox, each tried by a plugin attack
(`tests/cheat_doors.py`) through libc, so that the kernel alone answers; the kernel's own errno is
asserted. The terminal (TIOCSTI / TIOCLINUX with high bits in the command, under a pseudo-terminal
too), /proc of the fork server and of the harness, other processes' resource limits, priorities
and CPUs, the death signal, System V IPC and POSIX message queues, a symbolic link in a plugin folder,
and processes left behind by `kill -9` of a run. Each test fails on the code before issue 41."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import random
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cheat_doors  # tests/ is on the path: the worker imports it too
import pytest
from cheat_doors import HIGH_BITS, IOCTLS, DoorsAttack
from conftest import REPO_ROOT, cli_env

from leakbench.api import scoped_attack
from leakbench.cell.spec import CellSpec
from leakbench.harness import isolation, sandbox
from leakbench.harness.cell import run_cell
from leakbench.harness.sandbox import FULL, level

sandboxed = pytest.mark.skipif(level()[0] != FULL, reason=f"this kernel or install cannot sandbox: {level()[1]}")
TESTS = Path(__file__).resolve().parent
EPERM, EACCES = errno.EPERM, errno.EACCES


@pytest.fixture(scope="module")
def doors() -> Iterator[None]:
    """The doors attack registered (and importable by the worker) for this module's tests."""
    with scoped_attack(DoorsAttack):
        yield


def _stats(route: str, target: str = "") -> dict[str, Any]:
    """The stats of the doors attack's `route` run in a sandboxed attack worker (errno per try)."""
    s = run_cell(CellSpec(attack="doors", dataset="embedded", batch_size=1, width=16, depth=3,
                          hyperparameters={"route": route, "target": target})).summary
    assert s["status"] == "ok" and s["isolation"] == FULL, s
    stats: dict[str, Any] = s["attack_stats"]
    return stats


def _unused_key() -> int:
    """A System V key / name suffix no one uses."""
    return random.randrange(1 << 20, 1 << 30)


# --------------------------------------------------------------------------- the relay of the worker's output


def test_the_relayed_output_keeps_text_newlines_and_carriage_returns_and_nothing_that_drives_a_terminal() -> None:
    text = "bar 1/3\r bar 2/3\x1b[2J\x1b[1;31mred\x1b[0m\x1b]0;title\x07\tend\x9b6n\x00\x7f\n"
    assert isolation.printable(text) == "bar 1/3\r bar 2/3red]0;title\tend6n\n"


def test_the_relay_is_bounded_and_drains_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    read, write = os.pipe()
    payload = ("é\x1b[A" * 40_000).encode()  # more than a pipe holds: the relay must read as it goes
    import threading

    relay = threading.Thread(target=isolation.relay_output, args=(read, 1000))
    relay.start()
    os.write(write, payload)
    os.close(write)
    relay.join(timeout=30)
    assert not relay.is_alive()
    assert shown.getvalue() == "é" * 1000 + "\n[the attack's output is cut here: over 1000 characters]\n"


# --------------------------------------------------------------------------- the terminal


@pytest.fixture(scope="module")
def tty_doors(doors: None) -> dict[str, Any]:
    return _stats("tty")


@pytest.mark.slow
@sandboxed
@pytest.mark.parametrize("high", list(HIGH_BITS))
@pytest.mark.parametrize("ioctl", list(IOCTLS))
@pytest.mark.parametrize("fd", ["0", "1", "2"])
def test_a_filtered_terminal_ioctl_is_refused_whatever_its_high_bits(tty_doors: dict[str, Any], ioctl: str,
                                                                     high: str, fd: str) -> None:
    """seccomp answers EPERM before the kernel looks at the descriptor (/dev/null or a pipe now: it
    would say ENOTTY), with the command's high 32 bits clear or set (the kernel reads the low 32)."""
    assert tty_doors[f"{ioctl}{high} on {fd}"] == EPERM, tty_doors


def _pty_session() -> None:
    """In the child: the pseudo-terminal on fd 0 becomes its controlling terminal (a shell's)."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _drain(fd: int, until: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """What arrives on the master `fd` until the process `until` has ended and nothing more comes."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif until.poll() is not None:
            break
    return out


@pytest.mark.slow
@sandboxed
def test_an_attack_types_nothing_into_the_users_terminal(tmp_path: Path) -> None:
    """`leakbench attack` run in a pseudo-terminal that is its controlling terminal, as in a shell: the
    attack pushes a command with TIOCSTI (high bits or not) on fds 0, 1, 2 and /dev/tty; nothing
    arrives on the terminal's input (read from the slave) or its echo (read from the master), and
    the attack's own output still shows, without its escape sequences."""
    master, slave = os.openpty()
    typed = f"echo typed-{uuid.uuid4().hex[:8]}"
    env = {**cli_env(), "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(TESTS)])}
    proc = subprocess.Popen([sys.executable, "-m", "leakbench", "attack", "--plugin", "doors_plugin",
                             "--attack", "doors", "--batch-size", "1", "--width", "16", "--depth", "3",
                             "--param", "route=tty", "--param", f"target={typed}", "--json"],
                            stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=env, start_new_session=True,
                            preexec_fn=_pty_session)
    try:
        shown = _drain(master, proc, 300)
        assert proc.wait(timeout=60) == 0, shown[-3000:]
    finally:
        proc.kill()
    os.set_blocking(slave, False)
    try:
        pending = os.read(slave, 1 << 16)
    except BlockingIOError:  # nothing in the terminal's input queue
        pending = b""
    os.close(slave)
    os.close(master)
    summary_line = next(line for line in shown.splitlines() if line.startswith(b"{"))  # names the text typed
    echoed = shown.replace(summary_line, b"")
    assert typed.encode() not in echoed and typed.encode() not in pending, (echoed[-2000:], pending)
    assert b"doors: progress ]0;title0m done\r" in echoed and b"\x1b" not in echoed, echoed[-2000:]
    import json

    summary = json.loads(summary_line)
    stats = summary["attack_stats"]
    assert {stats[f"TIOCSTI{h} on {fd}"] for h in HIGH_BITS for fd in "012"} == {EPERM}, stats
    assert stats["open /dev/tty"] == EACCES and stats["terminals"] == 0, stats


# --------------------------------------------------------------------------- /proc, limits, priorities, IPC


@pytest.mark.slow
@sandboxed
def test_proc_holds_nothing_of_the_fork_server_or_the_harness(doors: None) -> None:
    stats = _stats("proc", str(os.getpid()))
    assert stats["fork server"] == stats["harness"] == EACCES, stats  # Landlock
    assert stats["own"] == 0, stats


@pytest.mark.slow
@sandboxed
def test_the_limits_of_the_fork_server_and_the_harness_cannot_be_read_or_set(doors: None) -> None:
    stats = _stats("prlimit", str(os.getpid()))
    assert {stats[k] for k in ("fork server read", "fork server set", "harness read", "harness set")} == {EPERM}, stats


@pytest.mark.slow
@sandboxed
def test_other_processes_priority_cpus_and_the_death_signal_cannot_be_changed(doors: None) -> None:
    stats = _stats("others", str(os.getpid()))
    assert {stats[k] for k in ("setpriority", "setpriority group", "sched_setaffinity", "ioprio_set",
                               "PR_SET_PDEATHSIG", "PR_SET_PDEATHSIG+2^32")} == {EPERM}, stats


@pytest.mark.slow
@sandboxed
def test_system_v_ipc_and_posix_message_queues_are_refused(doors: None) -> None:
    """Looked up by an unused key: ENOENT where allowed (nothing is created), EPERM from seccomp."""
    stats = _stats("ipc", str(_unused_key()))
    assert {stats[k] for k in ("shmget", "msgget", "semget", "mq_open")} == {EPERM}, stats


def _remove_segment(key: int) -> None:
    """Remove the System V segment `key` if a cell (of the code before issue 41) left one."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(key, 0, 0)
    if shmid >= 0:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


@pytest.mark.slow
@sandboxed
def test_two_cells_cannot_relay_an_answer_through_shared_memory(doors: None) -> None:
    key = _unused_key()
    try:
        wrote, read = _stats("shm_write", str(key)), _stats("shm_read", str(key))
    finally:
        _remove_segment(key)
    assert wrote["shmget"] == read["shmget"] == EPERM and read["relayed"] == 0, (wrote, read)


# --------------------------------------------------------------------------- plugin folders


def _plugin_folder(root: Path) -> tuple[Path, Path]:
    """A plugin folder whose `*.dist-info` is a symbolic link to a data folder; (folder, the data
    file as seen through the link)."""
    data = root / "data"
    data.mkdir()
    (data / "secret.txt").write_text("the batch")
    folder = root / "plugins"
    (folder / "plugin_pkg").mkdir(parents=True)
    (folder / "plugin_pkg" / "__init__.py").write_text("")
    (folder / "plugin_pkg" / "weights.bin").write_bytes(b"package data")
    (folder / "evil-1.0.dist-info").symlink_to(data, target_is_directory=True)
    (folder / "evil.py").symlink_to(data / "secret.txt")
    return folder, folder / "evil-1.0.dist-info" / "secret.txt"


def test_symbolic_links_out_of_a_plugin_folder_open_nothing(tmp_path: Path) -> None:
    folder, _ = _plugin_folder(tmp_path)
    assert sorted(Path(p).name for p in sandbox._module_entries(str(folder))) == ["plugin_pkg"]
    rules = sandbox.read_rules(sandbox.policy([str(folder)], [], str(tmp_path / "scratch")))
    data = str((tmp_path / "data").resolve())
    assert not any(sandbox._within(path, data) for path, _ in rules), [p for p, _ in rules if "data" in p]
    assert any(path == str((folder / "plugin_pkg").resolve()) for path, _ in rules)  # package data: readable


@pytest.mark.slow
@sandboxed
def test_a_file_behind_a_plugin_folders_symbolic_link_cannot_be_read(doors: None, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder, secret = _plugin_folder(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    assert _stats("beside", str(secret))["read"] == EACCES
    assert _stats("beside", str(folder / "plugin_pkg" / "weights.bin"))["read"] == 0  # its own package data


# --------------------------------------------------------------------------- no process outlives a killed run


MARKER = "LEAKBENCH_DOORS_MARKER"
"""An environment variable set for a harness under test: its descendants inherit it."""


def _marked(marker: str) -> list[int]:
    """The live processes whose environment carries `marker` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _lingering(pids: list[int]) -> list[int]:
    """Those of `pids` that are the linger attack (cheat_doors.LINGER_NAME)."""
    named = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_bytes().strip() == cheat_doors.LINGER_NAME:
                named.append(pid)
        except OSError:
            continue
    return named


SUITE = """\
name = "linger"
dataset = "embedded"
attacks = ["doors"]
batch_sizes = [1]
seeds = [0, 1]
width = 16
depth = 3

[hyperparameters.doors]
route = "linger"
"""


def _kill_during_linger(tmp_path: Path, args: list[str], attacks: int) -> list[int]:
    """Start `leakbench ARGS` (the doors plugin loaded), wait until `attacks` linger attacks run (each
    cleared its death signal where it could), kill -9 the harness; what is left of its descendants
    5 s later (all of them are killed before returning)."""
    marker = f"{MARKER}={uuid.uuid4().hex}"
    env = {**cli_env(), "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(TESTS)]), MARKER: marker.split("=")[1]}
    (tmp_path / "suite.toml").write_text(SUITE)
    log = (tmp_path / "stderr.txt").open("wb")
    harness = subprocess.Popen([sys.executable, "-m", "leakbench", *args, "--plugin", "doors_plugin"], cwd=tmp_path,
                               env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 300
        while len(_lingering(_marked(marker))) < attacks:
            assert harness.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
            assert time.monotonic() < deadline, "the linger attacks never started"
            time.sleep(0.5)
        time.sleep(1)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        time.sleep(5)
        return _marked(marker)
    finally:
        harness.kill()
        for pid in _marked(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()


@pytest.mark.slow
@sandboxed
def test_kill_9_of_run_leaves_no_process(tmp_path: Path) -> None:
    assert _kill_during_linger(tmp_path, ["run", "suite.toml", "--out", "res", "--reports", "rep"], 1) == []


@pytest.mark.slow
@sandboxed
def test_kill_9_of_run_with_two_jobs_leaves_no_process(tmp_path: Path) -> None:
    left = _kill_during_linger(tmp_path, ["run", "suite.toml", "--out", "res", "--reports", "rep", "--jobs", "2"], 2)
    assert left == []


@pytest.mark.slow
@sandboxed
def test_kill_9_of_attack_leaves_no_process(tmp_path: Path) -> None:
    args = ["attack", "--attack", "doors", "--batch-size", "1", "--width", "16", "--depth", "3", "--param",
            "route=linger"]
    assert _kill_during_linger(tmp_path, args, 1) == []
