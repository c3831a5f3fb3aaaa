"""docs/add-a-dataset.md and docs/add-a-victim.md (issue 25): each page's module and suite run as printed
through `leakbench run`, and the records carry the page's dataset or victim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import CLI_TIMEOUT_S, REPO_ROOT


def _blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO_ROOT / "docs" / page).read_text(), re.S)


def _run_page(page: str, module: str, tmp_path: Path) -> pd.DataFrame:
    """Write the page's Python block as `module`, its suite as the file its first comment names, and run
    the page's command; return the run's records."""
    (tmp_path / module).write_text(_blocks(page, "python")[0])
    suite = _blocks(page, "toml")[0]
    (tmp_path / suite.splitlines()[0].lstrip("# ").strip()).write_text(suite)
    (command,) = [line.split("#")[0].split() for line in _blocks(page, "sh")[0].splitlines() if line.strip()]
    assert command[:3] == ["PYTHONPATH=.", "leakbench", "run"]
    env = {"PYTHONPATH": f"{REPO_ROOT}:{tmp_path}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "HOME": str(Path.home())}
    proc = subprocess.run([sys.executable, "-m", "leakbench", *command[2:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = re.search(r'^name = "(.*)"', suite, re.M)
    assert name, "the page's suite has no name"
    return pd.read_parquet(tmp_path / "results" / name.group(1) / "records.parquet")


@pytest.mark.slow
def test_the_dataset_page_runs_as_printed(tmp_path: Path) -> None:
    records = _run_page("add-a-dataset.md", "my_data.py", tmp_path)
    assert set(records["dataset"]) == {"blobs"} and len(records) == 2
    assert records["exact"].all()  # SPEAR recovers both blobs exactly: the loader served real images


@pytest.mark.slow
def test_the_victim_page_runs_as_printed(tmp_path: Path) -> None:
    records = _run_page("add-a-victim.md", "my_victim.py", tmp_path)
    assert set(records["arch"]) == {"my-resnet18"} and set(records["status"]) == {"ok"}
