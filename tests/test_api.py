"""The Python API (issue 14): docs/api.md's 20-line example runs as printed; `evaluate` scopes the
attack to the call, refuses a clash, and gives the same records on the serial and pool executors."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import CLI_TIMEOUT_S, REPO_ROOT
from grey_attack import GreyAttack, GreyConfig

from leakbench import api
from leakbench.attacks import ATTACKS, Attack, Reconstruction
from leakbench.core.errors import ConfigError

SMALL = """name = "api-small"
dataset = "embedded"
attacks = ["spear", "ig"]
batch_sizes = [1, 2]
layers = [1, 2]
width = 32
depth = 3
"""


class GiveUpAttack(Attack):
    name, description, Config = "api-give-up", "gives up on batches of more than one image (test)", GreyConfig

    def reconstruct(self, update, *, seed):
        if (update.batch_size or 1) > 1:
            return Reconstruction.failed("budget exhausted after 300000 draws")
        return Reconstruction("ok", "image", images=torch.full((1, *update.model.input_shape), self.config.level))


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


@pytest.mark.slow
def test_the_docs_example_runs_as_printed(tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", (REPO_ROOT / "docs" / "api.md").read_text(), re.S).group(1)
    attack_lines = code[code.index("@dataclass"):code.index('if __name__')].strip().splitlines()
    assert len([line for line in attack_lines if line.strip()]) <= 20, "the example is no longer 20 lines"
    (tmp_path / "ratio.py").write_text(code.replace('"default"', f'"{_suite(tmp_path)}"'))
    proc = subprocess.run([sys.executable, "ratio.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, env={"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1",
                                                      "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = api.load_records(tmp_path / "results" / "api-small--ratio")
    assert set(records["attack"]) == {"ratio"} and set(records["layer"]) == {1}
    assert records[records["batch_size"] == 1]["exact"].all()  # one image: the ratio is the image


@pytest.mark.slow
def test_evaluate_scopes_the_attack_to_the_call(tmp_path: Path) -> None:
    records = api.evaluate(GreyAttack, _suite(tmp_path), hyperparameters={"level": 0.25}, out=tmp_path / "res")
    assert "api-grey" not in ATTACKS.names()
    assert len(records) == 1 + 2 and set(records["status"]) == {"ok"}  # b = 1 and 2, layer 1 only
    cells = api.load_cells(tmp_path / "res" / "api-small--api-grey")
    assert len(cells) == 2
    with pytest.raises(ConfigError, match="unknown hyperparameter"):
        api.evaluate(GreyAttack, _suite(tmp_path), hyperparameters={"nope": 1}, out=tmp_path / "res")


@pytest.mark.slow
def test_evaluate_prints_the_progress_of_leakbench_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line per finished cell as `leakbench run` writes them (a failed cell with its reason), then the count."""
    api.evaluate(GiveUpAttack, _suite(tmp_path), out=tmp_path / "res")
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("[")]
    assert len(lines) == 2 and lines[0].startswith("[1/2] api-give-up embedded b=1 ") and ": ok, exact 0%, " in lines[0]
    assert lines[1].startswith("[2/2] api-give-up embedded b=2 ")
    assert ": failed: budget exhausted after 300000 draws, " in lines[1]
    assert err[-1] == ("cells: 1 ok, 1 failed (each one's reason: its progress line above, and the records in "
                       f"{tmp_path / 'res' / 'api-small--api-give-up'})")
    api.evaluate(GiveUpAttack, _suite(tmp_path), out=tmp_path / "res", progress=False)  # resumed: nothing runs
    assert capsys.readouterr().err == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()  # a bar, and above it a line for the failed cell (the bar has no room for the reason)
    api.evaluate(GiveUpAttack, _suite(tmp_path), out=tmp_path / "tty", progress=terminal)
    lines = [line for line in re.split(r"[\r\n]", terminal.getvalue()) if line.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith("[2/2] api-give-up embedded b=2 ") and "budget exhausted" in lines[0]


@pytest.mark.slow
def test_evaluate_refuses_a_shipped_name(tmp_path: Path) -> None:
    clash = type("Clash", (GreyAttack,), {"name": "spear"})
    with pytest.raises(ConfigError, match="already registered"):
        api.evaluate(clash, _suite(tmp_path), out=tmp_path / "res")


@pytest.mark.slow
def test_serial_and_pool_give_the_same_records(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    serial = api.evaluate(GreyAttack, suite, out=tmp_path / "a")
    pool = api.evaluate(GreyAttack, suite, out=tmp_path / "b", executor="pool", jobs=2)
    pd.testing.assert_frame_equal(serial, pool)


def test_load_records_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no records\.parquet"):
        api.load_records(tmp_path)
