"""The attack runs in a sandboxed process of its own, a fresh one per cell, that never held a batch.

The harness process loads the data, builds the victim and the client's update, and scores. Each
cell's attack runs in a new attack worker (`AttackWorker`), a Python process started as
`python -I -S` (no `sitecustomize`, no `.pth` file, no PYTHONPATH runs in it): it imports torch and
leakbench's own modules, then waits. The harness keeps one such worker started ahead (`Workers`), so
its start-up overlaps the previous cell. For a cell, the worker

1. leaves the harness's session (`setsid`: no controlling terminal), takes /dev/null as stdin and a
   pipe the harness relays (`relay_output`, control characters removed) as stdout and stderr,
   receives the cell's policy as JSON (the data locations and output folders to hide, its scratch
   folder) and sandboxes itself (`leakbench.harness.sandbox`: Landlock + seccomp, where the kernel
   has them), then installs the audit-hook `Guard` as a second layer;
2. only then receives the `AttackJob` and the `ClientUpdate` (pickled by the harness), loads the
   job's plugins and runs the attack: no plugin or attack code ever runs unsandboxed;
3. answers with plain data only — JSON metadata and an `.npz`, read within hard limits before
   anything is parsed or allocated (`leakbench.harness.replies`), checked for range (`check_reply`)
   — and exits. The harness kills it when it has not answered within the cell's time limit.

Nothing an attack leaves behind reaches another cell: its process, memory and scratch folder end
with the cell. A worker that dies without answering (killed by the OS, out of memory) is a fault,
not a result: `run` raises `WorkerDied`, which the harness retries with a fresh worker.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import math
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakbench.core.errors import LeakbenchError

if TYPE_CHECKING:  # imported lazily at run time (the worker's start-up)
    from leakbench.attacks.base import Space
    from leakbench.core.reconstruction import Failure

PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                            "os.forkpty", "pty.spawn"})
"""Audit events that start a process (a child could read what the worker may not)."""
PATH_EVENTS = {"open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.chdir": (0,), "os.link": (0,),
               "os.symlink": (0,), "os.rename": (0,), "shutil.copyfile": (0,), "shutil.copytree": (0,),
               "sqlite3.connect": (0,), "os.truncate": (0,)}
"""Audit events that reach a file, and the positions of their path arguments."""
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from leakbench.harness.isolation import fork_server; fork_server(int(sys.argv[2]), int(sys.argv[3]))")
"""What `python -I -S -c` runs in the fork server: leakbench from the harness's checkout, nothing else."""
MAX_RELAYED = 16 << 20
"""The most characters of one attack worker's output (its progress bars, prints) relayed to the
harness's stderr; the rest is read and dropped."""


class WorkerDied(LeakbenchError):
    """The attack worker ended without answering; `code` is its exit code (negative: the signal that
    killed it)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.code = code


class Guard:
    """The worker's audit hook, a second layer inside the sandbox: no path under a protected root,
    no directory above one, no other process's /proc entry, no new process."""

    def __init__(self, roots: list[str]) -> None:
        self.roots: list[str] = []
        self.above: set[str] = set()
        self.add(roots)

    def add(self, roots: list[str]) -> None:
        """Protect `roots` too (absolute, resolved paths)."""
        for root in roots:
            root = os.path.realpath(root)
            if root not in self.roots:
                self.roots.append(root)
                parent = root
                while parent != os.path.dirname(parent):
                    parent = os.path.dirname(parent)
                    self.above.add(parent)

    def allowed(self, path: Any, event: str = "open", flags: Any = 0) -> bool:
        """Whether the worker may reach `path` (a file descriptor always: it was opened already).

        Directories above a root may be listed (imports list package folders) and hold anonymous
        temporary files (O_TMPFILE), but not be opened otherwise: a directory's descriptor would let
        `os.open(..., dir_fd=)` reach the root by a relative path."""
        if isinstance(path, int) or path is None:
            return True
        full = os.path.realpath(os.fsdecode(os.fspath(path)))
        tmpfile = isinstance(flags, int) and flags & _O_TMPFILE == _O_TMPFILE != 0
        if event == "open" and full in self.above and not tmpfile:
            return False
        if any(full == root or full.startswith(root + os.sep) for root in self.roots):
            return False
        parts = full.split(os.sep)
        return not (len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid())

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event in PROCESS_EVENTS:
            raise PermissionError(f"the attack worker may not start processes ({event})")
        for i in PATH_EVENTS.get(event, ()):
            if i < len(args) and not self.allowed(args[i], event, args[2] if event == "open" and len(args) > 2 else 0):
                raise PermissionError(f"the attack worker may not reach {args[i]!r} ({event})")


class Zygote:
    """The harness side of this process's fork server: a `python -I -S` process that imported torch
    and leakbench (no plugin, no attack, no data) and forks one child per cell on request."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", BOOT, leakbench_root(), str(theirs.fileno()),
                                       str(os.getpid())],
                                      pass_fds=(theirs.fileno(),), cwd=tempfile.gettempdir(), env=_worker_env(),
                                      stdin=subprocess.DEVNULL, stdout=2)
        theirs.close()
        self._sock = ours
        Connection(os.dup(ours.fileno())).send_bytes(json.dumps(search_path()).encode())

    def alive(self) -> bool:
        return self._proc.poll() is None

    def fork(self) -> tuple[int, int, int, int]:
        """(child pid, its request pipe's write end, its reply pipe's read end, the read end of the
        pipe that is its stdout and stderr)."""
        self._sock.sendall(b"F")
        data, fds, _, _ = socket.recv_fds(self._sock, 4, 3)
        if len(data) != 4 or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            raise WorkerDied("the attack worker's fork server ended", self._proc.poll())
        return int.from_bytes(data, "little"), fds[0], fds[1], fds[2]

    def exit_code(self) -> int | None:
        """The exit code of the child forked last (the server reports it once the child has ended)."""
        data = b""
        while len(data) < 4:
            chunk = self._sock.recv(4 - len(data))
            if not chunk:
                return None
            data += chunk
        return int.from_bytes(data, "little", signed=True)

    def stop(self) -> None:
        self._sock.close()
        self._proc.kill()
        self._proc.wait()


SCRATCH_PREFIX = "leakbench-attack-"
"""Each attack worker's scratch folder is `<temp>/leakbench-attack-<harness pid>-<random>`."""


def sweep_scratch(root: str | None = None) -> int:
    """Remove, from `root` (the temp folder), the attack scratch folders a killed harness left behind: those
    of a harness process that no longer runs (a folder named before harness pids were part of the name is
    removed only when empty). Only this user's folders; the number removed. Several harnesses sweep at once
    (a pool's workers start together): an entry another one removes first is passed over, never an error."""
    removed = 0
    with os.scandir(root or tempfile.gettempdir()) as entries:
        for entry in entries:
            if entry.name.startswith(SCRATCH_PREFIX):
                with contextlib.suppress(OSError):  # gone already (another sweep), or unreadable: not ours
                    removed += _sweep_one(entry)
    return removed


def _sweep_one(entry: os.DirEntry[str]) -> bool:
    """Remove the scratch folder `entry` when it is this user's and its harness has ended; whether it went."""
    if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
        return False
    owner, sep, _ = entry.name[len(SCRATCH_PREFIX):].partition("-")
    if not sep or not owner.isascii() or not owner.isdigit():
        os.rmdir(entry.path)  # an old-style name: only when empty (OSError otherwise)
        return True
    if _running(int(owner)):
        return False
    shutil.rmtree(entry.path, ignore_errors=True)
    return not os.path.lexists(entry.path)


def _running(pid: int) -> bool:
    """Whether a process `pid` runs (in this pid namespace)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process; a number no pid can be
        return False
    except PermissionError:
        return True
    return True


SANDBOXED = b"sandboxed"
"""What a worker sends once its sandbox holds, before it reads its request (so before any attack or
plugin code runs: the one message of a worker that no attack can have written)."""
SANDBOX_FAILED = "sandbox failed: "
"""How a worker's message starts when it could not apply its sandbox (then it exits)."""


class SandboxFailed(LeakbenchError):
    """The attack worker could not apply its sandbox: a fault of this machine or install, not of the
    attack, so the run stops (one line) rather than store a failed cell."""


def _sandboxed(message: bytes) -> None:
    """Raise SandboxFailed unless `message` (the worker's first, sent before any attack code ran) says
    its sandbox holds."""
    if message != SANDBOXED:
        text = message.decode("utf-8", "replace")
        why = text[len(SANDBOX_FAILED):] if text.startswith(SANDBOX_FAILED) else f"it said {text[:200]!r}"
        raise SandboxFailed(f"attack worker: the sandbox could not be applied: {why}")


class Deadline:
    """Kill process `pid` (SIGKILL) once `limit` seconds have passed (None: never), unless `end()` came
    first: the harness's time limit on an attack worker, whatever the harness is waiting in."""

    def __init__(self, pid: int, limit: float | None) -> None:
        self._pid = pid
        self._lock = threading.Lock()
        self._ended = False
        self.expired = False
        self._timer = threading.Timer(limit, self._expire) if limit is not None else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if not self._ended:
                self.expired = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)

    def end(self) -> None:
        """No kill from now on (call it once the worker has ended, or has answered)."""
        with self._lock:
            self._ended = True
        if self._timer is not None:
            self._timer.cancel()


class AttackWorker:
    """The harness side of one attack worker: a child of the fork server, used for one cell, then ended."""

    def __init__(self, zygote: Zygote) -> None:
        self.scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        self._zygote: Zygote | None = zygote
        self._pid, send_fd, recv_fd, output_fd = zygote.fork()
        self._send: Connection | None = Connection(send_fd, readable=False)
        self._recv: Connection | None = Connection(recv_fd, writable=False)
        self._relay = threading.Thread(target=relay_output, args=(output_fd,), name="attack-output", daemon=True)
        self._relay.start()

    @property
    def pid(self) -> int | None:
        return self._pid if self._zygote is not None else None

    def run(self, job: Any, update: Any, hidden: list[Path], limit: float | None = None) -> Any:
        """The `AttackOutput` of `job` on `update`, its `seconds` measured here (from the request's sending
        to the reply). The worker hides `hidden` (data locations, output folders) from the attack, answers
        once and ends. A reply outside the limits (`leakbench.harness.replies`) or an error the worker
        reports is a failed output saying why. Raises `WorkerDied` when the worker ends without answering,
        `OutOfTime` when it had not answered after `limit` seconds (it is killed)."""
        from leakbench.harness.replies import ReplyRefused, bounds_of

        start = time.perf_counter()
        try:
            header, npz, seconds = self._exchange(("cell", job, update), hidden, limit,
                                                  bounds_of(update.model).total_bytes())
        except ReplyRefused as exc:
            output = refused_reply(exc, job.layer)
            output.seconds = time.perf_counter() - start
            return output
        if header["kind"] != "ok":  # the worker's error (or its refusal of the settings): the cell's failure
            space: Space = "image" if job.layer == 1 else "feature"
            return _failed(f"error: attack worker: {header['message']}", space, job.layer, seconds)
        output = check_reply(header["meta"], npz, update, job.layer)
        output.seconds = seconds
        return output

    def modify(self, job: Any, model: Any, hidden: list[Path], limit: float | None) -> Any:
        """The `ServerModel` of the job's attack's modification of `model` (`harness.server`), checked against the
        victim within hard limits. Raises ReplyRefused, OutOfTime, WorkerDied, or a LeakbenchError saying what the
        worker reported."""
        from leakbench.harness.server import read_server_model, value_bytes

        header, npz, _ = self._exchange(("modify", job, model), hidden, limit,
                                      lambda header: value_bytes(header, model))
        if header["kind"] != "modified":
            raise LeakbenchError(f"server worker: {header['message']}")
        return read_server_model(header, npz, model)

    def describe(self, modules: list[str], entry_points: bool, hidden: list[Path]) -> dict[str, Any]:
        """The attack plugins (`leakbench.harness.job.described_plugins`), imported and described in the sandbox;
        a ConfigError (one line) when the worker could not describe them or its reply is refused."""
        from leakbench.core.errors import ConfigError
        from leakbench.harness.replies import DESCRIBE_SECONDS, OutOfTime, ReplyRefused

        try:
            header, _, _ = self._exchange(("describe", modules, entry_points), hidden, DESCRIBE_SECONDS, 0)
        except (ReplyRefused, OutOfTime) as exc:
            raise ConfigError(f"attack plugins: the attack worker's description was refused ({exc})") from None
        if header["kind"] == "config":  # a plugin that cannot be loaded: the user's to fix, one line
            raise ConfigError(header["message"])
        if header["kind"] == "error":
            raise LeakbenchError(f"attack worker: {header['message']}")
        found = header["found"]
        if not isinstance(found, dict) or not isinstance(found.get("plugins"), list) \
                or not isinstance(found.get("attacks"), list):
            raise LeakbenchError("attack worker: a malformed plugin description")
        return found

    def _exchange(self, request: tuple[Any, ...], hidden: list[Path], limit: float | None,
                  array_bytes: int | Callable[[dict[str, Any]], int]) -> tuple[dict[str, Any], bytes, float]:
        """Send the sandbox policy and `request`; the worker's JSON header (`replies.read_header`: of a kind
        expected for the request), its arrays (an "ok" or "modified" reply's, at most `array_bytes`, or what it
        says for that header) and the seconds from
        the request's sending to the reply. Ends the worker. The worker is killed when it has not answered
        after `limit` seconds (OutOfTime), or when its reply is refused (ReplyRefused)."""
        from leakbench.harness.replies import MAX_HEADER_BYTES, OutOfTime, ReplyRefused, read_header, receive
        from leakbench.harness.sandbox import level

        assert self._send is not None and self._recv is not None, "an attack worker serves one request"
        deadline = Deadline(self._pid, limit)
        try:
            cell = {"hidden": [str(p) for p in hidden], "scratch": self.scratch, "sandbox": not level()[1],
                    "path": search_path()}
            self._send.send_bytes(json.dumps(cell).encode())
            data = pickle.dumps(request, protocol=5)  # while the worker sandboxes itself
            _sandboxed(receive(self._recv, MAX_HEADER_BYTES, "the sandbox's answer"))
            self._send.send_bytes(data)
            start = time.perf_counter()
            header = read_header(receive(self._recv, MAX_HEADER_BYTES, "the header"), request[0])
            npz = b""
            if header["kind"] in ("ok", "modified"):
                bound = array_bytes(header) if callable(array_bytes) else array_bytes
                npz = receive(self._recv, bound, "the arrays")
            seconds = time.perf_counter() - start
        except (ReplyRefused, SandboxFailed):
            self.stop(kill=True)
            raise
        except (EOFError, OSError):
            code = self.stop()  # the worker closed its pipe: the deadline still holds while it ends
            if deadline.expired:
                raise OutOfTime(limit or 0.0) from None
            raise WorkerDied(f"the attack process ended before it answered ({_exit_text(code)})", code) from None
        except BaseException:
            self.stop(kill=True)
            raise
        finally:
            deadline.end()
        self.stop(kill=True)  # it has answered: nothing of it runs on (a forged reply need not exit)
        return header, npz, seconds

    def stop(self, *, kill: bool = False) -> int | None:
        """End the worker (closing its pipes ends it; `kill` ends it at once), then remove its scratch
        folder; its exit code (negative: the signal that ended it)."""
        zygote, self._zygote = self._zygote, None
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        code = None
        if zygote is not None:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)
            code = zygote.exit_code()
            self._relay.join(timeout=5)  # the pipe ends with the worker: what it wrote last is shown
        shutil.rmtree(self.scratch, ignore_errors=True)
        return code


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
"""A terminal's control sequences (CSI: cursor moves, colours, mode changes), removed whole."""
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""The C0 and C1 control characters and DEL but tab, newline and carriage return (bars use \\r)."""


def printable(text: str) -> str:
    """`text` without terminal control sequences or control characters (\\t, \\n, \\r kept): what
    an attack writes can draw a bar or a line, never drive the user's terminal."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def relay_output(fd: int, limit: int = MAX_RELAYED) -> None:
    """Copy what an attack worker writes on its stdout and stderr (the pipe `fd`) to this process's
    stderr, made `printable`, at most `limit` characters (then one line saying so; the rest is read
    and dropped, so the worker never blocks on a full pipe), until the worker ends; closes `fd`."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    left = limit
    try:
        while chunk := os.read(fd, 1 << 16):
            if left < 0:
                continue
            text = printable(decoder.decode(chunk))
            if len(text) > left:
                text, left = f"{text[:left]}\n[the attack's output is cut here: over {limit} characters]\n", -1
            else:
                left -= len(text)
            with contextlib.suppress(Exception):  # a closed or broken stderr loses the text, nothing else
                sys.stderr.write(text)
                sys.stderr.flush()
    except OSError:
        pass
    finally:
        os.close(fd)


class Workers:
    """This process's attack workers: `prestart()` starts the fork server (it imports while the
    caller prepares the update), `take()` forks a fresh worker from it for one cell."""

    def __init__(self) -> None:
        self._zygote: Zygote | None = None

    def prestart(self) -> None:
        if self._zygote is None or not self._zygote.alive():
            self._zygote = Zygote()

    def take(self) -> AttackWorker:
        self.prestart()
        assert self._zygote is not None
        return AttackWorker(self._zygote)

    def stop(self) -> None:
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            zygote.stop()


WORKER_TRIES = 3
"""How often a cell's attack is tried when its worker is killed by a signal that usually comes from
outside (OOM killer, kill -9); killed every time, the cell is stored as failed with the reason: an
attack may kill itself, and nothing an attack does may stop the run (issue 41)."""
FAULT_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
"""Signals that end a worker from outside: a fault to retry. Any other end (an exit code, a crash
in the attack's own code) is the attack's answer: a failed cell."""
IN_PROCESS = "not isolated (in process)"
"""The isolation of an attack run in the harness process (`isolate=False`: debugging only)."""


def run_isolated(job: Any, update: Any, hidden: list[Path], attack: Any) -> Any:
    """The `AttackOutput` of `job` on `update` from a fresh sandboxed worker. `attack` is the harness's own
    configured attack for the job (for a plugin attack, its described stand-in): its hyperparameters are
    the ones recorded and its declared budget gives the time limit (`replies.time_limit`); `seconds` and
    `isolation` are set here too, never taken from the attack. A worker killed by a fault signal is retried with
    a new one (WORKER_TRIES in all); a worker that ends by itself, or is killed every time, gives a failed
    reconstruction saying how it ended, and one out of time a failed reconstruction with reason "time: …".
    A worker that could not apply its sandbox raises SandboxFailed (the run stops)."""
    from leakbench.harness.replies import OutOfTime, time_limit
    from leakbench.harness.sandbox import isolation_level

    limit = time_limit(attack.config, job.inversion.steps if job.inversion is not None else 0)
    space: Space = "image" if job.layer == 1 else "feature"
    for attempt in range(1, WORKER_TRIES + 1):
        worker = workers().take()
        start = time.perf_counter()
        try:
            output = worker.run(job, update, hidden, limit)
        except OutOfTime as exc:
            output = _failed(f"time: {exc} (the attack's limit: {limit_text(attack.config)}); the attack "
                             "worker was killed", space, job.layer, time.perf_counter() - start, failure="budget")
        except WorkerDied as exc:
            killed = exc.code is not None and exc.code < 0 and -exc.code in FAULT_SIGNALS
            if killed and attempt < WORKER_TRIES:
                continue
            again = f", {WORKER_TRIES} times (from outside, or by the attack itself)" if killed else ""
            output = _failed(f"error: {exc}{again}", space, job.layer, time.perf_counter() - start)
        output.hyperparameters = attack.hyperparameters()
        output.isolation = isolation_level()
        output.time_limit = limit
        return output
    raise AssertionError("unreachable")


def limit_text(config: Any) -> str:
    """How a cell's time limit was set, in words (for a failed cell's reason)."""
    from leakbench.harness.replies import TIME_LIMIT_ENV, TIME_MARGIN, declared_seconds

    declared = declared_seconds(config)
    if declared is None:
        return f"no max_seconds declared, so {TIME_LIMIT_ENV} or its default"
    return f"max_seconds {declared:g} s + max({declared:g} s, {TIME_MARGIN:g} s)"


def _failed(reason: str, space: Space, layer: int, seconds: float, failure: Failure = "error") -> Any:
    """A failed `AttackOutput` with `reason` and its `failure` kind (an error unless said: a worker out of time
    is "budget"), after `seconds`."""
    from leakbench.attacks import Reconstruction
    from leakbench.records.artifacts import AttackOutput

    return AttackOutput(Reconstruction.failed(reason, failure=failure, space=space, layer=layer), seconds)


def refused_reply(exc: Exception, layer: int) -> Any:
    """The failed `AttackOutput` of a reply refused for `exc`."""
    space: Space = "image" if layer == 1 else "feature"
    return _failed(f"error: the attack's reply was refused ({type(exc).__name__}: {exc})", space, layer, 0.0)


def describe_plugins(modules: list[str], entry_points: bool) -> dict[str, Any]:
    """What a fresh sandboxed worker finds when it imports the attack plugins: the harness never does."""
    from leakbench.datasets.loaders import data_locations

    return workers().take().describe(modules, entry_points, data_locations())


_WORKERS: Workers | None = None


def workers() -> Workers:
    """This process's supply of attack workers (the spare is stopped at exit). The first call removes the
    scratch folders of harnesses that were killed (`sweep_scratch`)."""
    global _WORKERS
    if _WORKERS is None:
        sweep_scratch()
        _WORKERS = Workers()
        atexit.register(_WORKERS.stop)
    return _WORKERS


def check_reply(meta: Any, npz: bytes, update: Any, layer: int) -> Any:
    """The worker's answer as an `AttackOutput`, or a failed one saying why the answer was refused:
    JSON metadata of the known shape, and arrays read within the cell's bounds (`replies.read_arrays`:
    float32, no pickle, of the update's image shape or two-dimensional features), finite, images in
    [0, 1]. Its `seconds` and `hyperparameters` are the harness's to set (`AttackWorker.run`)."""
    import torch

    from leakbench.harness.replies import bounds_of, read_arrays
    from leakbench.records.artifacts import attack_output

    try:
        _check_meta(meta, layer)
        tensors = {name: torch.from_numpy(array) for name, array in read_arrays(npz, bounds_of(update.model)).items()}
        output = attack_output(meta, tensors)
        _check_arrays(output)
        return output
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return refused_reply(exc, layer)


def _check_meta(meta: Any, layer: int) -> None:
    """Raise ValueError unless `meta` is an attack.json of the stored kind, for a cell on `layer`: a failed
    answer may carry its `failure` kind (one of `core.reconstruction.FAILURES`), no other answer one."""
    types: dict[str, type | tuple[type, ...]] = {
        "status": str, "reason": str, "space": str, "stats": dict, "seconds": (int, float),
        "hyperparameters": dict, "layer": (int, type(None)), "isolation": str}
    if not isinstance(meta, dict) or set(meta) - {"failure"} != set(types):
        raise ValueError(f"metadata keys {sorted(meta)[:20] if isinstance(meta, dict) else type(meta).__name__}")
    for key, kind in types.items():
        if not isinstance(meta[key], kind) or isinstance(meta[key], bool):
            raise ValueError(f"{key} is a {type(meta[key]).__name__}")
    from leakbench.core.reconstruction import FAILURES, STATUSES

    if meta["status"] not in STATUSES or meta["space"] not in ("image", "feature"):
        raise ValueError(f"status {meta['status']!r:.40}, space {meta['space']!r:.40}")
    if "failure" in meta and (meta["status"] != "failed" or meta["failure"] not in FAILURES):
        raise ValueError(f"failure {meta['failure']!r:.40} with status {meta['status']!r} (only a failed answer has "
                         f"one: {', '.join(FAILURES)})")
    if meta["layer"] not in (None, layer):
        raise ValueError(f"layer {meta['layer']!r:.40} in a cell on layer {layer}")
    if not math.isfinite(meta["seconds"]) or meta["seconds"] < 0:  # of the stored kind (the harness measures)
        raise ValueError(f"seconds {meta['seconds']!r}")


def _check_arrays(output: Any) -> None:
    """Raise ValueError unless the output's arrays (their shapes checked by `replies.read_arrays`) are
    finite, and its images in [0, 1]."""
    import torch

    named = {"images": output.reconstruction.images, "features": output.reconstruction.features,
             "inverted": output.inverted}
    for name, array in named.items():
        image = name != "features"
        if array is not None and (not bool(torch.isfinite(array).all())
                                  or (image and not bool(((array >= 0) & (array <= 1)).all()))):
            raise ValueError(f"{name} not finite{' or outside [0, 1]' if image else ''}")


def search_path() -> list[str]:
    """This process's import path, absolute: plugins and scripts import in a worker as they do here."""
    return [os.path.abspath(p or os.curdir) for p in sys.path]


def leakbench_root() -> str:
    """The folder that holds the `leakbench` package this process runs (this file is leakbench/harness/isolation.py)."""
    return str(Path(__file__).resolve().parents[2])


def worker_pythonpath() -> str:
    """This process's PYTHONPATH made absolute, with the folder holding `leakbench` first (for
    processes that start elsewhere: pool and Ray workers)."""
    rest = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([leakbench_root(), *rest]))


def _worker_env() -> dict[str, str]:
    """The fork server's environment: this one, with one BLAS thread and no joblib processes."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "JOBLIB_MULTIPROCESSING": "0"}


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        known = -code in signal.Signals._value2member_map_
        return f"killed by {signal.Signals(-code).name}" if known else f"signal {-code}"
    return f"exit code {code}"


# --------------------------------------------------------------------------- inside the worker


def fork_server(fd: int, harness: int) -> None:
    """The fork server: import torch and leakbench, then fork one attack worker per request of the
    harness (process `harness`) and report how each ended. It stays single-threaded, never runs
    plugin or attack code and never holds a batch: each child starts from this clean state."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(harness)
    sock = socket.socket(fileno=fd)
    sys.path[:] = list(dict.fromkeys([*json.loads(Connection(os.dup(fd)).recv_bytes()), *sys.path]))
    import torch  # torch and leakbench's own modules load before any sandbox (torch probes the system)

    from leakbench.harness import job, sandbox  # noqa: F401 — loaded once, here, for every child
    from leakbench.progress import attack_progress  # noqa: F401

    torch.set_num_threads(1)
    _warm_up()
    try:
        _serve(sock)
    except ConnectionError:  # the harness went away (Ctrl-C, a stop signal): nothing to report, no traceback
        pass


def _serve(sock: socket.socket) -> None:
    """The fork server's loop: one attack worker per request on `sock`, until it closes."""
    server = os.getpid()
    while sock.recv(1) == b"F":
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        output_r, output_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            sock.close()
            for end in (request_w, reply_r, output_r):
                os.close(end)
            _child(request_r, reply_w, output_w, server)
        for end in (request_r, reply_w, output_w):
            os.close(end)
        socket.send_fds(sock, [pid.to_bytes(4, "little")], [request_w, reply_r, output_r])
        for end in (request_w, reply_r, output_r):
            os.close(end)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        sock.sendall(code.to_bytes(4, "little", signed=True))


def _warm_up() -> None:
    """What every child would otherwise load or initialise again: the sandbox's libraries (pyseccomp
    runs ldconfig to find libseccomp) and its read rules, scipy's optimisers, torch's first autograd
    pass, the installed attack entry points. All of it
    runs in this one thread: the server must stay single-threaded to fork safely (importing
    scikit-learn starts a thread, so CPA's FastICA loads in the child)."""
    import landlock  # noqa: F401
    import pyseccomp  # noqa: F401
    import scipy.optimize  # noqa: F401
    import torch

    from leakbench.datasets.loaders import data_locations
    from leakbench.harness import sandbox
    from leakbench.plugins import entry_points_of

    x = torch.ones(4, 4, requires_grad=True)
    torch.nn.functional.linear(x, x).relu().sum().backward()
    entry_points_of("attacks")  # cached: scanning every distribution's metadata takes a while
    if not sandbox.level()[1]:
        sandbox.prepare(sandbox.policy(sys.path, [str(p) for p in data_locations()], ""))


def _child(receive_fd: int, send_fd: int, output_fd: int, server: int) -> None:
    """One attack worker: wait for its cell, sandbox itself, answer, exit. It dies with the fork
    server (process `server`), has no controlling terminal (a session of its own) and no terminal
    among its standard descriptors: stdin is /dev/null, stdout and stderr the pipe `output_fd` that
    the harness reads and relays (`relay_output`)."""
    try:
        die_with_parent(server)
        _own_stdio(output_fd)
        from leakbench.harness.job import attack_cell
        from leakbench.harness.sandbox import apply, policy
        from leakbench.progress import attack_progress

        receive, send = Connection(receive_fd, writable=False), Connection(send_fd, readable=False)
        try:
            cell = json.loads(receive.recv_bytes())
        except EOFError:
            os._exit(0)
        sys.path[:] = list(dict.fromkeys([*cell["path"], *sys.path]))  # the harness's, as it is now
        try:
            os.chdir(cell["scratch"])
            os.environ["TMPDIR"] = cell["scratch"]
            tempfile.tempdir = None
            if cell["sandbox"]:  # the harness decides (it records the level); the worker obeys
                apply(policy(sys.path, cell["hidden"], cell["scratch"]))
        except Exception as exc:  # noqa: BLE001 — fail closed: no attack runs with less isolation than recorded
            send.send_bytes(f"{SANDBOX_FAILED}{exc}".encode())
            os._exit(0)
        sys.addaudithook(Guard(cell["hidden"]))
        send.send_bytes(SANDBOXED)  # before any attack or plugin code runs: the harness may believe it
        _answer(send, receive, attack_cell, attack_progress)
    finally:
        os._exit(1)  # never return into the fork server's loop


def _answer(send: Connection, receive: Connection, attack_cell: Any, attack_progress: Any) -> None:
    """Answer the request that arrives on `receive` (run a cell, modify a model, or describe the attack plugins); send
    the header (JSON) and arrays (.npz) on `send`."""
    from leakbench.core.errors import LeakbenchError
    from leakbench.harness.job import described_plugins
    from leakbench.plugins import enter_attack_worker

    enter_attack_worker()  # plugin attacks are imported here, never in the harness
    request = pickle.loads(receive.recv_bytes())
    npz = b""
    try:
        if request[0] == "describe":
            header = json.dumps({"kind": "describe", "found": described_plugins(request[1], request[2])})
        elif request[0] == "modify":  # the server's half of a malicious-server cell (`harness.server`)
            from leakbench.harness.server import encode_server_model, modify_cell

            header, npz = encode_server_model(modify_cell(*request[1:]))
        else:
            job, update = request[1:]
            with attack_progress(sys.stderr if job.bars else None):
                header, npz = _plain(attack_cell(job, update), job.layer)
    except LeakbenchError as exc:
        header = json.dumps({"kind": "config", "message": str(exc)})
    except Exception as exc:  # noqa: BLE001 — reported to the harness, which raises it
        header = json.dumps({"kind": "error", "message": f"{type(exc).__name__}: {exc}"})
    send.send_bytes(header.encode())
    if npz:
        send.send_bytes(npz)
    send.close()
    os._exit(0)  # no atexit or finaliser of an attack's runs after the answer


def _plain(output: Any, layer: int) -> tuple[str, bytes]:
    """The "ok" header and arrays of an attack output; an output that is not plain data (stats that
    JSON cannot hold) becomes a failed reconstruction saying so."""
    from leakbench.attacks import Reconstruction
    from leakbench.records.artifacts import AttackOutput, encode_attack_output

    try:
        meta, npz = encode_attack_output(output)
        return json.dumps({"kind": "ok", "meta": meta}), npz
    except (TypeError, ValueError, AttributeError) as exc:
        reason = f"error: the attack's answer is not plain data ({type(exc).__name__}: {exc})"
        failed = Reconstruction.failed(reason, failure="error", space="image" if layer == 1 else "feature",
                                       layer=layer)
        meta, npz = encode_attack_output(AttackOutput(failed, output.seconds, output.hyperparameters))
        return json.dumps({"kind": "ok", "meta": meta}), npz


def die_with_parent(parent: int) -> None:
    """The kernel kills this process with SIGKILL when its parent (process `parent`, which started
    it from its main thread) ends, however it ends: no attack worker, fork server or pool worker
    outlives a killed run. A parent that ended before this call (this process was re-parented
    already) ends this process now. The sandbox refuses the attack any change of it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _own_stdio(output_fd: int) -> None:
    """Leave the harness's session (no controlling terminal: /dev/tty cannot be opened) and make
    stdin /dev/null and stdout and stderr the pipe `output_fd`: no descriptor of this process is the
    user's terminal or shares the harness's stderr (its file offset, a log it could truncate)."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    for fd in {null, output_fd} - {0, 1, 2}:
        os.close(fd)
