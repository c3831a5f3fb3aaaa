"""spear-dl against guided SPEAR, and spear-paper (SPEAR as published) against spear (issue 16).

    PYTHONPATH=. python benchmarks/spear_dl.py --data-root ../shared/data --out reports/spear-dl \\
        --batch-sizes 25,50,100,200 --widths 400,2000 --seeds 0 --max-seconds 300 \\
        --route-batch-sizes 8,12,16,20,25 --route-seeds 0-2 --route-max-seconds 120

Part 1 (`frontier.csv`): `spear-dl` and `spear-guided` through the harness on the same cells
(TinyImageNet, FC-6 at init, layer 1, every b < width), each with the per-run time budget
`--max-seconds`: exact fraction, seconds, draws (spear-dl counts one proposal as one draw) and how
many samples the proposals (or guides) found. Part 2 (`routes.csv`, skipped with
`--route-batch-sizes ""`): `spear-paper` (the published algorithm) and `spear` (the deflated search)
at small b on width `--route-width`. Figures are printed as tables; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranges import parse_range

from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell


def run(args: argparse.Namespace, attack: str, b: int, width: int, seed: int, budget: float,
        **params: object) -> dict:
    """One cell; the row of figures printed and stored."""
    spec = CellSpec(attack=attack, dataset=args.dataset, batch_size=b, seed=seed, width=width, depth=6, layer=1,
                    data_root=args.data_root, hyperparameters={"max_seconds": budget, **params})
    s = run_cell(spec).summary
    stats = s["attack_stats"]
    row = {"attack": attack, **{k: v for k, v in params.items()}, "width": width, "batch_size": b, "seed": seed,
           "status": s["status"], "exact_fraction": s["exact_fraction"], "seconds": s["seconds"],
           "draws": stats.get("draws", 0), "samples_found": stats.get("samples_found", 0),
           "found_by_lead": stats.get("dl_found", stats.get("guides_matched")),
           "mode": stats.get("mode"), "reason": s["reason"]}
    print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
          file=sys.stderr, flush=True)
    return row


def frontier(args: argparse.Namespace) -> pd.DataFrame:
    rows = [run(args, attack, b, width, seed, args.max_seconds)
            for width in parse_range(args.widths)
            for b in parse_range(args.batch_sizes) if b < width
            for seed in parse_range(args.seeds)
            for attack in args.attacks.split(",")]
    return pd.DataFrame(rows)


def routes(args: argparse.Namespace) -> pd.DataFrame:
    rows = [run(args, attack, b, args.route_width, seed, args.route_max_seconds)
            for b in parse_range(args.route_batch_sizes)
            for seed in parse_range(args.route_seeds)
            for attack in ("spear-paper", "spear")]
    return pd.DataFrame(rows)


def table(df: pd.DataFrame, keys: list[str]) -> str:
    return df.groupby(keys).agg(
        n=("seed", "size"), failed=("status", lambda s: int((s != "ok").sum())),
        exact_pct=("exact_fraction", lambda v: 100 * v.mean()), seconds_median=("seconds", "median"),
        seconds_max=("seconds", "max"), draws_median=("draws", "median"),
        found_median=("samples_found", "median")).to_string(float_format=lambda v: f"{v:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--attacks", default="spear-dl,spear-guided")
    parser.add_argument("--batch-sizes", default="25,50,100,200")
    parser.add_argument("--widths", default="400,2000")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="per-run time budget of part 1")
    parser.add_argument("--route-batch-sizes", default="8,12,16,20,25", help="part 2; empty to skip")
    parser.add_argument("--route-seeds", default="0-2")
    parser.add_argument("--route-width", type=int, default=200)
    parser.add_argument("--route-max-seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("reports/spear-dl"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.batch_sizes:
        df = frontier(args)
        df.to_csv(args.out / "frontier.csv", index=False)
        print(table(df, ["attack", "width", "batch_size"]))
    if args.route_batch_sizes:
        dr = routes(args)
        dr.to_csv(args.out / "routes.csv", index=False)
        print(table(dr, ["attack", "batch_size"]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
