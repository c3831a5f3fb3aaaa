"""SPEAR under Gaussian noise on the shared gradient: the per-level table of a `paper/spear-noise` run.

    leakbench reproduce spear-noise --data-root ../shared/data     # runs the suite (records under results/)
    PYTHONPATH=. python benchmarks/spear_noise.py --run results/paper-spear-noise

Noise std = σ × max |gradient entry| of each parameter tensor (the suite's `noise_scale = "max"`).
Prints PSNR / exact per level from the run's cells and writes them as CSV. A failed attack (nothing
verified within the budget) counts as PSNR NaN, exact 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def noise_table(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per noise level σ: cells, failures, mean PSNR of the cells, exact %, median seconds."""
    return cells.groupby("noise_sigma").agg(
        n=("seed", "size"), failed=("status", lambda s: int((s != "ok").sum())),
        psnr_mean=("psnr_mean", "mean"), exact_pct=("exact_fraction", lambda v: 100 * v.mean()),
        seconds_median=("seconds", "median"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=Path("results/paper-spear-noise"),
                        help="the run folder of the paper/spear-noise suite (holds cells.parquet)")
    parser.add_argument("--out", type=Path, default=None, help="CSV path (default: RUN/noise_table.csv)")
    args = parser.parse_args(argv)
    path = args.run / "cells.parquet"
    if not path.is_file():
        print(f"spear_noise: no {path}; run `leakbench reproduce spear-noise` first", file=sys.stderr)
        return 2
    table = noise_table(pd.read_parquet(path))
    print(table.to_string())
    out = args.out or args.run / "noise_table.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
