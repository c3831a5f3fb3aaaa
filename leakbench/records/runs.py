"""A run folder's stored cells and its consolidated tables.

Run folder layout (`leakbench run --out DIR`, default `results/`)::

    DIR/SUITE/manifest.json          suite text, versions, git revision, machine, seeds, grid selections
    DIR/SUITE/records.parquet        one row per image per cell (every axis a column)
    DIR/SUITE/cells.parquet          one row per cell (status, reason, seconds, attack stats)
    DIR/SUITE/cells/CELL_ID/         a cell folder (`records.cells`)

A cell counts as finished when its folder is intact (`records.seal`); a damaged one is left out of
every table and recomputed by the next sweep. The consolidated tables are rebuilt from the cell
folders. Reports and the leaderboard read a run through `read_run` only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from leakbench.cell.selection import check_selection
from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.limits import MAX_GRID_IMAGES, check_int, check_seed
from leakbench.core.ranges import INT64
from leakbench.metrics.score import recovered
from leakbench.records.atomic import write_parquet_atomic
from leakbench.records.cell_state import with_states
from leakbench.records.cells import CELLS_DIR, cell_path
from leakbench.records.folders import check_owned, folder_name, remove_leftovers
from leakbench.records.labels import STORED_COLUMNS, stored_columns
from leakbench.records.schema import SUMMARY_COLUMNS, TIMING_COLUMNS, axis_columns
from leakbench.records.seal import damage, foreign_cell_entries
from leakbench.records.trust import TRUST_COLUMNS, derived, read_manifest


@dataclass(frozen=True)
class CellStates:
    """The stored state of a run's planned cells: intact (in plan order), damaged (id → why)."""

    intact: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)


def survey(run_dir: Path, cell_ids: list[str]) -> CellStates:
    """Which of `cell_ids` have an intact folder and which a damaged one (cells not run yet: neither)."""
    states = CellStates()
    for cid in dict.fromkeys(cell_ids):
        folder = cell_path(run_dir, cid)
        if not os.path.lexists(folder):
            continue
        reason = damage(folder, cid)
        if reason:
            states.damaged[cid] = reason
        else:
            states.intact.append(cid)
    return states


def finished_cells(run_dir: Path, planned: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Ids of the cells whose folder is intact, leaving out the ids in `planned` (temporary and moved-aside
    folders start with '.')."""
    folder = run_dir / CELLS_DIR
    if not folder.is_dir():
        return set()
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".") and p.name not in planned)
    return set(survey(run_dir, names).intact)


def check_cell_folders(run_dir: Path, cell_ids: list[str]) -> None:
    """Refuse (one line) a planned cell folder holding files leakbench did not write, before anything runs."""
    for cid in cell_ids:
        check_owned(cell_path(run_dir, cid), foreign_cell_entries)


def remove_partial_cells(run_dir: Path) -> int:
    """Delete the temporary folders an interrupted sweep left in cells/ (only leakbench's marked ones:
    `folders.remove_leftovers`; one sweep per run folder at a time)."""
    return remove_leftovers(run_dir / CELLS_DIR)


def read_run_manifest(run_dir: Path) -> dict[str, Any]:
    """A run folder's manifest, checked: the suite and every cell id are folder names, each cell listed once,
    each grid selection distinct positions of the cell's ground truth (its `truth_size`, written by the
    harness for cells of several clients; else its batch size), and every number reports read of the
    right type and range (`check_manifest_numbers`: a `grid_seed` of 1e400 is one line, not a traceback).

    Runs stored before duplicate cells were refused may list a cell twice; it is kept once.
    """
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
        folder_name(manifest["suite"], f"{path}: 'suite'")
        cells = {folder_name(c["cell_id"], f"{path}: cell id"): c for c in manifest["cells"]}
        check_manifest_numbers(manifest, cells, str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LeakbenchError(f"{run_dir} is not a finished run folder ({type(exc).__name__}: {exc})"
                             .replace("\n", " ")) from None
    return {**manifest, "cells": list(cells.values())}


def check_manifest_numbers(manifest: dict[str, Any], cells: dict[str, Any], where: str) -> None:
    """Raise ConfigError (naming `where`, the manifest) or ValueError for the first number of a run manifest
    out of its type or range: `grid_seed` a seed in [0, 2^63), `grid_images` in [1, MAX_GRID_IMAGES], each
    cell's batch size and
    truth size an integer in [1, 2^63), its grid selection distinct positions of that truth, and the
    counts of `cell_revisions` integers ≥ 0; `suite_text` a string, `layerless_attacks` a list of names
    (what reports read besides the cell folders). JSON numbers such as 1e400 parse as ±inf: refused here."""
    check_seed(manifest["grid_seed"], f"{where}: 'grid_seed'")
    check_int(manifest["grid_images"], f"{where}: 'grid_images'", 1, MAX_GRID_IMAGES)
    for cid, cell in cells.items():
        batch = check_int(cell["batch_size"], f"{where}: cell {cid}: 'batch_size'", 1, INT64 - 1)
        size = check_int(cell.get("truth_size", batch), f"{where}: cell {cid}: 'truth_size'", batch, INT64 - 1)
        check_selection(cell["grid_selection"], size, f"cell {cid}")
    revisions = manifest.get("cell_revisions", {})
    if not isinstance(revisions, dict):
        raise ConfigError(f"{where}: 'cell_revisions' must be an object, got {revisions!r}")
    for revision, count in revisions.items():
        check_int(count, f"{where}: 'cell_revisions.{revision}'", 0, INT64 - 1)
    if not isinstance(manifest.get("suite_text", ""), str):
        raise ConfigError(f"{where}: 'suite_text' must be a string")
    layerless = manifest.get("layerless_attacks", [])
    if not isinstance(layerless, list) or not all(isinstance(a, str) for a in layerless):
        raise ConfigError(f"{where}: 'layerless_attacks' must list attack names")


def cell_row(cell_dir: Path, records: pd.DataFrame) -> dict[str, Any]:
    """One row of cells.parquet: the axes (from the records, exact values), outcome and attack stats."""
    summary = json.loads((cell_dir / "summary.json").read_text())
    row: dict[str, Any] = {key: records[key].iloc[0] for key in axis_columns(records.columns)}
    row.update({key: summary.get(key) for key in SUMMARY_COLUMNS})
    row["failures"] = int((~recovered(records)).sum())  # images without a reconstruction
    row["attack_stats"] = json.dumps(summary.get("attack_stats", {}), sort_keys=True)
    row["hyperparameters"] = json.dumps(summary.get("hyperparameters", {}), sort_keys=True)
    return row


def consolidate(run_dir: Path, cell_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rebuild records.parquet and cells.parquet from the intact cells, in plan order; write atomically."""
    records, cells, _ = collect(run_dir, cell_ids)
    for name, frame in (("records.parquet", records), ("cells.parquet", cells)):
        write_parquet_atomic(frame, run_dir / name)
    return records, cells


def collect(run_dir: Path, cell_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """Per-image records and per-cell rows of the intact cells among `cell_ids` (each once, in that order),
    and the damaged ones (id → why), which are left out."""
    states = survey(run_dir, cell_ids)
    frames, rows = [], []
    for cid in states.intact:
        records = pd.read_parquet(cell_path(run_dir, cid) / "records.parquet")
        frames.append(records)
        rows.append(cell_row(cell_path(run_dir, cid), records))
    records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return records, pd.DataFrame(rows), states.damaged


def read_table(run_dir: Path, name: str) -> pd.DataFrame:
    """A run folder's consolidated table `name` (records.parquet or cells.parquet), or one ConfigError line."""
    path = Path(run_dir) / name
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no {name} (not a run folder, or its sweep has not finished a cell)")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 — pyarrow raises its own types for a damaged or foreign file
        raise ConfigError(f"{path} is not a readable Parquet table ({type(exc).__name__}: {exc})") from None


def read_cells(run_dir: Path) -> pd.DataFrame:
    """A run folder's cells.parquet with each cell's leakage state (`cell_state.with_states`, counted from its
    records.parquet): what views read (`leakbench view`, `leakbench reproduce`)."""
    return with_states(read_table(run_dir, "cells.parquet"), read_table(run_dir, "records.parquet"))


@dataclass(frozen=True)
class StoredRun:
    """A run's records and cells as reports read them; `cells` carries a `budget` column (the attack's
    budget in words, from each cell's summary.json; '' for cells stored without one), the leakage state columns
    (`failure`, `leaked`, `state`: `records.cell_state.with_states`) and the columns
    `labels.STORED_COLUMNS` (what reports need instead of a registry), which are never written to
    cells.parquet. `damaged`: cells left out (id → why)."""

    records: pd.DataFrame
    cells: pd.DataFrame
    damaged: dict[str, str] = field(default_factory=dict)


def read_run(run_dir: Path, cell_ids: list[str] | None = None) -> StoredRun:
    """A run's records and cells: of the intact cell folders among `cell_ids` (in that order, damaged
    ones left out), or, without `cell_ids`, its consolidated tables (`read_table`); the cells' budgets,
    trust columns, data labels (`with_data_labels`) and leakage states (`cell_state.with_states`: `failure`, None
    where a cell was stored without one, `leaked` and `state`) filled in."""
    damaged: dict[str, str] = {}
    if cell_ids is None:
        records, cells = read_table(run_dir, "records.parquet"), read_table(run_dir, "cells.parquet")
    else:
        records, cells, damaged = collect(run_dir, cell_ids)
    return StoredRun(records, with_states(with_data_labels(with_trust(run_dir, with_budgets(run_dir, cells))), records),
                     damaged)


def with_data_labels(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with the `dataset` of every cell that has a data fingerprint (an `imagefolder`'s: the files it
    read) labelled with its first 8 hex digits, 'imagefolder (3f2a9c1b)': what reports and the leaderboard
    group and key by, so two folders of the same layout are two rows, never merged. `data_fingerprint`
    keeps the whole; cells without one (every other dataset) stay as they were."""
    if "data_fingerprint" not in cells or "dataset" not in cells:
        return cells
    fingerprint = cells["data_fingerprint"]
    labelled = cells["dataset"].astype(str) + " (" + fingerprint.astype(str).str[:8] + ")"
    return cells.assign(dataset=cells["dataset"].where(fingerprint.isna() | (fingerprint == ""), labelled))


def with_trust(run_dir: Path, cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with every trust column (`records.trust`) filled: a cell stored before they were recorded gets
    them from its cell folder's manifest (`trust.derived`; 'unknown' what cannot be derived)."""
    if not {"cell_id", "attack", "dataset"} <= set(cells.columns) or cells.empty:
        return cells
    cells = cells.assign(**{c: cells[c].astype(object) if c in cells else None for c in TRUST_COLUMNS})
    for index in cells.index[cells[list(TRUST_COLUMNS)].isna().any(axis=1)]:
        cid = cells.at[index, "cell_id"]
        manifest = read_manifest(cell_path(run_dir, cid)) if isinstance(cid, str) and _plain(cid) else None
        found = derived(manifest, run_dir.name, str(cells.at[index, "attack"]), str(cells.at[index, "dataset"]))
        for column in TRUST_COLUMNS:
            if not isinstance(cells.at[index, column], str):  # None or NaN: not recorded
                cells.at[index, column] = found[column]
    return cells


def with_budgets(run_dir: Path, cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with a `budget` column and the `labels.STORED_COLUMNS` (victim, update, papers), read from each
    cell folder's summary.json ('' where there is none)."""
    if "cell_id" not in cells:
        return cells
    stored = [cell_summary(cell_path(run_dir, cid)) if _plain(cid) else {} for cid in cells["cell_id"]]
    budgets = [s.get("budget", "") if isinstance(s.get("budget", ""), str) else "" for s in stored]
    labels = pd.DataFrame([stored_columns(s) for s in stored], index=cells.index, columns=list(STORED_COLUMNS))
    return cells.assign(budget=budgets, **{c: labels[c] for c in STORED_COLUMNS})


def _plain(cell_id: object) -> bool:
    """Whether a stored cell id names a folder inside cells/ (a foreign table's ids are never followed)."""
    return isinstance(cell_id, str) and bool(cell_id) and "/" not in cell_id and not cell_id.startswith(".")


def cell_summary(cell_dir: Path) -> dict[str, Any]:
    """A cell folder's summary.json ({} when it is missing or unreadable)."""
    try:
        summary = json.loads((cell_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def records_difference(a: Path, b: Path) -> str:
    """'' when two run folders hold the same records (per-cell timing aside), else the first difference."""
    try:
        pd.testing.assert_frame_equal(pd.read_parquet(a / "records.parquet"), pd.read_parquet(b / "records.parquet"))
        pd.testing.assert_frame_equal(pd.read_parquet(a / "cells.parquet").drop(columns=list(TIMING_COLUMNS)),
                                      pd.read_parquet(b / "cells.parquet").drop(columns=list(TIMING_COLUMNS)))
    except AssertionError as exc:
        return " ".join(str(exc).split())[:300]
    return ""
