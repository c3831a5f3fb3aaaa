"""Flower (`flwr`) as a client (issue 45 prototype): one real Flower round in process gives leakbench's FedSGD update.

The tests that run Flower skip, with one reason, where `flwr` is not importable (the default venv); each
Flower round on Flower's Ray runtime starts and stops a local Ray cluster (about 10 s on two busy cores), one
in process about 1-2 s: they are marked slow. The Ray runtime runs once (the parity fixture), the rest in process.
"""

from __future__ import annotations

import copy
import importlib
from types import ModuleType
from typing import Any

import pytest
import torch

from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.fl import fedsgd_update
from leakbench.fl import flower as fl_flower
from leakbench.harness.victim import prepare

LR = 0.5
EPS32 = float(torch.finfo(torch.float32).eps)


@pytest.fixture(scope="module")
def victim() -> tuple[Any, Any]:
    batch, model, _ = prepare(CellSpec(attack="cpa", dataset="embedded", batch_size=4, width=32, depth=3))
    return batch, model


@pytest.fixture(scope="module")
def flower_update(victim: tuple[Any, Any]) -> Any:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    batch, model = victim
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update = fl_flower.flower_fedsgd_update(model, batch, lr=LR)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # victim untouched
    return update


def _gap(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two sets of named tensors (over `want`'s names)."""
    return max(float((got[k] - w).abs().max()) for k, w in want.items())


def _bound(model: torch.nn.Module, gradients: dict[str, torch.Tensor], lr: float) -> float:
    """What float32 rounding allows between (θ₀ − θ₁)/η and the gradient: a few ε of max|θ₀|/η + max|g|."""
    weights = max(float(p.detach().abs().max()) for p in model.parameters())
    grads = max(float(g.abs().max()) for g in gradients.values())
    return 8 * EPS32 * (weights / lr + grads)


@pytest.mark.slow  # a Flower round: a Ray cluster started and stopped (about 10 s)
def test_a_flower_round_gives_the_fedsgd_gradient(victim: tuple[Any, Any], flower_update: Any) -> None:
    batch, model = victim
    reference = fedsgd_update(model, batch)
    assert flower_update.kind == "flower-fedsgd"
    assert flower_update.batch_size == batch.size and flower_update.labels is None
    assert set(flower_update.gradients) == set(reference.gradients)
    gap = max(float((flower_update.gradients[k] - reference.gradients[k]).abs().max()) for k in reference.gradients)
    assert gap <= _bound(model, reference.gradients, LR)
    assert max(float(g.abs().max()) for g in reference.gradients.values()) > 1e3 * gap  # a gradient, not zeros


@pytest.mark.slow  # a Flower round: a Ray cluster started and stopped (about 10 s)
def test_the_in_process_runtime_receives_what_the_ray_runtime_receives(victim: tuple[Any, Any],
                                                                       flower_update: Any) -> None:
    batch, model = victim
    backend = importlib.import_module("flwr.server.superlink.fleet.vce.backend.raybackend")
    shipped = backend.RayBackend
    update = fl_flower.flower_fedsgd_update(model, batch, lr=LR, runtime="inprocess")
    assert backend.RayBackend is shipped  # Flower's backend put back
    # bit for bit where both sides compute with the same thread count (observed); a bound, not equality, since
    # the Ray actor's thread count is Ray's choice
    scale = max(float(g.abs().max()) for g in flower_update.gradients.values())
    assert all(torch.allclose(update.gradients[k], g, rtol=0, atol=4 * EPS32 * scale)
               for k, g in flower_update.gradients.items())


@pytest.mark.slow  # a Flower round: a Ray cluster started and stopped (about 10 s)
def test_the_update_carries_the_weights_the_server_sent(victim: tuple[Any, Any], flower_update: Any) -> None:
    _, model = victim
    sent = dict(model.named_parameters())
    assert all(torch.equal(p, sent[k].detach()) for k, p in flower_update.model.named_parameters())


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_the_server_records_the_new_weights_of_each_client_in_client_order(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    batch, model = victim
    halves = [(batch.images[:2], batch.labels[:2]), (batch.images[2:], batch.labels[2:])]
    result = fl_flower.fedsgd_round(model, halves, lr=LR, runtime="inprocess")
    assert [r.client for r in result.received] == [0, 1] and [r.num_examples for r in result.received] == [2, 2]
    assert result.version.startswith("1.")
    for (images, labels), reply in zip(halves, result.received, strict=True):
        local = copy.deepcopy(model).eval()
        fl_flower._client_step(local, images, labels, LR)  # the same step, in this process
        expected = local.state_dict()
        assert set(reply.arrays) == set(expected)
        assert all(torch.allclose(reply.arrays[k], expected[k], rtol=0, atol=4 * EPS32) for k in expected)
    first, second = (r.arrays for r in result.received)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # two batches, two replies


def test_without_flwr_the_client_is_one_config_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_flwr(name: str, package: str | None = None) -> ModuleType:
        if name == "flwr" or name.startswith("flwr."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(fl_flower.importlib, "import_module", no_flwr)
    with pytest.raises(ConfigError) as info:
        fl_flower.flower()
    assert str(info.value) == fl_flower.MISSING and "\n" not in str(info.value)


def test_a_process_connected_to_ray_is_refused(monkeypatch: pytest.MonkeyPatch, victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    ray = pytest.importorskip("ray")
    batch, model = victim
    monkeypatch.setattr(ray, "is_initialized", lambda: True)

    def no_round(**_: Any) -> None:
        raise AssertionError("the round ran in a process connected to Ray")

    monkeypatch.setattr(importlib.import_module("flwr.simulation"), "run_simulation", no_round)
    with pytest.raises(ConfigError, match="already connected to Ray"):
        fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=LR)
    with pytest.raises(AssertionError, match="connected to Ray"):  # in process: no Ray to shut down, it runs
        fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=LR, runtime="inprocess")


def test_an_unknown_runtime_is_refused(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    batch, model = victim
    with pytest.raises(ConfigError, match="runtime must be one of ray, inprocess"):
        fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=LR, runtime="threads")


@pytest.mark.parametrize("lr", [0.0, -1.0, float("nan")])
def test_bad_learning_rates_are_refused(victim: tuple[Any, Any], lr: float) -> None:
    batch, model = victim
    with pytest.raises(ConfigError, match="learning rate"):
        fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=lr)


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_a_secaggplus_round_gives_the_secagg_mean_within_flowers_quantisation(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from leakbench.datasets.base import split_batch
    from leakbench.fl.secagg import secagg_update

    batch, model = victim
    parts = split_batch(batch, 2)
    # max_weight = b = 2 (the default here): Flower's finest quantisation steps
    update = fl_flower.flower_secaggplus_update(model, parts, lr=LR, runtime="inprocess")
    assert update.kind == "flower-secaggplus" and update.batch_size == 4
    reference = secagg_update(model, parts).gradients
    assert all(update.gradients[k].dtype == g.dtype for k, g in reference.items())
    # each client's scaled weights are rounded (stochastically) to steps of 2·clip/Q; the mean of K of them,
    # unscaled, is off by less than one step · max_weight / n, and the gradient by that over η
    settings = fl_flower.SecAggPlusSettings()
    step = 2 * settings.clipping_range / settings.quantization_range * 2 / 2
    gap = max(float((update.gradients[k] - reference[k]).abs().max()) for k in reference)
    assert gap <= step / LR + _bound(model, reference, LR)
    assert max(float(g.abs().max()) for g in reference.values()) > 1e3 * gap


def test_secaggplus_needs_two_clients(victim: tuple[Any, Any]) -> None:
    batch, model = victim
    with pytest.raises(ConfigError, match="at least 2 clients"):
        fl_flower.secaggplus_round(model, [(batch.images, batch.labels)], lr=LR)


def _norm(arrays: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum((v.double() ** 2).sum() for v in arrays.values())))


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_fixedclipping_mod_clips_what_the_server_receives(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from flwr.clientapp.mod import fixedclipping_mod

    batch, model = victim
    reference = fedsgd_update(model, batch).gradients
    clip = 0.1 * LR * _norm(reference)  # the step θ₀ − θ₁ = η g clipped to a tenth of its norm
    result = fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=LR, mods=[fixedclipping_mod],
                                    config={"clipping_norm": clip}, runtime="inprocess")
    gradients = fl_flower.as_gradients(result.sent, result.received[0].arrays, list(reference), LR)
    assert _norm(gradients) == pytest.approx(clip / LR, rel=1e-5)
    scaled = {k: g * clip / (LR * _norm(reference)) for k, g in reference.items()}
    assert max(float((gradients[k] - scaled[k]).abs().max()) for k in reference) <= _bound(model, reference, LR)


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_localdp_mod_adds_gaussian_noise_of_flowers_sigma_to_the_weights(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    import math

    from flwr.clientapp.mod import LocalDpMod

    batch, model = victim
    reference = fedsgd_update(model, batch).gradients
    clip, sensitivity, epsilon, delta = 0.1 * LR * _norm(reference), 0.01, 10.0, 1e-5
    mod = LocalDpMod(clipping_norm=clip, sensitivity=sensitivity, epsilon=epsilon, delta=delta)
    result = fl_flower.fedsgd_round(model, [(batch.images, batch.labels)], lr=LR, mods=[mod], seed=3,
                                    runtime="inprocess")
    received = result.received[0].arrays
    clipped_step = {k: result.sent[k] - LR * g * clip / (LR * _norm(reference)) for k, g in reference.items()}
    noise = torch.cat([(received[k] - clipped_step[k]).flatten() for k in reference])
    sigma = sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon  # LocalDpMod's Gaussian mechanism
    assert noise.numel() > 10_000
    assert float(noise.std()) == pytest.approx(sigma, rel=0.05)
    assert abs(float(noise.mean())) < 5 * sigma / math.sqrt(noise.numel())


@pytest.mark.slow  # two Flower rounds in process (about 1-2 s each)
def test_the_unregistered_transforms_make_the_updates_leakbench_makes(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from leakbench.datasets.base import split_batch
    from leakbench.fl.secagg import secagg_update
    from leakbench.fl.transform import Client, client_update
    from leakbench.fl.update import ThreatModel

    batch, model = victim
    client = Client(model=model, batch=batch, seed=0, threat=ThreatModel(labels_known=True))
    fedsgd = client_update([fl_flower.FlowerFedSGD(fl_flower.FlowerFedSGDConfig(lr=LR))], client)
    reference = fedsgd_update(model, batch).gradients
    assert fedsgd.kind == "flower-fedsgd" and torch.equal(fedsgd.labels, batch.labels)
    assert _gap(fedsgd.gradients, reference) <= _bound(model, reference, LR)
    transform = fl_flower.FlowerSecAggPlus(fl_flower.FlowerSecAggPlusConfig(clients=2, lr=LR))
    assert transform.clients() == 2 and transform.columns()["flower_version"].startswith("1.")
    secagg = client_update([transform], client)
    mean = secagg_update(model, split_batch(batch, 2)).gradients
    step = 2 * 8.0 / 4194304  # max_weight 0: b, Flower's finest quantisation step (in weight units)
    assert secagg.kind == "flower-secaggplus" and secagg.batch_size == 4
    assert _gap(secagg.gradients, mean) <= step / LR + _bound(model, mean, LR)


def test_the_transform_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="runtime must be one of"):
        fl_flower.FlowerFedSGDConfig(runtime="threads")
    with pytest.raises(ConfigError, match="clients must be an integer"):
        fl_flower.FlowerSecAggPlusConfig(clients=1)
    with pytest.raises(ConfigError, match="lr"):
        fl_flower.FlowerFedSGDConfig(lr=0.0)


def _through(transform: Any, victim: tuple[Any, Any], seed: int = 0) -> Any:
    """The update `transform` (a Flower level) makes of the victim's batch, as a cell's client makes it."""
    from leakbench.fl.transform import Client, client_update
    from leakbench.fl.update import ThreatModel

    batch, model = victim
    return client_update([transform], Client(model=model, batch=batch, seed=seed, threat=ThreatModel()))


@pytest.mark.slow  # three Flower rounds in process (about 1-2 s each)
def test_flowers_central_dp_received_is_the_clipped_update_and_released_adds_its_noise(
        victim: tuple[Any, Any]) -> None:
    """flower-dp-fixed: the server receives the client's update clipped to C (the same direction: Flower adds its
    noise after receipt); the release is that plus N(0, (z·C/K)²) per weight from Flower's own strategy,
    reproducible per seed."""
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    batch, model = victim
    reference = fedsgd_update(model, batch).gradients
    clip, z = 0.1 * LR * _norm(reference), 0.5
    config = fl_flower.FlowerDPFixedConfig(clipping_norm=clip, noise_multiplier=z, lr=LR)
    received = _through(fl_flower.FlowerDPFixed(config), victim)
    assert received.kind == "flower-dp-fixed"
    assert _norm(received.gradients) == pytest.approx(clip / LR, rel=1e-5)
    scaled = {k: g * clip / (LR * _norm(reference)) for k, g in reference.items()}
    assert _gap(received.gradients, scaled) <= _bound(model, reference, LR)
    release = fl_flower.FlowerDPFixed(fl_flower.FlowerDPFixedConfig(clipping_norm=clip, noise_multiplier=z, lr=LR,
                                                                    view="released"))
    first, again = _through(release, victim, seed=5), _through(release, victim, seed=5)
    assert all(torch.equal(first.gradients[k], again.gradients[k]) for k in reference)  # same seed, same noise
    noise = torch.cat([(first.gradients[k] - received.gradients[k]).flatten() for k in reference]) * LR
    assert noise.numel() > 1000 and float(noise.std()) == pytest.approx(z * clip, rel=0.1)


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_flowers_local_dp_level_noises_the_reply(victim: tuple[Any, Any]) -> None:
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    import math

    batch, model = victim
    reference = fedsgd_update(model, batch).gradients
    config = fl_flower.FlowerLocalDPConfig(clipping_norm=1e6, sensitivity=0.01, epsilon=10.0, lr=LR)
    update = _through(fl_flower.FlowerLocalDP(config), victim)
    noise = torch.cat([(update.gradients[k] - reference[k]).flatten() for k in reference]) * LR
    sigma = 0.01 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 10.0
    assert update.kind == "flower-localdp" and float(noise.std()) == pytest.approx(sigma, rel=0.1)


def test_the_flower_levels_are_registered_and_refused_without_flwr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Flower level is a registered client transform; where flwr is not installed its settings are refused
    with the one MISSING line (so a suite naming one is refused when read, before any cell runs)."""
    from leakbench.fl import TRANSFORMS

    names = {"flower-fedsgd", "flower-secaggplus", "flower-dp-fixed", "flower-localdp", "flower-fedavg"}
    assert names <= set(TRANSFORMS.names())
    assert all(TRANSFORMS.create(name).makes_update for name in names)
    monkeypatch.setattr(fl_flower.importlib.util, "find_spec", lambda name, *a: None)
    for config in (fl_flower.FlowerFedSGDConfig, fl_flower.FlowerDPFixedConfig, fl_flower.FlowerLocalDPConfig,
                   fl_flower.FlowerSecAggPlusConfig, fl_flower.FlowerFedAvgConfig):
        with pytest.raises(ConfigError) as info:
            config()
        assert str(info.value) == fl_flower.MISSING


@pytest.mark.slow  # a cell with a Flower round in process and SPEAR (a few seconds)
def test_a_cell_attacks_what_the_flower_server_received() -> None:
    """Through the harness: a suite-style level `flower-fedsgd` gives SPEAR the Flower server's update, and SPEAR
    recovers the batch exactly."""
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from leakbench.fl.transform import DefenceSetting
    from leakbench.harness.cell import run_cell

    level = DefenceSetting("flower-fedsgd", fl_flower.FlowerFedSGDConfig())
    summary = run_cell(CellSpec("spear", "embedded", 4, width=64, depth=3, defences=(level,))).summary
    assert summary["status"] == "ok", summary.get("reason")
    assert summary["client"] == "flower-fedsgd lr=1" and summary["exact_fraction"] == 1.0  # no runtime in the label


@pytest.mark.slow  # a Flower round in process (about 1-2 s)
def test_flower_fedavg_gives_leakbenchs_fedavg_update(victim: tuple[Any, Any]) -> None:
    """flower-fedavg: the client runs leakbench's local training (E epochs of shuffled mini-batches from the cell's
    seed) and replies with θ_K; (θ₀ − θ_K)/(η K) from what the server received is leakbench's `fedavg` update within
    float32 rounding, and K steps of rate η make it differ from FedSGD's gradient."""
    pytest.importorskip("flwr", reason="flwr (Flower) is not installed")
    from leakbench.fl.fedavg import FedAvgConfig, fedavg_update

    batch, model = victim
    flower_update = _through(fl_flower.FlowerFedAvg(fl_flower.FlowerFedAvgConfig(epochs=2, minibatch=2, lr=LR)), victim,
                             seed=4)
    reference = fedavg_update(model, batch, FedAvgConfig(epochs=2, minibatch=2, lr=LR), seed=4).gradients
    assert flower_update.kind == "flower-fedavg"
    assert _gap(flower_update.gradients, reference) <= _bound(model, reference, LR * 4)
    assert _gap(reference, fedsgd_update(model, batch).gradients) > 100 * _bound(model, reference, LR * 4)
