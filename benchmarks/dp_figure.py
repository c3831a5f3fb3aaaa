"""PSNR and exact % against ε for every attack of a DP sweep (issue 6), from stored records.

    python benchmarks/dp_figure.py RUN_DIR [RUN_DIR ...] [--out PNG] [--data-root DIR]

Reads RUN_DIR/records.parquet (written by `leakbench run` on a suite with a `dp` axis, e.g.
benchmarks/review/dp-mid.toml), prints a markdown table (one row per DP level with σ, C, q, steps,
δ and ε; one column per attack: "exact % / PSNR median (dB)", images pooled over seeds, failed
images count as not exact and carry no PSNR) and draws two panels against ε (log x, one line per
attack, σ on the top axis): PSNR median with the inter-quartile range of the images, and exact %.
Clipping without noise (σ = 0) has ε = ∞ and sits at the right edge; levels without DP ("none")
are in the table only. A level where every image of an attack failed is drawn as × at the bottom.
With --data-root, the PSNR of a grey image and of the dataset's mean image on the same batches
(benchmarks/floor_psnr.py: what an attack that learned nothing scores) is drawn as dashed lines.
`make dp-figure` runs the suite (resumable) and this script.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

NEEDED = ("attack", "dp", "dp_sigma", "dp_clip", "dp_q", "dp_steps", "dp_delta", "dp_epsilon", "psnr", "exact")


def load(run_dirs: list[Path]) -> pd.DataFrame:
    """Records of the runs, concatenated; a one-line SystemExit when a run or a column is missing."""
    frames = []
    for run in run_dirs:
        path = run / "records.parquet"
        if not path.is_file():
            raise SystemExit(f"dp_figure: no {path} (run `leakbench run` on the suite first)")
        frame = pd.read_parquet(path)
        missing = [c for c in NEEDED if c not in frame]
        if missing:
            raise SystemExit(f"dp_figure: {path} lacks column(s) {', '.join(missing)}")
        frames.append(frame)
    records = pd.concat(frames, ignore_index=True)
    if not np.isfinite(records["dp_sigma"].to_numpy(dtype=float)).any():
        raise SystemExit("dp_figure: no DP level with a noise multiplier σ in the records (no `dp` axis?)")
    return records


def points(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (DP level, attack): σ, C, q, steps, δ, ε, n, failed, exact %, PSNR median and quartiles."""
    rows = []
    for (dp, attack), group in records.groupby(["dp", "attack"], sort=False):
        first = group.iloc[0]
        psnr = group["psnr"].to_numpy(dtype=float)
        psnr = psnr[np.isfinite(psnr)]
        rows.append({
            "dp": dp, "attack": attack, "sigma": float(first["dp_sigma"]), "clip": float(first["dp_clip"]),
            "q": float(first["dp_q"]), "steps": int(first["dp_steps"]), "delta": float(first["dp_delta"]),
            "epsilon": float(first["dp_epsilon"]), "n": len(group),
            "failed": int((group["status"] != "ok").sum()) if "status" in group else 0,
            "exact_pct": 100.0 * group["exact"].astype(bool).mean(),
            "psnr_median": float(np.median(psnr)) if len(psnr) else math.nan,
            "psnr_q1": float(np.percentile(psnr, 25)) if len(psnr) else math.nan,
            "psnr_q3": float(np.percentile(psnr, 75)) if len(psnr) else math.nan,
        })
    return pd.DataFrame(rows)


def _eps_text(eps: float) -> str:
    return "∞" if math.isinf(eps) else f"{eps:.3g}"


def markdown(pts: pd.DataFrame) -> str:
    """The plotted values as a table: rows = DP levels in record order, columns = attacks."""
    attacks = list(dict.fromkeys(pts["attack"]))
    lines = ["| DP level | σ | ε | " + " | ".join(attacks) + " |", "|---" * (len(attacks) + 3) + "|"]
    for dp in dict.fromkeys(pts["dp"]):
        level = pts[pts["dp"] == dp]
        first = level.iloc[0]
        sigma = "–" if math.isnan(first["sigma"]) else f"{first['sigma']:g}"
        cells = []
        for attack in attacks:
            row = level[level["attack"] == attack]
            if row.empty:
                cells.append("–")
                continue
            r = row.iloc[0]
            text = f"{r['exact_pct']:.0f} / " + ("–" if math.isnan(r["psnr_median"]) else f"{r['psnr_median']:.1f}")
            cells.append(text + (f" [{r['failed']}/{r['n']} failed]" if r["failed"] else ""))
        lines.append(f"| {dp} | {sigma} | {_eps_text(first['epsilon'])} | " + " | ".join(cells) + " |")
    noisy = pts[np.isfinite(pts["sigma"])].iloc[0]
    lines += ["", f"ε: Opacus RDP, q = {noisy['q']:g}, steps = {noisy['steps']}, δ = {noisy['delta']:g}, "
                  f"C = {noisy['clip']:g}; cells: exact % / PSNR median (dB), n = images pooled over seeds."]
    return "\n".join(lines)


def floor_lines(records: pd.DataFrame, data_root: Path | None) -> dict[str, float]:
    """PSNR of batch-agnostic images (grey, dataset mean) on the records' batches (one dataset and b)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from floor_psnr import floors

    from leakbench.core.errors import LeakbenchError
    from leakbench.datasets import load_dataset

    if records["dataset"].nunique() != 1 or records["batch_size"].nunique() != 1:
        raise SystemExit("dp_figure: --data-root needs records of one dataset and one batch size")
    try:
        dataset = load_dataset(str(records["dataset"].iloc[0]), data_root=data_root)
    except LeakbenchError as exc:
        raise SystemExit(f"dp_figure: {exc}") from None
    result = floors(dataset, int(records["batch_size"].iloc[0]), sorted(int(s) for s in records["seed"].unique()))
    result.pop("images")
    return result


def figure(pts: pd.DataFrame, path: Path, title: str, floor: dict[str, float] | None = None,
           cap: float = 60.0) -> Path:
    """Two panels against ε (log x): PSNR median (IQR bars, × where every image failed) and exact %.

    PSNR above `cap` (an exact reconstruction: ~140 dB) is drawn at the top edge with its value written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leakbench.reporting.figures import save_figure

    shown = pts[np.isfinite(pts["sigma"])].copy()
    finite = shown.loc[np.isfinite(shown["epsilon"]), "epsilon"]
    top = 10.0 ** (math.ceil(math.log10(finite.max())) + 1) if len(finite) else 1.0
    shown["x"] = np.where(np.isfinite(shown["epsilon"]), shown["epsilon"], top)
    levels = shown.drop_duplicates("dp").sort_values("x")
    attacks = list(dict.fromkeys(shown["attack"]))
    markers = "osD^vP*X"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    psnr_ax, exact_ax = axes
    bottom = 0.0
    for i, attack in enumerate(attacks):
        a = shown[shown["attack"] == attack].sort_values("x")
        style = {"marker": markers[i % len(markers)], "label": attack, "color": f"C{i}"}
        ok = a[np.isfinite(a["psnr_median"]) & (a["psnr_median"] <= cap)]
        err = np.vstack([ok["psnr_median"] - ok["psnr_q1"], ok["psnr_q3"] - ok["psnr_median"]])
        psnr_ax.errorbar(ok["x"], ok["psnr_median"], yerr=err, capsize=3, **style)
        for _, high in a[a["psnr_median"] > cap].iterrows():
            psnr_ax.scatter([high["x"]], [cap], marker="^", s=70, color=f"C{i}", zorder=3, clip_on=False)
            psnr_ax.annotate(f"{high['psnr_median']:.0f} dB", (high["x"], cap), textcoords="offset points",
                             xytext=(-6, -14), ha="right", fontsize=8, color=f"C{i}")
        gone = a[~np.isfinite(a["psnr_median"])]
        if len(gone):
            psnr_ax.scatter(gone["x"], np.full(len(gone), bottom), marker="x", s=60, color=f"C{i}", zorder=3)
        exact_ax.plot(a["x"], a["exact_pct"], **style)
    for j, (name, value) in enumerate((floor or {}).items()):
        psnr_ax.axhline(value, color="grey", linestyle=("--", ":")[j % 2], linewidth=1,
                        label=f"{name} ({value:.1f} dB)")
    if shown["psnr_median"].isna().any():
        psnr_ax.scatter([], [], marker="x", color="grey", label="every image failed")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("ε (δ, q, steps in the title; log scale)")
        ax.set_xticks(levels["x"])
        ax.set_xticklabels([_eps_text(e) for e in levels["epsilon"]], rotation=30, fontsize=8)
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        sig = ax.secondary_xaxis("top")
        sig.set_xticks(levels["x"])
        sig.set_xticklabels([f"σ={s:g}" for s in levels["sigma"]], rotation=30, fontsize=8)
        sig.tick_params(axis="x", which="minor", top=False)
    psnr_ax.set_ylabel(f"PSNR median (dB), bars: image IQR; ▲ above {cap:g}")
    exact_ax.set_ylabel("exact % (8-bit identical images)")
    exact_ax.set_ylim(-5, 105)
    psnr_ax.set_ylim(-3, cap)
    psnr_ax.legend(fontsize=8, loc="upper left")
    first = shown.iloc[0]
    fig.suptitle(f"{title}\nε: Opacus RDP, δ = {first['delta']:g}, q = {first['q']:g}, steps = {first['steps']}, "
                 f"C = {first['clip']:g}; ε = ∞ is clipping only (σ = 0); noise grows to the left", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders holding records.parquet")
    parser.add_argument("--out", type=Path, default=Path("docs/figures/dp-psnr-vs-epsilon.png"))
    parser.add_argument("--title", default=None, help="figure title (default: the run folders' names)")
    parser.add_argument("--psnr-cap", type=float, default=60.0, help="top of the PSNR axis (higher: ▲ at the edge)")
    parser.add_argument("--data-root", type=Path, default=None,
                        help="dataset folder: also draw the grey / mean-image PSNR floor of the same batches")
    args = parser.parse_args(argv)
    records = load(args.runs)
    pts = points(records)
    floor = floor_lines(records, args.data_root) if args.data_root else None
    print(markdown(pts))
    if floor:
        print("\nfloor (same batches): " + ", ".join(f"{k} {v:.1f} dB" for k, v in floor.items()))
    path = figure(pts, args.out, args.title or " + ".join(r.name for r in args.runs), floor, args.psnr_cap)
    print(f"\nfigure: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
