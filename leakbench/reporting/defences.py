"""The price of a defence, from stored records only: each defence level's leakage against its victim's accuracy.

A *defence level* is what a cell's client did to its update besides plain FedSGD: its DP-SGD setting, its
noise, its defences (and a FedAvg client or a threat model, when not the default), named by one label
('none', 'DP σ=0.5 C=1', 'noise σ=0.01', 'prune keep=0.5'). A trained victim is trained with its cell's level
applied to every update (`models.training`), so its test accuracy is the level's price; the *accuracy cost*
is the drop from the undefended victim ('none') trained the same way (same board: suite, dataset, model,
batch size). The *worst leakage* of a level is that of the strongest attack against it (most exact images,
then highest PSNR median), over every attack and attacked layer of the board.

`defence_blocks` is the leaderboard's board "defences"; `privacy_utility_data` feeds the report's figure.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

from leakbench.reporting.aggregate import all_exact, fmt, grouped, key_values, model_order, psnr_text
from leakbench.reporting.order import level_key
from leakbench.reporting.pivot import ranks, shown_psnr
from leakbench.reporting.render import Block, Table

NONE = "none"
"""The label of the undefended level (plain FedSGD, no DP, no noise, no defence)."""
DEFENCE_BOARD = ["suite", "dataset", "model", "batch_size"]
"""What one defence board holds fixed; its rows are the defence levels, ranked."""


def defence_levels(cells: pd.DataFrame) -> pd.Series:
    """Each cell's defence level label, from the `client` column `aggregate.with_model` writes (noise,
    defences, threat model after 'fedsgd') and the DP label."""
    client = cells["client"].fillna("fedsgd").astype(str) if "client" in cells else pd.Series("fedsgd", cells.index)
    rest = client.str.replace(r"^fedsgd( \+ )?", "", regex=True).str.replace(r"^ · ", "", regex=True)
    dp = cells["dp"].fillna("none").astype(str) if "dp" in cells else pd.Series("none", cells.index)
    parts = [[*([f"DP {d}"] if d != "none" else []), *([r] if r else [])] for d, r in zip(dp, rest, strict=True)]
    return pd.Series([" + ".join(p) if p else NONE for p in parts], index=cells.index, dtype=object)


def _leakage_key(s: dict[str, Any]) -> tuple[float, float]:
    """Larger is more leakage: exact % first, then PSNR median (none: 0 dB), each at the precision a table
    shows it (whole %, 0.1 dB capped at `PSNR_CAP`), so float noise past the shown digits decides nothing."""
    return float(round(s["exact_pct"])), shown_psnr(s["psnr_median"])


def _accuracy(cells: pd.DataFrame) -> float:
    """Mean test accuracy over the distinct victims of `cells` (NaN when none was trained)."""
    if "test_accuracy" not in cells:
        return math.nan
    victims = cells.drop_duplicates("victim_hash") if "victim_hash" in cells else cells
    values = victims["test_accuracy"].to_numpy(dtype=float)
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def level_rows(records: pd.DataFrame, cells: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per defence level of `cells` (one board): its victims' test accuracy, the cost against
    'none', and the strongest attack (and layer) with its stats."""
    cells = cells.assign(level=defence_levels(cells))
    base = _accuracy(cells[cells["level"] == NONE])
    rows = []
    for level, sub in sorted(cells.groupby("level", sort=True), key=lambda g: level_key(g[0])):
        attacks = grouped(records, sub, ["attack", "layer"])
        # the strongest; among equally strong ones (as shown) the first by name
        (attack, layer), worst = min(attacks, key=lambda a: (tuple(-v for v in _leakage_key(a[1])), a[0]))
        accuracy = _accuracy(sub)
        several_layers = sub["layer"].nunique() > 1
        rows.append({"level": str(level), "accuracy": accuracy, "cost": base - accuracy, "worst": worst,
                     "strongest": f"{attack}" + (f" (layer {layer})" if several_layers else ""),
                     "attacks": len(attacks), "cells": len(sub)})
    return rows


def _ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Least worst leakage first, then smallest accuracy cost (unknown last), then label."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        cost = r["cost"] if not math.isnan(r["cost"]) else math.inf
        return (*_leakage_key(r["worst"]), cost, level_key(r["level"]))
    return sorted(rows, key=key)


def _on_front(row: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    """True unless another level leaks no more at no higher cost, strictly better in one."""
    if math.isnan(row["cost"]):
        return False
    mine = (_leakage_key(row["worst"]), row["cost"])
    for other in rows:
        if other is row or math.isnan(other["cost"]):
            continue
        theirs = (_leakage_key(other["worst"]), other["cost"])
        if theirs[0] <= mine[0] and theirs[1] <= mine[1] and theirs != mine:
            return False
    return True


DEFENCE_HEADER = ["rank", "defence", "test acc. %", "accuracy cost (pp)", "worst exact %", "worst PSNR median (dB)",
                  "LPIPS", "strongest attack", "attacks", "cells", "front"]


def defence_table(records: pd.DataFrame, cells: pd.DataFrame, board: tuple[Any, ...]) -> Table:
    """One board: defence levels ranked by their worst leakage, with accuracy and cost beside it."""
    suite, dataset, model, b = board
    rows = level_rows(records, cells)
    body = []
    ranked = _ranked(rows)
    shown = [(_leakage_key(r["worst"]), fmt(100 * r["cost"], 1)) for r in ranked]  # equal as shown: equal rank
    for rank, r in zip(ranks(shown), ranked, strict=True):
        s = r["worst"]
        psnr = psnr_text(s["psnr_median"], exact=all_exact(s)).removesuffix(" dB")
        body.append([str(rank), r["level"], fmt(100 * r["accuracy"], 1), fmt(100 * r["cost"], 1),
                     fmt(s["exact_pct"], 0), psnr, fmt(s["lpips_mean"], 3),
                     r["strongest"],
                     str(r["attacks"]), str(r["cells"]), "✓" if _on_front(r, rows) else ""])
    notes = ["Worst leakage: the strongest attack against the level (most exact images, then highest PSNR "
             "median; its LPIPS beside). Accuracy cost: test accuracy of the undefended victim ('none') minus "
             "the level's, in percentage points; the victims are trained with the level on every update. "
             "front ✓: no other level leaks less at no higher cost. Levels that read the same (leakage and cost "
             "as shown) share a rank."]
    if all(math.isnan(r["accuracy"]) for r in rows):
        notes.append("Victims at init (untrained): no accuracy measured, ranked by leakage alone.")
    elif not any(r["level"] == NONE for r in rows):
        notes.append("No undefended level in this board: no accuracy cost.")
    return Table(f"Defences: {dataset} · {model} · b={b} (suite {suite})", DEFENCE_HEADER, body, notes)


def defence_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """The board "defences": one table per suite, dataset, model and batch size that holds a defended level
    (`cells` with `model` and `client`, as `aggregate.with_model` makes them, and `suite`)."""
    levels = defence_levels(cells)
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    blocks: list[Block] = []
    groups = sorted(cells.groupby(DEFENCE_BOARD, sort=True), key=lambda g: (g[0][0], g[0][1], rank[g[0][2]], g[0][3]))
    for board, sub in groups:
        if (levels[sub.index] == NONE).all():
            continue
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"])) & (records["suite"] == board[0])] \
            if "suite" in records else records[records["cell_id"].isin(set(sub["cell_id"]))]
        blocks.append(defence_table(sub_records, sub, key_values(board)))
    return blocks


def privacy_utility_data(records: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, model, batch size, attack, defence level) of trained victims: test accuracy %,
    exact %, PSNR median and mean LPIPS pooled over the level's cells (seeds, layers)."""
    cells = cells.assign(level=defence_levels(cells))
    cells = cells[np.isfinite(cells["test_accuracy"].to_numpy(dtype=float))] if "test_accuracy" in cells \
        else cells.iloc[0:0]
    rows = []
    for key, s in grouped(records, cells, ["dataset", "model", "batch_size", "attack", "level"]):
        sub = cells[(cells[["dataset", "model", "batch_size", "attack", "level"]] == list(key)).all(axis=1)]
        rows.append({**dict(zip(["dataset", "model", "batch_size", "attack", "level"], key, strict=True)),
                     "accuracy_pct": 100 * _accuracy(sub), "exact_pct": s["exact_pct"],
                     "psnr_median": s["psnr_median"], "lpips_mean": s["lpips_mean"]})
    return pd.DataFrame(rows, columns=["dataset", "model", "batch_size", "attack", "level", "accuracy_pct",
                                       "exact_pct", "psnr_median", "lpips_mean"])
