"""CPA's guide under a time bound (attacks/ica.py): seconds, iterations and the guide's quality per bound.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/guide_budget.py --data-root ../shared/data \
        --width 2000 --batch-size 800 --seeds 0 --bounds 0,150,300,450 [--whiten-solver eigh]

Runs spear-guided's guide (CPA, FastICA with the derivative prefilter) on the cell's update with each wall-clock
bound (`max_seconds`; 0: unbounded, scikit-learn's estimator as CPA always ran it) and prints, measured here with the
ground truth the attack never sees (spear_guided.guide_quality): the fraction of neurons whose sign the guide
predicts right and the precision of the pool a draw starts from — the two figures that set how many draws the search
needs. FC-6 TinyImageNet at init, layer 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranges import parse_range
from spear_guided import guide_quality

from leakbench.attacks import create_attack
from leakbench.attacks.spear.tolerances import TOLERANCES
from leakbench.cell.spec import CellSpec
from leakbench.harness.victim import prepare


def measure(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for seed in parse_range(args.seeds):
        spec = CellSpec(attack="spear-guided", dataset="tinyimagenet", batch_size=args.batch_size, seed=seed,
                        width=args.width, depth=6, layer=1, data_root=args.data_root)
        batch, model, update = prepare(spec)
        for bound in [float(x) for x in args.bounds.split(",")]:
            solver = args.whiten_solver if bound > 0 else "svd"
            attack = create_attack("cpa", prefilter="derivative", max_seconds=bound, whiten_solver=solver)
            start = time.perf_counter()
            rec = attack.reconstruct(update, seed=seed)
            seconds = time.perf_counter() - start
            row = {"width": args.width, "b": args.batch_size, "seed": seed, "bound_s": bound, "whiten": solver,
                   "seconds": round(seconds, 1), "iterations": rec.stats.get("iterations"),
                   "converged": rec.stats.get("converged"), "status": rec.status}
            if rec.features is not None:
                row.update(guide_quality(model, batch, rec.features, TOLERANCES.pool_start))
            rows.append(row)
            print(pd.DataFrame([row]).to_string(index=False, header=len(rows) == 1), flush=True)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--width", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=800)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--bounds", default="0,150,300,450", help="max_seconds values, comma-separated (0: none)")
    parser.add_argument("--whiten-solver", default="eigh", choices=("svd", "eigh"))
    parser.add_argument("--out", help="CSV to write")
    args = parser.parse_args(argv)
    table = measure(args)
    if args.out:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
