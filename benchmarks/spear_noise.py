"""SPEAR under Gaussian noise on the shared gradient (not DP-SGD: plain additive noise).

    PYTHONPATH=. python benchmarks/spear_noise.py --data-root ../shared/data --batch-size 8 \
        --levels 0,1e-6,1e-5,1e-4,1e-3,1e-2 --seeds 0-2 --max-seconds 30

Noise std = level × max |gradient entry| of each parameter tensor. Prints PSNR / exact per level and
writes CSV. A failed attack (nothing verified within the budget) counts as PSNR NaN, exact 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd
import torch

from leakbench.attacks import create_attack
from leakbench.fl import ClientUpdate
from leakbench.harness.cell import CellSpec, prepare
from leakbench.metrics import score_images


def noisy(update: ClientUpdate, level: float, seed: int) -> ClientUpdate:
    """The update with i.i.d. Gaussian noise of std level·max|g| added to every gradient tensor."""
    gen = torch.Generator().manual_seed(seed)
    grads = {k: v + level * v.abs().max() * torch.randn(v.shape, generator=gen, dtype=v.dtype)
             for k, v in update.gradients.items()}
    return dataclasses.replace(update, gradients=grads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--levels", default="0,1e-6,1e-5,1e-4,1e-3,1e-2")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=Path("results/spear_noise.csv"))
    args = parser.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    rows = []
    for level in [float(v) for v in args.levels.split(",")]:
        for seed in seeds:
            spec = CellSpec(attack="spear", dataset=args.dataset, batch_size=args.batch_size, seed=seed,
                            data_root=args.data_root)
            batch, _, update = prepare(spec)
            rec = create_attack("spear", max_seconds=args.max_seconds).reconstruct(noisy(update, level, seed),
                                                                                 seed=seed)
            scores = score_images(rec.images if rec.status == "ok" else None, batch.images, lpips=None)
            rows.append({"level": level, "seed": seed, "status": rec.status, "psnr_mean": scores["psnr"].mean(),
                         "exact_fraction": scores["exact"].mean(), "seconds": rec.stats.get("seconds")})
            print(rows[-1], file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    print(df.groupby("level").agg(n=("seed", "size"), failed=("status", lambda s: int((s != "ok").sum())),
                                  psnr_mean=("psnr_mean", "mean"), exact_pct=("exact_fraction", lambda v: 100 * v.mean()),
                                  seconds_median=("seconds", "median")).to_string())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
