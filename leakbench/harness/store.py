"""Writing a cell's outputs: per-image records (Parquet), summary, manifest, grid — all or nothing."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from leakbench.errors import ConfigError
from leakbench.harness.cell import CellResult, json_safe, spec_dict
from leakbench.reporting.grid import save_grid

PACKAGES = ("torch", "torchvision", "numpy", "scipy", "scikit-learn", "scikit-image", "pandas",
            "pyarrow", "torchmetrics", "lpips")


def check_out_dir(out: Path) -> None:
    """Refuse an output path that exists as a file (before any work is done)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory")


def manifest(result: CellResult) -> dict[str, Any]:
    """Versions, seeds, settings, timing and machine for one cell."""
    return {
        "leakbench": _version("leakbench"),
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
        "git_revision": git_revision(),
        "spec": spec_dict(result.spec),
        "seeds": {"batch": result.spec.seed, "model_init": result.spec.seed, "attack": result.spec.seed},
        "dataset_indices": [int(i) for i in result.records["dataset_index"]],
        "summary": result.summary,
    }


def write_cell(result: CellResult, out: Path, caption: str) -> None:
    """Write records.parquet, summary.json, manifest.json and grid.png into `out` atomically.

    Everything is written to a temporary folder beside `out` first; only the complete folder
    replaces `out` (no stale files from an earlier run survive), so an interrupted run leaves no
    half-written output.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        result.records.to_parquet(tmp / "records.parquet", index=False)
        _write_json(tmp / "summary.json", result.summary)
        _write_json(tmp / "manifest.json", manifest(result))
        if result.spec.batch_size and result.summary["space"] == "image":
            failed = [result.reconstruction.status != "ok"] * result.spec.batch_size
            save_grid(tmp / "grid.png", result.truth, result.aligned, caption=caption, failed=failed)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(new: Path, out: Path) -> None:
    """Put the complete folder `new` at `out`; an older `out` is moved aside, then deleted."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(new, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(json_safe(payload), indent=2, sort_keys=True) + "\n")


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
