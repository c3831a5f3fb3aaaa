"""Ray beyond one machine (issue 22): a real Ray cluster started on 127.0.0.1 runs a suite through
`--address` with a relative `--out` from another folder, and its records equal the serial run's; a
cluster that cannot be reached is one error line, with nothing written.

One cluster per module (starting one takes ~10-20 s on two busy cores). It is stopped by signalling
its `ray start --block` process, which stops what it started, then by ending its process group: not
by `ray stop`, which stops every Ray instance on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, cli_env

from leakbench.cell.spec import cell_id
from leakbench.cli import main
from leakbench.core.errors import ConfigError
from leakbench.harness.executors import Task, check_reachable, portable, ray_worker_env
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import load_suite
from leakbench.records.runs import finished_cells, records_difference

SUITE = """\
name = "tiny"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [1, 2]
layers = [1, 2]
width = 32
depth = 3
grid_images = 1
grid_seed = 5

[hyperparameters.spear]
max_draws = 20000
"""

CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""Ray's settings for `ray start` and the driver. With multi-node clusters off, Ray keeps 127.0.0.1 as
the node's address (its servers then listen there only) instead of resolving it to the machine's
network address. Token authentication with a token of this module's own: not whatever
~/.ray/auth_token holds (a local `ray.init()` writes one, and `ray start` then requires it)."""

START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_started(head: subprocess.Popen, log: Path) -> None:
    """Return once `ray start` says the cluster runs; fail with its log if it exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in log.read_text():
        if head.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"ray start did not start a cluster:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _stop(head: subprocess.Popen) -> None:
    """Stop the cluster `head` started: SIGTERM (it stops its processes), then SIGKILL to what is left
    of its process group."""
    head.send_signal(signal.SIGTERM)
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(head.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    head.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Ray head on 127.0.0.1 (2 CPUs, 100 MB object store), started from a folder of its own: its
    address and that folder."""
    home = tmp_path_factory.mktemp("cluster_cwd")
    temp = Path(tempfile.mkdtemp(prefix="lbray-"))  # short: Ray's socket paths lie under it
    port = _free_port()
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
               "--object-store-memory=100000000", f"--temp-dir={temp}", "--disable-usage-stats"]
    log = temp / "ray-start.log"
    with log.open("w") as out:
        head = subprocess.Popen(command, cwd=home, env={**cli_env(), **CLUSTER_ENV}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_until_started(head, log)
        yield f"127.0.0.1:{port}", home
    finally:
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_a_cluster_runs_a_suite_with_a_relative_out(cluster: tuple[str, Path], tmp_path: Path) -> None:
    """The driver writes every cell under its own working folder, where the workers (elsewhere) did not;
    the records equal a serial run's."""
    address, cluster_home = cluster
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    driver = tmp_path / "driver"
    driver.mkdir()
    command = [sys.executable, "-m", "leakbench", "run", str(suite), "--executor", "ray", "--address", address,
               "--out", "rel/res", "--reports", "rel/rep"]
    with subprocess.Popen(command, cwd=driver, env={**cli_env(), **CLUSTER_ENV}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as ray_run:
        serial = run_sweep(str(suite), out=tmp_path / "serial")  # meanwhile, here
        stdout, stderr = ray_run.communicate(timeout=CLI_TIMEOUT_S)
    assert ray_run.returncode == 0 and "Traceback" not in stderr, stderr
    run_dir = driver / "rel" / "res" / "tiny"
    assert finished_cells(run_dir) == {cell_id(spec) for spec in load_suite(suite).cells} and len(serial.cells) == 4
    assert records_difference(run_dir, serial.run_dir) == ""
    assert json.loads((run_dir / "manifest.json").read_text())["executor"] == "ray"
    assert "report: rel/rep/tiny.html (Markdown: rel/rep/tiny.md)" in stdout
    assert list(cluster_home.iterdir()) == []  # nothing written where the workers run


@pytest.mark.slow
def test_an_unreachable_cluster_is_one_line_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "suite.toml").write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    rc = main(["run", "suite.toml", "--executor", "ray", "--address", f"127.0.0.1:{_free_port()}", "--out", "rel"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("leakbench: error: cannot connect to the Ray cluster")
    assert [p.name for p in tmp_path.iterdir()] == ["suite.toml"]  # no run folder, no manifest, no report
    assert time.monotonic() - started < 120  # refused at once, not after Ray's minutes of retries


def test_check_reachable_leaves_portless_addresses_to_ray() -> None:
    check_reachable("auto")  # Ray finds a cluster on this machine itself
    with pytest.raises(ConfigError, match="cannot connect to the Ray cluster"):
        check_reachable(f"ray://127.0.0.1:{_free_port()}")


def test_portable_tasks_carry_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker reads is named by absolute paths (the driver's), and the cell is the same cell."""
    (tmp_path / "suite.toml").write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    spec = load_suite(Path("suite.toml"), data_root="data").cells[0]
    task = portable(Task(spec=spec, out=Path("rel/cell"), selection=(0,), grid_seed=5, lpips_weights="w/alex.pth"))
    assert task.spec.data_root == str(tmp_path / "data") and task.lpips_weights == str(tmp_path / "w" / "alex.pth")
    assert cell_id(task.spec) == cell_id(spec)
    unset = portable(Task(spec=load_suite(Path("suite.toml")).cells[0], out=Path("o"), selection=(), grid_seed=5))
    assert unset.spec.data_root is None and unset.lpips_weights is None


def test_ray_workers_get_the_plugins_and_this_checkout(monkeypatch: pytest.MonkeyPatch, repo_root: Path) -> None:
    """Ray workers do not inherit the driver's environment: what they need is passed explicitly."""
    monkeypatch.setenv("LEAKBENCH_PLUGINS", "some_package.attacks")
    env = ray_worker_env()
    assert env["LEAKBENCH_PLUGINS"] == "some_package.attacks" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(repo_root)
    monkeypatch.delenv("LEAKBENCH_PLUGINS")
    assert "LEAKBENCH_PLUGINS" not in ray_worker_env()
