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
