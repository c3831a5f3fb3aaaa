"""PSNR and LPIPS against optimisation steps for the baselines as published (issue 15).

One long run per attack, scored at checkpoints along it (`leakbench.attacks.base.Checkpoints`), so
a reader sees where a step budget sits on the curve: `cpa-released` (the released Cocktail Party
objective, Adam lr 1e-3) and `ig-breaching` (breaching's Inverting Gradients), with scikit-learn
FastICA (`cpa`, the design card's ICA baseline) and FastICA on pixel differences
(`cpa` + `prefilter=derivative`, leakbench's addition) as horizontal lines: they have no steps.

    PYTHONPATH=. python benchmarks/budget_curves.py --data-root ../shared/data \\
        --cpa-steps 25000 --ig-steps 2000 --ig-image-size 32 --out docs/figures/budget-curves

(`--merge OTHER.csv` draws an earlier run's rows in the same figure; `--cpa-steps 0 --no-fastica`
runs IG alone.)

writes OUT.csv (one row per attack, checkpoint and seed: PSNR mean/median, LPIPS mean, seconds) and
OUT.png. CPA's checkpoint at step k is exactly what a run with `iterations=k` returns (constant step
size); IG's is the answer so far along a run of `--ig-steps` steps, whose step decays sit at 3/8,
5/8 and 7/8 of that run, so it is not what a shorter IG budget would give. Scoring is the harness's
(`leakbench.harness.cell.score`: Hungarian matching on MSE, images clamped to [0, 1]); LPIPS only
with verified weights (else NaN, and the note says why).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from leakbench.attacks import Reconstruction, create_attack
from leakbench.attacks.base import Checkpoints
from leakbench.cell.spec import CellSpec
from leakbench.harness.scoring import score
from leakbench.harness.victim import prepare
from leakbench.metrics import load_lpips

DEFAULT_CHECKPOINTS = (100, 250, 500, 1000, 2000, 5000, 10000, 15000, 20000, 25000)
COLUMNS = ("attack", "steps", "seed", "dataset", "image_size", "model", "b", "psnr_mean", "psnr_median",
           "lpips_mean", "seconds", "status")


def parse_ints(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", default=None, help="folder holding tiny-imagenet-200/ (or MNIST/)")
    p.add_argument("--dataset", default="tinyimagenet")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seeds", type=parse_ints, default=[0])
    p.add_argument("--width", type=int, default=256, help="FC victim width (default: FC-2 width 256)")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--checkpoints", type=parse_ints, default=list(DEFAULT_CHECKPOINTS))
    p.add_argument("--cpa-steps", type=int, default=25000, help="cpa-released run length (0: skip)")
    p.add_argument("--ig-steps", type=int, default=0, help="ig-breaching run length (0: skip)")
    p.add_argument("--ig-image-size", type=int, default=None, help="IG's image size (default: the dataset's)")
    p.add_argument("--no-fastica", action="store_true", help="skip the FastICA reference lines")
    p.add_argument("--out", type=Path, default=Path("budget-curves"), help="writes OUT.csv and OUT.png")
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="earlier OUT.csv files drawn in the same figure (e.g. IG's run at another image size)")
    p.add_argument("--title", default=None)
    return p


def curve(attack: str, steps: int, checkpoints: list[int], spec: CellSpec, lpips: Any) -> list[dict[str, Any]]:
    """One run of `attack` for `steps` steps, scored at every checkpoint ≤ steps (and at the end)."""
    batch, model, update = prepare(spec)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()

    def row(step: int, recon: Reconstruction) -> dict[str, Any]:
        records, _ = score(recon, batch, model, lpips)
        psnr = records["psnr"].to_numpy(dtype=float)
        return {"attack": attack, "steps": step, "seed": spec.seed, "dataset": spec.dataset,
                "image_size": int(batch.images.shape[-1]), "model": f"fc{spec.depth}-{spec.width}",
                "b": spec.batch_size, "psnr_mean": float(np.nanmean(psnr)) if np.isfinite(psnr).any() else math.nan,
                "psnr_median": float(np.nanmedian(psnr)) if np.isfinite(psnr).any() else math.nan,
                "lpips_mean": float(records["lpips"].mean()), "seconds": time.perf_counter() - start,
                "status": recon.status}

    def report(step: int, recon: Reconstruction) -> None:
        rows.append(row(step, recon))
        print(format_row(rows[-1]), flush=True)

    marks = frozenset(c for c in checkpoints if 0 < c < steps)
    recon = create_attack(attack, iterations=steps).reconstruct(update, seed=spec.seed,
                                                                checkpoints=Checkpoints(marks, report))
    report(steps, recon)
    return rows


def reference(attack: str, params: dict[str, Any], label: str, spec: CellSpec, lpips: Any) -> dict[str, Any]:
    """A step-free attack (FastICA) on the same cell: one row, steps NaN."""
    batch, model, update = prepare(spec)
    start = time.perf_counter()
    recon = create_attack(attack, **params).reconstruct(update, seed=spec.seed)
    records, _ = score(recon, batch, model, lpips)
    psnr = records["psnr"].to_numpy(dtype=float)
    out = {"attack": label, "steps": math.nan, "seed": spec.seed, "dataset": spec.dataset,
           "image_size": int(batch.images.shape[-1]), "model": f"fc{spec.depth}-{spec.width}", "b": spec.batch_size,
           "psnr_mean": float(np.nanmean(psnr)), "psnr_median": float(np.nanmedian(psnr)),
           "lpips_mean": float(records["lpips"].mean()), "seconds": time.perf_counter() - start,
           "status": recon.status}
    print(format_row(out), flush=True)
    return out


def format_row(r: dict[str, Any]) -> str:
    steps = "—" if isinstance(r["steps"], float) and math.isnan(r["steps"]) else str(int(r["steps"]))
    return (f"{r['attack']:<26} {steps:>6} {r['seed']:>4} {r['image_size']:>4} {r['psnr_mean']:>7.2f} "
            f"{r['psnr_median']:>7.2f} {r['lpips_mean']:>7.3f} {r['seconds']:>8.1f}  {r['status']}")


HEADER = f"{'attack':<26} {'steps':>6} {'seed':>4} {'size':>4} {'PSNR':>7} {'PSNRmed':>7} {'LPIPS':>7} {'seconds':>8}"


def budget_marks(attacks: set[str]) -> list[tuple[str, int]]:
    """The step budgets a reader compares against, read from the Configs: each curve's preset and the
    CPU-sized default of its base attack (cpa's `iterations` for method=official, ig's `iterations`)."""
    from leakbench.attacks.presets import PRESETS

    marks = []
    for preset in PRESETS:
        if preset.name in attacks and "iterations" in preset.values:
            marks.append((preset.name, int(preset.values["iterations"])))
            marks.append((f"{preset.base.name} default", int(preset.base.Config().iterations)))
    return marks


def plot(table: pd.DataFrame, out: Path, title: str) -> None:
    """Two panels against steps (log x): mean PSNR and mean LPIPS, seeds averaged; FastICA as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [("psnr_mean", "PSNR (dB, mean over images)")]
    if table["lpips_mean"].notna().any():
        metrics.append(("lpips_mean", "LPIPS (alex, mean; lower is better)"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.2 * len(metrics), 4.4), squeeze=False)
    curves = table[table["steps"].notna()]
    lines = table[table["steps"].isna()]
    for ax, (col, label) in zip(axes[0], metrics, strict=True):
        for (attack, size), group in curves.groupby(["attack", "image_size"], sort=False):
            mean = group.groupby("steps")[col].mean()
            ax.plot(mean.index, mean.values, marker="o", ms=3, label=f"{attack} ({size}×{size})")
        for i, (attack, group) in enumerate(lines.groupby("attack", sort=False)):
            ax.axhline(group[col].mean(), ls="--", lw=1, color=f"C{i + 3}", label=f"{attack} (no steps)")
        drawn: list[int] = []
        for name, steps in budget_marks(set(curves["attack"])):
            near = any(abs(steps - d) < 0.2 * d for d in drawn)  # 24,000 beside 25,000: label on the other side
            drawn.append(steps)
            ax.axvline(steps, ls=":", lw=1, color="0.4" if "-" in name else "0.7")
            ax.annotate(f"{name}: {steps:,}", (steps, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                        fontsize=7, va="top", ha="left" if near else "right", color="0.3")
        ax.set_xscale("log")
        ax.set_xlabel("optimisation steps (one run, scored at checkpoints)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lpips, note = load_lpips()
    print(f"# {note}", flush=True)
    print(HEADER, flush=True)
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        spec = CellSpec(attack="cpa", dataset=args.dataset, batch_size=args.batch_size, seed=seed, width=args.width,
                        depth=args.depth, data_root=args.data_root)
        if args.cpa_steps:
            rows += curve("cpa-released", args.cpa_steps, args.checkpoints, spec, lpips)
        if not args.no_fastica:
            rows.append(reference("cpa", {}, "cpa (FastICA)", spec, lpips))
            rows.append(reference("cpa", {"prefilter": "derivative"}, "cpa + derivative prefilter", spec, lpips))
        if args.ig_steps:
            ig_spec = CellSpec(attack="ig-breaching", dataset=args.dataset, batch_size=args.batch_size, seed=seed,
                               width=args.width, depth=args.depth, data_root=args.data_root,
                               image_size=args.ig_image_size)
            rows += curve("ig-breaching", args.ig_steps, args.checkpoints, ig_spec, lpips)
    table = pd.concat([pd.DataFrame(rows, columns=list(COLUMNS)), *(pd.read_csv(path) for path in args.merge)],
                      ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out.with_suffix(".csv"), index=False)
    title = args.title or (f"{args.dataset}, FC-{args.depth} width {args.width} at init, b = {args.batch_size}, "
                           f"seeds {','.join(map(str, args.seeds))}")
    plot(table, args.out.with_suffix(".png"), title)
    print(f"# wrote {args.out.with_suffix('.csv')} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
