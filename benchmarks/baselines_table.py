"""Baselines table: SPEAR, CPA, IG and DLG on TinyImageNet across FC victims and batch sizes.

Runs `leakbench.harness.cell.run_cell` for every (attack, model, batch size, seed), prints one table
row per cell as it finishes, then the whole table, and writes a CSV (one row per cell, numbers as
numbers). Images are paired with the ground truth by Hungarian matching on MSE before scoring.

    PYTHONPATH=. python benchmarks/baselines_table.py --data-root /path/with/tiny-imagenet-200 \\
        --batch-sizes 1,4,16,64 --seeds 0 --ig-iterations 200 --dlg-iterations 50 --out baselines.csv

An attack may carry hyperparameters after a colon, joined by '+':
`cpa:prefilter=derivative`, `ig:iterations=1000+restarts=2` (values parsed as JSON when they can be).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from leakbench.errors import LeakbenchError
from leakbench.harness.cell import CellSpec, run_cell
from leakbench.metrics import MATCHING

COLUMNS = ("attack", "model", "b", "seed", "exact_pct", "psnr_mean", "psnr_median", "ssim_mean", "seconds",
           "status", "note")


def parse_ints(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def parse_model(text: str) -> tuple[int, int]:
    """'fc2-256' → (depth 2, width 256)."""
    try:
        depth, width = text.lower().removeprefix("fc").split("-")
        return int(depth), int(width)
    except ValueError:
        raise argparse.ArgumentTypeError(f"model must look like fc<depth>-<width>, got {text!r}") from None


def parse_attack(text: str) -> tuple[str, dict[str, Any]]:
    """'cpa:prefilter=derivative+max_iter=500' → ('cpa', {...})."""
    name, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for pair in filter(None, rest.split("+")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"attack parameter must be KEY=VALUE, got {pair!r} in {text!r}")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return name.strip(), params


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", required=True, help="folder containing tiny-imagenet-200/")
    p.add_argument("--dataset", default="tinyimagenet")
    p.add_argument("--seeds", type=parse_ints, default=[0], help="comma-separated seeds (default 0)")
    p.add_argument("--batch-sizes", type=parse_ints, default=[1, 4, 8, 16, 32, 64])
    p.add_argument("--attacks", default="spear,cpa,ig,dlg",
                   help="comma-separated attacks, optionally name:key=value+key=value")
    p.add_argument("--models", default="fc2-256,fc6-200", help="comma-separated fc<depth>-<width>")
    p.add_argument("--ig-iterations", type=int, default=None, help="IG Adam steps (default: attack default)")
    p.add_argument("--dlg-iterations", type=int, default=None, help="DLG L-BFGS steps (default: attack default)")
    p.add_argument("--spear-seconds", type=float, default=120.0, help="SPEAR time budget per cell")
    p.add_argument("--out", type=Path, default=Path("baselines_table.csv"), help="CSV to write")
    return p


def cell_params(name: str, params: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out = dict(params)
    if name == "spear":
        out.setdefault("max_seconds", args.spear_seconds)
    if name == "ig" and args.ig_iterations is not None:
        out.setdefault("iterations", args.ig_iterations)
    if name == "dlg" and args.dlg_iterations is not None:
        out.setdefault("iterations", args.dlg_iterations)
    return out


def note_for(summary: dict[str, Any]) -> str:
    """A short attack-specific remark: failure reason, ICA convergence, labels, loss."""
    stats = summary.get("attack_stats") or {}
    if summary["status"] != "ok":
        return str(summary.get("reason", ""))[:80]
    bits = []
    if "converged" in stats and not stats["converged"]:
        bits.append("ICA not converged")
    if "final_loss" in stats and "initial_loss" in stats:
        bits.append(f"loss {stats['initial_loss']:.3g}->{stats['final_loss']:.3g}")
    if "label_strategy" in stats and stats["label_strategy"] != "given":
        bits.append(stats["label_strategy"].split(" ")[0])
    return "; ".join(bits)


def run_one(label: str, name: str, params: dict[str, Any], depth: int, width: int, b: int, seed: int,
            args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"attack": label, "model": f"fc{depth}-{width}", "b": b, "seed": seed}
    spec = CellSpec(attack=name, dataset=args.dataset, batch_size=b, seed=seed, width=width, depth=depth,
                    data_root=str(args.data_root), hyperparameters=cell_params(name, params, args))
    start = time.perf_counter()
    try:
        s = run_cell(spec).summary
    except LeakbenchError as exc:  # the attack refuses the cell (e.g. batch larger than the layer)
        row.update({"exact_pct": math.nan, "psnr_mean": math.nan, "psnr_median": math.nan, "ssim_mean": math.nan,
                    "seconds": time.perf_counter() - start, "status": "refused", "note": str(exc)[:80]})
        return row
    row.update({"exact_pct": 100.0 * s["exact_fraction"], "psnr_mean": _num(s["psnr_mean"]),
                "psnr_median": _num(s["psnr_median"]), "ssim_mean": _num(s["ssim_mean"]),
                "seconds": s["seconds"], "status": s["status"], "note": note_for(s)})
    return row


def _num(value: float | None) -> float:
    return math.nan if value is None else float(value)


def format_row(row: dict[str, Any]) -> str:
    def f(v: float, digits: int = 2) -> str:
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"

    return (f"{row['attack']:<24} {row['model']:<8} {row['b']:>3} {row['seed']:>4} {f(row['exact_pct'], 0):>6} "
            f"{f(row['psnr_mean']):>7} {f(row['psnr_median']):>7} {f(row['ssim_mean'], 3):>6} "
            f"{f(row['seconds'], 1):>7}  {row['status']:<7} {row['note']}")


HEADER = (f"{'attack':<24} {'model':<8} {'b':>3} {'seed':>4} {'exact%':>6} {'PSNR':>7} {'PSNRmed':>7} "
          f"{'SSIM':>6} {'seconds':>7}  {'status':<7} note")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    attacks = [(text, *parse_attack(text)) for text in args.attacks.split(",") if text.strip()]
    models = [parse_model(m) for m in args.models.split(",") if m.strip()]
    print(f"# {args.dataset}; matching: {MATCHING}; PSNR peak 1; images clamped to [0,1]", flush=True)
    print(HEADER, flush=True)
    rows = []
    for depth, width in models:
        for b in args.batch_sizes:
            for label, name, params in attacks:
                if name == "spear" and b >= width:
                    continue  # SPEAR needs b < layer width
                for seed in args.seeds:
                    row = run_one(label, name, params, depth, width, b, seed, args)
                    rows.append(row)
                    print(format_row(row), flush=True)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"\n# sorted by attack, model, b  (CSV: {args.out})")
    print(HEADER)
    for row in table.sort_values(["attack", "model", "b", "seed"], kind="stable").to_dict("records"):
        print(format_row(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
