"""The attack runs in a process of its own that has never loaded a dataset or held a batch.

The harness process loads the data, builds the victim and the client's update, and scores. The
attack worker is a separate Python process (`python -m leakbench.harness.isolation`), started
once per harness process (serial run, pool worker or Ray worker) and reused for every cell:

- it receives an `AttackJob` (attack name, hyperparameters, layer, a seed derived from the cell
  id, inversion settings) and the `ClientUpdate`, pickled over a pipe, and sends back the
  `AttackOutput`; no dataset name, data root, batch index or batch seed crosses;
- before any plugin or attack code runs it installs a guard (`Guard`, a `sys.addaudithook` hook): opening
  or listing anything under a data location (`leakbench.datasets.loaders.data_locations`: the data
  roots in use, the download cache, the photo and digit folders bundled with scikit-learn and
  scikit-image) or a directory above one, another process's `/proc` entries, or starting a
  process raises PermissionError;
- it runs in the temporary folder, with one torch thread, ignores Ctrl-C (the harness stops it)
  and exits when its parent does.

What the guard cannot stop is native code (a C extension reading files with its own system calls);
that barrier would be the operating system's (another user, a mount namespace).
The worker imports torch and leakbench's own modules, then installs the guard, then loads plugins
and runs attacks: no attack or plugin code runs unguarded.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                            "os.forkpty", "pty.spawn"})
"""Audit events that start a process (a child could read what the worker may not)."""
PATH_EVENTS = {"open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.chdir": (0,), "os.link": (0,),
               "os.symlink": (0,), "os.rename": (0,), "shutil.copyfile": (0,), "shutil.copytree": (0,),
               "sqlite3.connect": (0,), "os.truncate": (0,)}
"""Audit events that reach a file, and the positions of their path arguments."""
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)


class Guard:
    """The worker's audit hook: no path under a protected root, no directory above one, no other
    process's /proc entry, no new process."""

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


class AttackWorker:
    """The harness side of one attack worker process: start it once, send it cells, stop it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None

    def start(self, roots: list[Path]) -> None:
        """Start the worker (it imports while the caller prepares the update); no-op when it runs."""
        if self._proc is not None and self._proc.poll() is None:
            return
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(to_child), str(from_child)],
                                      pass_fds=(to_child, from_child), cwd=tempfile.gettempdir(),
                                      env=_worker_env(), stdin=subprocess.DEVNULL, stdout=2)
        os.close(to_child)
        os.close(from_child)
        self._send = Connection(from_parent, readable=False)
        self._recv = Connection(to_parent, writable=False)
        search_path = [os.path.abspath(p or os.curdir) for p in sys.path]  # plugins and scripts import as here
        self._send.send_bytes(pickle.dumps(([str(r) for r in roots], search_path)))

    def run(self, job: Any, update: Any, roots: list[Path]) -> Any:
        """The `AttackOutput` of `job` on `update`; a worker that dies gives a failed reconstruction."""
        from leakbench.attacks import Reconstruction
        from leakbench.errors import ConfigError, LeakbenchError
        from leakbench.harness.artifacts import AttackOutput

        self.start(roots)
        assert self._send is not None and self._recv is not None
        try:
            self._send.send_bytes(pickle.dumps(([str(r) for r in roots], job, update), protocol=5))
            reply = pickle.loads(self._recv.recv_bytes())
        except (EOFError, OSError):
            code = self.stop()
            space = "image" if job.layer == 1 else "feature"
            reason = f"error: the attack process ended (exit code {code}) before it answered"
            return AttackOutput(Reconstruction.failed(reason, space=space, layer=job.layer), 0.0, job.hyperparameters)
        except BaseException:
            self.stop(kill=True)
            raise
        kind, value = reply
        if kind == "config":
            raise ConfigError(value)
        if kind == "error":
            raise LeakbenchError(f"attack worker: {value}")
        return value

    def stop(self, *, kill: bool = False) -> int | None:
        """End the worker (closing its pipe ends it; `kill` does not wait); its exit code."""
        proc, self._proc = self._proc, None
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        if proc is None:
            return None
        if kill:
            proc.kill()
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


_SHARED: AttackWorker | None = None


def shared_worker() -> AttackWorker:
    """This process's attack worker (one per harness process, stopped at exit)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = AttackWorker()
        atexit.register(_SHARED.stop)
    return _SHARED


def worker_pythonpath() -> str:
    """This process's PYTHONPATH made absolute, with the folder holding `leakbench` first (for
    processes that start elsewhere: attack workers, Ray workers)."""
    import leakbench

    here = str(Path(leakbench.__file__).resolve().parents[1])
    rest = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([here, *rest]))


def _worker_env() -> dict[str, str]:
    """The worker's environment: this one, with one BLAS thread and `worker_pythonpath()` (the
    worker runs in the temporary folder)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": worker_pythonpath()}


# --------------------------------------------------------------------------- inside the worker


def _serve(receive: Connection, send: Connection) -> None:
    """Install the guard, then answer jobs until the harness closes the pipe."""
    roots, search_path = pickle.loads(receive.recv_bytes())
    sys.path.extend(p for p in search_path if p not in sys.path)
    import torch  # torch and leakbench's own modules load before the guard (torch probes the system);

    from leakbench.errors import LeakbenchError  # no plugin and no attack code has run yet
    from leakbench.harness.job import attack_cell
    from leakbench.progress import attack_progress

    guard = Guard(roots)
    sys.addaudithook(guard)
    torch.set_num_threads(1)
    while True:
        try:
            data = receive.recv_bytes()
        except EOFError:
            return
        roots, job, update = pickle.loads(data)
        guard.add(roots)
        try:
            with attack_progress(sys.stderr if job.bars else None):
                reply: tuple[str, Any] = ("ok", attack_cell(job, update))
        except LeakbenchError as exc:
            reply = ("config", str(exc))
        except Exception as exc:  # noqa: BLE001 — reported to the harness, which raises it
            reply = ("error", f"{type(exc).__name__}: {exc}")
        del job, update
        send.send_bytes(pickle.dumps(reply, protocol=5))


def _watch_parent(parent: int) -> None:
    """End this process when its parent has gone (killed harnesses leave no attack running)."""
    while os.getppid() == parent:
        threading.Event().wait(0.5)
    os._exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
