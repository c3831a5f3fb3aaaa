"""`leakbench leaderboard`: rank attacks per setting from stored records only (deterministic output).

Every run folder under `--results` (a folder holding records.parquet and cells.parquet) contributes.
A setting is (suite, dataset, model, batch size, layer, DP level, client), seeds pooled. Attacks are ranked
by exact % (failed images count as not exact), then PSNR median, then fewer failures, then name.
The same records always give byte-identical files: nothing depends on time, order on disk or host.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from leakbench.errors import LeakbenchError
from leakbench.reporting.aggregate import fmt, grouped, stat_cells, STAT_HEADER
from leakbench.reporting.render import Block, Table, html_document, markdown

SETTING = ["dataset", "model", "batch_size", "layer", "dp", "client"]
TITLE = "leakbench leaderboard"


def load_results(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs' records and cells, with a `suite` column (the run folder's name), sorted."""
    runs = sorted(p.parent for p in results.glob("*/cells.parquet") if (p.parent / "records.parquet").is_file())
    records, cells = [], []
    for run in runs:
        run_cells = pd.read_parquet(run / "cells.parquet")
        if len(run_cells):  # a sweep interrupted before its first cell stores empty tables
            records.append(pd.read_parquet(run / "records.parquet").assign(suite=run.name))
            cells.append(run_cells.assign(suite=run.name))
    if not cells:
        raise LeakbenchError(f"no stored runs under {results} (expected RUN/records.parquet and RUN/cells.parquet)")
    cells_all = pd.concat(cells, ignore_index=True)
    for column, default in (("arch", "fc"), ("client", "fedsgd")):  # runs stored before these existed
        cells_all[column] = cells_all[column].fillna(default) if column in cells_all else default
    prefix = cells_all["arch"].map({"fc": "FC-"}).fillna(cells_all["arch"] + "-")
    cells_all["model"] = prefix + cells_all["depth"].astype(str) + " w" + cells_all["width"].astype(str)
    return pd.concat(records, ignore_index=True), cells_all


def rank_key(stats: dict) -> tuple:
    """Sort key: exact % high first, PSNR median high first (missing last), failures few first."""
    psnr = stats["psnr_median"]
    return (-stats["exact_pct"], math.inf if math.isnan(psnr) else -psnr, stats["failures"])


def leaderboard_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """One table per suite: every setting, its attacks ranked."""
    blocks: list[Block] = []
    for suite in sorted(cells["suite"].unique()):
        sub_cells = cells[cells["suite"] == suite]
        sub_records = records[(records["suite"] == suite)]
        stats = grouped(sub_records, sub_cells, [*SETTING, "attack"])
        settings: dict[tuple, list] = {}
        for key, s in stats:
            settings.setdefault(key[:-1], []).append((key[-1], s))
        rows = []
        for setting in sorted(settings, key=_setting_order):
            ranked = sorted(settings[setting], key=lambda item: (rank_key(item[1]), item[0]))
            for rank, (attack, s) in enumerate(ranked, 1):
                rows.append([*(str(v) for v in setting), str(rank), attack, *stat_cells(s)])
        blocks.append(Table(f"Suite '{suite}'", ["dataset", "model", "b", "layer", "dp", "client", "rank", "attack", *STAT_HEADER],
                            rows, [f"{len(sub_cells)} cells, {int((sub_cells['status'] != 'ok').sum())} failed; "
                                   "seeds pooled per setting."]))
    return blocks


def _setting_order(setting: tuple) -> tuple:
    dataset, model, b, layer, dp, client = setting
    return (dataset, model, int(b), int(layer), dp != "none", dp, client != "fedsgd", client)


def write_leaderboard(results: Path, reports: Path) -> list[Path]:
    """Regenerate REPORTS/leaderboard.md and .html from the runs under `results`."""
    records, cells = load_results(results)
    blocks = leaderboard_blocks(records, cells)
    intro = ["Attacks ranked per setting by exact % (failed images count as not exact), then PSNR median, "
             "then fewer failures. Generated from stored records only; the same records give the same files.",
             f"Runs: {', '.join(sorted(cells['suite'].unique()))}. Matching: Hungarian on MSE. "
             f"Exact over all images: {fmt(100 * float(records['exact'].mean()), 1)} %."]
    reports.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in (("leaderboard.md", markdown(TITLE, intro, blocks)),
                       ("leaderboard.html", html_document(TITLE, intro, blocks))):
        path = reports / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        paths.append(path)
    return paths
