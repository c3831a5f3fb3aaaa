"""What running attacks in the sandboxed attack worker costs per cell (issues 14, 22).

    PYTHONPATH=. python benchmarks/worker_overhead.py [--cells 20] [--jobs 2] [--data-root ../shared/data]

serial: the same cells run with the attack in this process and in a fresh sandboxed attack worker
(one per cell, started ahead while the previous cell runs), alternating; the overhead is the
per-cell wall-time difference (median), plus the first worker's start-up (once per process,
overlapped with computing the first update). The isolation level is printed (LEAKBENCH_SANDBOX=off
measures the Python guard alone). pool: the same cells through the pool
executor with `--jobs` workers, each with its own attack worker, isolated and not: wall time per
cell. big: with --data-root, one TinyImageNet FC-6 width-2000 update (b = 16, 64×64, ≈ 25 M
parameters) sent to the worker for an attack that stops at once (SPEAR with one draw): the cost of
moving a large update. Cells are SPEAR on embedded patches, b = 2, width 200 (a cheap attack, so
the overhead is not hidden).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell
from leakbench.harness.executors import Task, execute
from leakbench.harness.isolation import workers
from leakbench.harness.sandbox import isolation_level


def _wall(spec: CellSpec, isolate: bool) -> float:
    start = time.perf_counter()
    run_cell(spec, isolate=isolate)
    return time.perf_counter() - start


def serial(cells: list[CellSpec]) -> tuple[float, float, float]:
    """(start-up s, median in-process s, median overhead s per cell)."""
    start = time.perf_counter()
    workers().prestart()
    run_cell(cells[0], isolate=True)
    first = time.perf_counter() - start
    inproc, extra = [], []
    for spec in cells:
        a, b = _wall(spec, False), _wall(spec, True)
        inproc.append(a)
        extra.append(b - a)
    return first - inproc[0], statistics.median(inproc), statistics.median(extra)


def pool(cells: list[CellSpec], jobs: int, isolate: bool) -> float:
    """Wall seconds per cell through the pool executor."""
    with tempfile.TemporaryDirectory() as out:
        tasks = [Task(spec, Path(out) / f"c{i}", (0,), 0, isolate=isolate) for i, spec in enumerate(cells)]
        start = time.perf_counter()
        execute(tasks, lambda _: None, executor="pool", jobs=jobs)
        return (time.perf_counter() - start) / len(cells)


def big(data_root: str) -> float:
    """Overhead (s) of one width-2000 TinyImageNet update sent to the worker."""
    spec = CellSpec(attack="spear", dataset="tinyimagenet", data_root=data_root, batch_size=16, width=2000,
                    hyperparameters={"max_draws": 1})
    _wall(spec, True)  # the dataset decoded once
    return statistics.median(_wall(spec, True) - _wall(spec, False) for _ in range(3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cells = [CellSpec(attack="spear", dataset="embedded", batch_size=2, seed=s) for s in range(args.cells)]
    startup, base, extra = serial(cells)
    print(f"isolation: {isolation_level()}")
    print(f"serial: worker start-up {startup:.2f} s (first cell only); in-process cell {base:.3f} s median; "
          f"isolation overhead {extra * 1000:.1f} ms per cell median ({args.cells} cells)")
    plain, isolated = pool(cells, args.jobs, False), pool(cells, args.jobs, True)
    print(f"pool --jobs {args.jobs}: {plain:.3f} s per cell in-process, {isolated:.3f} s isolated "
          f"(overhead {(isolated - plain) * 1000:.0f} ms per cell, start-ups included)")
    if args.data_root:
        print(f"big update (FC-6 w2000, 64×64, b = 16): isolation overhead {big(args.data_root):.2f} s per cell")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
