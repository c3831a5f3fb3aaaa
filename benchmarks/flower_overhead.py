"""What a Flower level costs per cell: the seconds to make the client's update, leakbench's client vs Flower's.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/flower_overhead.py --data-root ../shared/data/cifar10 \
        [--suite paper/flower] [--repeats 3]

For every update level of the suite (its `defences`), on the suite's first cell settings (seed 0), the median
wall seconds of `harness.victim.prepare` after one warm-up — batch load, victim, and the client's update: for a
Flower level one real round of Flower's Simulation Runtime in process — and, for the Flower levels, the difference
from leakbench's client of the same kind (flower-fedsgd and flower-dp-fixed against `none`, flower-localdp against
`dp`, flower-secaggplus against `secagg`). The attack's own seconds do not change with the client: the update it
gets has the same shape.
"""

from __future__ import annotations

import argparse
import statistics
import time

from leakbench.cell.spec import cell_settings
from leakbench.harness.suite import load_suite, shipped_suite
from leakbench.harness.victim import prepare

BASELINE = {"flower-fedsgd": "none", "flower-dp-fixed": "none", "flower-localdp": "dp", "flower-secaggplus": "secagg"}
"""The leakbench client each Flower level is compared with."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--suite", default="paper/flower")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    cells = load_suite(shipped_suite(args.suite), data_root=args.data_root).cells
    first = cells[0]
    levels = {tuple(c.defences): c for c in cells if c.attack == first.attack and c.seed == first.seed}
    times: dict[str, float] = {}
    for defences, cell in levels.items():
        spec = cell
        prepare(spec)  # warm-up: imports, the dataset index
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            prepare(spec)
            runs.append(time.perf_counter() - start)
        name = defences[0].name if defences else "none"
        times.setdefault(name, statistics.median(runs))
        print(f"{' '.join(cell_settings(spec)):<110} {statistics.median(runs):7.2f} s", flush=True)
    for name, base in BASELINE.items():
        if name in times and base in times:
            extra = times[name] - times[base]
            print(f"{name}: {times[name]:.2f} s vs {base} {times[base]:.2f} s: {extra:+.2f} s a cell")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
