"""Trained victims (issue 15): the tables of docs/notebook/victims.md, from a stored run of `paper/victims`.

    leakbench run paper/victims --data-root DIR --out RESULTS
    python benchmarks/victims_table.py RESULTS/paper-victims --data-root DIR [--doc docs/notebook/victims.md]

Reads the run's cells.parquet and manifest.json only (no attack runs); the victims' accuracies are the
`victims` view (`leakbench view victims RUN_DIR`). The ReLU sparsity of the
attacked layer is measured here, from the victim (loaded from the victim cache, or retrained
deterministically when the cache is gone) on the cell's batch: the fraction of (image, unit) pairs
of the ReLU after the attacked layer that are inactive, and the units inactive for the whole batch.
The tables replace what lies between the markers in the doc; the prose around them is kept.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd
import torch

from leakbench.cell.spec import spec_from_dict
from leakbench.harness.victim import victim
from leakbench.reporting.views import apply_view

BEGIN, END = "<!-- victims-table:begin -->", "<!-- victims-table:end -->"


def relu_sparsity(spec_data: dict, data_root: str | None) -> tuple[float, float, float, float]:
    """(inactive fraction of (image, unit) pairs, fraction of units inactive on every image, fraction of
    units active on fewer than 10 % of the images) of the ReLU after the attacked layer, and the
    per-sample gradient spread there, for the cell's victim and batch."""
    spec = spec_from_dict({**spec_data, "data_root": data_root})
    batch, model = victim(spec)
    with torch.no_grad():
        h = model.layer_inputs(batch.images.to(torch.float32), spec.layer + 1)
    off = h <= 0
    rate = (~off).float().mean(dim=0)
    return (float(off.float().mean()), float(off.all(dim=0).float().mean()), float((rate < 0.1).float().mean()),
            gradient_spread(model, batch, spec.layer))


def gradient_spread(model: torch.nn.Module, batch, layer: int) -> float:
    """max/min over the batch of the per-sample gradient norm ‖∂ℓ_i/∂z_i‖ at the attacked layer's output
    (the columns SPEAR must separate; rows are per sample since nothing mixes samples)."""
    seen = {}

    def keep(module, inputs, output):
        output.retain_grad()
        seen["z"] = output

    handle = model.linear_layers()[layer - 1].register_forward_hook(keep)
    try:
        loss = torch.nn.functional.cross_entropy(model(batch.images), batch.labels, reduction="sum")
        loss.backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    norms = seen["z"].grad.norm(dim=1)
    return float(norms.max() / norms.min())


def sparsity_table(manifest: dict, data_root: str | None) -> pd.DataFrame:
    """One row per (train_epochs, batch size, seed): the attacked batches are the same for every attack."""
    rows, seen = [], set()
    for cell in manifest["cells"]:
        spec = {k: v for k, v in cell.items() if k not in ("cell_id", "batch_id", "grid_selection")}
        key = (spec.get("train_epochs", 0), spec["batch_size"], spec["seed"], spec.get("layer", 1))
        if key in seen:
            continue
        seen.add(key)
        inactive, dead, rare, spread = relu_sparsity(spec, data_root)
        rows.append({"train_epochs": key[0], "batch_size": key[1], "seed": key[2], "inactive": inactive,
                     "dead_on_batch": dead, "rarely_active": rare, "gradient_spread": spread})
    return pd.DataFrame(rows)


def _num(value: float, digits: int) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _draws(stats: str) -> str:
    parsed = json.loads(stats or "{}")
    return f"{parsed['draws']:,}" if "draws" in parsed else ""


def victims_markdown(cells: pd.DataFrame) -> list[str]:
    """The victims' accuracies (the `victims` view), one row per epoch count and init seed."""
    v = apply_view("victims", cells).table
    lines = ["| train epochs | init seed | train accuracy % (train part) | test accuracy % (test part) | victim hash |",
             "|---|---|---|---|---|"]
    for r in v.itertuples():
        lines.append(f"| {r.train_epochs} | {r.seed} | {_num(r.train_accuracy_pct, 1)} | "
                     f"{_num(r.test_accuracy_pct, 1)} | "
                     f"{r.victim_hash[:12] or 'at init'} |")
    return lines


def sparsity_markdown(sp: pd.DataFrame) -> list[str]:
    """Inactive % · units off for the whole batch % · units active on < 10 % of it, per epoch count and
    batch size (mean over seeds)."""
    bs = sorted(sp["batch_size"].unique())
    lines = ["| train epochs | " + " | ".join(f"b = {b}: inactive % · units off on all % · on < 10 %" for b in bs)
             + " |",
             "|---" * (len(bs) + 1) + "|"]
    for epochs, group in sp.groupby("train_epochs"):
        cells = [group[group["batch_size"] == b] for b in bs]
        lines.append(f"| {epochs} | " + " | ".join(
            f"{100 * c['inactive'].mean():.1f} · {100 * c['dead_on_batch'].mean():.1f} · "
            f"{100 * c['rarely_active'].mean():.1f}" for c in cells) + " |")
    lines += ["", "Per-sample gradient spread at layer 1's output, max/min over the batch of ‖∂ℓ_i/∂z_i‖:", "",
              "| train epochs | " + " | ".join(f"b = {b}" for b in bs) + " |", "|---" * (len(bs) + 1) + "|"]
    for epochs, group in sp.groupby("train_epochs"):
        lines.append(f"| {epochs} | " + " | ".join(
            f"{group[group['batch_size'] == b]['gradient_spread'].mean():.1f}" for b in bs) + " |")
    return lines


def failure_text(reason: str) -> str:
    """'failed (draw budget, 0 of 64 found)' for SPEAR's budget failures, else 'failed: REASON' whole."""
    found = re.search(r"(draw|time) budget spent after \d+ draws with (\d+ of \d+) samples found", reason)
    return f"failed ({found[1]} budget, {found[2]} found)" if found else f"failed: {reason}"


def results_markdown(cells: pd.DataFrame) -> list[str]:
    """Every attack × epochs × b: status, exact %, PSNR median, LPIPS, seconds, SPEAR's draws."""
    lines = ["| attack | train epochs | b | seed | status | exact % | PSNR median dB | LPIPS | seconds | draws |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = {a: i for i, a in enumerate(dict.fromkeys(cells["attack"]))}
    frame = cells.assign(_o=cells["attack"].map(order)).sort_values(["_o", "train_epochs", "batch_size", "seed"])
    for r in frame.itertuples():
        status = r.status if r.status == "ok" else failure_text(str(r.reason))
        lines.append(f"| {r.attack} | {r.train_epochs} | {r.batch_size} | {r.seed} | {status} | "
                     f"{100 * r.exact_fraction:.0f} | {_num(r.psnr_median, 1)} | {_num(r.lpips_mean, 3)} | "
                     f"{r.seconds:.1f} | {_draws(r.attack_stats)} |")
    return lines


def tables(run_dir: Path, data_root: str | None) -> list[str]:
    cells = pd.read_parquet(run_dir / "cells.parquet")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    sp = sparsity_table(manifest, data_root)
    return [BEGIN, f"Generated by `benchmarks/victims_table.py` from `{run_dir.name}` "
            f"({len(cells)} cells, git {manifest.get('git_revision', '?')}).", "",
            "**Victims**", "", *victims_markdown(cells), "",
            "**ReLU after layer 1, on the attacked batches**", "", *sparsity_markdown(sp), "",
            "**Attacks** (one seed; PSNR median over the batch's images; LPIPS mean, AlexNet)", "",
            *results_markdown(cells), END]


def write_doc(doc: Path, block: list[str]) -> None:
    """Replace the marked block in `doc` (or append it) with `block`."""
    text = doc.read_text() if doc.exists() else ""
    new = "\n".join(block)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + new + rest.split(END, 1)[1]
    else:
        text = text + ("\n" if text else "") + new + "\n"
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the run folder, e.g. results/paper-victims")
    parser.add_argument("--data-root", help="where the dataset lies (default: where it was run from)")
    parser.add_argument("--doc", type=Path, help="write the tables into this Markdown file (else print)")
    args = parser.parse_args(argv)
    if not (args.run_dir / "cells.parquet").is_file():
        print(f"victims_table: error: no cells.parquet in {args.run_dir}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    block = tables(args.run_dir, args.data_root)
    if args.doc is None:
        print("\n".join(block))
    else:
        write_doc(args.doc, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
