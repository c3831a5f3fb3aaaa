"""The attack × defence matrix of a stored run as one Markdown table (docs/notebook/defences.md).

One row per defence level (in suite order), the victim's test accuracy when trained with it, and per
attack "exact % · PSNR median" — on the victim at init, then on the trained one. From stored records
only (`leakbench.api.load_cells`); nothing is rerun.

    python benchmarks/defences_table.py RUN_DIR [--lpips]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from leakbench import api
from leakbench.reporting.aggregate import with_model
from leakbench.reporting.defences import defence_levels


def cell_text(row: pd.Series, lpips: bool) -> str:
    """'100 · 146' (exact %, PSNR median), '–' without images, 'fail' for a failed cell."""
    if row["status"] != "ok" and (row["psnr_median"] is None or math.isnan(row["psnr_median"])):
        return "fail"
    psnr = row["psnr_median"]
    text = f"{100 * row['exact_fraction']:.0f} · {psnr:.1f}" if not math.isnan(psnr) else "–"
    return text + (f" · {row['lpips_mean']:.2f}" if lpips and not math.isnan(row["lpips_mean"]) else "")


def matrix(cells: pd.DataFrame, lpips: bool = False) -> str:
    """The Markdown matrix of `cells` (one seed and batch size per level, attack and training)."""
    cells = cells.assign(level=defence_levels(with_model(cells)))
    levels = list(dict.fromkeys(cells["level"]))
    attacks = list(dict.fromkeys(cells["attack"]))
    epochs = sorted(cells["train_epochs"].unique())
    head = ["defence level", "test acc. %"] + [f"{a} ({'init' if e == 0 else f'{e} ep'})"
                                                for a in attacks for e in epochs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for level in levels:
        at = cells[cells["level"] == level]
        trained = at[at["train_epochs"] > 0]["test_accuracy"].dropna()
        row = [level, f"{100 * trained.iloc[0]:.1f}" if len(trained) else "–"]
        for attack in attacks:
            for e in epochs:
                one = at[(at["attack"] == attack) & (at["train_epochs"] == e)]
                row.append(cell_text(one.iloc[0], lpips) if len(one) else "")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--lpips", action="store_true", help="add the mean LPIPS to each entry")
    args = parser.parse_args(argv)
    if not (args.run / "cells.parquet").is_file():
        print(f"defences_table: {args.run} holds no finished run (no cells.parquet)", file=sys.stderr)
        return 2
    print(matrix(api.load_cells(args.run), args.lpips))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
