"""SPEAR speed benchmark: exact fraction, seconds and draws per batch size (not a timed test).

    PYTHONPATH=. python benchmarks/spear_speed.py --data-root ../shared/data --seeds 0-9 \
        --batch-sizes 1,2,4,8,12,16,20,25 --out results/spear_speed.csv

Victim: FC-6 width 200 at init, layer 1, TinyImageNet val (or --dataset). Prints a table and writes CSV.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from leakbench.harness.cell import CellSpec, run_cell


def parse_range(text: str) -> list[int]:
    """"0-9" or "1,2,4" → list of ints."""
    if "-" in text and "," not in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--batch-sizes", default="1,2,4,8,12,16,20,25")
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--layer", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("results/spear_speed.csv"))
    args = parser.parse_args(argv)
    rows = []
    for b in parse_range(args.batch_sizes):
        for seed in parse_range(args.seeds):
            spec = CellSpec(attack="spear", dataset=args.dataset, batch_size=b, seed=seed, width=args.width,
                            depth=args.depth, layer=args.layer, data_root=args.data_root,
                            hyperparameters={"max_seconds": args.max_seconds, "device": args.device})
            s = run_cell(spec).summary
            stats = s["attack_stats"]
            rows.append({"batch_size": b, "seed": seed, "status": s["status"], "exact_fraction": s["exact_fraction"],
                         "seconds": s["seconds"], "draws": stats.get("draws", 0), "retries": stats.get("retries", 0)})
            print(f"b={b:3d} seed={seed:2d} {s['status']:6s} exact={s['exact_fraction']:.2f} "
                  f"{s['seconds']:8.2f} s draws={stats.get('draws', 0)}", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    table = df.groupby("batch_size").agg(
        n=("seed", "size"), failed=("status", lambda s: int((s != "ok").sum())),
        exact_pct=("exact_fraction", lambda v: 100 * v.mean()),
        seconds_median=("seconds", "median"), seconds_max=("seconds", "max"),
        draws_median=("draws", "median"), draws_max=("draws", "max"))
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
