"""Kill a sweep halfway, rerun it, and compare its records with those of an uninterrupted run.

    PYTHONPATH=. python benchmarks/resume_check.py --suite default --reference results/default \\
        [--after 40] [--signal INT|KILL] [--out /tmp/leakbench-resume]

Starts `leakbench run SUITE --out OUT` in a subprocess, sends the signal once `--after` cells are
stored, reruns the same command (resume is the default) and prints how many cells each run did and
whether the records equal the reference's (timing columns aside).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from leakbench.harness.store import finished_cells, records_difference

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default")
    parser.add_argument("--reference", type=Path, required=True, help="run folder of an uninterrupted run")
    parser.add_argument("--after", type=int, default=40, help="interrupt once this many cells are stored")
    parser.add_argument("--signal", choices=["INT", "KILL"], default="INT")
    parser.add_argument("--out", type=Path, default=Path("/tmp/leakbench-resume"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [sys.executable, "-m", "leakbench", "run", args.suite, "--out", str(args.out / "results"),
               "--reports", str(args.out / "reports")]
    run_dir = args.out / "results" / args.reference.name
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while first.poll() is None and len(finished_cells(run_dir)) < args.after:
        time.sleep(0.2)
    os.killpg(first.pid, getattr(signal, f"SIG{args.signal}"))
    first.wait()
    stored = len(finished_cells(run_dir))
    leftovers = [p.name for p in (run_dir / "cells").iterdir() if p.name.startswith(".")]
    start = time.perf_counter()
    second = subprocess.run(command, capture_output=True, text=True)
    lines = [ln for ln in second.stderr.splitlines() if ln.startswith("[")]
    print(f"interrupted (SIG{args.signal}) with {stored} cells stored, exit {first.returncode}; "
          f"temporary folders left: {len(leftovers)}")
    print(f"rerun: exit {second.returncode}, {len(lines)} cells run in {time.perf_counter() - start:.0f} s, "
          f"{len(finished_cells(run_dir))} cells stored")
    cells = pd.read_parquet(run_dir / "cells.parquet")
    print(f"cells.parquet: {len(cells)} rows, {cells['cell_id'].nunique()} distinct cells")
    difference = records_difference(run_dir, args.reference)
    print(f"records equal the uninterrupted run: {not difference}" + (f" ({difference})" if difference else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
