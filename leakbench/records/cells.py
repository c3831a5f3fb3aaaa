"""A cell folder: its files written all or nothing and sealed, its manifest, and where it lies in a run.

A cell folder holds reconstruction.npz and attack.json (the attack's answer: `records.artifacts`),
records.parquet, summary.json and manifest.json (its scoring), and seal.json (`records.seal`). The runner
builds these files from a scored cell (`harness.manifest`); the store writes them to a temporary folder
beside their place first and seals it; only the complete folder replaces the old one, and only a folder
leakbench wrote is ever replaced (`records.folders`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.records.folders import replace_folder, temp_folder
from leakbench.records.seal import CELL_FILES, foreign_cell_entries, is_cell_folder, write_seal

CELLS_DIR = "cells"


def cell_path(run_dir: Path, cell_id: str) -> Path:
    """The folder of one cell inside a run folder."""
    return run_dir / CELLS_DIR / cell_id


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


@dataclass(frozen=True)
class CellFiles:
    """A cell folder's content before it is stored: the cell's id and each file's bytes by name (unsealed).

    Ray workers return this and the driver writes the folder (`write_cell_files`), so a cluster needs
    no shared file system."""

    cell_id: str
    files: dict[str, bytes]


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
