"""Guided SPEAR on trained victims (docs/notebook/victims.md): how good is its guide, CPA, per epoch count?

    python benchmarks/victims_guide.py RESULTS/paper-victims --data-root DIR [--batch-size 64]

For every stored CPA cell of that batch size: the fraction of layer-1 pre-activations whose sign the
CPA reconstruction (matched to the truth) predicts, the median |z| and the median |ẑ − z|, and the
layer-1 weight norm of the victim. Reads stored reconstructions; runs no attack.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from leakbench.cell.spec import spec_from_dict
from leakbench.harness.victim import victim
from leakbench.metrics import apply_matching, match_by_mse


def guide_row(cell_dir: Path, data_root: str | None) -> dict:
    """Sign agreement and scales of layer-1 pre-activations for one stored CPA cell."""
    manifest = json.loads((cell_dir / "manifest.json").read_text())
    spec = spec_from_dict({**manifest["spec"], "data_root": data_root})
    batch, model = victim(spec)
    recon = torch.as_tensor(np.load(cell_dir / "reconstruction.npz")["images"]).float()
    aligned = apply_matching(recon, match_by_mse(recon, batch.images))
    layer = model.linear_layers()[0]
    with torch.no_grad():
        z, z_hat = layer(model.normalize(batch.images)), layer(model.normalize(aligned))
    return {"train_epochs": spec.train_epochs, "sign_agreement": float(((z > 0) == (z_hat > 0)).float().mean()),
            "median_abs_z": float(z.abs().median()), "median_error": float((z_hat - z).abs().median()),
            "weight_norm": float(layer.weight.detach().norm())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-root")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for summary in sorted((args.run_dir / "cells").glob("*/summary.json")):
        s = json.loads(summary.read_text())
        if s["attack"] == "cpa" and s["batch_size"] == args.batch_size and s["status"] == "ok":
            rows.append(guide_row(summary.parent, args.data_root))
    if not rows:
        print(f"victims_guide: error: no CPA cell of b={args.batch_size} in {args.run_dir}", file=sys.stderr)
        return 2
    print("| train epochs | signs predicted % | median abs z | median abs error | layer-1 weight norm |")
    print("|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r["train_epochs"]):
        print(f"| {r['train_epochs']} | {100 * r['sign_agreement']:.1f} | {r['median_abs_z']:.3f} | "
              f"{r['median_error']:.3f} | {r['weight_norm']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
