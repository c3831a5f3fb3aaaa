"""Interrupt a sweep halfway, optionally damage stored cells, rerun it, and compare its records with
those of an uninterrupted run.

    PYTHONPATH=. python benchmarks/resume_check.py --suite default --reference results/default \\
        [--after 40] [--signal INT|KILL] [--jobs N] [--corrupt] [--out /tmp/leakbench-resume]

Starts `leakbench run SUITE --out OUT [--jobs N]` in its own process group, sends the signal to the
group (as Ctrl-C in a terminal does) once `--after` cells are stored, and reports how long the
sweep took to exit after it. With `--corrupt`, stored image cells are then damaged, one per kind in
`DAMAGE` (another stored image cell serves as the source of copied files). It reruns the same
command (resume is the default) and prints how many cells each run did, the damage warnings, the
temporary folders left, and whether the records equal the reference's (timing columns aside).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from leakbench.records.runs import finished_cells, records_difference


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _copy_files(cell: Path, other: Path) -> None:
    for name in ("records.parquet", "summary.json", "manifest.json", "reconstruction.npz", "attack.json"):
        if (other / name).is_file():  # folders from before stored reconstructions have fewer files
            shutil.copyfile(other / name, cell / name)


def _copy_folder(cell: Path, other: Path) -> None:
    shutil.rmtree(cell)
    shutil.copytree(other, cell)


DAMAGE: dict[str, Callable[[Path, Path], None]] = {
    "truncated_records": lambda cell, other: _truncate(cell / "records.parquet"),
    "missing_records": lambda cell, other: (cell / "records.parquet").unlink(),
    "missing_summary": lambda cell, other: (cell / "summary.json").unlink(),
    "invalid_summary": lambda cell, other: (cell / "summary.json").write_text("{not json"),
    "invalid_manifest": lambda cell, other: (cell / "manifest.json").write_text("{not json"),
    "missing_reconstruction": lambda cell, other: (cell / "reconstruction.npz").unlink(),
    "invalid_reconstruction": lambda cell, other: _truncate(cell / "reconstruction.npz"),
    "other_cells_files": _copy_files,
    "other_cells_folder": _copy_folder,
}
"""Ways a stored image cell folder gets damaged: f(cell folder, another image cell's folder)."""


def corrupt(run_dir: Path) -> list[str]:
    """Damage one stored image cell per kind in DAMAGE; return 'kind cell_id' for each."""
    cells = sorted(p for p in (run_dir / "cells").iterdir()
                   if not p.name.startswith(".") and json.loads((p / "summary.json").read_text())["space"] == "image")
    if len(cells) <= len(DAMAGE):
        raise SystemExit(f"--corrupt needs more than {len(DAMAGE)} stored image cells, found {len(cells)}")
    other, targets = cells[0], cells[1:]
    # targets outnumber DAMAGE (checked above): the surplus cells stay intact.
    for damage, cell in zip(DAMAGE.values(), targets, strict=False):
        damage(cell, other)
    return [f"{kind} {cell.name}" for kind, cell in zip(DAMAGE, targets, strict=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default")
    parser.add_argument("--reference", type=Path, required=True, help="run folder of an uninterrupted run")
    parser.add_argument("--after", type=int, default=40, help="interrupt once this many cells are stored")
    parser.add_argument("--signal", choices=["INT", "KILL"], default="INT")
    parser.add_argument("--jobs", type=int, default=1, help="cells side by side (--jobs of leakbench run)")
    parser.add_argument("--corrupt", action="store_true", help="damage stored cells before the rerun")
    parser.add_argument("--out", type=Path, default=Path("/tmp/leakbench-resume"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [sys.executable, "-m", "leakbench", "run", args.suite, "--out", str(args.out / "results"),
               "--reports", str(args.out / "reports"), "--jobs", str(args.jobs)]
    run_dir = args.out / "results" / args.reference.name
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while first.poll() is None and len(finished_cells(run_dir)) < args.after:
        time.sleep(0.2)
    sent = time.perf_counter()
    os.killpg(first.pid, getattr(signal, f"SIG{args.signal}"))
    first.wait()
    exited = time.perf_counter() - sent
    time.sleep(1.0)  # anything the sweep left running would store more cells now
    stored = len(finished_cells(run_dir))
    leftovers = [p.name for p in (run_dir / "cells").iterdir() if p.name.startswith(".")]
    print(f"interrupted (SIG{args.signal}, --jobs {args.jobs}) with {stored} cells stored, exit {first.returncode} "
          f"{exited:.1f} s after the signal; temporary folders left: {len(leftovers)}")
    if args.corrupt:
        print("damaged: " + ", ".join(corrupt(run_dir)))
    start = time.perf_counter()
    second = subprocess.run(command, capture_output=True, text=True)
    lines = [ln for ln in second.stderr.splitlines() if ln.startswith("[")]
    warned = [ln for ln in second.stderr.splitlines() if ln.startswith("leakbench: warning:")]
    leftovers = [p.name for p in (run_dir / "cells").iterdir() if p.name.startswith(".")]
    print(f"rerun: exit {second.returncode}, {len(lines)} cells run in {time.perf_counter() - start:.0f} s, "
          f"{len(finished_cells(run_dir))} cells stored, {len(warned)} damage warnings, "
          f"temporary folders left: {len(leftovers)}")
    for line in warned:
        print(f"  {line}")
    cells = pd.read_parquet(run_dir / "cells.parquet")
    print(f"cells.parquet: {len(cells)} rows, {cells['cell_id'].nunique()} distinct cells")
    difference = records_difference(run_dir, args.reference)
    print(f"records equal the uninterrupted run: {not difference}" + (f" ({difference})" if difference else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
