"""Tables of docs/review.md from stored runs: exact % and PSNR per attack against one axis.

    python benchmarks/review_tables.py [--by COLUMN] RUN_DIR [RUN_DIR ...]

Reads RUN_DIR/records.parquet (written by `leakbench run`) and prints one markdown table per run:
rows = the run's varying setting (client, DP level with ε, layer, dataset), columns = attack;
cells "exact % / PSNR median (dB)" (seeds pooled; failed images count as not exact, carry no PSNR)
plus the feature relative error where an attack worked in feature space.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

AXES = ("client", "dp", "layer", "dataset")


def setting_column(records: pd.DataFrame) -> str:
    """The first axis that takes more than one value in the run (dataset if none does)."""
    for axis in AXES:
        if axis in records and records[axis].nunique() > 1:
            return axis
    return "dataset"


def summary(group: pd.DataFrame) -> str:
    """'exact % / PSNR median' for one setting and attack (+ feature error and failures when present)."""
    exact = 100 * group["exact"].astype(bool).mean()
    psnr = group["psnr"].dropna() if "psnr" in group else pd.Series(dtype=float)
    text = f"{exact:.0f} / {np.median(psnr):.1f}" if len(psnr) else f"{exact:.0f} / –"
    if (group["space"] == "feature").any() and "rel_error" in group and group["rel_error"].notna().any():
        text += f" (feat. err {group['rel_error'].median():.1e})"
    failed = int((group["status"] != "ok").sum())
    return text + (f" [{failed} failed]" if failed else "")


def label(axis: str, value, records: pd.DataFrame) -> str:
    if axis == "dp":
        eps = float(records.loc[records["dp"] == value, "dp_epsilon"].iloc[0])
        return f"{value} (ε={'∞' if math.isinf(eps) else f'{eps:.3g}'})"
    return str(value)


def table(run_dir: Path, by: str | None = None) -> str:
    records = pd.read_parquet(run_dir / "records.parquet")
    axis = by or setting_column(records)
    order = list(dict.fromkeys(records[axis]))  # plan order
    attacks = list(dict.fromkeys(records["attack"]))
    lines = [f"{run_dir.name}: exact % / PSNR median (dB), n = images pooled over seeds", "",
             "| " + axis + " | " + " | ".join(attacks) + " |", "|---" * (len(attacks) + 1) + "|"]
    for value in order:
        row = records[records[axis] == value]
        cells = [summary(row[row["attack"] == a]) if (row["attack"] == a).any() else "–" for a in attacks]
        lines.append(f"| {label(axis, value, records)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by", choices=AXES, help="row axis (default: the first of client, dp, layer, dataset that varies)")
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    for run in args.runs:
        print(table(run, args.by), end="\n\n")


if __name__ == "__main__":
    main()
