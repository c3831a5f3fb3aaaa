"""Issue 41: the harness's peak memory while it refuses each forged reply of `tests/forge_attack.py`.

Each route runs one cell (embedded dataset, b = 2, FC width 16, depth 3) in a fresh Python process,
which reports its own peak resident memory (getrusage RUSAGE_SELF ru_maxrss: the harness process
only, not its attack worker), the cell's status and reason, or the exception that escaped `run_cell`
(the harness's traceback, or a stop of the suite). "honest" is the baseline: a well-formed reply of
the same cell. The zip bomb's images.npy claims `--bomb-rows` rows of 3 × 32 × 32 float32 zeros
(160,000: 1.97 GB from a 1.9 MB zip, issue 41's "2 MB zip bomb").

    PYTHONPATH=. python benchmarks/bad_replies.py                       # this checkout's harness
    PYTHONPATH=. python benchmarks/bad_replies.py --leakbench /tmp/old  # another checkout's (the forging
                                                                        # attack still comes from this one)

The routes that never answer ("sleep", "stall") are left out: without a time limit they never end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROUTES = ("honest", "deep", "huge", "bomb", "config", "error", "unknown", "extra")

ONE = """
import json, resource, sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from forge_attack import ForgeAttack
from leakbench.api import scoped_attack
from leakbench.harness.cell import run_cell
from leakbench.cell.spec import CellSpec

route = {route!r}
params = {{"route": "seconds", "sleep": 0.0}} if route == "honest" else {{"route": route, "rows": {rows}}}
start = time.perf_counter()
try:
    with scoped_attack(ForgeAttack):
        s = run_cell(CellSpec(attack="forge", dataset="embedded", batch_size=2, width=16, depth=3,
                              hyperparameters=params)).summary
    outcome = {{"status": s["status"], "reason": s["reason"]}}
except BaseException as exc:
    outcome = {{"status": "raised", "reason": f"{{type(exc).__name__}}: {{str(exc)[:120]}}"}}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
wall = round(time.perf_counter() - start, 1)
print(json.dumps({{"route": route, "peak_mib": round(peak), "wall_s": wall, **outcome}}))
"""


def measure(route: str, root: Path, rows: int) -> dict[str, object]:
    """One route's row, from a fresh process running `root`'s harness."""
    code = ONE.format(root=str(root), tests=str(HERE / "tests"), route=route, rows=rows)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(Path.home())})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"route": route, "peak_mib": "-", "wall_s": "-", "status": f"exit {proc.returncode}",
                "reason": proc.stderr.strip().splitlines()[-1][:120] if proc.stderr.strip() else ""}
    row: dict[str, object] = json.loads(lines[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leakbench", type=Path, default=HERE, help="the checkout whose harness runs the cells")
    parser.add_argument("--bomb-rows", type=int, default=160_000, help="rows the zip bomb's images.npy claims")
    parser.add_argument("--routes", nargs="*", default=list(ROUTES), choices=ROUTES)
    args = parser.parse_args()
    print(f"harness: {args.leakbench.resolve()}; peak = the harness process's ru_maxrss")
    print(f"| {'route':8} | {'peak MiB':>8} | {'wall s':>6} | {'status':7} | reason")
    print(f"|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 9}|{'-' * 40}")
    for route in args.routes:
        row = measure(route, args.leakbench.resolve(), args.bomb_rows)
        reason = " ".join(str(row["reason"]).split())[:110]
        print(f"| {route:8} | {row['peak_mib']!s:>8} | {row['wall_s']!s:>6} | {row['status']!s:7} | {reason}",
              flush=True)


if __name__ == "__main__":
    main()
