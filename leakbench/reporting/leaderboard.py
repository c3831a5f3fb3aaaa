"""`leakbench leaderboard`: attacks ranked from stored records only, one compact table per victim.

Every run folder under `--results` (a folder holding records.parquet and cells.parquet) contributes, read
through `records.runs.read_run` (each attack's budget from its cell folders' summary.json, '' without them).
A table holds (suite, dataset, model, attacked layer, client) fixed, like RobustBench's per-threat-model
tables: attacks are its rows, ranked; batch size × DP level its columns; each entry one headline number
(exact %, else PSNR median) with LPIPS beside it; seeds pooled. The ranked files are byte-identical for the
same records (nothing depends on time, order on disk or host); wall-clock seconds go to a separate file.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import pandas as pd

from leakbench.errors import ConfigError, LeakbenchError
from leakbench.records.atomic import write_text_atomic
from leakbench.records.runs import read_run
from leakbench.reporting.aggregate import Key, epsilon_labels, fmt, grouped, key_values, model_order, with_model
from leakbench.reporting.compare import grid_name
from leakbench.reporting.defences import defence_blocks
from leakbench.reporting.pivot import pivot_table
from leakbench.reporting.render import Block, Table, html_document, markdown
from leakbench.reporting.target import check_leaderboard_target

BOARD = ["suite", "dataset", "model", "layer", "client"]
"""What one leaderboard table holds fixed; its columns are batch size × DP level, its rows attacks."""
COLUMN = ["batch_size", "dp"]
CELL_COLUMNS = ("cell_id", "attack", "dataset", "batch_size", "width", "depth", "layer", "seed", "dp", "space")
RECORD_COLUMNS = ("cell_id", "exact")
"""Columns every leakbench run's cells.parquet / records.parquet holds (runs of every version): a table
without them is another tool's, refused in one line rather than failing deep in pandas."""
TITLE = "leakbench leaderboard"
TIMING_TITLE = "leakbench leaderboard — timing"


def load_results(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs' records and cells, with a `suite` column (the run folder's name), sorted; a table that is
    not leakbench's (unreadable, or without the columns it writes) is one ConfigError line naming it."""
    runs = sorted(p.parent for p in results.glob("*/cells.parquet") if (p.parent / "records.parquet").is_file())
    records, cells = [], []
    for run in runs:
        stored = read_run(run)
        if len(stored.cells):  # a sweep interrupted before its first cell stores empty tables
            _check_columns(run, stored.cells, stored.records)
            records.append(stored.records.assign(suite=run.name))
            cells.append(stored.cells.assign(suite=run.name))
    if not cells:
        raise LeakbenchError(f"no stored runs under {results} (expected RUN/records.parquet and RUN/cells.parquet)")
    return pd.concat(records, ignore_index=True), with_model(pd.concat(cells, ignore_index=True))


def _check_columns(run: Path, cells: pd.DataFrame, records: pd.DataFrame) -> None:
    """Refuse a run folder whose tables lack the columns the leaderboard reads (not a leakbench run)."""
    for name, table, needed in (("cells.parquet", cells, CELL_COLUMNS), ("records.parquet", records, RECORD_COLUMNS)):
        missing = sorted(set(needed) - set(table.columns))
        if missing:
            raise ConfigError(f"{run / name} is not a leakbench table (no column {', '.join(missing[:3])}); "
                              "--results must hold leakbench run folders only")


def board_table(records: pd.DataFrame, cells: pd.DataFrame, board: Key, eps: dict[Hashable, str],
                reports: Path | None = None) -> Table:
    """One RobustBench-style table: attacks ranked as rows, batch size × DP level as columns; an entry links
    to its comparison grid when that grid lies in `reports` (written there by `leakbench report` or `run`)."""
    suite, dataset, model, layer, client = board
    several_dp = cells["dp"].nunique() > 1
    title = (f"{dataset} · {model} · layer {layer}" + ("" if client == "fedsgd" else f" · {client}")
             + f" (suite {suite})")
    images = bool(((cells["space"] == "image") | (cells["inversion_steps"] > 0)).any())
    seed = int(cells["seed"].min())

    def link(attack: str, setting: Key) -> str | None:  # the comparison grid of the setting's first seed
        b, dp = setting
        target = f"{suite}/grids/{grid_name(dataset, model, b, layer, dp, client, seed)}"
        return target if images and reports is not None and (reports / target).is_file() else None
    return pivot_table(records, cells, title=title, columns=COLUMN, link=link,
                       label=lambda c: f"b={c[0]}" + (f" {eps.get(c[1], c[1])}" if several_dp else ""))


def leaderboard_blocks(records: pd.DataFrame, cells: pd.DataFrame, reports: Path | None = None) -> list[Block]:
    """One table per suite, dataset, model, attacked layer and client, in a fixed order (entries link to
    the grids found under `reports`)."""
    eps = epsilon_labels(cells)
    blocks: list[Block] = []
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    for board, sub in sorted(cells.groupby(BOARD, sort=True), key=lambda g: (g[0][0], g[0][1], rank[g[0][2]])):
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"])) & (records["suite"] == board[0])]
        blocks.append(board_table(sub_records, sub, key_values(board), eps, reports))
    return blocks


def timing_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """Seconds per cell for every attack and setting (wall clock: differs between reruns, never ranked)."""
    rows = [[*map(str, key), fmt(s["seconds_mean"], 2), str(s["cells"])]
            for key, s in grouped(records, cells, [*BOARD, *COLUMN, "attack"])]
    return [Table("Seconds per cell", [*BOARD, *COLUMN, "attack", "seconds / cell", "cells"], rows)]


def write_leaderboard(results: Path, reports: Path) -> list[Path]:
    """Regenerate REPORTS/leaderboard.{md,html} (ranked, byte-identical for the same records) and
    REPORTS/leaderboard-timing.md (seconds per cell) from the runs under `results`."""
    check_leaderboard_target(reports)  # before reading anything: a user's leaderboard.md is never replaced
    records, cells = load_results(results)
    intro = ["Per dataset, victim and attacked layer: attacks ranked by mean exact % over the table's settings "
             "(failed images count as not exact), then mean PSNR median, then fewer failures. Each entry is one "
             "headline number — exact % when any image is exact, else the PSNR median — with the mean LPIPS after "
             "the dot. Generated from stored records only; the same records give the same bytes (timing is in "
             "leaderboard-timing.md). An entry links to its comparison grid where the suite's report lies in the "
             "same reports folder (`leakbench report RUN --reports` this folder).",
             f"Runs: {', '.join(sorted(cells['suite'].unique()))}. Matching: Hungarian on MSE. "
             f"Exact over all images: {fmt(100 * float(records['exact'].mean()), 1)} %."]
    blocks = leaderboard_blocks(records, cells, reports)
    defences = defence_blocks(records, cells)
    if defences:
        intro.append("Defences (the tables titled 'Defences: …', after the attack tables): per dataset, victim and "
                     "batch size, each defence level ranked by its worst leakage over every attack, beside the "
                     "test accuracy of a victim trained with that defence on every update and its cost against "
                     "the undefended victim.")
        blocks += defences
    files = {"leaderboard.md": markdown(TITLE, intro, blocks),
             "leaderboard.html": html_document(TITLE, intro, blocks, sortable=True),
             "leaderboard-timing.md": markdown(TIMING_TITLE, ["Wall-clock seconds per cell; not part of the ranking."],
                                               timing_blocks(records, cells))}
    for name, text in files.items():
        write_text_atomic(reports / name, text)
    return [reports / name for name in files]
