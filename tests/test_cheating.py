"""Issue 14: an attack cannot reach the client's batch, by construction. A cheating plugin attack
(`tests/cheat_attack.py`) tries six routes; in the attack worker every one of them fails and the
cheat scores like noise. Run in the harness process (`isolate=False`, or handed the batch's seed)
the same routes reach the truth: the test can fail, and fails on the code before the worker."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from PIL import Image

from leakbench.harness.cell import CellSpec, attack_job, prepare, run_cell
from leakbench.api import scoped_attack

from cheat_attack import ROUTES, CheatAttack  # tests/ is on the path: the worker imports it too

B = 4
BLOCKED = "PermissionError: the attack worker may not reach"
EXPECTED = {"stack": "nothing found", "gc": "nothing found", "globals": "nothing found",
            "seed": BLOCKED, "cache": BLOCKED, "data_root": BLOCKED}
"""Why each route fails in the worker: no batch in its memory, or the guard refused a data file."""


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny imagefolder dataset: the private data root of the `data_root` route."""
    root = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(0)
    for c in range(2):
        (root / f"class{c}").mkdir()
        for i in range(6):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / f"class{c}" / f"{i}.png")
    return str(root)


@pytest.fixture(autouse=True)
def cheat() -> Iterator[None]:
    """The cheat registered for one test (and importable by the worker), never for the whole session."""
    with scoped_attack(CheatAttack):
        yield


def _spec(route: str, image_root: str) -> CellSpec:
    if route == "data_root":
        return CellSpec(attack="cheat", dataset="imagefolder", data_root=image_root, image_size=16, batch_size=B,
                        width=32, depth=3, hyperparameters={"route": route, "data_root": image_root})
    return CellSpec(attack="cheat", dataset="embedded", batch_size=B, width=32, depth=3, hyperparameters={"route": route})


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_fails_in_the_attack_worker(route: str, image_root: str) -> None:
    result = run_cell(_spec(route, image_root))
    s = result.summary
    assert s["attack_stats"]["outcome"].startswith(EXPECTED[route]), s["attack_stats"]
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
