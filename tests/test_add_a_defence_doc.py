"""docs/add-a-defence.md: its defence module and its suite run as printed, through `leakbench run` and
`leakbench leaderboard`, and the defence's cells carry its columns and rows of their own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import CLI_TIMEOUT_S, REPO_ROOT

PAGE = REPO_ROOT / "docs" / "add-a-defence.md"


def _block(language: str, index: int = 0) -> str:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.S)[index]


def _leakbench(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": f"{REPO_ROOT}:{cwd}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "HOME": str(Path.home())}
    return subprocess.run([sys.executable, "-m", "leakbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, env=env)


def test_the_defence_is_short_and_draws_from_the_cell_seed() -> None:
    code = _block("python")
    body = code[code.index("@dataclass"):].strip().splitlines()
    assert len([line for line in body if line.strip()]) <= 20, "the example is no longer 20 lines"
    assert "client.seed" in code and "manual_seed" in code


@pytest.mark.slow
def test_the_page_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "my_dropout.py").write_text(_block("python"))
    (tmp_path / "my-dropout.toml").write_text(_block("toml"))
    commands = [line.split("#")[0].split() for line in _block("sh").splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["leakbench", "run"], ["leakbench", "leaderboard"]]
    for command in commands:
        proc = _leakbench(command[1:], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    records = pd.read_parquet(tmp_path / "results" / "my-dropout" / "records.parquet")
    levels = records.groupby("cell_id")["my_dropout_p"].first().fillna(0)
    assert sorted(levels) == [0, 0, 0.1, 0.1, 0.5, 0.5]  # 2 attacks × 3 levels
    assert set(records["defence"].dropna()) == {"my-dropout p=0.1", "my-dropout p=0.5"}
    # an undefended SPEAR cell is exact; gradient dropout at p = 0.5 leaves SPEAR short of it
    spear = records[records["attack"] == "spear"]
    assert spear[spear["defence"].isna()]["exact"].all()
    assert not spear[spear["defence"] == "my-dropout p=0.5"]["exact"].all()
    board = next((tmp_path / "reports").glob("leaderboard.md")).read_text()
    assert "my-dropout p=0.5" in board
