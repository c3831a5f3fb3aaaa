"""`leakbench leaderboard`: attacks ranked from stored records only, one table per threat model.

Every run folder under `--results` (a folder holding records.parquet and cells.parquet) contributes, read
through `records.runs.read_run` (each attack's budget from its cell folders' summary.json, '' without them).
Like RobustBench's per-threat-model pages, a table holds one threat model fixed — dataset, victim, attacked
layer and defence level (DP, client, noise, defences, threat model: `defences.defence_levels`) — whatever
run its cells come from: an attack evaluated through `api.evaluate` (run folder `SUITE--NAME`), a plugin's,
and the shipped ones stand in one table when their settings match. Rows are attacks (one per budget), each
linked to its paper; columns are one metric and one unit each, per batch size: exact %, PSNR median in dB
('exact' when the median image is exact), LPIPS; then n and failures. A cell stored by two runs (the same
cell id) counts once. The ranked files are byte-identical for the same records (nothing depends on time,
order on disk or host); wall-clock seconds go to a separate file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from leakbench.core.citation import Papers
from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.server import MALICIOUS, SERVER_COLUMN
from leakbench.metrics.matching import matching_line
from leakbench.records.atomic import write_text_atomic
from leakbench.records.labels import stored_papers
from leakbench.records.runs import read_run
from leakbench.reporting.aggregate import (
    INCOMPLETE_NOTE,
    Key,
    board_order_key,
    cells_note,
    fmt,
    grouped,
    incomplete_cells,
    incomplete_text,
    key_values,
    no_answer,
    scored_settings,
    shared_note,
    state_words,
    with_model,
)
from leakbench.reporting.board_page import (
    Board,
    Column,
    Entry,
    Section,
    anchor,
    html_page,
    markdown_page,
    number,
    paper_entry,
    text,
)
from leakbench.reporting.compare import grid_name
from leakbench.reporting.defences import (
    NO_ADAPTATIONS,
    RANK_NOTE,
    Adaptations,
    defence_ranking,
    level_papers,
    psnr_entry,
)
from leakbench.reporting.leakage import leakage_stats, shown_exact, shown_median
from leakbench.reporting.order import defence_levels
from leakbench.reporting.palette import colour
from leakbench.reporting.pivot import not_isolated, ranks
from leakbench.reporting.render import Table, markdown
from leakbench.reporting.target import check_leaderboard_target
from leakbench.reporting.trust import (
    ATTACK_CODE,
    UNRANKED_COLUMNS,
    UNRANKED_NOTE,
    UNRANKED_TITLE,
    attack_code,
    has_third_party,
    ranked,
    unranked_rows,
)

NO_PAPERS = Papers()
BOARD = ["dataset", "model", "layer", "level"]
"""The threat model one leaderboard table holds fixed; its rows are attacks, its columns metrics per batch size."""
CELL_COLUMNS = ("cell_id", "attack", "dataset", "batch_size", "width", "depth", "layer", "seed", "dp", "space")
RECORD_COLUMNS = ("cell_id", "exact")
"""Columns every leakbench run's cells.parquet / records.parquet holds (runs of every version): a table
without them is another tool's, refused in one line rather than failing deep in pandas."""
TITLE = "leakbench leaderboard"
TIMING_TITLE = "leakbench leaderboard — timing"
EXACT = "exact %"
PSNR = "PSNR median (dB)"
ERROR = "feature rel. error (median)"
LPIPS = "LPIPS (mean)"


def load_results(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs' records and cells, with a `suite` column (the run folder's name), sorted; a cell stored by
    several runs (same id) is kept from the first run only; a table that is not leakbench's (unreadable, or
    without the columns it writes) is one ConfigError line naming it."""
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
    all_cells = pd.concat(cells, ignore_index=True).drop_duplicates("cell_id", keep="first")
    all_records = pd.concat(records, ignore_index=True)
    kept = all_records.set_index(["suite", "cell_id"]).index.isin(all_cells.set_index(["suite", "cell_id"]).index)
    all_cells = all_cells.reset_index(drop=True)
    malicious = malicious_cells(all_cells)  # each server's cells labelled apart: honest labels never change
    all_cells = pd.concat([with_model(all_cells[~malicious]), with_model(all_cells[malicious])]).sort_index() \
        if malicious.any() else with_model(all_cells)
    return all_records[kept].reset_index(drop=True), all_cells.assign(level=defence_levels(all_cells))


def malicious_cells(cells: pd.DataFrame) -> pd.Series:
    """Which cells ran under a malicious server (`server` column 'malicious'; cells of honest attacks have none)."""
    return cells[SERVER_COLUMN].eq(MALICIOUS) if SERVER_COLUMN in cells else pd.Series(False, index=cells.index)


def _check_columns(run: Path, cells: pd.DataFrame, records: pd.DataFrame) -> None:
    """Refuse a run folder whose tables lack the columns the leaderboard reads (not a leakbench run)."""
    for name, table, needed in (("cells.parquet", cells, CELL_COLUMNS), ("records.parquet", records, RECORD_COLUMNS)):
        missing = sorted(set(needed) - set(table.columns))
        if missing:
            raise ConfigError(f"{run / name} is not a leakbench table (no column {', '.join(missing[:3])}); "
                              "--results must hold leakbench run folders only")


# --------------------------------------------------------------------------- papers

def with_stored_papers(cells: pd.DataFrame, papers: Papers) -> Papers:
    """`papers` and, for every attack and transform it lacks, the paper the cells stored when they ran
    (`records.labels`: a plugin's, even when the plugin is not installed here)."""
    if "papers" not in cells:
        return papers
    stored = stored_papers(list(cells["attack"]), list(cells["papers"]))
    return Papers({**stored.attacks, **papers.attacks}, {**stored.defences, **papers.defences})


# --------------------------------------------------------------------------- one threat model

def rank_key(row: Sequence[dict[str, Any] | None]) -> tuple[int, float, float, int, int]:
    """Mean exact % (as shown: whole percent) high first, then mean PSNR median (as shown: `leakage.shown_median`,
    0.1 dB capped at 60, exact above any), then fewer batch sizes without an answer, then fewer failures; a batch
    size the attack did not run counts 0 % exact, one whose every cell failed is left out of the means
    (`aggregate.scored_settings`: never 0 %), and an attack without any answer ranks last. Rounding as shown:
    float noise never decides a rank."""
    scored = scored_settings(row)
    failures = sum(s["failures"] for s in row if s)
    if not scored:
        return 1, 0.0, 0.0, len(row), failures
    exact = sum(shown_exact(s) for s in scored) / len(scored)
    psnr = sum(shown_median(s) for s in scored) / len(scored)
    return 0, -round(exact, 6), -round(psnr, 6), len(row) - len(scored), failures


def metrics_of(spaces: set[str]) -> list[str]:
    """The metric groups of a table whose records lie in `spaces` ('image', 'feature')."""
    image, feature = "image" in spaces, "feature" in spaces
    return [EXACT, *([PSNR] if image else []), *([ERROR] if feature else []), *([LPIPS] if image else [])]


INCOMPLETE = "incomplete batches"
"""The column a table gains when one of its cells is an incomplete batch (status partial)."""


def _columns(batch_sizes: list[int], metrics: list[str], incomplete: bool, third: bool) -> list[Column]:
    """A table's columns; `third`: it holds a third-party attack (the 'attack code' column marks it)."""
    return [Column("rank"), Column("attack", numeric=False), Column("budget", numeric=False),
            *([Column(ATTACK_CODE, numeric=False)] if third else []),
            *[Column(m, f"b={b}") for m in metrics for b in batch_sizes], Column("n"), Column("failures"),
            *([Column(INCOMPLETE)] if incomplete else [])]


def incomplete_entry(row: Sequence[dict[str, Any] | None]) -> Entry:
    """The incomplete batches of a row over its batch sizes: '1 (148/150 verified)', sorted by their count."""
    batches = sorted(batch for s in row if s for batch in s["incomplete"])
    return Entry(incomplete_text(batches) or "0", len(batches))


def _entries(metric: str, s: dict[str, Any] | None, link: str | None) -> Entry:
    if s is None:
        return Entry("–")
    if no_answer(s) and metric in (EXACT, PSNR):  # every cell failed: its state, never 0 % or 0 dB (issue 43)
        return Entry(state_words(s))
    if metric == EXACT:
        entry = number(s["exact_pct"], 0)
        return Entry(entry.text, entry.sort, link, "comparison grid" if link else "")
    if metric == PSNR:
        return psnr_entry(s)
    if metric == ERROR:
        value = s["rel_error_median"] if s["space"] == "feature" else math.nan
        return Entry("–") if math.isnan(value) else Entry(f"{value:.1e}", float(f"{value:.1e}"))
    return number(s["lpips_mean"], 3)


def board_table(records: pd.DataFrame, cells: pd.DataFrame, board: Key,
                reports: Path | None = None, papers: Papers = NO_PAPERS) -> Board:
    """One threat model: attacks (one row per attack and budget) ranked, one column per metric and batch
    size; an exact % links to its comparison grid when that grid lies in `reports` (written there by
    `leakbench report` or `run`)."""
    dataset, model, layer, level = board
    cells = cells.assign(budget=cells["budget"].fillna("") if "budget" in cells else "")
    batch_sizes = sorted(int(b) for b in cells["batch_size"].unique())
    stats: dict[tuple[str, str, int], dict[str, Any]] = {}
    for (attack, budget, _), sub in cells.groupby(["attack", "budget", "batch_size"], sort=True):
        b = int(sub["batch_size"].iloc[0])
        stats[(str(attack), str(budget), b)] = leakage_stats(records[records["cell_id"].isin(set(sub["cell_id"]))], sub)
    rows = {key[:2]: [stats.get((*key[:2], b)) for b in batch_sizes] for key in stats}
    metrics = metrics_of(set(cells["space"].astype(str)))
    exposed = not_isolated(cells)
    incomplete = incomplete_cells(cells["status"]) > 0
    third = has_third_party(cells)
    keys = sorted(rows, key=lambda k: (rank_key(rows[k]), k))
    body: list[list[Entry]] = []
    for rank, key in zip(ranks([rank_key(rows[k]) for k in keys]), keys, strict=True):
        attack, budget = key
        paper = papers.attacks.get(attack)
        shown = attack + (" (not isolated)" if attack in exposed else "")
        entries = [_entries(m, s, _grid(cells, reports, board, b, attack) if m == EXACT else None)
                   for m in metrics for b, s in zip(batch_sizes, rows[key], strict=True)]
        n = sum(s["n"] for s in rows[key] if s)
        failures = sum(s["failures"] for s in rows[key] if s)
        code = [text(attack_code(cells[cells["attack"] == attack]))] if third else []
        body.append([Entry(str(rank), rank), paper_entry(shown, paper, colour(attack)), text(budget or "–"), *code,
                     *entries,
                     Entry(str(n), n), Entry(str(failures), failures),
                     *([incomplete_entry(rows[key])] if incomplete else [])])
    title = f"{dataset} · {model} · layer {layer} · defence: {level}"  # a DP level names its ε, q and T
    suites = ", ".join(sorted(cells["suite"].unique()))
    notes = [f"{len(cells)} cells ({cells_note(cells['status'])}) from run{'s' * (',' in suites)} "
             f"{suites}; seeds pooled per batch size."]
    if exposed:
        notes.append("not isolated: some of the attack's cells ran without the operating-system sandbox "
                     "(Python guard only, or in process), so it could have read the batch.")
    if incomplete:
        notes.append(f"{INCOMPLETE}: {INCOMPLETE_NOTE}; k/b: its k verified images of b.")
    if third:
        notes.append(THIRD_PARTY_NOTE)
    return Board(title, _columns(batch_sizes, metrics, incomplete, third), body, notes,
                 level_papers(str(level), cells, papers), anchor("t", *board))


def _grid(cells: pd.DataFrame, reports: Path | None, board: Key, b: int, attack: str) -> str | None:
    """The comparison grid of the setting's first seed in its run's report folder, when it is there."""
    dataset, model, layer, _ = board
    sub = cells[(cells["batch_size"] == b) & (cells["attack"] == attack)]
    images = bool(((sub["space"] == "image") | (sub["inversion_steps"] > 0)).any()) if len(sub) else False
    if reports is None or not images:
        return None
    first = sub.sort_values(["seed", "suite"]).iloc[0]
    name = grid_name(dataset, model, b, layer, first["dp"], first["client"], first["seed"])
    target = f"{first['suite']}/grids/{name}"
    return target if (reports / target).is_file() else None


def board_order(cells: pd.DataFrame) -> list[Key]:
    """The threat models of `cells` by dataset, victim (`model_order`), layer and defence level."""
    keys = [key_values(k) for k in cells.groupby(BOARD, sort=True).groups]
    return sorted(keys, key=board_order_key(cells))


def leaderboard_boards(records: pd.DataFrame, cells: pd.DataFrame, reports: Path | None = None,
                       papers: Papers = NO_PAPERS) -> list[Board]:
    """One table per threat model (dataset, victim, attacked layer, defence level), in `board_order`."""
    boards = []
    for key in board_order(cells):
        sub = cells[(cells[BOARD] == list(key)).all(axis=1)]
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"]))]
        boards.append(board_table(sub_records, sub, key, reports, papers))
    return boards


def contents(boards: list[Board], keys: list[Key]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Navigation: per dataset, victim and layer, a link to each defence level's table."""
    lines: dict[str, list[tuple[str, str]]] = {}
    for board, key in zip(boards, keys, strict=True):
        lines.setdefault(f"{key[0]} · {key[1]} · layer {key[2]}", []).append((str(key[3]), f"#{board.anchor}"))
    return list(lines.items())


def timing_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Table]:
    """Seconds per cell for every attack and setting (wall clock: differs between reruns, never ranked)."""
    by = [*BOARD, "batch_size", "attack"]
    rows = [[*map(str, key), fmt(s["seconds_mean"], 2), str(s["cells"])] for key, s in grouped(records, cells, by)]
    return [Table("Seconds per cell", [*by, "seconds / cell", "cells"], rows)]


THIRD_PARTY_NOTE = (
    f"{ATTACK_CODE}: a third-party attack (a plugin's, or evaluated) is verified only on private images, which its "
    "submitter cannot have; on public ones it could carry the dataset and match the batch behind any defence, so "
    "an unverified row does not compare with the shipped attacks' ('How to read': trust model).")

HOW_TO_READ = [
    "One table per threat model — dataset, victim, attacked layer and defence — like RobustBench's pages. Attacks "
    "(each linked to its paper) are ranked by mean exact % over the table's batch sizes (failed images count as "
    "not exact; a batch size whose every cell failed shows its state, such as 'failed (budget)' or 'not "
    "applicable', and is left out of the mean, never read as 0 %), then mean PSNR median, then fewer batch sizes "
    "without an answer, then fewer failures, each rounded as shown so float noise never decides "
    "a rank; equal keys share a rank. Each column is one metric in one unit at one batch size b: exact % (images "
    "pixel-equal at 8 bits), PSNR median in dB over the reconstructed images ('exact' when the median image is "
    "exact; sorted above any number), mean LPIPS (lower is closer), n images and failures (images without a "
    "reconstruction: those of failed cells, and those an incomplete batch did not verify). A table with an incomplete "
    "batch (an attack that verified k of the batch's b samples before its budget ran out) counts them in a column "
    "of its own; the k verified images are scored like any other. Click a header to sort on its numbers (largest "
    "first; '–' last).",
    "Attacks from plugins and from `leakbench.api.evaluate` (run folders SUITE--NAME) stand in the same tables as "
    "the shipped ones when their settings match; a cell stored by several runs counts once. Generated from "
    "stored records only: the same records give the same bytes (wall-clock seconds are in "
    "leaderboard-timing.md). An exact % links to its comparison grid where the run's report lies in the same "
    "reports folder (`leakbench report RUN --reports` this folder).",
    "Trust model (docs/reference/sandbox.md): attack code is untrusted and runs sandboxed; defence, dataset and "
    "victim code is trusted client-side code that runs beside the batch. A third-party attack (a plugin's, or "
    "a class evaluated through `api.evaluate`) is marked in the column 'attack code': verified when every one "
    "of its cells attacked private images (an `imagefolder` of the evaluator's), unverified on public ones, "
    "which it could carry inside its package. A cell pairing a third-party defence with a third-party attack "
    "is no result and is ranked nowhere: such cells are listed apart, under 'Not ranked'.",
]


DEFENCES_INTRO = (
    "Per dataset, victim and batch size: each defence level's verdict — the worst leakage of every attack that "
    "ran against it, adaptive attacks (the attacker knew the defence and the attack adapts to it) beside the "
    "non-adaptive ones in the same row — against the accuracy cost of a victim trained with the defence on every "
    "update. A defended level without an adaptive attack is marked 'no adaptive attack (potentially "
    "unreliable)'. " + RANK_NOTE)


MALICIOUS_INTRO = (
    "A malicious server modifies the model it sends (an imprint block, trap weights) and attacks the update the "
    "client computed on it (docs/reference/threat-models.md). Its attacks are ranked here, apart from every "
    "honest-server result above: a number here says what such a server learns, not what an honest one does.")


def leaderboard_sections(records: pd.DataFrame, cells: pd.DataFrame, reports: Path | None,
                         papers: Papers = NO_PAPERS, adaptations: Adaptations = NO_ADAPTATIONS) -> list[Section]:
    """The page's views: the defence ranking (when a run has defended cells), then the attack tables, both of
    the cells that may be ranked (`trust.ranked`) under an honest server; the same two views of the malicious
    server's cells, apart (`malicious_cells`); then the cells that may not be ranked (a third-party defence with
    a third-party attack)."""
    all_records, all_cells = records, cells
    papers = with_stored_papers(cells, papers)
    records, cells = ranked(records, cells)
    malicious = malicious_cells(cells)
    sections = _ranked_sections(records, cells[~malicious], reports, papers, adaptations)
    if malicious.any():
        sections += [_apart(section) for section in _ranked_sections(records, cells[malicious], reports, papers,
                                                                     adaptations)]
    unranked = unranked_rows(all_records, all_cells)
    if unranked:
        sections.append(Section(UNRANKED_TITLE, [UNRANKED_NOTE], [
            Board("cells kept out of the rankings", UNRANKED_COLUMNS, unranked, anchor=anchor("unranked", "cells"))],
            "unranked"))
    sections.append(Section("How to read these tables", [*HOW_TO_READ, matching_line(all_cells)], [], "how"))
    return sections


def _ranked_sections(records: pd.DataFrame, cells: pd.DataFrame, reports: Path | None, papers: Papers,
                     adaptations: Adaptations) -> list[Section]:
    """The defence ranking (when there are defended cells) and the attack tables of `cells` (none for none)."""
    if not len(cells):
        return []
    records = records[records["cell_id"].isin(set(cells["cell_id"]))]
    sections = []
    keys = board_order(cells)
    boards = leaderboard_boards(records, cells, reports, papers)
    ranking = defence_ranking(records, cells, papers, adaptations)
    if ranking:
        sections.append(Section("Defences ranked", [DEFENCES_INTRO], ranking, "defences"))
    sections.append(Section("Attacks per threat model", [], boards, "attacks", contents(boards, keys)))
    return sections


def _apart(section: Section) -> Section:
    """A view of the malicious server's cells: its title and intro say so, its anchors and links are its own."""
    boards = [dataclasses.replace(board, anchor=f"malicious-{board.anchor}") for board in section.boards]
    contents = [(label, [(text, f"#malicious-{link.removeprefix('#')}") for text, link in links])
                for label, links in section.contents]
    return dataclasses.replace(section, title=f"Malicious server: {section.title.lower()}",
                               intro=[MALICIOUS_INTRO, *section.intro], boards=boards,
                               anchor=f"malicious-{section.anchor}", contents=contents)


def _counts(records: pd.DataFrame, cells: pd.DataFrame) -> str:
    """'RUNS (n cells, m images, x % of them exact)' of `cells`."""
    records = records[records["cell_id"].isin(set(cells["cell_id"]))]
    return (f"{', '.join(sorted(cells['suite'].unique()))} ({len(cells)} cells, {len(records)} images, "
            f"{fmt(100 * float(records['exact'].mean()), 1)} % of them exact)")


def write_leaderboard(results: Path, reports: Path, papers: Papers = NO_PAPERS,
                      adaptations: Adaptations = NO_ADAPTATIONS) -> list[Path]:
    """Regenerate REPORTS/leaderboard.{md,html} (ranked, byte-identical for the same records and papers) and
    REPORTS/leaderboard-timing.md (seconds per cell) from the runs under `results`; names link to `papers`
    (`citation.registered_papers()` from the command line); the defence ranking knows an attack adapts to a
    defence from `adaptations` (`citation.registered_adaptations()` from the command line)."""
    check_leaderboard_target(reports)  # before reading anything: a user's leaderboard.md is never replaced
    records, cells = load_results(results)
    malicious = malicious_cells(cells)
    honest = cells[~malicious] if (~malicious).any() else cells
    intro = ["Gradient-inversion attacks ranked per threat model, and defence levels ranked by their worst leakage "
             "against every attack (adaptive ones included) and their accuracy cost, from the stored records of "
             f"{_counts(records, honest)}. Names link to their papers; click a column header to sort; how to read: "
             "at the end.", *shared_note(honest)]
    if malicious.any() and (~malicious).any():
        intro.append(f"A malicious server's attacks, ranked apart (sections 'Malicious server'): "
                     f"{_counts(records, cells[malicious])}.")
    sections = leaderboard_sections(records, cells, reports, papers, adaptations)
    files = {"leaderboard.md": markdown_page(TITLE, intro, sections),
             "leaderboard.html": html_page(TITLE, intro, sections, nav=True),
             "leaderboard-timing.md": markdown(TIMING_TITLE, ["Wall-clock seconds per cell; not part of the ranking."],
                                               list(timing_blocks(records, cells)))}
    for name, page in files.items():
        write_text_atomic(reports / name, page)
    return [reports / name for name in files]
