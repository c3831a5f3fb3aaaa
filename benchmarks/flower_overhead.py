"""What a Flower level costs per cell and how far its update is from leakbench's client of the same kind.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/flower_overhead.py --data-root ../shared/data/cifar10 \
        [--suite paper/flower] [--repeats 3]

For every update level of the suite (its `defences`), on the suite's first cell settings (seed 0), the median
wall seconds of `harness.victim.prepare` after one warm-up — batch load, victim, and the client's update: for a
Flower level one real round of Flower's Simulation Runtime in process — and, for the Flower levels, the difference
from leakbench's client of the same kind (flower-fedsgd and flower-dp-fixed against `none`, flower-localdp against
`dp`, flower-secaggplus against `secagg`), with the largest absolute difference between the two updates' gradients
(absolute, and relative to the baseline's largest entry). The attack's own seconds do not change with the client:
the update it gets has the same shape.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakbench.cell.spec import CellSpec, cell_settings
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
    levels = {(c.defences, c.dp): c for c in cells if c.attack == first.attack and c.seed == first.seed}
    times: dict[str, float] = {}
    updates: dict[str, dict[str, torch.Tensor]] = {}
    for cell in levels.values():
        updates.setdefault(level_name(cell), prepare(cell)[2].gradients)  # also the warm-up
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            prepare(cell)
            runs.append(time.perf_counter() - start)
        times.setdefault(level_name(cell), statistics.median(runs))
        print(f"{' '.join(cell_settings(cell)):<110} {statistics.median(runs):7.2f} s", flush=True)
    for name, base in BASELINE.items():
        if name in times and base in times:
            extra = times[name] - times[base]
            gap = max(float((updates[name][k] - g).abs().max()) for k, g in updates[base].items())
            top = max(float(g.abs().max()) for g in updates[base].values())
            print(f"{name}: {times[name]:.2f} s vs {base} {times[base]:.2f} s: {extra:+.2f} s a cell; "
                  f"max |Δ gradient| {gap:.2e} (relative {gap / top:.1e})")
    return 0


def level_name(cell: CellSpec) -> str:
    """The cell's update level: its client transform's name, 'dp' for a DP-SGD cell, 'none' for plain FedSGD."""
    return cell.defences[0].name if cell.defences else ("dp" if cell.dp is not None else "none")


if __name__ == "__main__":
    raise SystemExit(main())
