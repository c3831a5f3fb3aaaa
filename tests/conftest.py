"""Shared fixtures: where the repository and the optional real data live, and a CLI runner."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_zygote import Zygote, fresh_run  # tests/ is on the path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The leakbench checkout (the folder holding `leakbench/`, `tests/`, `benchmarks/`)."""

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""Real datasets beside the checkout (MNIST raw files, tiny-imagenet-200); absent in a user's clone."""

CLI_TIMEOUT_S = 300

CELL_FILES = ["attack.json", "manifest.json", "reconstruction.npz", "records.parquet", "seal.json", "summary.json"]
"""What a run writes into every cell folder (sorted), as the tests expect it."""

# The SPEAR search is dense linear algebra on small matrices: with other processes on the same few
# cores, intra-op threads oversubscribe the CPU and make runs several times slower. One thread per
# process keeps the suite fast and its timing stable; results do not depend on it.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


def reference_run(factory: pytest.TempPathFactory, suite_text: str, folder: str = "ref") -> Path:
    """A finished run of `suite_text` (its suite file beside it in a fresh folder); its run folder."""
    from leakbench.harness.run import run_sweep

    root = factory.mktemp(folder)
    (root / "suite.toml").write_text(suite_text)
    return run_sweep(str(root / "suite.toml"), out=root / "res").run_dir


def load_benchmark(name: str):
    """Import the script benchmarks/NAME.py as a module (benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder, or skip the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def mnist_root(shared_data: Path) -> Path:
    """A data root for the `mnist` loader (holds MNIST/raw/t10k-*), or skip."""
    if not (shared_data / "MNIST" / "raw").is_dir():
        pytest.skip(f"no MNIST/raw under {shared_data}")
    return shared_data


@pytest.fixture(scope="session")
def tinyimagenet_root(shared_data: Path) -> Path:
    """A data root for the `tinyimagenet` loader (holds tiny-imagenet-200/), or skip."""
    folder = shared_data / "tiny-imagenet-200"
    if not (folder / "wnids.txt").is_file() or not (folder / "val" / "val_annotations.txt").is_file():
        pytest.skip(f"no usable tiny-imagenet-200 under {shared_data}")
    return shared_data


def cli_env() -> dict[str, str]:
    """The current environment with PYTHONPATH pointing at this checkout only."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    # A CLI call is a fresh user command: it loads the plugins its own suite names. The attack plugins an
    # earlier in-process test loaded by name (`plugins.load_plugin` notes them in LEAKBENCH_PLUGINS for its
    # attack workers) live in that test's temporary folders, which this process cannot import.
    env.pop("LEAKBENCH_PLUGINS", None)
    env.setdefault("OMP_NUM_THREADS", "1")  # several CLI runs go at once; see the note above
    return env


ZYGOTE = None if os.environ.get("LEAKBENCH_TEST_FRESH_CLI") else Zygote()
"""Forks a pre-imported interpreter per CLI call (tests/cli_zygote.py); None: a fresh interpreter per call."""
if ZYGOTE is not None:
    atexit.register(ZYGOTE.close)


def run_cli(args: Sequence[str], *, cwd: Path, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m leakbench ARGS` in a process of its own, run from `cwd` (so no stray output lands in the repo):
    forked from the CLI zygote, or with `fresh` (or LEAKBENCH_TEST_FRESH_CLI=1) a fresh interpreter."""
    call = list(map(str, args))
    if ZYGOTE is None or fresh:
        return fresh_run(call, cwd=cwd, env=cli_env(), timeout=CLI_TIMEOUT_S)
    return ZYGOTE.run(call, cwd=cwd, env=cli_env(), timeout=CLI_TIMEOUT_S)


def fault_check_with_zygote(fault_check: Any) -> Any:
    """benchmarks/fault_check.py's module with its `cli` (a CLI call that must be refused or finish: exit 124 on
    time-out) forked from the CLI zygote; the runs a case interrupts or watches still start fresh interpreters."""
    if ZYGOTE is None:
        return fault_check
    zygote = ZYGOTE

    def cli(args: list[str], cwd: Path, timeout: float = fault_check.TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        try:
            return zygote.run(args, cwd=cwd, env=fault_check.run_env(), timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout:.0f} s")

    fault_check.cli = cli
    return fault_check


def run_cli_many(jobs: dict[str, tuple[Sequence[str], Path]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run several independent CLI invocations concurrently (they are mostly interpreter start-up)."""
    workers = max(2, min(len(jobs), (os.cpu_count() or 2) * 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(run_cli, args, cwd=cwd) for key, (args, cwd) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The `run_cli` helper as a fixture."""
    return run_cli


def attack_plugin_source(cls: str, name: str, description: str, *, prelude: str = "") -> str:
    """The source of a one-module attack plugin registering attack `name` (class `cls`, a one-field
    Config, a `reconstruct` that is never run); `prelude` (lines) runs at its import, after the imports."""
    return f'''\
from dataclasses import dataclass

from leakbench.attacks import Attack, register_attack
{prelude}

@dataclass(frozen=True)
class Config:
    """x: nothing."""

    x: int = 0


@register_attack
class {cls}(Attack):
    name = "{name}"
    description = "{description}"
    Config = Config

    def reconstruct(self, update, *, seed):
        raise NotImplementedError
'''


@pytest.fixture(scope="module")
def client() -> Any:
    """A FedSGD client of a small embedded cell (FC-3 w32, b = 4, default threat): what the update-defence tests
    (`test_defences_update.py`, `test_qsgd.py`) transform."""
    from leakbench.cell.spec import CellSpec
    from leakbench.fl import Client, ThreatModel
    from leakbench.harness.victim import victim

    batch, model = victim(CellSpec(attack="ig", dataset="embedded", batch_size=4, width=32, depth=3))
    return Client(model, batch, 0, ThreatModel())
