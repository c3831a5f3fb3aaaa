"""SPEAR on the shallow MLP (issue 44): found / exact / seconds for spear-guided on FC-2 (layer 1 feeds the classifier).

    PYTHONPATH=. python benchmarks/fc2_frontier.py --data-root ../shared/data/cifar10 \
        --width 1000 --batch-sizes 64,128,256 --seeds 0-2 --max-seconds 900

Runs each cell through the harness (CIFAR-10, leakbench's default FC victim at init, `--depth 2`), like
`leakbench attack --attack spear-guided --depth 2 --width 1000 --batch-size 64 --dataset cifar10`. Prints one line
per cell: b, seed, status, samples found (attack_stats.samples_found), exact fraction, seconds, the guide's seconds,
and the columns the next-layer weight check rejected. Run it on an idle machine (the seconds are wall time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranges import parse_range

from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", required=True, help="CIFAR-10 folder")
    ap.add_argument("--attack", default="spear-guided")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--batch-sizes", default="64,128,256")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--max-seconds", type=float, default=900.0)
    args = ap.parse_args()
    print("attack,width,b,seed,status,found,exact,seconds,guide_seconds,rejected_next_weight", flush=True)
    for b in parse_range(args.batch_sizes):
        for seed in parse_range(args.seeds):
            spec = CellSpec(attack=args.attack, dataset="cifar10", batch_size=b, seed=seed, width=args.width,
                            depth=2, layer=1, data_root=args.data_root,
                            hyperparameters={"max_seconds": args.max_seconds})
            s = run_cell(spec).summary
            st = s.get("attack_stats", {})
            print(f"{args.attack},{args.width},{b},{seed},{s['status']},{st.get('samples_found', '')},"
                  f"{s.get('exact_fraction', 0.0):.3f},{s.get('seconds', 0.0):.1f},"
                  f"{st.get('guide_seconds', 0.0):.1f},{st.get('rejected_next_weight', 0)}", flush=True)


if __name__ == "__main__":
    main()
