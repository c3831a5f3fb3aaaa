"""Issue 45, "bring your own Flower app": the capture mod (`leakbench.fl.capture`) and `leakbench attack-update`.

The example app (examples/flower-quickstart) runs one round in Flower's Simulation Runtime in process (the
backend `leakbench.fl.flower` swaps in, about 5 s on two busy cores): those tests skip without flwr and are
slow. The file format, the update's arithmetic and the command's refusals are tested on captures written by
`save_capture` from a local SGD step, without Flower.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from leakbench.core.errors import ConfigError
from leakbench.datasets.base import Batch
from leakbench.fl import fedsgd_update
from leakbench.fl.capture import BATCH, FORMAT, MANIFEST, VERSION, find_capture, load_capture, save_capture
from leakbench.harness import captured
from leakbench.records.seal import is_cell_folder
from tests.conftest import run_cli, run_cli_many

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower-quickstart"
LR = 0.1
WIDTH, DEPTH = 100, 3  # the example's MLP: SPEAR finds b = 4 at once (at w40 it searches for minutes)
EPS32 = float(torch.finfo(torch.float32).eps)


def _victim() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    from leakbench.datasets import load_dataset
    from leakbench.models import build_model

    data = load_dataset("embedded")
    model = build_model("fc", (3, 32, 32), 6, width=WIDTH, depth=DEPTH, seed=0).eval()
    take = torch.randperm(len(data.images), generator=torch.Generator().manual_seed(0))[:4]  # the example's draw
    return model, data.images[take].clone(), data.labels[take].clone()  # (the first 4: near-identical patches)


def _step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, lr: float) -> dict[str, torch.Tensor]:
    """θ₁ after one full-batch SGD step from `model`'s weights (the example client's step)."""
    local = copy.deepcopy(model).requires_grad_(True)
    torch.nn.functional.cross_entropy(local(images), labels).backward()
    with torch.no_grad():
        for p in local.parameters():
            p -= lr * p.grad
    return {k: v.detach().clone() for k, v in local.state_dict().items()}


def _manifest(**changes: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "flwr_version": "none (test)", "round": 1, "node_id": 7,
            "partition_id": 0, "run_id": 1, "message_id": "m", "lr": LR, "local_steps": 1, "num_examples": 4,
            **changes}


def _capture(root: Path, *, batch: bool = True, **changes: Any) -> Path:
    """A capture written as the mod writes one, from a local SGD step (no Flower)."""
    model, images, labels = _victim()
    sent = {k: v.clone() for k, v in model.state_dict().items()}
    return save_capture(root, _manifest(**changes), ("arrays", sent), ("arrays", _step(model, images, labels, LR)),
                        (images, labels) if batch else None)


def test_a_capture_reads_back_as_written_and_gives_the_fedsgd_gradient(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "captures")
    assert folder == tmp_path / "captures" / "round-1" / "node-7"
    assert find_capture(tmp_path / "captures") == folder == find_capture(folder / MANIFEST)
    capture = load_capture(folder)
    model, images, labels = _victim()
    assert torch.equal(capture.batch[0], images) and torch.equal(capture.batch[1], labels)
    shape = captured.VictimShape("fc", WIDTH, DEPTH, *captured.default_shape(capture, None, None))
    assert shape.image_shape == (3, 32, 32) and shape.num_classes == 6
    victim = captured.capture_victim(capture, shape)
    update = captured.captured_update(capture, victim, captured.capture_lr(capture, None))
    reference = fedsgd_update(model, Batch(images, labels, tuple(range(4)), "embedded", 6)).gradients
    scale = max(float(p.detach().abs().max()) for p in model.parameters()) / LR + max(float(g.abs().max())
                                                                             for g in reference.values())
    assert update.kind == "flower-capture" and update.batch_size == 4 and update.labels is None
    assert set(update.gradients) == set(reference)
    assert max(float((update.gradients[k] - g).abs().max()) for k, g in reference.items()) <= 8 * EPS32 * scale
    assert max(float(g.abs().max()) for g in reference.values()) > 1e-3  # a gradient, not zeros


def test_a_capture_is_never_replaced(tmp_path: Path) -> None:
    folder = _capture(tmp_path)
    before = (folder / MANIFEST).read_bytes()
    with pytest.raises(FileExistsError, match="exists already"):
        _capture(tmp_path)
    assert (folder / MANIFEST).read_bytes() == before
    assert [p.name for p in folder.parent.iterdir()] == ["node-7"]  # no temporary folder left


def test_damaged_captures_are_one_config_line(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "a")
    (folder / BATCH).write_bytes((folder / BATCH).read_bytes()[:-1] + b"x")
    with pytest.raises(ConfigError, match="SHA-256 differs"):
        load_capture(folder)
    other = _capture(tmp_path / "b")
    (other / MANIFEST).write_text(json.dumps({**json.loads((other / MANIFEST).read_text()), "version": 99}))
    with pytest.raises(ConfigError, match="capture version 99"):
        load_capture(other)
    _capture(tmp_path / "b", node_id=8)
    with pytest.raises(ConfigError, match="holds 2 captures"):
        find_capture(tmp_path / "b")


def test_the_attack_worker_is_kept_from_every_capture_of_the_run(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "captures")
    hidden = captured.hidden_paths(load_capture(folder), folder, tmp_path / "out")
    assert (tmp_path / "captures").resolve() in hidden and (tmp_path / "out").resolve() in hidden


def _args(capture: Path, out: Path, *more: str) -> list[str]:
    return ["attack-update", str(capture), "--arch", "fc", "--width", str(WIDTH), "--depth", str(DEPTH),
            "--out", str(out), *more]


@pytest.mark.slow  # CLI calls (forked from the zygote), nothing runs: about 1 s each on two cores
def test_bad_inputs_are_one_line_exit_2_and_write_nothing(tmp_path: Path) -> None:
    good = _capture(tmp_path / "c")
    no_lr = _capture(tmp_path / "d", lr=None)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    out = tmp_path / "out"
    cases = {
        "missing": (_args(tmp_path / "nowhere", out), "does not exist"),
        "wrong width": (["attack-update", str(good), "--width", "101", "--depth", str(DEPTH), "--out", str(out)],
                        "do not fit --arch fc --width 101"),
        "wrong depth": (_args(good, out, "--depth", "4"), "do not fit"),
        "batch shape": (_args(good, out, "--image-shape", "3x16x64"), "the model takes 3x16x64"),
        "no lr": (_args(no_lr, out), "give --lr"),
        "lr differs": (_args(good, out, "--lr", "0.5"), "differs from the capture's learning rate"),
        "param alone": (_args(good, out, "--param", "max_draws=5"), "--param needs --attack"),
        "unknown attack": (_args(good, out, "--attack", "nope"), "nope"),
        "user folder": (_args(good, user), "not a leakbench cell folder"),
        "bad shape": (_args(good, out, "--image-shape", "3x32"), "CxHxW"),
    }
    done = run_cli_many({name: (args, tmp_path) for name, (args, _) in cases.items()})
    for name, (_, message) in cases.items():
        proc = done[name]
        assert proc.returncode == 2, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("leakbench: error:") and message in lines[0], (name, lines)
    assert not out.exists()
    assert [p.name for p in user.iterdir()] == ["notes.txt"] and (user / "notes.txt").read_text() == "mine"


@pytest.mark.slow  # one SPEAR attack in a sandboxed worker: about 10 s on two busy cores
def test_without_a_batch_the_attack_runs_and_nothing_is_scored(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "captures", batch=False)
    proc = run_cli(_args(folder, tmp_path / "out", "--attack", "spear", "--image-shape", "3x32x32", "--json"),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cell = json.loads(proc.stdout)["cells"][0]
    assert cell["scored"] is False and cell["score_note"] == captured.NOT_SCORED and "psnr_mean" not in cell
    assert cell["status"] == "ok" and cell["n_images"] == 4 and cell["assumption"] == captured.ASSUMPTION
    assert is_cell_folder(tmp_path / "out" / "spear") and not (tmp_path / "out" / "spear" / "grid.png").exists()
    assert pd.read_parquet(tmp_path / "out" / "spear" / "records.parquet").empty


@pytest.fixture(scope="module")
def example_round(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example Flower app's one round, captured (in process), under a fresh folder."""
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from leakbench.fl import flower as fl_flower

    fl_flower.flower()  # telemetry off before the example imports flwr
    sys.path.insert(0, str(EXAMPLE))
    try:
        from quickstart_capture.client_app import make_client_app
        from quickstart_capture.server_app import NUM_CLIENTS, make_server_app
    finally:
        sys.path.remove(str(EXAMPLE))
    root = tmp_path_factory.mktemp("flower") / "captures"
    fl_flower.simulate(make_server_app(), make_client_app(root), NUM_CLIENTS, "inprocess")
    return root


@pytest.mark.slow  # a Flower round in process (about 5 s)
def test_the_mod_captures_what_each_client_received_and_sent(example_round: Path) -> None:
    from quickstart_capture.task import LR as EXAMPLE_LR
    from quickstart_capture.task import client_batch, make_model

    folders = sorted(example_round.glob("round-1/node-*"))
    assert len(folders) == 2
    captures = sorted((load_capture(f) for f in folders), key=lambda c: c.manifest["partition_id"])
    start = make_model().state_dict()
    for partition, capture in enumerate(captures):
        meta = capture.manifest
        assert meta["partition_id"] == partition and meta["round"] == 1 and meta["flwr_version"].startswith("1.")
        assert meta["lr"] == EXAMPLE_LR and meta["num_examples"] == 4 and meta["local_steps"] == 1
        assert all(torch.equal(capture.received[k], v) for k, v in start.items())  # θ₀: what the server sent
        images, labels = client_batch(partition)
        assert capture.batch is not None and torch.equal(capture.batch[0], images)
        expected = _step(make_model().eval(), images, labels, EXAMPLE_LR)
        assert all(torch.allclose(capture.reply[k], v, rtol=0, atol=4 * EPS32) for k, v in expected.items())
    assert any(not torch.equal(captures[0].reply[k], captures[1].reply[k]) for k in start)


@pytest.mark.slow  # a Flower round in process, then SPEAR in a sandboxed worker (about 15 s)
def test_attack_update_recovers_the_example_clients_batch(example_round: Path, tmp_path: Path) -> None:
    from quickstart_capture.task import DEPTH as EXAMPLE_DEPTH
    from quickstart_capture.task import WIDTH as EXAMPLE_WIDTH

    capture = sorted(example_round.glob("round-1/node-*"))[0]
    out = tmp_path / "attacks"
    proc = run_cli(["attack-update", str(capture), "--arch", "fc", "--width", str(EXAMPLE_WIDTH), "--depth",
                    str(EXAMPLE_DEPTH), "--attack", "spear", "--out", str(out), "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cell = json.loads(proc.stdout)["cells"][0]
    assert cell["scored"] is True and cell["status"] == "ok" and cell["n_images"] == 4
    assert cell["exact_fraction"] == 1.0 and cell["psnr_min"] > 60  # SPEAR is exact up to float rounding
    assert cell["update"] == "flower-capture" and cell["lr"] == 0.1
    assert is_cell_folder(out / "spear") and (out / "spear" / "grid.png").is_file()
    records = pd.read_parquet(out / "spear" / "records.parquet")
    assert len(records) == 4 and records["exact"].all() and set(records["node_id"]) == {cell["node_id"]}
