"""SPEAR: measured draws against the theory, and measured failure rates against the bound.

    PYTHONPATH=. python benchmarks/spear_draws.py --data-root ../shared/data --out reports

Victim: FC-6 at init, layer 1, TinyImageNet val (or --dataset). Part 1: widths m (default 200 and
2000) × batch sizes × seeds; per cell the draws SPEAR made, next to the expectation computed from
the batch's own zero counts (`theory.expected_draws`, ground truth used here only, never by the
attack), the Binomial(m, ½) idealisation with deflation, and plain SPEAR's 2^(b−1)·H_b. Draws are
counted in whole chunks; the chunk shrinks with b (`chunk_for`) so small counts are not rounded up.
Part 2: small widths at one batch size; failure rate over seeds against `theory.failure_bound`.
Writes spear_draws.csv, spear_failures.csv, spear_draws.png and prints both tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from leakbench.attacks.spear import theory
from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare

sys.path.insert(0, str(Path(__file__).parent))
from ranges import parse_range


def zero_counts(spec: CellSpec) -> tuple[np.ndarray, int]:
    """Ground truth for the benchmark: each sample's inactive neurons among the live ones at layer 1."""
    batch, model, _ = prepare(spec)
    with torch.no_grad():
        first = model.linear_layers()[0]
        active = (first(model.normalize(batch.images.to(first.weight.dtype))) > 0)
    live = active.any(dim=0)
    return (~active[:, live]).sum(dim=1).numpy(), int(live.sum())


def chunk_for(b: int) -> int:
    """Draws per vectorised chunk: small for small b so the count is not rounded up to a chunk."""
    return 256 if b <= 8 else 1024 if b <= 12 else 4096 if b <= 16 else 0


def run(spec: CellSpec) -> dict:
    s = run_cell(spec).summary
    z, m_live = zero_counts(spec)
    return {"width": spec.width, "batch_size": spec.batch_size, "seed": spec.seed, "status": s["status"],
            "exact_fraction": s["exact_fraction"], "seconds": s["seconds"],
            "draws": s["attack_stats"].get("draws", 0), "live": m_live, "zeros_min": int(z.min()),
            "expected_deflation": theory.expected_draws(z, m_live, deflation=True),
            "expected_plain": theory.expected_draws(z, m_live, deflation=False)}


def plot(draws: pd.DataFrame, failures: pd.DataFrame, path: Path) -> None:
    widths = sorted(draws.width.unique())
    fig, axes = plt.subplots(1, len(widths) + 1, figsize=(5 * (len(widths) + 1), 4))
    for ax, m in zip(axes, widths, strict=False):  # the last axis is the failures panel
        d = draws[draws.width == m].groupby("batch_size")
        b = np.array(sorted(draws[draws.width == m].batch_size.unique()))
        ax.fill_between(b, d.draws.quantile(0.1), d.draws.quantile(0.9), alpha=0.3, label="measured 10–90 %")
        ax.plot(b, d.draws.median(), "o-", label="measured median")
        ax.plot(b, d.expected_deflation.median(), "s--", label="expected (batch's zeros, deflation)")
        ax.plot(b, [theory.expected_draws_binomial(int(k), m, batches=16) for k in b], ":",
                label="expected (Binomial(m,½), deflation)")
        ax.plot(b, [theory.plain_draws_approx(int(k)) for k in b], "-.", label="plain SPEAR 2^(b−1)·H_b")
        ax.set(yscale="log", xlabel="batch size b", ylabel="draws", title=f"m = {m}")
        ax.legend(fontsize=7)
    ax = axes[-1]
    f = failures.groupby("width").agg(rate=("failed", "mean"), bound=("bound", "first"), n=("failed", "size"))
    ax.plot(f.index, f.rate, "o-", label=f"measured failure rate (n={int(f.n.iloc[0])} per m)")
    ax.plot(f.index, f.bound, "s--", label="bound, Binomial(m,½), deflation")
    ax.set(xlabel="width m", ylabel="P(failure)", title=f"b = {int(failures.batch_size.iloc[0])}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--widths", default="200,2000")
    parser.add_argument("--batch-sizes", default="4,8,12,16,20")
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--failure-batch-size", type=int, default=8)
    parser.add_argument("--failure-widths", default="12,16,20,24,32")
    parser.add_argument("--failure-seeds", default="0-9")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    base = dict(attack="spear", dataset=args.dataset, depth=6, layer=1, data_root=args.data_root,
                hyperparameters={"max_seconds": args.max_seconds})
    rows = []
    for m in parse_range(args.widths):
        for b in parse_range(args.batch_sizes):
            for seed in parse_range(args.seeds):
                hp = {**base["hyperparameters"], "chunk": chunk_for(b)}
                rows.append(run(CellSpec(batch_size=b, seed=seed, width=m, **{**base, "hyperparameters": hp})))
                r = rows[-1]
                print(f"m={m} b={b} seed={seed} {r['status']} draws={r['draws']} "
                      f"expected={r['expected_deflation']:.3g} {r['seconds']:.1f}s", file=sys.stderr, flush=True)
    draws = pd.DataFrame(rows)
    fail_rows = []
    b = args.failure_batch_size
    for m in parse_range(args.failure_widths):
        for seed in parse_range(args.failure_seeds):
            spec = CellSpec(batch_size=b, seed=seed, width=m, **{**base, "hyperparameters": {"max_seconds": 10.0}})
            s = run_cell(spec).summary
            fail_rows.append({"width": m, "batch_size": b, "seed": seed, "failed": s["status"] != "ok",
                              "bound": theory.failure_bound(b, m, deflation=True)})
    failures = pd.DataFrame(fail_rows)
    args.out.mkdir(parents=True, exist_ok=True)
    draws.to_csv(args.out / "spear_draws.csv", index=False)
    failures.to_csv(args.out / "spear_failures.csv", index=False)
    plot(draws, failures, args.out / "spear_draws.png")
    table = draws.groupby(["width", "batch_size"]).agg(
        n=("seed", "size"), failed=("status", lambda s: int((s != "ok").sum())),
        draws_median=("draws", "median"), draws_p10=("draws", lambda v: v.quantile(0.1)),
        draws_p90=("draws", lambda v: v.quantile(0.9)), expected_median=("expected_deflation", "median"),
        plain_expected=("expected_plain", "median"), seconds_median=("seconds", "median"))
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    print(failures.groupby("width").agg(rate=("failed", "mean"), bound=("bound", "first")).to_string())
    print(f"wrote {args.out / 'spear_draws.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
