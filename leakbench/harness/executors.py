"""Executors: run a sweep's cells serially, in a local process pool, or on Ray — same records from each.

Each task runs one cell and writes its folder itself (atomically), so whatever finished before an
interruption is kept. SIGTERM and SIGHUP stop every executor as Ctrl-C does (`harness.interrupts`):
its workers are ended and nothing of theirs runs on. Every cell runs with one torch thread whichever executor runs it: results
then do not depend on the executor, and parallelism comes from running cells side by side.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from leakbench.errors import ConfigError
from leakbench.harness.interrupts import stop_signals_as_interrupt
from leakbench.harness.isolation import worker_pythonpath
from leakbench.progress import attack_progress

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


def run_task(task: Task) -> dict[str, Any]:
    """Run the cell, write its folder, return its JSON-safe summary (runs inside workers)."""
    import torch

    from leakbench.harness.cell import json_safe, run_cell
    from leakbench.harness.store import write_cell

    torch.set_num_threads(1)
    scorer, note = lpips_scorer(task.lpips_weights, task.lpips_net)
    result = run_cell(task.spec, lpips=scorer, lpips_note=note, isolate=task.isolate)
    write_cell(result, task.out, selection=list(task.selection))
    return json_safe(result.summary)


@lru_cache(maxsize=4)
def lpips_scorer(path: str | None, net: str = "alex"):
    """The verified LPIPS scorer and its note for a weights path (None: the default search) and net,
    built and checked once per process."""
    import warnings

    from leakbench.metrics import load_lpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_lpips(Path(path) if path else None, net=net)


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


def _pool(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], jobs: int,
          work: Callable[[Task], dict[str, Any]] = run_task) -> None:
    """A local process pool (spawned workers: no state inherited from this process).

    At most `jobs` tasks are in the pool at a time, so nothing is queued behind the running cells;
    workers ignore Ctrl-C, and on any interruption this process terminates them at once (their
    half-written temporary folders are removed by the sweep).
    """
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker)
    waiting = iter(tasks)
    try:
        running: set[Future] = {pool.submit(work, task) for task in islice(waiting, jobs)}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                on_done(future.result())
                running |= {pool.submit(work, task) for task in islice(waiting, 1)}
    except BaseException:
        _terminate(pool)
        raise
    pool.shutdown(wait=True)


def _start_worker() -> None:
    """A pool worker leaves Ctrl-C to the parent, which stops it (see `_pool`), and starts its attack
    worker at once, so that its start-up overlaps the first cell's data loading."""
    from leakbench.harness.isolation import shared_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    shared_worker().start([])


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (Python 3.14 has `terminate_workers` for this)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=10)


def _ray(tasks: list[Task], on_done: Callable[[dict[str, Any]], None], jobs: int, address: str | None) -> None:
    """Ray tasks, one CPU each; a local Ray instance with `jobs` CPUs unless `address` names a cluster."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'leakbench[ray]'") from None
    started = not ray.is_initialized()
    if started:
        env = {"env_vars": {"PYTHONPATH": worker_pythonpath(), "OMP_NUM_THREADS": "1"}}
        if address:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
        else:
            ray.init(num_cpus=jobs, include_dashboard=False, runtime_env=env, log_to_driver=False)
    pending: list[Any] = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        pending = [remote.remote(task) for task in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            on_done(ray.get(done[0]))
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
