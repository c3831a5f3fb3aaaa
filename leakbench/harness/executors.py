"""Executors: run a sweep's cells serially, in a local process pool, or on Ray — same records from each.

A serial or pool task runs one cell and writes its folder itself (atomically), so whatever finished
before an interruption is kept; a Ray task returns its cell's files and the driver writes the folder
(the same store code), so a cluster needs no shared file system (docs/reference/ray.md). SIGTERM and SIGHUP
stop every executor as Ctrl-C does (`harness.interrupts`): its workers are ended and nothing of
theirs runs on. Every cell runs with one torch thread whichever executor runs it: results then do
not depend on the executor, and parallelism comes from running cells side by side.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from leakbench.core.errors import ConfigError
from leakbench.harness.interrupts import stop_signals_as_interrupt
from leakbench.harness.isolation import worker_pythonpath
from leakbench.progress import attack_progress

if TYPE_CHECKING:
    from leakbench.metrics.lpips_metric import LpipsScorer
    from leakbench.records.cells import CellFiles

EXECUTORS = ("serial", "pool", "ray")


@dataclass(frozen=True)
class Task:
    """One cell to run and where to store it; `selection` is the grid's pre-drawn batch positions."""

    spec: Any  # CellSpec (kept untyped so this module imports nothing heavy)
    out: Path
    selection: tuple[int, ...]
    grid_seed: int
    lpips_weights: str | None = None
    lpips_net: str = "alex"
    isolate: bool = True
    """Run the attack in the attack worker (False only to measure what isolation costs)."""


def cell_output(task: Task) -> tuple[dict[str, Any], CellFiles]:
    """Run the cell: its JSON-safe summary and its folder's files (runs inside workers)."""
    import torch

    from leakbench.harness.cell import run_cell
    from leakbench.harness.manifest import cell_files
    from leakbench.records.artifacts import json_safe

    torch.set_num_threads(1)
    scorer, note = lpips_scorer(task.lpips_weights, task.lpips_net)
    result = run_cell(task.spec, lpips=scorer, lpips_note=note, isolate=task.isolate, hidden=(task.out.parent.parent,))
    return json_safe(result.summary), cell_files(result, list(task.selection))


def run_task(task: Task) -> dict[str, Any]:
    """Run the cell, write its folder, return its JSON-safe summary (runs inside serial and pool workers)."""
    from leakbench.records.cells import write_cell_files

    summary, files = cell_output(task)
    write_cell_files(files, task.out)
    return summary


@lru_cache(maxsize=4)
def lpips_scorer(path: str | None, net: str = "alex") -> tuple[LpipsScorer | None, str]:
    """The verified LPIPS scorer and its note for a weights path (None: the default search) and net,
    built and checked once per process."""
    import warnings

    from leakbench.metrics import load_lpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_lpips(Path(path) if path else None, net=net)


def missing_lpips_note(path: str | None, net: str = "alex") -> str:
    """'' when the cells will be scored with LPIPS (verified weights for `path` and `net`), else the one-line
    note saying why not and what to install (the scorer is built once per process: see `lpips_scorer`)."""
    scorer, note = lpips_scorer(path, net)
    return "" if scorer is not None else note


def execute(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], *, executor: str = "serial",
            jobs: int = 1, address: str | None = None, attack_bars: TextIO | None = None,
            on_start: Callable[[Task], None] | None = None) -> None:
    """Run `tasks`, calling `on_done(summary)` in this process as each cell finishes (any order).

    Serial executor only: `attack_bars` is a terminal to draw bars inside long attacks on, and
    `on_start(task)` is called as each cell starts. SIGTERM and SIGHUP raise `Terminated` (a
    KeyboardInterrupt) here, so every executor stops its workers as on Ctrl-C.
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    if not tasks:
        return
    with stop_signals_as_interrupt():
        if executor == "ray":
            _ray(tasks, on_done, jobs, address)
        elif executor == "pool" and jobs > 1:
            _pool(tasks, on_done, jobs)
        else:
            with attack_progress(attack_bars):
                for task in tasks:
                    if on_start is not None:
                        on_start(task)
                    on_done(run_task(task))


POOL_RESTARTS = 2
"""Fresh pools a run makes after a pool worker died from outside (the OOM killer, a stray SIGKILL): its unfinished
cells run again there; one more death ends the run with the error."""


def _pool(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], jobs: int,
          work: Callable[[Task], dict[str, Any]] = run_task) -> None:
    """A local process pool (spawned workers: no state inherited from this process).

    At most `jobs` tasks are in the pool at a time, so nothing is queued behind the running cells;
    workers ignore Ctrl-C, and on any interruption this process terminates them at once (their
    half-written temporary folders are removed by the sweep). A worker that dies (`BrokenProcessPool`: killed
    from outside; a cell's own failures are its records, and a killed attack worker is retried inside the
    cell) ends that pool: the cells not yet done run in a fresh one, at most `POOL_RESTARTS` times. A cell's
    folder is written atomically and the same seed gives the same records, so one run again adds nothing twice.
    """
    left = list(tasks)
    for restart in range(POOL_RESTARTS + 1):
        done: set[int] = set()
        try:
            _pool_round(left, on_done, jobs, work, done)
            return
        except BrokenProcessPool:
            if restart == POOL_RESTARTS:
                raise
            left = [task for i, task in enumerate(left) if i not in done]
            print(f"leakbench: a pool worker died (killed from outside?): the {len(left)} unfinished cells run "
                  "again in a fresh pool", file=sys.stderr, flush=True)


def _pool_round(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], jobs: int,
                work: Callable[[Task], dict[str, Any]], done: set[int]) -> None:
    """One pool over `tasks`; each finished task's index goes into `done` once `on_done` has taken it."""
    earlier = {child.pid for child in multiprocessing.active_children()}
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(os.getpid(),))
    waiting = iter(enumerate(tasks))
    try:
        with _ctrl_c_held():
            running = {pool.submit(work, task): i for i, task in islice(waiting, jobs)}
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                on_done(future.result())
                done.add(running.pop(future))
                with _ctrl_c_held():
                    running |= {pool.submit(work, task): i for i, task in islice(waiting, 1)}
    except BaseException:
        _terminate(pool, earlier)
        raise
    pool.shutdown(wait=True)


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back while `submit` spawns workers: a spawned worker starts with the parent's signal mask
    (kept across exec), so a Ctrl-C to the process group cannot reach it before `_start_worker` ignores
    it (it would print a traceback from the middle of its start-up); the parent gets it on leaving."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _start_worker(parent: int) -> None:
    """A pool worker dies with its parent (process `parent`), however that ends (`kill -9`
    included: its fork server and attack worker then die with it), leaves Ctrl-C to the parent,
    which stops it (see `_pool`), and starts its attack worker at once, so that its start-up
    overlaps the first cell's data loading. It was spawned with SIGINT held (`_ctrl_c_held`): it
    ignores it first, then lets it through (a held one is dropped)."""
    from leakbench.harness.isolation import die_with_parent, workers

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    workers().prestart()


def _terminate(pool: ProcessPoolExecutor, earlier: set[int | None]) -> None:
    """Cancel what has not started and end the workers now (Python 3.14 has `terminate_workers` for this).

    The workers are the pool's, and any child started since the pool was made (`earlier`: the children
    before it): an interruption that lands inside `submit` while it spawns a worker leaves one the pool
    has not listed yet."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    listed = {worker.pid for worker in workers}
    workers += [child for child in multiprocessing.active_children() if child.pid not in earlier | listed]
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=10)
        if worker.is_alive():  # one spawned at the moment of the signal may not have its handlers yet
            worker.kill()
            worker.join(timeout=10)


def connection(executor: str, jobs: int, address: str | None) -> AbstractContextManager[Any]:
    """What `executor` needs for a whole sweep, to open before anything is written: for Ray, the connection
    (`ray_connection`: a cluster that cannot be reached fails there, in one line); nothing otherwise."""
    return ray_connection(jobs, address) if executor == "ray" else nullcontext()


@contextmanager
def ray_connection(jobs: int, address: str | None) -> Iterator[Any]:
    """The `ray` module, connected to the cluster at `address`, else to a local Ray with `jobs` CPUs, and
    disconnected on leaving; a connection already open is used as it is (and left open).

    A failure to connect or start is a ConfigError line; nothing is left connected.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'leakbench[ray]'") from None
    if ray.is_initialized():
        yield ray
        return
    if address:
        check_reachable(address)
    env = {"env_vars": ray_worker_env()}
    try:
        if address:
            ray.init(address=address, runtime_env=env, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(num_cpus=jobs, include_dashboard=False, runtime_env=env, log_to_driver=False,
                     logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 — Ray raises ConnectionError, ValueError, RuntimeError, …
        ray.shutdown()
        where = f"connect to the Ray cluster at {address}" if address else "start a local Ray"
        raise ConfigError(f"cannot {where} ({type(exc).__name__}: {exc})") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def ray_worker_env() -> dict[str, str]:
    """Environment variables for Ray workers, which do not inherit this process's: its PYTHONPATH made
    absolute (of use where nodes have the same paths), one BLAS thread, the plugins loaded by name, and
    the time limit of attacks that declare none (`replies.TIME_LIMIT_ENV`) where it is set."""
    import os

    from leakbench.harness.replies import TIME_LIMIT_ENV
    from leakbench.plugins import ENV_VAR, named_plugins

    plugins = {ENV_VAR: ",".join(named_plugins())} if named_plugins() else {}
    limit = {TIME_LIMIT_ENV: os.environ[TIME_LIMIT_ENV]} if os.environ.get(TIME_LIMIT_ENV) else {}
    return {"PYTHONPATH": worker_pythonpath(), "OMP_NUM_THREADS": "1", **plugins, **limit}


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ConfigError line unless something accepts a TCP connection at `address` ([SCHEME://]HOST:PORT),
    checked before `ray.init`, which retries an unreachable cluster for minutes; an address naming no
    port ('auto') is left to Ray."""
    host, colon, port = address.split("://")[-1].rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"cannot connect to the Ray cluster at {address} ({type(exc).__name__}: {exc})") from None


def portable(task: Task) -> Task:
    """`task` with the paths a worker reads (data root, LPIPS weights) made absolute: a Ray worker runs
    in its own folder, maybe on another machine (where those paths must hold the same files)."""
    spec = task.spec
    if spec.data_root:
        spec = replace(spec, data_root=str(Path(spec.data_root).absolute()))
    weights = str(Path(task.lpips_weights).absolute()) if task.lpips_weights else None
    return replace(task, spec=spec, lpips_weights=weights)


def _ray(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], jobs: int, address: str | None) -> None:
    """Ray tasks, one CPU each, on the cluster at `address` or a local Ray with `jobs` CPUs.

    Each task returns its cell's files and this process writes the folder (`write_cell_files`) under
    its own `out`: relative paths mean the same as for the other executors, and no node but this one
    needs the output folder. On any interruption the tasks not finished are cancelled.
    """
    from leakbench.records.cells import write_cell_files

    with ray_connection(jobs, address) as ray:
        remote = ray.remote(num_cpus=1, max_retries=0)(cell_output)
        pending = {remote.remote(portable(task)): task for task in tasks}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(done[0])
                summary, files = ray.get(done[0])
                write_cell_files(files, task.out)
                on_done(summary)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
