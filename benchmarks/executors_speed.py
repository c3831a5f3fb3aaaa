"""Executors compared: one suite run serially, in a local process pool and on Ray; wall time, speed-up
and whether the records are identical (timing columns aside).

    PYTHONPATH=.:$RAY_DIR python benchmarks/executors_speed.py --suite default --jobs 2 \\
        --executors serial,pool,ray [--out /tmp/executors]

Each executor writes a fresh run folder under --out (no resume), so every run does all the work.
sum_cell_s (attack seconds summed over cells) growing with --jobs means the cores were not free;
load_avg is the 1-minute load average when the run ended.
Ray is optional: without it the ray row says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from leakbench.harness.run import run_sweep
from leakbench.records.runs import records_difference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--executors", default="serial,pool,ray")
    parser.add_argument("--out", type=Path, default=Path("/tmp/leakbench-executors"))
    args = parser.parse_args(argv)
    rows, reference = [], None
    for executor in args.executors.split(","):
        out = args.out / executor
        shutil.rmtree(out, ignore_errors=True)
        jobs = 1 if executor == "serial" else args.jobs
        start = time.perf_counter()
        try:
            sweep = run_sweep(args.suite, out=out, executor=executor, jobs=jobs, resume=False)
        except Exception as exc:  # noqa: BLE001 — e.g. Ray not installed: report and go on
            rows.append({"executor": executor, "jobs": jobs, "wall_s": None, "speedup": None, "same_records": None,
                         "note": f"{type(exc).__name__}: {exc}"})
            continue
        wall = time.perf_counter() - start
        reference = reference or (sweep.run_dir, wall)
        rows.append({"executor": executor, "jobs": jobs, "cells": sweep.ran, "wall_s": round(wall, 1),
                     "sum_cell_s": round(float(sweep.cells["seconds"].sum()), 1),
                     "load_avg": round(os.getloadavg()[0], 1), "speedup": round(reference[1] / wall, 2),
                     "same_records": not records_difference(reference[0], sweep.run_dir),
                     "note": ""})
        print(rows[-1], file=sys.stderr, flush=True)
    print(pd.DataFrame(rows).to_markdown(index=False) if _has_tabulate() else pd.DataFrame(rows).to_string(index=False))
    return 0


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
