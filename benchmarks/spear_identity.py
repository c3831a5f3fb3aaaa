"""Same draws before and after a refactor: every SPEAR-family route on a fixed set of cells, one JSON line each.

    PYTHONPATH=. python benchmarks/spear_identity.py --data-root ../shared/data --out /tmp/new.jsonl
    PYTHONPATH=/work/wt/old python benchmarks/spear_identity.py --data-root ../shared/data --out /tmp/old.jsonl
    diff /tmp/old.jsonl /tmp/new.jsonl          # empty: the same search, draw for draw

Each line holds a cell's status, its search counters (draws, candidates, patterns, fits, retries, guide and
proposal counters; every stat but times) and a digest of the recovered inputs. The cells exercise each
route a refactor of the deflated search can change: uniform and row-weighted zero draws, two-sided draws
(layer 3), the tail switch, remembered directions, bans after failed completions (gradient noise), the
guide (with and without `refine_first`), residual guides and guide-pattern fits (b ≥ 128), the
dictionary-learning proposals, and the paper route. `--quick` keeps the cells under a minute each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

CELLS: list[dict[str, Any]] = [
    *({"attack": "spear", "b": b, "seed": s, "width": 200} for b in (20, 25) for s in range(3)),
    {"attack": "spear", "b": 20, "seed": 0, "width": 200, "params": {"row_weight_power": 0.0}},
    {"attack": "spear", "b": 20, "seed": 1, "width": 200, "params": {"sampler": "both"}},
    {"attack": "spear", "b": 8, "seed": 0, "width": 200, "layer": 3},
    {"attack": "spear", "b": 8, "seed": 1, "width": 200, "layer": 3, "params": {"sampler": "zeros"}},
    {"attack": "spear", "b": 8, "seed": 0, "width": 200, "noise": 1e-8},
    {"attack": "spear-paper", "b": 8, "seed": 0, "width": 200, "params": {"lp_check": True, "last_column": True,
                                                                       "second_stage": False}},
    {"attack": "spear-guided", "b": 50, "seed": 0, "width": 400},
    {"attack": "spear-guided", "b": 50, "seed": 1, "width": 400, "params": {"refine_first": True}},
    {"attack": "spear-guided", "b": 32, "seed": 0, "width": 400, "layer": 2},
    {"attack": "spear-guided", "b": 130, "seed": 0, "width": 400, "slow": True},
    {"attack": "spear-dl", "b": 25, "seed": 0, "width": 400},
    {"attack": "spear-dl", "b": 40, "seed": 1, "width": 400, "params": {"init": "msp"}},
]
"""The cells: FC-6 at init on TinyImageNet (layer 1 unless given); `slow` cells are skipped with --quick.
Before issue 26 spear-paper was `spear` with route=paper, and spear-paper's two additions were always on:
`--before-26` runs those cells so (the other cells are the same either side)."""

TIMES = ("seconds", "search_seconds", "guide_seconds", "residual_guide_seconds", "pattern_fit_seconds")


def run_one(cell: dict[str, Any], data_root: str | None, max_seconds: float, before_26: bool) -> dict[str, Any]:
    """One cell through `create_attack(...).reconstruct` (the attack seed is the cell's seed)."""
    from leakbench.attacks import create_attack
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.victim import prepare

    shown = cell
    if before_26 and cell["attack"] == "spear-paper":
        cell = {**cell, "attack": "spear", "params": {"route": "paper"}}
    spec = CellSpec(attack=cell["attack"], dataset="tinyimagenet", batch_size=cell["b"], seed=cell["seed"],
                    width=cell["width"], layer=cell.get("layer", 1), data_root=data_root,
                    noise=cell.get("noise", 0.0))
    _, _, update = prepare(spec)
    params = {"max_seconds": max_seconds, "layer": cell.get("layer", 1), **cell.get("params", {})}
    start = time.perf_counter()
    recon = create_attack(cell["attack"], **params).reconstruct(update, seed=cell["seed"])
    seconds = time.perf_counter() - start
    out = recon.features if recon.features is not None else recon.images
    digest = hashlib.sha256(out.double().numpy().round(6).tobytes()).hexdigest()[:16] if out is not None else ""
    stats = {k: v for k, v in sorted(recon.stats.items()) if k not in TIMES}
    return {"cell": shown, "status": recon.status, "reason": recon.reason, "digest": digest, "stats": stats,
            "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="budget per cell (a cell that hits "
                        "it is not comparable draw for draw)")
    parser.add_argument("--quick", action="store_true", help="skip the slow cells")
    parser.add_argument("--before-26", action="store_true", help="a checkout from before issue 26 (route=paper)")
    parser.add_argument("--only", default="", help="comma-separated cell indices")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per cell (seconds left out)")
    args = parser.parse_args(argv)
    picked = [int(i) for i in args.only.split(",")] if args.only else range(len(CELLS))
    lines = []
    for i in picked:
        cell = CELLS[i]
        if args.quick and cell.get("slow"):
            continue
        row = run_one(cell, args.data_root, args.max_seconds, args.before_26)
        print(f"{i:2d} {row['seconds']:7.1f} s {row['status']:6s} {row['digest']} {json.dumps(row['cell'])} "
              f"draws={row['stats'].get('draws')} found={row['stats'].get('samples_found')}", flush=True)
        row.pop("seconds")
        lines.append(json.dumps({"index": i, **row}, sort_keys=True, default=str))
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
