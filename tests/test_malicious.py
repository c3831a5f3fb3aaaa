"""Issue 46: a malicious server. Its modification runs in a sandboxed worker that never holds the batch (a cheating
modification that reads the data root is refused there, and works in process: the control), its reply is plain data
checked against the victim, Robbing the Fed's imprint block recovers images exactly where the answer is known, a
client that checks the model refuses an imprint block, and malicious cells stand on a board of their own, the
honest board unchanged byte for byte."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from cheat_server import MARKER, CheatServer
from PIL import Image

from leakbench import api
from leakbench.api import scoped_attack
from leakbench.attacks.imprint import Imprint, ImprintConfig, bin_differences
from leakbench.attacks.malicious import is_malicious
from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.datasets.base import Batch
from leakbench.fl.model_check import CheckModel, CheckModelConfig, ClientRefused
from leakbench.fl.transform import Client
from leakbench.fl.update import fedsgd_update
from leakbench.harness.cell import run_cell
from leakbench.harness.replies import ReplyRefused
from leakbench.harness.scoring import scored_columns
from leakbench.harness.server import encode_server_model, read_server_model
from leakbench.metrics.image import exact
from leakbench.models import build_model
from leakbench.reporting.leaderboard import write_leaderboard
from leakbench.server import ServerModel, modified_victim

SHAPE = (3, 8, 8)


def _victim(width: int = 32) -> torch.nn.Module:
    return build_model("fc", SHAPE, 10, width=width, depth=3, seed=0)


def _batch(brightness: list[float], seed: int = 0) -> Batch:
    """Images of the given mean brightness (8-bit values, small texture), one label each."""
    rng = np.random.default_rng(seed)
    images = [np.clip(np.round(255 * (b + rng.uniform(-0.05, 0.05, SHAPE))), 0, 255) / 255 for b in brightness]
    tensor = torch.tensor(np.stack(images), dtype=torch.float32)
    return Batch(tensor, torch.arange(len(brightness)) % 10, tuple(range(len(brightness))), "synthetic", 10)


def test_imprint_recovers_every_image_alone_in_its_bin_exactly() -> None:
    """Four images of brightness 0.2 … 0.8: under the victim's normalisation their mean pixels lie at −0.6 … 0.6,
    one per bin of 64 placed for N(0, 0.5²). Every image is a hit of its own, exact at 8 bits; breaching's
    reduction (4 rows kept of 5 hits: the first bin holds every image) may drop one, never more."""
    batch = _batch([0.2, 0.4, 0.6, 0.8])
    model = _victim()
    attack = Imprint(ImprintConfig(bins=64, linfunc="avg", query_std=0.5))
    update = fedsgd_update(modified_victim(model, attack.modify(model, seed=3)), batch)
    weight, bias = bin_differences(update.gradients["block.0.weight"], update.gradients["block.0.bias"])
    hits = torch.nonzero(bias != 0).flatten()
    rows = model.denormalize(weight[hits] / bias[hits, None]).clamp(0, 1)
    for image in batch.images:  # each image is one hit, exactly
        assert int(exact(rows, image.expand_as(rows)).sum()) == 1
    recon = attack.reconstruct(update, seed=0)
    assert recon.status == "ok" and recon.images is not None and len(recon.images) == 4
    found = [bool(exact(recon.images, image.expand_as(recon.images)).any()) for image in batch.images]
    assert sum(found) >= 3, found


def test_imprint_sees_the_aggregate_of_several_clients_as_one_batch() -> None:
    """Secure aggregation: the mean of two clients' updates is one batch of both clients' images to the block."""
    model = _victim()
    attack = Imprint(ImprintConfig(bins=64, linfunc="avg", query_std=0.5))
    sent = modified_victim(model, attack.modify(model, seed=0))
    a, b = _batch([0.2, 0.6], seed=1), _batch([0.4, 0.8], seed=2)
    updates = [fedsgd_update(sent, batch) for batch in (a, b)]
    mean = {k: (updates[0].gradients[k] + updates[1].gradients[k]) / 2 for k in updates[0].gradients}
    update = fedsgd_update(sent, a).with_gradients(mean, "secagg")
    update = type(update)(**{**update.__dict__, "batch_size": 4})
    recon = attack.reconstruct(update, seed=0)
    assert recon.images is not None
    truth = torch.cat([a.images, b.images])
    assert sum(bool(exact(recon.images, t.expand_as(recon.images)).any()) for t in truth) >= 3


def test_the_modification_depends_on_the_model_config_and_seed_alone() -> None:
    model = _victim()
    attack = Imprint(ImprintConfig(bins=16, linfunc="randn"))
    one, two, other = (attack.modify(model, seed=s) for s in (1, 1, 2))
    assert all(torch.equal(one.values[k], two.values[k]) for k in one.values)
    assert not torch.equal(one.values["block.0.weight"], other.values["block.0.weight"])
    assert is_malicious(Imprint) and not is_malicious(type("Honest", (), {}))


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_a_server_reply_is_read_only_within_the_victims_shapes() -> None:
    model = _victim()
    header, npz = encode_server_model(Imprint(ImprintConfig(bins=16)).modify(model, seed=0))
    import json

    read = read_server_model(json.loads(header), npz, model)
    assert read.block == 16 and read.values["block.0.weight"].shape == (16, math.prod(SHAPE))
    d = math.prod(SHAPE)
    forged = {"wrong shape": ({"kind": "modified", "block": 16}, {"block.0.bias": np.zeros(17, np.float32)}),
              "unknown name": ({"kind": "modified", "block": 0}, {"evil": np.zeros(1, np.float32)}),
              "float64": ({"kind": "modified", "block": 4}, {"block.0.bias": np.zeros(4, np.float64)}),
              "object": ({"kind": "modified", "block": 4}, {"block.0.weight": np.zeros((4, d), object)}),
              "huge block": ({"kind": "modified", "block": 1 << 30}, {})}
    for name, (header_, arrays) in forged.items():
        with pytest.raises(ReplyRefused):
            read_server_model(header_, _npz(arrays) if name != "object" else _object_npz(), model)
        assert name


def _object_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{"block.0.weight": np.array([None, 1], dtype=object)})
    return buffer.getvalue()


def test_the_harness_refuses_a_server_model_that_is_not_the_victims() -> None:
    model = _victim()
    with pytest.raises(ConfigError, match="does not have"):
        modified_victim(model, ServerModel(0, {"base.nothing": torch.zeros(1)}))
    with pytest.raises(ConfigError, match="not finite"):
        modified_victim(model, ServerModel(2, {"block.0.bias": torch.tensor([0.0, math.inf])}))
    with pytest.raises(ConfigError, match="float32"):
        modified_victim(model, ServerModel(2, {"block.0.bias": torch.zeros(3)}))


def test_a_client_that_checks_the_model_refuses_an_imprint_block_and_not_trap_weights() -> None:
    model, batch = _victim(), _batch([0.2, 0.4])
    check = CheckModel(CheckModelConfig())
    imprinted = modified_victim(model, Imprint(ImprintConfig(bins=8)).modify(model, seed=0))
    with pytest.raises(ClientRefused, match="architecture"):
        check.apply(fedsgd_update(imprinted, batch), Client(imprinted, batch, 0, fedsgd_update(model, batch).threat))
    weight, _ = model.layer_param_names(1)
    trapped = modified_victim(model, ServerModel(0, {f"base.{weight}": -dict(model.named_parameters())[weight]
                                                     .detach().clone()}))
    update = fedsgd_update(trapped, batch)
    assert check.apply(update, Client(trapped, batch, 0, update.threat)) is update


def test_only_a_malicious_servers_cells_record_a_server() -> None:
    honest = CellSpec(attack="spear", dataset="embedded", batch_size=2, width=32, depth=3)
    malicious = CellSpec(attack="imprint", dataset="embedded", batch_size=2, width=32, depth=3)
    assert "server" not in scored_columns(honest)
    assert scored_columns(malicious)["server"] == "malicious"


# --------------------------------------------------------------------------- cells (attack workers: seconds each)


@pytest.fixture()
def cheat() -> Iterator[None]:
    with scoped_attack(CheatServer):
        yield


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir()
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / label / f"{i}.png")
    return str(root)


def _cheat_spec(image_root: str, native: bool) -> CellSpec:
    return CellSpec(attack="cheat-server", dataset="imagefolder", data_root=image_root, image_size=8, batch_size=2,
                    width=16, depth=3, hyperparameters={"data_root": image_root, "native": native})


@pytest.mark.slow
@pytest.mark.parametrize("native", [False, True], ids=["python", "libc"])
def test_a_modification_that_reads_the_data_root_is_refused_in_its_worker(cheat: None, image_root: str,
                                                                          native: bool) -> None:
    summary = run_cell(_cheat_spec(image_root, native)).summary
    assert summary["status"] == "failed" and summary["failure"] == "error"
    assert "server's model modification failed" in summary["reason"]
    assert "may not reach" in summary["reason"] or "Permission" in summary["reason"] \
        or "refused" in summary["reason"], summary["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("native", [False, True], ids=["python", "libc"])
def test_the_same_modification_reads_it_in_process(cheat: None, image_root: str, native: bool) -> None:
    """The control: without the sandbox the cheat reads the file and plants its marker in the model sent."""
    summary = run_cell(_cheat_spec(image_root, native), isolate=False).summary
    assert summary["attack_stats"]["planted"] is True, summary["reason"]
    assert MARKER == 7.0


@pytest.mark.slow
def test_imprint_end_to_end_in_the_sandbox_and_a_client_that_refuses(tmp_path: Path) -> None:
    spec = CellSpec(attack="imprint", dataset="embedded", batch_size=4, width=32, depth=3,
                    hyperparameters={"bins": 256, "linfunc": "avg", "query_std": 0.3})
    summary = run_cell(spec).summary
    assert summary["server"] == "malicious" and summary["status"] == "ok"
    assert summary["exact_fraction"] >= 0.5, summary  # 4 images, 256 bins: most alone in theirs
    from leakbench.fl.transform import DefenceSetting

    refused = run_cell(CellSpec(**{**spec.__dict__, "defences": (DefenceSetting("check-model", CheckModelConfig()),)}))
    assert refused.summary["status"] == "failed" and refused.summary["failure"] == "not-applicable"
    assert "refused the server's model" in refused.summary["reason"]


HONEST = """name = "honest-tiny"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [2]
layers = [1]
width = 32
depth = 3
"""
MALICIOUS = """name = "malicious-tiny"
dataset = "embedded"
attacks = ["imprint"]
batch_sizes = [2]
width = 32
depth = 3
[hyperparameters.imprint]
bins = 64
"""


@pytest.mark.slow
def test_malicious_cells_have_a_board_of_their_own_and_the_honest_one_is_unchanged(tmp_path: Path) -> None:
    (tmp_path / "honest.toml").write_text(HONEST)
    (tmp_path / "malicious.toml").write_text(MALICIOUS)
    api.run(tmp_path / "honest.toml", out=tmp_path / "res", reports=tmp_path / "rep")
    write_leaderboard(tmp_path / "res", tmp_path / "alone")
    api.run(tmp_path / "malicious.toml", out=tmp_path / "res", reports=tmp_path / "rep")
    write_leaderboard(tmp_path / "res", tmp_path / "both")
    alone, both = ((tmp_path / f / "leaderboard.md").read_text() for f in ("alone", "both"))
    parts = both.split("\n## ")
    honest = [p for p in parts if not p.startswith("Malicious server")]
    malicious = [p for p in parts if p.startswith("Malicious server")]
    assert honest[1:] == alone.split("\n## ")[1:]  # every honest table and note, byte for byte
    extra = [line for line in honest[0].splitlines() if line not in alone.split("\n## ")[0].splitlines()]
    assert [line.split(":")[0] for line in extra if line] == ["A malicious server's attacks, ranked apart (sections "
                                                              "'Malicious server')"]
    assert malicious and "imprint" in "".join(malicious) and "imprint" not in "".join(honest[1:])
    assert "spear" not in "".join(malicious)
    page = (tmp_path / "both" / "leaderboard.html").read_text()
    assert 'id="malicious-attacks"' in page or "malicious-attacks" in page
