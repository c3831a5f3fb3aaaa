"""Tables of docs/notebook/review.md from stored runs: exact % and PSNR per attack against one axis.

    python benchmarks/review_tables.py [--by COLUMN] [--per-seed] RUN_DIR [RUN_DIR ...]

Reads RUN_DIR/records.parquet (written by `leakbench run`) and prints one markdown table per run:
rows = the run's varying setting (client, DP level with ε, batch size, layer, dataset), columns = attack;
cells "exact % / PSNR median (dB)" (seeds pooled; failed images count as not exact, carry no PSNR)
plus the feature relative error where an attack worked in feature space. `--per-seed` appends the
exact % of each seed in seed order (e.g. "seeds 100/0/100"), to tell a partly failing setting from
one that fails on some batches only.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

AXES = ("client", "dp", "batch_size", "layer", "dataset")


def setting_column(records: pd.DataFrame) -> str:
    """The first axis that takes more than one value in the run (dataset if none does)."""
    for axis in AXES:
        if axis in records and records[axis].nunique() > 1:
            return axis
    return "dataset"


def summary(group: pd.DataFrame, per_seed: bool = False) -> str:
    """'exact % / PSNR median' for one setting and attack (+ feature error and failures when present)."""
    exact = 100 * group["exact"].astype(bool).mean()
    psnr = group["psnr"].dropna() if "psnr" in group else pd.Series(dtype=float)
    text = f"{exact:.0f} / {np.median(psnr):.1f}" if len(psnr) else f"{exact:.0f} / –"
    if (group["space"] == "feature").any() and "rel_error" in group and group["rel_error"].notna().any():
        text += f" (feat. err {group['rel_error'].median():.1e})"
    if per_seed and "seed" in group:
        seeds = group.groupby("seed", sort=True)["exact"].apply(lambda e: 100 * e.astype(bool).mean())
        text += " seeds " + "/".join(f"{v:.0f}" for v in seeds)
    failed = int((group["status"] != "ok").sum())
    return text + (f" [{failed} failed]" if failed else "")


def label(axis: str, value, records: pd.DataFrame) -> str:
    if axis == "dp":
        eps = float(records.loc[records["dp"] == value, "dp_epsilon"].iloc[0])
        return f"{value} (ε={'∞' if math.isinf(eps) else f'{eps:.3g}'})"
    return str(value)


def table(run_dir: Path, by: str | None = None, per_seed: bool = False) -> str:
    path = run_dir / "records.parquet"
    if not path.is_file():
        raise SystemExit(f"review_tables: no {path} (run `leakbench run` on the suite first)")
    records = pd.read_parquet(path)
    axis = by or setting_column(records)
    order = list(dict.fromkeys(records[axis]))  # plan order
    attacks = list(dict.fromkeys(records["attack"]))
    lines = [f"{run_dir.name}: exact % / PSNR median (dB), n = images pooled over seeds", "",
             "| " + axis + " | " + " | ".join(attacks) + " |", "|---" * (len(attacks) + 1) + "|"]
    for value in order:
        row = records[records[axis] == value]
        cells = [summary(row[row["attack"] == a], per_seed) if (row["attack"] == a).any() else "–" for a in attacks]
        lines.append(f"| {label(axis, value, records)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by", choices=AXES,
                        help="row axis (default: the first of client, dp, batch_size, layer, dataset that varies)")
    parser.add_argument("--per-seed", action="store_true", help="append the exact %% of each seed")
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for run in args.runs:
        print(table(run, args.by, args.per_seed), end="\n\n")


if __name__ == "__main__":
    main()
