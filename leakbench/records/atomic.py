"""Whole-file writes: a table, a text or a JSON file appears complete or not at all (a temporary file
in the same folder, then a rename)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from leakbench.records.artifacts import json_bytes


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write a Parquet file through a temporary file in the same folder and a rename."""
    _write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text_atomic(path: Path, text: str) -> None:
    """Write text through a temporary file in the same folder and a rename."""
    _write_atomic(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON through a temporary file in the same folder and a rename."""
    _write_atomic(path, lambda tmp: tmp.write_bytes(json_bytes(payload)))
