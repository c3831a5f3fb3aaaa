"""The price of a defence, from stored records only: each defence level's leakage against its victim's accuracy.

A *defence level* is what a cell's client did to its update besides plain FedSGD: its DP-SGD setting, its
noise, its defences (and a FedAvg client or a threat model, when not the default), named by one label
('none', 'DP σ=0.5 C=1', 'noise σ=0.01', 'prune keep=0.5'). A trained victim is trained with its cell's level
applied to every update (`models.training`), so its test accuracy is the level's price; the *accuracy cost*
is the drop from the undefended victim ('none') trained the same way (same board: suite, dataset, model,
batch size). The *worst leakage* of a level is that of the strongest attack against it (most exact images,
then highest PSNR median), over every attack and attacked layer of the board.

`defence_blocks` are the report's defence boards, `defence_ranking` the leaderboard's view "Defences ranked";
`privacy_utility_data` feeds the report's figure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pandas as pd

from leakbench.core.citation import Citation, Papers
from leakbench.fl.dp import CLIPPING_NOISE
from leakbench.records.labels import update_steps
from leakbench.reporting.aggregate import (
    PSNR_CAP,
    all_exact,
    board_order_key,
    fmt,
    grouped,
    key_values,
    model_order,
    psnr_text,
)
from leakbench.reporting.board_page import Board, Column, Entry, anchor, number, paper_entry
from leakbench.reporting.leakage import leakage_key, leakage_stats, shown_exact
from leakbench.reporting.order import NONE, defence_levels, level_sorter
from leakbench.reporting.palette import colour
from leakbench.reporting.pivot import ranks, shown_psnr
from leakbench.reporting.render import Block, Table

DEFENCE_BOARD = ["suite", "dataset", "model", "batch_size"]
"""What one defence board holds fixed; its rows are the defence levels, ranked."""


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
    order = level_sorter(cells)
    for level, sub in sorted(cells.groupby("level", sort=True), key=lambda g: order(g[0])):
        attacks = grouped(records, sub, ["attack", "layer"])
        # the strongest; among equally strong ones (as shown) the first by name
        (attack, layer), worst = min(attacks, key=lambda a: (tuple(-v for v in _leakage_key(a[1])), a[0]))
        accuracy = _accuracy(sub)
        several_layers = sub["layer"].nunique() > 1
        rows.append({"level": str(level), "accuracy": accuracy, "cost": base - accuracy, "worst": worst,
                     "strongest": f"{attack}" + (f" (layer {layer})" if several_layers else ""),
                     "attacks": len(attacks), "cells": len(sub)})
    return rows


def _ranked(rows: list[dict[str, Any]], order: Callable[[object], tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Least worst leakage first, then smallest accuracy cost (unknown last), then level (`order`)."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        cost = r["cost"] if not math.isnan(r["cost"]) else math.inf
        return (*_leakage_key(r["worst"]), cost, order(r["level"]))
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
    ranked = _ranked(rows, level_sorter(cells))
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


# --------------------------------------------------------------------------- the leaderboard's defence ranking

RANKING_BOARD = ["dataset", "model", "batch_size"]
"""What one defence ranking of the leaderboard holds fixed (whatever run the cells come from)."""


def level_papers(level: str, cells: pd.DataFrame, papers: Papers) -> list[tuple[str, Citation]]:
    """The papers of the update transforms of a defence level's `cells`, each once, in the order they run
    (a leading FedSGD, which the level does not name, left out), found by the transform names their stored
    updates list (`records.labels`); transforms without a paper in `papers` give none. Only for cells stored
    without their update: the names that start the parts of its label ('DP σ=1 C=1 + prune p=0.5' → dp, prune)."""
    stored = [steps for steps in map(update_steps, cells["update"] if "update" in cells else ()) if steps]
    names = [name for steps in stored for i, (name, _) in enumerate(steps) if i or name != "fedsgd"]
    if not stored:  # cells stored before `update`
        names = [part.split(" ")[0].lower() for part in re.split(r" \+ | · ", level.replace(CLIPPING_NOISE, "dp"))]
    return [(name, papers.defences[name]) for name in dict.fromkeys(names) if name in papers.defences]


def defence_ranking(records: pd.DataFrame, cells: pd.DataFrame, papers: Papers | None = None) -> list[Board]:
    """The leaderboard's view "Defences ranked": per dataset, victim and batch size with a defended level,
    the defence levels ranked by how much they cut the leakage of the strongest attack against the
    undefended client (`cells` with `model`, `client` and `suite`, as the leaderboard loads them)."""
    levels = defence_levels(cells)
    boards = []
    order = board_order_key(cells)
    groups = sorted(cells.groupby(RANKING_BOARD, sort=True), key=lambda g: order(key_values(g[0])))
    for key, sub in groups:
        if (levels[sub.index] == NONE).all():
            continue
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"]))]
        boards.append(ranking_board(sub_records, sub.assign(level=levels[sub.index]), key_values(key),
                                    papers or Papers()))
    return boards


def _strongest(records: pd.DataFrame, cells: pd.DataFrame) -> tuple[tuple[str, int], dict[str, Any]] | None:
    """The (attack, layer) leaking most over `cells` (most exact images, then highest PSNR median, as shown)
    with its stats, the first by name among equally strong ones (as the report's findings); None without cells."""
    found = [(key_values(k), leakage_stats(records[records["cell_id"].isin(set(s["cell_id"]))], s))
             for k, s in cells.groupby(["attack", "layer"], sort=True)]
    if not found:
        return None
    (attack, layer), stats = max(found, key=lambda f: leakage_key(f[1]))  # max keeps the first of equals
    return (str(attack), int(layer)), stats


def ranking_board(records: pd.DataFrame, cells: pd.DataFrame, board: tuple[Any, ...], papers: Papers) -> Board:
    """One board of the defence ranking: its levels ranked by the strongest undefended attack's leakage
    under them, then the worst leakage of any attack, then accuracy cost (unknown last), then label."""
    dataset, model, b = board
    undefended = cells[cells["level"] == NONE]
    strongest = _strongest(records, undefended)
    base = _accuracy(undefended)
    rows: list[dict[str, Any]] = []
    order = level_sorter(cells)
    for level, sub in cells.groupby("level", sort=True):
        target = None
        if strongest:
            (attack, layer), _ = strongest
            hit = sub[(sub["attack"] == attack) & (sub["layer"] == layer)]
            target = leakage_stats(records[records["cell_id"].isin(set(hit["cell_id"]))], hit) if len(hit) else None
        worst = _strongest(records, sub)
        if worst and leakage_key(worst[1]) == (0.0, 0.0):  # every attack failed on every image: no attack leaks
            worst = None
        accuracy = _accuracy(sub)
        rows.append({"level": str(level), "target": target, "worst": worst, "accuracy": accuracy,
                     "cost": base - accuracy, "cells": len(sub)})

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        cost = r["cost"] if not math.isnan(r["cost"]) else math.inf
        unmeasured = strongest is not None and r["target"] is None  # never ranked above a level it was measured on
        return (unmeasured, leakage_key(r["target"]), leakage_key(r["worst"][1] if r["worst"] else None), cost,
                order(r["level"]))
    ranked = sorted(rows, key=key)
    several_layers = cells["layer"].nunique() > 1
    body = []
    for rank, r in zip(ranks([key(r)[:4] for r in ranked]), ranked, strict=True):
        cited = level_papers(r["level"], cells[cells["level"] == r["level"]], papers)
        name = Entry(r["level"], None, cited[0][1].url if cited else None,
                     "; ".join(f"{n}: {c.short}" for n, c in cited))
        worst_attack = w[0][0] if (w := r["worst"]) else ""
        t, w = r["target"], r["worst"]
        ref = strongest[1] if strongest else None
        worst_name = (w[0][0] + (f" (layer {w[0][1]})" if several_layers else "")) if w else "none leaks"
        worst_paper = papers.attacks.get(w[0][0]) if w else None
        body.append([Entry(str(rank), rank), name,
                     number(t["exact_pct"], 0) if t else Entry("–"), psnr_entry(t),
                     _cut(ref, t),
                     number(w[1]["exact_pct"], 0) if w else Entry("–"), psnr_entry(w[1] if w else None),
                     paper_entry(worst_name, worst_paper, colour(worst_attack) if worst_attack else ""),
                     number(100 * r["accuracy"], 1), number(100 * r["cost"], 1), Entry(str(r["cells"]), r["cells"])])
    if strongest:
        (attack, layer), ref_stats = strongest
        who = f"{attack}" + (f" (layer {layer})" if several_layers else "")
        paper = papers.attacks.get(attack)
        group = f"strongest undefended attack: {who}"
        shown = psnr_entry(ref_stats).text
        notes = [f"{who} leaks {fmt(ref_stats['exact_pct'], 0)} % exact images undefended (PSNR median "
                 f"{shown}{'' if shown in ('exact', '–') else ' dB'})."]
        if any(r["target"] is None for r in rows):
            notes.append(f"'–' under {who}: it has no cell at that level (not run there, or a third-party pairing "
                         "kept out of the rankings), so the level is ranked after every level it was measured on.")
        linked = [(attack, paper)] if paper else []
    else:
        group, notes, linked = "strongest undefended attack: none (no undefended cells)", [
            "No undefended level here: ranked by the worst leakage of any attack."], []
    columns = [Column("rank"), Column("defence", numeric=False),
               Column(group, "exact %"), Column(group, "PSNR median (dB)"), Column(group, "exact cut (pp)"),
               Column("worst of all attacks", "exact %"),
               Column("worst of all attacks", "PSNR median (dB)"), Column("worst of all attacks", "attack", False),
               Column("test acc. %"), Column("accuracy cost (pp)"), Column("cells")]
    if all(math.isnan(r["accuracy"]) for r in rows):  # victims at init: no accuracy columns
        notes[0] += " Victims at init (untrained): no accuracy measured."
        columns, body = columns[:-3] + columns[-1:], [row[:-3] + row[-1:] for row in body]
    return Board(f"{dataset} · {model} · b={b}", columns, body, notes, linked, anchor("d", *board))


def psnr_entry(s: dict[str, Any] | None) -> Entry:
    """A PSNR median entry: 'exact' (sorted as +∞) when the median image is exact, '≥ 60' past
    `aggregate.PSNR_CAP` (sorted as the cap: above it the number tells only float digits), '–' when none."""
    if s is None:
        return Entry("–")
    value = s["psnr_exact_median"]
    if math.isinf(value):
        return Entry("exact", math.inf, hint="the median image is exact (pixel-equal at 8 bits)")
    if value >= PSNR_CAP:
        return Entry(f"≥ {PSNR_CAP:.0f}", PSNR_CAP, hint=f"{value:.1f} dB: within the 8-bit rounding step, not exact")
    return number(value, 1)


def _cut(ref: dict[str, Any] | None, under: dict[str, Any] | None) -> Entry:
    """How many percentage points of exact images the defence takes from the strongest attack (as shown)."""
    if ref is None or under is None:
        return Entry("–")
    return number(shown_exact(ref) - shown_exact(under), 0)
