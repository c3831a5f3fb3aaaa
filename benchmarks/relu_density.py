"""The attacked layer's ReLU density per stored cell, next to the attack's outcome (issue 16).

    python benchmarks/relu_density.py RESULTS/paper-spear-dl-density --data-root DIR

For every stored cell: the victim's training epochs, the attack, b, and — measured here with the
ground truth, which the attacks never see — the fraction of layer-`layer` neurons inactive
(pre-activation ≤ 0) per image of the batch (mean and min over the images; SPEAR's zero draws need
b − 1 inactive neurons for one image), beside the cell's status, exact % and seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from leakbench.cell.spec import spec_from_dict
from leakbench.harness.victim import victim


def density_row(summary: dict, manifest: dict, data_root: str | None) -> dict:
    """One cell's row: its settings, inactive fraction (mean, min over images), outcome."""
    spec = spec_from_dict({**manifest["spec"], "data_root": data_root})
    batch, model = victim(spec)
    weight, bias = (dict(model.named_parameters())[name] for name in model.layer_param_names(spec.layer))
    with torch.no_grad():
        z = model.layer_inputs(batch.images, spec.layer).flatten(1) @ weight.T + bias
    inactive = (z <= 0).float().mean(dim=1)
    return {"attack": summary["attack"], "train_epochs": spec.train_epochs, "batch_size": spec.batch_size,
            "seed": spec.seed, "inactive_mean": float(inactive.mean()), "inactive_min": float(inactive.min()),
            "width": int(weight.shape[0]), "status": summary["status"],
            "exact_pct": 100.0 * float(summary["exact_fraction"]), "seconds": float(summary["seconds"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-root")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for path in sorted((args.run_dir / "cells").glob("*/summary.json")):
        manifest = path.parent / "manifest.json"
        if manifest.is_file():
            rows.append(density_row(json.loads(path.read_text()), json.loads(manifest.read_text()), args.data_root))
    if not rows:
        print(f"relu_density: error: no stored cells in {args.run_dir}", file=sys.stderr)
        return 2
    print("| attack | train epochs | b | seed | inactive % (mean over images) | min | status | exact % | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["attack"], r["train_epochs"], r["batch_size"], r["seed"])):
        print(f"| {r['attack']} | {r['train_epochs']} | {r['batch_size']} | {r['seed']} | "
              f"{100 * r['inactive_mean']:.1f} | {100 * r['inactive_min']:.1f} | {r['status']} | "
              f"{r['exact_pct']:.0f} | {r['seconds']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
