"""`python -m leakbench ARGS` for the tests, without paying the interpreter's imports at every call.

A refusal of the command line costs about 3 CPU-seconds, nearly all of it importing torch, SciPy and pandas
before the arguments can be checked; the tests make about a hundred such calls. The zygote is one Python process,
started once per test process, that imports the command line's heavy modules and then forks one child per call.
The child is a real process of its own: it changes to the call's folder, takes the call's environment, points its
file descriptors 0, 1 and 2 at /dev/null and two files, runs `leakbench` as `python -m leakbench` does
(`runpy.run_module(..., run_name="__main__")`) and exits through the interpreter's own shutdown (threads joined,
atexit handlers run), so its exit status, stdout and stderr are what a fresh interpreter would give. What differs:
modules imported by the zygote are already imported (a test of what the command line imports must start a fresh
interpreter: `run_cli(..., fresh=True)`), and environment variables read only at import time by those modules are
the zygote's (the zygote imports no plugin and reads no LEAKBENCH_* variable at import). A call whose PYTHONPATH
is not the zygote's starts a fresh interpreter: the import path is made at an interpreter's start.

`LEAKBENCH_TEST_FRESH_CLI=1` makes every call a fresh interpreter again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

WARM_MODULES = ("leakbench.cli", "leakbench.pipeline", "leakbench.harness.rescore", "leakbench.reporting.report",
                "leakbench.reporting.leaderboard", "leakbench.papers")
"""What the zygote imports before its first fork: what every `run`, `attack`, `report` or `reproduce` call imports."""


def serve(path: str) -> None:
    """The zygote: import WARM_MODULES, then fork one child per connection on the Unix socket at `path`."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    threading.Thread(target=reap_children, daemon=True).start()  # their callers watch the socket, not the status
    threading.Thread(target=end_with_parent, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            run_call(conn)  # ends the process
        conn.close()


def reap_children() -> None:
    """Wait for every finished child, so that none lingers as a zombie and their CPU time is counted in the
    zygote's, and through it in the test process's (`benchmarks/suite_times.py` reads RUSAGE_CHILDREN)."""
    import time

    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.05)


def end_with_parent() -> None:
    """End the zygote when the test process that started it ends (its end of our stdin closes). It reads the
    descriptor, not `sys.stdin`, so that no lock of a Python stream is held by this thread when the zygote forks."""
    while os.read(0, 4096):
        pass
    os._exit(0)


def run_call(conn: socket.socket) -> None:
    """In the forked child: read the call, become it, run it, and leave through the interpreter's own exit. The
    status goes to the caller from the last atexit handler (the first registered), after the streams are flushed."""
    import atexit
    import runpy

    request = json.loads(conn.makefile("r").readline())
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, target, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                              (2, request["stderr"], os.O_WRONLY)):
        handle = os.open(target, flags)
        os.dup2(handle, fd)
        os.close(handle)
    # the process's own streams on the new descriptors, as the interpreter opens them
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
    sys.argv = [request["main"], *request["args"]]
    status = {"code": 1}

    def report() -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        conn.sendall(json.dumps(status).encode() + b"\n")

    atexit.register(report)
    conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    try:
        runpy.run_module("leakbench", run_name="__main__", alter_sys=True)
        status["code"] = 0
    except SystemExit as exc:
        status["code"] = exit_code(exc.code)
        raise
    sys.exit(0)


def exit_code(code: object) -> int:
    """The status an interpreter exits with for `SystemExit(code)`: 0 for None, the number, else 1 (text printed)."""
    if code is None:
        return 0
    return code & 0xFF if isinstance(code, int) else 1


def fresh_run(args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
              ) -> subprocess.CompletedProcess[str]:
    """`python -m leakbench ARGS` in a fresh interpreter (what a zygote call stands for)."""
    return subprocess.run([sys.executable, "-m", "leakbench", *args], cwd=cwd, env=dict(env), capture_output=True,
                          text=True, timeout=timeout)


class Zygote:
    """The test process's handle on its zygote: started on first use, one per process (pytest-xdist worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._folder = tempfile.mkdtemp(prefix="leakbench-zygote-")
        self._path = os.path.join(self._folder, "socket")
        self._pythonpath: str | None = None

    def _start(self, env: Mapping[str, str]) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            here = str(Path(__file__).resolve().parent)
            code = f"import sys; sys.path.insert(0, {here!r}); import cli_zygote; cli_zygote.serve({self._path!r})"
            self._pythonpath = env.get("PYTHONPATH")
            self._process = subprocess.Popen([sys.executable, "-c", code], env=dict(env), stdout=subprocess.PIPE,
                                             stdin=subprocess.PIPE, text=True)
            assert self._process.stdout is not None
            if self._process.stdout.readline().strip() != "ready":
                raise RuntimeError("the CLI zygote did not start")

    def run(self, args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:
        """Like subprocess.run([python, -m, leakbench, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout), through a forked child of the zygote."""
        self._start(env)
        if env.get("PYTHONPATH") != self._pythonpath:  # sys.path is made at start-up: only a fresh interpreter has it
            return fresh_run(args, cwd=cwd, env=env, timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="leakbench-cli-") as scratch:
            out, err = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
            for name in (out, err):
                Path(name).touch()
            main = str(Path(__file__).resolve().parents[1] / "leakbench" / "__main__.py")
            request = {"args": list(args), "cwd": str(cwd), "env": dict(env), "stdout": out, "stderr": err,
                       "main": main}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(self._path)
                sock.sendall(json.dumps(request).encode() + b"\n")
                sock.settimeout(timeout)
                reader = sock.makefile("rb")
                pid = json.loads(reader.readline())["pid"]
                try:
                    line = reader.readline()  # the status, sent as the child exits; nothing: it was killed
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(["leakbench", *args], timeout) from None
            code = json.loads(line)["code"] if line else -signal.SIGKILL
            return subprocess.CompletedProcess(["leakbench", *args], code, Path(out).read_text(errors="replace"),
                                               Path(err).read_text(errors="replace"))

    def close(self) -> None:
        """End the zygote (it leaves when its stdin closes) and wait for it, so that its CPU time is counted."""
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._folder, ignore_errors=True)
