"""`leakbench leaderboard`: attacks ranked from stored records only, one compact table per victim.

Every run folder under `--results` (a folder holding records.parquet and cells.parquet) contributes.
A table holds (suite, dataset, model, attacked layer, client) fixed, like RobustBench's per-threat-model
tables: attacks are its rows, ranked; batch size × DP level its columns; each entry one headline number
(exact %, else PSNR median) with LPIPS beside it; seeds pooled. The ranked files are byte-identical for the
same records (nothing depends on time, order on disk or host); wall-clock seconds go to a separate file.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from leakbench.errors import LeakbenchError
from leakbench.reporting.aggregate import epsilon_labels, fmt, grouped
from leakbench.reporting.render import Block, Table, html_document, markdown

BOARD = ["suite", "dataset", "model", "layer", "client"]
"""What one leaderboard table holds fixed; its columns are batch size × DP level, its rows attacks."""
COLUMN = ["batch_size", "dp"]
TITLE = "leakbench leaderboard"
TIMING_TITLE = "leakbench leaderboard — timing"


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


def headline(s: dict) -> str:
    """One number per setting: exact % when any image is exact, else the PSNR median; LPIPS beside it."""
    main = f"{fmt(s['exact_pct'], 0)} %" if s["exact_pct"] > 0 else (
        f"{fmt(s['psnr_median'])} dB" if not math.isnan(s["psnr_median"]) else "failed")
    return main + ("" if math.isnan(s["lpips_mean"]) else f" · {s['lpips_mean']:.3f}")


def rank_key(row: list[dict]) -> tuple:
    """An attack's rank over a table's settings: mean exact % high first, then mean PSNR median, then failures.

    A setting the attack did not run counts as 0 % exact with no PSNR; a missing PSNR counts as 0 dB.
    """
    exact = [s["exact_pct"] if s else 0.0 for s in row]
    psnr = [s["psnr_median"] if s and not math.isnan(s["psnr_median"]) else 0.0 for s in row]
    return (-sum(exact) / len(row), -sum(psnr) / len(row), sum(s["failures"] for s in row if s))


def board_table(records: pd.DataFrame, cells: pd.DataFrame, board: tuple, eps: dict[str, str]) -> Table:
    """One RobustBench-style table: attacks ranked as rows, batch size × DP level as columns."""
    stats = dict(grouped(records, cells, ["attack", *COLUMN]))
    columns = sorted({key[1:] for key in stats}, key=lambda c: (int(c[0]), c[1] != "none", _sigma(cells, c[1]), c[1]))
    attacks = sorted({key[0] for key in stats})
    rows = {a: [stats.get((a, *c)) for c in columns] for a in attacks}
    ranked = sorted(attacks, key=lambda a: (rank_key(rows[a]), a))
    several_dp = len({c[1] for c in columns}) > 1
    header = ["rank", "attack", *[f"b={b}" + (f" {eps.get(dp, dp)}" if several_dp else "") for b, dp in columns],
              "n", "failures"]
    body = [[str(i), a, *[headline(s) if s else "–" for s in rows[a]], str(sum(s["n"] for s in rows[a] if s)),
             str(sum(s["failures"] for s in rows[a] if s))] for i, a in enumerate(ranked, 1)]
    suite, dataset, model, layer, client = board
    title = f"{dataset} · {model} · layer {layer}" + ("" if client == "fedsgd" else f" · {client}") + f" (suite {suite})"
    return Table(title, header, body, [f"{len(cells)} cells, {int((cells['status'] != 'ok').sum())} failed; "
                                       "seeds pooled per setting."])


def _sigma(cells: pd.DataFrame, dp: str) -> float:
    sigma = cells.loc[cells["dp"] == dp, "dp_sigma"]
    return float(sigma.iloc[0]) if len(sigma) and not math.isnan(sigma.iloc[0]) else -1.0


def leaderboard_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """One table per suite, dataset, model, attacked layer and client, in a fixed order."""
    eps = epsilon_labels(cells)
    blocks: list[Block] = []
    for board, sub in cells.groupby(BOARD, sort=True):
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"])) & (records["suite"] == board[0])]
        blocks.append(board_table(sub_records, sub, board, eps))
    return blocks


def timing_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """Seconds per cell for every attack and setting (wall clock: differs between reruns, never ranked)."""
    rows = [[*map(str, key), fmt(s["seconds_mean"], 2), str(s["cells"])]
            for key, s in grouped(records, cells, [*BOARD, *COLUMN, "attack"])]
    return [Table("Seconds per cell", [*BOARD, *COLUMN, "attack", "seconds / cell", "cells"], rows)]


def write_leaderboard(results: Path, reports: Path) -> list[Path]:
    """Regenerate REPORTS/leaderboard.{md,html} (ranked, byte-identical for the same records) and
    REPORTS/leaderboard-timing.md (seconds per cell) from the runs under `results`."""
    records, cells = load_results(results)
    intro = ["Per dataset, victim and attacked layer: attacks ranked by mean exact % over the table's settings "
             "(failed images count as not exact), then mean PSNR median, then fewer failures. Each entry is one "
             "headline number — exact % when any image is exact, else the PSNR median — with the mean LPIPS after "
             "the dot. Generated from stored records only; the same records give the same bytes (timing is in "
             "leaderboard-timing.md).",
             f"Runs: {', '.join(sorted(cells['suite'].unique()))}. Matching: Hungarian on MSE. "
             f"Exact over all images: {fmt(100 * float(records['exact'].mean()), 1)} %."]
    blocks = leaderboard_blocks(records, cells)
    files = {"leaderboard.md": markdown(TITLE, intro, blocks),
             "leaderboard.html": html_document(TITLE, intro, blocks, sortable=True),
             "leaderboard-timing.md": markdown(TIMING_TITLE, ["Wall-clock seconds per cell; not part of the ranking."],
                                               timing_blocks(records, cells))}
    reports.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        path = reports / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        paths.append(path)
    return paths
