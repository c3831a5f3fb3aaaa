"""Issue 44: what each test file costs, to keep `make test` under 15 minutes on two cores.

    PYTHONPATH=. python benchmarks/suite_times.py [FILES…] [--pytest-args "-m slow"] [--top 30]

Runs pytest once per test file (all of tests/test_*.py unless FILES are named), one after another, and
prints per file its wall seconds, its CPU seconds (the pytest process and every child it waited for:
CLI subprocesses, pool and attack workers), its test count and outcome, most expensive first, then the
totals. CPU seconds barely depend on the machine's load; wall seconds do, so run it on an idle machine
(it costs about as long as `make test`, plus one interpreter start per file). Trained victims go to a
fresh folder ($LEAKBENCH_VICTIM_CACHE, unless set), as on a clean machine, so the suite's own victim
training is counted. Not part of `make test`: a measurement, tens of minutes.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FileCost:
    """One test file's run: wall and CPU seconds, pytest's last line and exit status."""

    path: str
    wall_s: float
    cpu_s: float
    summary: str
    returncode: int


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child process this process has waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_file(path: str, pytest_args: list[str], env: dict[str, str]) -> FileCost:
    """Run `pytest -q PATH` (plus `pytest_args`) from the repository root and measure it."""
    cpu0, t0 = _children_cpu(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, path],
                          cwd=REPO, env=env, capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return FileCost(path, wall, cpu, lines[-1] if lines else proc.stderr.strip()[-200:], proc.returncode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--pytest-args", default="", help='extra pytest options, one string (e.g. "-m slow")')
    parser.add_argument("--top", type=int, default=0, help="print only the N most expensive files (0: all)")
    args = parser.parse_args(argv)
    files = args.files or sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.setdefault("LEAKBENCH_VICTIM_CACHE", tempfile.mkdtemp(prefix="leakbench-suite-times-victims-"))
    costs = []
    for path in files:
        cost = time_file(path, shlex.split(args.pytest_args), env)
        print(f"  {cost.wall_s:7.1f} s wall {cost.cpu_s:7.1f} s CPU  {path}: {cost.summary}", file=sys.stderr,
              flush=True)
        costs.append(cost)
    costs.sort(key=lambda c: c.cpu_s, reverse=True)
    print(f"{'wall s':>8} {'CPU s':>8}  file: pytest's summary")
    for cost in costs[:args.top or None]:
        print(f"{cost.wall_s:8.1f} {cost.cpu_s:8.1f}  {cost.path}: {cost.summary}")
    print(f"{sum(c.wall_s for c in costs):8.1f} {sum(c.cpu_s for c in costs):8.1f}  total over {len(costs)} files "
          f"(load average at the end: {os.getloadavg()[0]:.1f})")
    return 0 if all(c.returncode in (0, 5) for c in costs) else 1


if __name__ == "__main__":
    sys.exit(main())
