"""Seaborn figures: PSNR and exact % per attack against one axis (batch size, layer, DP level) or against each
defence's strength; leakage against accuracy per defence level.

Every figure colours an attack with `palette.colour` (the same in every figure and report), orders levels
with `order.level_key` (numbers as numbers), caps PSNR at `aggregate.PSNR_CAP` with an 'exact' band above
it, and wraps its title to its width."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from leakbench.records.folders import honour_umask
from leakbench.reporting.aggregate import PSNR_CAP
from leakbench.reporting.findings import family
from leakbench.reporting.order import NONE, level_sorter, ordered
from leakbench.reporting.palette import colour, colours

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


EXACT_BAND = (PSNR_CAP + 5.0, PSNR_CAP + 17.0)
"""Where a PSNR panel draws exact points: a shaded band above the axis, which stops at `PSNR_CAP`."""
EXACT_Y = sum(EXACT_BAND) / 2
TITLE_CHARS_PER_INCH = 10.5
"""Characters of an 11-point title per inch of figure width (titles are wrapped to the figure, never cut)."""


def wrapped(text: str, width_inches: float, *, chars_per_inch: float = TITLE_CHARS_PER_INCH) -> str:
    """`text` broken into lines that fit `width_inches` of figure."""
    return textwrap.fill(text, width=max(20, int(width_inches * chars_per_inch)))


def shown_psnr_column(per_cell: pd.DataFrame) -> pd.Series:
    """What a PSNR panel draws per cell: `EXACT_Y` (the exact band) for a cell whose every image is exact,
    else its PSNR capped at `PSNR_CAP` (NaN stays NaN: no point)."""
    psnr = per_cell["psnr"].astype(float).clip(upper=PSNR_CAP)
    return psnr.where(per_cell["exact_pct"].astype(float) < 100.0, EXACT_Y)


def psnr_axis(ax: Axes) -> None:
    """A PSNR axis from 0 to `PSNR_CAP` dB with the exact band above it, its tick labelled 'exact'."""
    ax.axhspan(*EXACT_BAND, color="#dff0d8", zorder=0)
    ax.set_ylim(-2, EXACT_BAND[1])
    ticks = [t for t in range(0, int(PSNR_CAP) + 1, 10)]
    ax.set_yticks([*ticks, EXACT_Y], [*(str(t) for t in ticks), "exact"])


def axis_figure(per_cell: pd.DataFrame, axis: str, order: list[Any], label: str, path: Path, title: str) -> Path:
    """Two panels (PSNR, exact %) against `axis` (categorical, in `order`), one line per attack, each attack
    in its own `palette.colour`.

    `per_cell` has one row per cell with columns attack, `axis`, psnr (median PSNR of the cell, NaN when
    it has none) and exact_pct; points are means over the cells (seeds) of each setting, with 95% bootstrap
    intervals where there are several. PSNR is drawn up to `PSNR_CAP`; cells whose every image is exact are
    drawn in the 'exact' band above it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = per_cell.assign(**{axis: per_cell[axis].astype(str)}, psnr=shown_psnr_column(per_cell))
    order = [str(v) for v in order]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    attacks = sorted(data["attack"].unique())
    for ax, column, ylabel in ((axes[0], "psnr", "PSNR (dB), mean over seeds"), (axes[1], "exact_pct", "exact %")):
        shown = data[np.isfinite(data[column].to_numpy(dtype=float))]
        if shown[axis].nunique() < 2:  # a lone point is no trend: say so, the tables have the number
            ax.text(0.5, 0.5, textwrap.fill(f"{ylabel.split(' (')[0]} at one {label} only (elsewhere every "
                                            "reconstruction failed): see the tables", 40),
                    transform=ax.transAxes, ha="center", va="center", color="grey")
        elif len(shown):
            sns.pointplot(data=shown, x=axis, y=column, hue="attack", order=order, hue_order=attacks, ax=ax,
                          palette=colours(attacks),
                          # types-seaborn has `dodge: bool`; pointplot documents "bool or float" (the offset)
                          dodge=0.25 if len(attacks) > 1 else False,  # type: ignore[arg-type]
                          markers="o", errorbar=("ci", 95), seed=0)
        ax.set_xlabel(label)
        ax.set_ylabel(ylabel)
        ax.set_xticks(range(len(order)), [textwrap.fill(o, 14) for o in order])
        legend = ax.get_legend()
        if legend is not None:
            legend.remove()
    psnr_axis(axes[0])
    axes[1].set_ylim(-5, 105)
    _legend(fig, attacks)
    fig.suptitle(wrapped(title, 11), fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return save_figure(fig, path)


def _legend(fig: Figure, attacks: list[str]) -> None:
    """One legend for the whole figure, right of the panels: each attack's colour."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour(a), marker="o", label=a) for a in attacks]
    fig.legend(handles=handles, loc="center right", title="attack", fontsize=9, title_fontsize=9, frameon=False)


def short_tick(label: str, width: int = 12) -> str:
    """A tick label over lines of about `width` characters, broken at spaces or after '=' (never inside a
    number: 'bottleneck=\n256', not 'bottleneck=2\n56')."""
    return "\n".join(textwrap.fill(part, width, break_long_words=False) if len(part) <= width
                     else part.replace("=", "=\n", 1) for part in label.split(" "))


def tick_labels(name: str, levels: list[str]) -> list[str]:
    """Short x labels for one defence's levels: the defence's name and the words every level shares
    ('beta=0.001' of 'precode beta=0.001 bottleneck=16', 'C=1' and 'at q=0.01, T=1 step' of 'DP σ=1 C=1
    (ε=0.956 at q=0.01, T=1 step)' → 'σ=1 (ε=0.956)') left out; 'none' kept."""
    words = [lv.removeprefix(name).split() for lv in levels if lv != NONE]
    common = set.intersection(*(set(w) for w in words)) if len(words) > 1 else set()
    return [lv if lv == NONE else _balanced(" ".join(w for w in lv.removeprefix(name).split() if w not in common))
            or lv for lv in levels]


def _balanced(text: str) -> str:
    """`text` with its parentheses closed where shared words were cut from their end ('(ε=0.956' → '(ε=0.956)')."""
    return text + ")" * max(0, text.count("(") - text.count(")"))


def defence_figure(per_cell: pd.DataFrame, path: Path, title: str) -> Path | None:
    """Exact % (top row) and PSNR (below) against each defence's strength: one panel per defence with
    at least one level besides 'none', its levels in `order.level_sorter` order after 'none'; one line per
    attack in its `palette.colour`. `per_cell`: one row per cell with attack, level, psnr, exact_pct (and the
    cell's client and stored update, which order the levels).
    None (nothing drawn) when no defence has a level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = ordered(per_cell["level"], level_sorter(per_cell))
    families = list(dict.fromkeys(family(lv) for lv in levels if lv != NONE))
    if not families:
        return None
    data = per_cell.assign(psnr=shown_psnr_column(per_cell))
    attacks = sorted(data["attack"].unique())
    columns = min(4, len(families))
    rows = -(-len(families) // columns)
    fig, axes = plt.subplots(2 * rows, columns, figsize=(3.3 * columns + 1.6, 3.0 * 2 * rows), squeeze=False)
    for i, name in enumerate(families):
        xs = [NONE, *(lv for lv in levels if lv != NONE and family(lv) == name)]
        for r, column in ((2 * (i // columns), "exact_pct"), (2 * (i // columns) + 1, "psnr")):
            ax = axes[r][i % columns]
            for k, attack in enumerate(attacks):  # dodged a little, so equal values do not hide each other
                mine = data[data["attack"] == attack].groupby("level")[column].mean()
                ys = [float(mine.get(x, np.nan)) for x in xs]
                shift = 0.07 * (k - (len(attacks) - 1) / 2)
                ax.plot([j + shift for j in range(len(xs))], ys, marker="o", ms=5, color=colour(attack), label=attack)
            ticks, knob = tick_labels(name, xs), ""
            pairs = [t.split("=", 1) for t in ticks[1:]]
            if all(len(p) == 2 and " " not in t for p, t in zip(pairs, ticks[1:], strict=True)) \
                    and len({p[0] for p in pairs}) == 1:  # one knob: its name in the title, its values as ticks
                knob, ticks = f" ({pairs[0][0]})", [ticks[0], *(p[1] for p in pairs)]
            ax.set_xticks(range(len(xs)), [short_tick(t) for t in ticks], fontsize=8)
            ax.grid(True, alpha=0.3)
            if column == "psnr":
                psnr_axis(ax)
                ax.set_ylabel("PSNR (dB)" if i % columns == 0 else "")
            else:
                ax.set_ylim(-5, 105)
                ax.set_title(name + knob, fontsize=10)
                ax.set_ylabel("exact %" if i % columns == 0 else "")
    for j in range(len(families), rows * columns):
        axes[2 * (j // columns)][j % columns].set_visible(False)
        axes[2 * (j // columns) + 1][j % columns].set_visible(False)
    _legend(fig, attacks)
    width = 3.3 * columns + 1.6
    fig.suptitle(wrapped(title, width), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1 - 1.5 / width, 1))
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


def on_front(levels: pd.DataFrame, column: str) -> set[str]:
    """The defence levels no other level beats in both accuracy (higher) and privacy in `column` (lower
    exact % or PSNR, higher LPIPS): the ones worth a label when twenty levels crowd one panel."""
    sign = -1.0 if column == "lpips_mean" else 1.0
    points = [(str(lv), float(a), sign * float(v)) for lv, a, v in
              zip(levels["level"], levels["accuracy_pct"], levels[column], strict=True) if np.isfinite(v)]
    return {lv for lv, a, v in points
            if not any(a2 >= a and v2 <= v and (a2, v2) != (a, v) for _, a2, v2 in points)}


def privacy_utility_figure(levels: pd.DataFrame, path: Path, title: str) -> Path:
    """Leakage against utility for one attack: three panels (exact %, PSNR median, LPIPS) against the
    victim's test accuracy %, one point per defence level (the levels on the front, `on_front`, and 'none'
    named beside their point), in the attack's colour, one marker per batch size; PSNR capped with the
    exact band. `levels` has the columns of `reporting.defences.privacy_utility_data`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    sizes = sorted(levels["batch_size"].unique())
    markers = "osD^v<>ph*"
    tint = colour(str(levels["attack"].iloc[0])) if len(levels) else "#1f77b4"
    levels = levels.assign(psnr_median=shown_psnr_column(levels.rename(columns={"psnr_median": "psnr"})))
    for ax, (column, ylabel) in zip(axes, PRIVACY_UTILITY_PANELS, strict=True):
        values = levels[column].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        labelled: set[str] = set()
        span = (float(finite.max() - finite.min()) if len(finite) else 0.0) or 1.0
        accuracy = levels["accuracy_pct"].to_numpy(dtype=float)
        width = float(accuracy.max() - accuracy.min()) or 1.0
        stacked: dict[tuple[int, int], int] = {}  # labels already near this point: the next one goes above them
        for i, b in enumerate(sizes):
            rows = levels[(levels["batch_size"] == b) & ~np.isnan(levels[column].to_numpy(dtype=float))]
            ax.scatter(rows["accuracy_pct"], rows[column], color=tint, marker=markers[i % len(markers)], s=36,
                       zorder=3, label=f"b = {b}")
            front = on_front(levels, column)
            for x, y, text in zip(rows["accuracy_pct"], rows[column], rows["level"], strict=True):
                if str(text) in labelled or (str(text) not in front and str(text) != NONE):
                    continue  # one label per level (its first point), and only on the front: readable
                labelled.add(str(text))
                near = (round(6 * x / width), round(20 * y / span))
                stacked[near] = above = stacked.get(near, -1) + 1
                ax.annotate(str(text), (x, y), textcoords="offset points", xytext=(5, 4 + 11 * above), fontsize=8,
                            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey"} if above else None)
        if not len(finite):
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_xlabel("victim test accuracy %\n(higher: cheaper defence →)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.25, y=0.15)
    axes[0].set_ylim(-5, 105)
    psnr_axis(axes[1])
    if len(sizes) > 1:
        axes[0].legend(fontsize=8)
    fig.suptitle(wrapped(title, 15), fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)


def verdict_figure(points: pd.DataFrame, path: Path, title: str) -> Path:
    """One verdict board as a privacy–utility plane: per defence level, its worst attack's leakage (adaptive
    attacks included: re-identification %, else exact %, ± the seed spread) against its accuracy cost (points,
    with the 95 % interval). Filled: ranked without a mark; hollow: a marked row (no or failed adaptive
    attack, unusable, not run against every attack); the first rank's levels and 'none' named. `points`: the
    rows of one board of `reporting.defences.verdict_points`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for _, row in points.iterrows():
        tint = colour(str(row["attack"]))
        xerr = [[row["cost_pp"] - row["cost_low_pp"]], [row["cost_high_pp"] - row["cost_pp"]]] \
            if np.isfinite(row["cost_low_pp"]) else None
        ax.errorbar(row["cost_pp"], row["leakage_pct"], xerr=xerr, yerr=row["leakage_spread"] or None,
                    fmt="o" if row["adaptive"] else "s", ms=7, color=tint, mfc="white" if row["marked"] else tint,
                    ecolor=tint, elinewidth=0.8, capsize=2, zorder=3)
        if row["rank"] == 1 or row["level"] == NONE:
            ax.annotate(str(row["level"]), (row["cost_pp"], row["leakage_pct"]), textcoords="offset points",
                        xytext=(6, 5), fontsize=8)
    measure = "re-identified %" if (points["measure"] == "reid").all() else "re-identified % (else exact %)"
    ax.set_xlabel("accuracy cost (points; 95 % interval over training seeds)  → more expensive")
    ax.set_ylabel(f"worst attack: {measure} (± seed spread)")
    ax.set_ylim(-5, 105)
    ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color="grey", marker=m, ls="", mfc=f, label=t) for m, f, t in (
        ("o", "grey", "worst attack adaptive"), ("s", "grey", "worst attack not adaptive"),
        ("o", "white", "hollow: a marked row (see the board)"))]
    attacks = sorted(set(points["attack"].astype(str)))
    handles += [Line2D([], [], color=colour(a), marker="o", ls="", label=a) for a in attacks]
    ax.legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(wrapped(title, 11), fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)

