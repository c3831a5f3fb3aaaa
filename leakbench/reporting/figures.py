"""Seaborn figures: PSNR and exact % per attack against one axis (batch size, layer, DP level)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from leakbench.records.folders import honour_umask

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def axis_figure(per_cell: pd.DataFrame, axis: str, order: list[Any], label: str, path: Path, title: str) -> Path:
    """Two panels (PSNR mean, exact %) against `axis` (categorical, in `order`), one line per attack.

    `per_cell` has one row per cell with columns attack, `axis`, psnr (mean finite PSNR of the cell,
    NaN when it has none) and exact_pct; points are means over the cells (seeds) of each setting,
    with 95% bootstrap intervals where there are several.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = per_cell.assign(**{axis: per_cell[axis].astype(str)})
    order = [str(v) for v in order]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    attacks = sorted(data["attack"].unique())
    for ax, column, ylabel in ((axes[0], "psnr", "PSNR mean (dB)"), (axes[1], "exact_pct", "exact %")):
        shown = data[np.isfinite(data[column].to_numpy(dtype=float))]
        if len(shown):
            sns.pointplot(data=shown, x=axis, y=column, hue="attack", order=order, hue_order=attacks, ax=ax,
                          # types-seaborn has `dodge: bool`; pointplot documents "bool or float" (the offset)
                          dodge=0.25 if len(attacks) > 1 else False,  # type: ignore[arg-type]
                          markers="o", errorbar=("ci", 95), seed=0)
        ax.set_xlabel(label)
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", labelrotation=20 if max(len(o) for o in order) > 6 else 0)
    axes[1].set_ylim(-5, 105)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig: Figure, path: Path) -> Path:
    """Write `fig` to `path` atomically (temp file + rename; byte-stable PNG metadata) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, metadata={"Software": None})
        honour_umask(Path(tmp))
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path


PRIVACY_UTILITY_PANELS = (("exact_pct", "exact % (worse for privacy ↑)"), ("psnr_median", "PSNR median (dB)"),
                          ("lpips_mean", "LPIPS mean (lower: closer)"))


def privacy_utility_figure(levels: pd.DataFrame, path: Path, title: str) -> Path:
    """Leakage against utility for one attack: three panels (exact %, PSNR median, LPIPS) against the
    victim's test accuracy %, one point per defence level (`level`, written beside it), one colour per
    batch size. `levels` has the columns of `reporting.defences.privacy_utility_data`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    sizes = sorted(levels["batch_size"].unique())
    colours = plt.get_cmap("tab10")
    for ax, (column, ylabel) in zip(axes, PRIVACY_UTILITY_PANELS, strict=True):
        values = levels[column].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        top = (float(finite.max()) if len(finite) else 40.0) + 10.0  # where ∞ (bit-identical) PSNR is drawn
        labelled: set[tuple[str, bool]] = set()
        span = (float(finite.max() - finite.min()) if len(finite) else 0.0) or 1.0
        accuracy = levels["accuracy_pct"].to_numpy(dtype=float)
        width = float(accuracy.max() - accuracy.min()) or 1.0
        stacked: dict[tuple[int, int], int] = {}  # labels already near this point: the next one goes above them
        for i, b in enumerate(sizes):
            rows = levels[(levels["batch_size"] == b) & ~np.isnan(levels[column].to_numpy(dtype=float))]
            ys = [top if np.isinf(y) else y for y in rows[column]]
            ax.scatter(rows["accuracy_pct"], ys, color=colours(i % 10), s=36, zorder=3, label=f"b = {b}")
            for x, y, raw, text in zip(rows["accuracy_pct"], ys, rows[column], rows["level"], strict=True):
                if (str(text), bool(np.isinf(raw))) in labelled:  # one label per level: its first point
                    continue
                labelled.add((str(text), bool(np.isinf(raw))))
                near = (round(6 * x / width), round(20 * y / span))
                stacked[near] = above = stacked.get(near, -1) + 1
                ax.annotate(str(text) + (" (∞ dB)" if np.isinf(raw) else ""), (x, y), textcoords="offset points",
                            xytext=(5, 4 + 11 * above), fontsize=8,
                            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey"} if above else None)
        if not len(finite) and not np.isinf(values).any():
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_xlabel("victim test accuracy % (higher: cheaper defence →)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.25, y=0.15)
    axes[0].set_ylim(-5, 105)
    if len(sizes) > 1:
        axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)
