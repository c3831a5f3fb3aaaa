"""The tests' CLI zygote (tests/cli_zygote.py) answers as a fresh `python -m leakbench`: status, stdout, stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ZYGOTE, run_cli

CALLS = {
    "version": ["--version"],
    "refused_flag": ["attack", "--attack", "spear", "--batch-size", "2", "--seed", "-1"],
    "refused_config": ["attack", "--attack", "spear-guided", "--batch-size", "2", "--param", "guide=nope"],
    "missing_suite": ["run", "no-such-suite.toml"],
    "listing": ["list", "datasets"],
}


@pytest.mark.slow
@pytest.mark.skipif(ZYGOTE is None, reason="LEAKBENCH_TEST_FRESH_CLI is set: every call is a fresh interpreter")
@pytest.mark.parametrize("key", CALLS)
def test_a_forked_call_answers_as_a_fresh_interpreter(tmp_path: Path, key: str) -> None:
    fresh = run_cli(CALLS[key], cwd=tmp_path, fresh=True)
    forked = run_cli(CALLS[key], cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither wrote anything
