"""Issues 14 and 22: an attack cannot reach the client's batch, by construction. A cheating plugin
attack (`tests/cheat_attack.py`, `tests/cheat_native.py`) tries issue 14's six Python routes and
issue 22's routes around a Python guard (native readers, new processes, the harness's memory, other
folders, the reply, the guard itself, a later cell). In the sandboxed attack worker every one of
them fails and the cheat scores like noise. The controls show each route works where nothing stops
it: run in the harness process (`isolate=False`), and, for issue 22's routes, in a worker with the
Python guard alone (LEAKBENCH_SANDBOX=off): the tests can fail, and fail on the code before the sandbox."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import cheat_native
import numpy as np
import pytest
from cheat_attack import NATIVE_ROUTES, READ_ROUTES, REPLY_MARKER, ROUTES, CheatAttack  # tests/ is on the
from PIL import Image

from leakbench.api import scoped_attack
from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import attack_job, run_cell
from leakbench.harness.sandbox import FULL, SWITCH, level
from leakbench.harness.victim import prepare

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow

# path: the worker imports them too

B = 4
BLOCKED = "PermissionError: the attack worker may not reach"
EXPECTED = {"stack": "nothing found", "gc": "nothing found", "globals": "nothing found",
            "seed": BLOCKED, "cache": BLOCKED, "data_root": BLOCKED}
"""The start of each route's outcome in the worker (the dataset loaders may wrap the refusal: then it is
named inside their message)."""
"""Why each route fails in the worker: no batch in its memory, or the guard refused a data file."""


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny imagefolder dataset: the private data root of the `data_root` route."""
    root = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(0)
    for folder, name in cheat_native.LAYOUT:
        (root / folder).mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / folder / name)
    return str(root)


@pytest.fixture(autouse=True)
def cheat() -> Iterator[None]:
    """The cheat registered for one test (and importable by the worker), never for the whole session."""
    with scoped_attack(CheatAttack):
        yield


def _spec(route: str, image_root: str, copy_root: str = "") -> CellSpec:
    """The cheat's cell; the routes that steal files attack a private image folder (`copy` reads
    its copy at `copy_root`, which no data location lists)."""
    if route in ("data_root", "copy", *NATIVE_ROUTES):
        return CellSpec(attack="cheat", dataset="imagefolder", data_root=image_root, image_size=16, batch_size=B,
                        width=32, depth=3, hyperparameters={"route": route, "data_root": copy_root or image_root})
    return CellSpec(attack="cheat", dataset="embedded", batch_size=B, width=32, depth=3,
                    hyperparameters={"route": route})


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_fails_in_the_attack_worker(route: str, image_root: str) -> None:
    result = run_cell(_spec(route, image_root))
    s = result.summary
    outcome = s["attack_stats"]["outcome"]
    assert outcome.startswith(EXPECTED[route]) or f"({EXPECTED[route]}" in outcome, s["attack_stats"]
    assert s["exact_fraction"] == 0.0
    assert s["psnr_median"] < 15, s["psnr_median"]  # uniform noise against photos


@pytest.mark.parametrize("route", ["stack", "gc", "cache", "data_root"])
def test_the_same_routes_reach_the_truth_in_the_harness_process(route: str, image_root: str) -> None:
    s = run_cell(_spec(route, image_root), isolate=False).summary
    assert s["attack_stats"]["outcome"] == "found" and s["exact_fraction"] == 1.0


def test_the_handed_seed_is_not_the_batch_seed() -> None:
    spec = _spec("seed", "")
    _, _, update = prepare(spec)
    assert attack_job(spec).seed != spec.seed
    s = run_cell(spec, isolate=False).summary
    assert s["attack_stats"]["outcome"] == "nothing found" and s["exact_fraction"] == 0.0
    # handed the batch's own seed (what the harness did before), the route reaches the truth
    found = CheatAttack(CheatAttack.Config(route="seed")).reconstruct(update, seed=spec.seed)
    assert found.stats["outcome"] == "found"


sandboxed = pytest.mark.skipif(level()[0] != FULL, reason=f"this kernel or install cannot sandbox: {level()[1]}")
STEALS = (*NATIVE_ROUTES, "copy")
REFUSED = ("Permission denied", "Operation not permitted")
"""What the kernel says when Landlock or seccomp refuse (the guard says "may not reach")."""


def _refused(outcome: str) -> bool:
    return any(word in outcome for word in REFUSED)
"""Issue 22's routes to the private files (the data root, or a copy no data location lists)."""


@pytest.fixture(scope="module")
def copy_root(image_root: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A copy of the private images outside every data location (like a wheel or pip cache)."""
    import shutil

    copy = tmp_path_factory.mktemp("cache") / "copy"
    shutil.copytree(image_root, copy)
    return str(copy)


@pytest.fixture
def guard_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers run under the Python guard alone (issue 14's isolation): the controls of issue 22."""
    monkeypatch.setenv(SWITCH, "off")


@sandboxed
@pytest.mark.parametrize("route", STEALS)
def test_every_native_route_fails_in_the_sandbox(route: str, image_root: str, copy_root: str) -> None:
    s = run_cell(_spec(route, image_root, copy_root if route == "copy" else "")).summary
    assert s["isolation"] == FULL and _refused(s["attack_stats"]["outcome"]), s["attack_stats"]
    assert s["exact_fraction"] == 0.0 and s["psnr_median"] < 15, s["psnr_median"]


@pytest.mark.parametrize("route", STEALS)
def test_the_native_routes_reach_the_truth_in_the_harness_process(route: str, image_root: str, copy_root: str) -> None:
    s = run_cell(_spec(route, image_root, copy_root if route == "copy" else ""), isolate=False).summary
    assert s["attack_stats"]["outcome"] == "found" and s["exact_fraction"] == 1.0, s["attack_stats"]


@pytest.mark.parametrize("route", STEALS)
def test_the_native_routes_reach_the_truth_past_the_python_guard(route: str, image_root: str, copy_root: str,
                                                                 guard_only: None) -> None:
    s = run_cell(_spec(route, image_root, copy_root if route == "copy" else "")).summary
    assert s["isolation"].startswith("python-guard only")
    assert s["attack_stats"]["outcome"] == "found" and s["exact_fraction"] == 1.0, s["attack_stats"]


@pytest.fixture(scope="module")
def results_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A file an earlier run left: a grid (it holds the truth row) in a results folder."""
    grid = tmp_path_factory.mktemp("results") / "run" / "grid.png"
    grid.parent.mkdir()
    grid.write_bytes(b"\x89PNG truth row")
    return str(grid)


def _read_spec(route: str, results_file: str) -> CellSpec:
    """A memory route is told the harness's process id (this one); the results route the file."""
    target = str(os.getpid()) if route != "results" else results_file
    return CellSpec(attack="cheat", dataset="embedded", batch_size=B, width=32, depth=3,
                    hyperparameters={"route": route, "data_root": target})


@sandboxed
@pytest.mark.parametrize("route", READ_ROUTES)
def test_the_harness_memory_and_other_files_are_out_of_reach_in_the_sandbox(route: str, results_file: str) -> None:
    s = run_cell(_read_spec(route, results_file)).summary
    assert _refused(s["attack_stats"]["outcome"]), s["attack_stats"]


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "python-guard"])
@pytest.mark.parametrize("route", READ_ROUTES)
def test_the_harness_memory_and_other_files_are_read_where_nothing_stops_it(
        route: str, isolate: bool, results_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH, "off")
    s = run_cell(_read_spec(route, results_file), isolate=isolate).summary
    assert s["attack_stats"]["outcome"].startswith("read "), s["attack_stats"]


def test_a_reply_is_plain_data_and_never_runs_code_in_the_harness() -> None:
    REPLY_MARKER.unlink(missing_ok=True)
    s = run_cell(_spec("reply_pickle", "")).summary
    assert s["status"] == "failed" and "not plain data" in s["reason"], s["reason"]
    assert not REPLY_MARKER.exists()


def test_an_attack_cannot_sabotage_a_later_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    from leakbench.attacks.spear.attack import SpearAttack

    spear = CellSpec(attack="spear", dataset="embedded", batch_size=2, width=200, depth=3)
    assert run_cell(_spec("sabotage", "")).summary["attack_stats"]["outcome"] == "patched"
    assert run_cell(spear).summary["exact_fraction"] == 1.0
    # control: the same sabotage in one shared process breaks the next cell
    monkeypatch.setattr(SpearAttack, "reconstruct", SpearAttack.reconstruct)
    run_cell(_spec("sabotage", ""), isolate=False)
    assert run_cell(spear, isolate=False).summary["status"] == "failed"


def test_a_sitecustomize_on_the_import_path_never_runs_in_the_worker(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    (tmp_path / "sitecustomize.py").write_text("CHEAT = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_cell(_spec("sitecustomize", "")).summary["attack_stats"]["outcome"] == "nothing found"
    # control: an ordinary interpreter with that folder on its path runs it at start-up
    probe = "import sys; print(getattr(sys.modules.get('sitecustomize'), 'CHEAT', 0))"
    ran = subprocess.run([sys.executable, "-c", probe],
                         env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "True"
