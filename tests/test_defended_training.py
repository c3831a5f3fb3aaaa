"""The price of a defence (issue 24): a victim trained with the cell's DP, noise and defences applied to every
update; plain FedSGD training unchanged bit for bit (same weights, same cache key)."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from dataclasses import dataclass

import pytest
import torch
from conftest import REPO_ROOT

from leakbench.cell.spec import CellSpec, transforms
from leakbench.datasets import load_dataset, partition
from leakbench.fl import DPConfig, FedAvgConfig, register_transform
from leakbench.fl.transform import TRANSFORMS, Client, DefenceSetting, EmptyConfig, FedSGD, UpdateTransform
from leakbench.fl.update import ClientUpdate
from leakbench.harness.victim import training_rule, victim, victim_key
from leakbench.models import ImageVictim, build_model
from leakbench.models import victims as victims_module
from leakbench.models.training import TrainRecipe, UpdateRule, step_seed, train

SMALL = dict(attack="spear", dataset="digits", batch_size=4, width=32, depth=3)
"""A victim that trains in well under a second (digits, FC-3 width 32)."""
RECIPE = TrainRecipe(batch_size=32)


@dataclass(frozen=True)
class ScaleConfig:
    """factor: what every shared gradient entry is multiplied by."""

    factor: float = 1.0


class Scale(UpdateTransform):
    """A test-local defence: every shared gradient times `factor` (1 is the identity)."""

    name = "test-scale"
    Config = ScaleConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        grads = {k: g * self.config.factor for k, g in update.gradients.items()}
        return dataclasses.replace(update, gradients=grads)


if "test-scale" not in TRANSFORMS.names():
    register_transform(Scale)


@pytest.fixture(autouse=True)
def victim_cache(tmp_path, monkeypatch):
    """Every test gets its own, empty victim cache."""
    monkeypatch.setenv(victims_module.CACHE_ENV, str(tmp_path / "victims"))


def _trained(rule_transforms: tuple[UpdateTransform, ...] | None, epochs: int = 1,
             recipe: TrainRecipe = RECIPE) -> dict[str, torch.Tensor]:
    data = load_dataset("digits")
    model = build_model("fc", data.image_shape, 10, width=32, depth=3, seed=0)
    rule = None if rule_transforms is None else UpdateRule(rule_transforms, "digits", 10)
    train(model, data.images, data.labels, torch.as_tensor(partition(data).train), recipe, epochs, rule=rule)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_an_identity_defence_trains_the_same_weights_as_plain_training() -> None:
    """The defended loop (update through client_update, then the optimiser) is plain training when the
    defence changes nothing: bit for bit."""
    big = TrainRecipe(batch_size=256)
    plain = _trained(None, recipe=big)
    assert _same(plain, _trained((FedSGD(EmptyConfig()), Scale(ScaleConfig(1.0))), recipe=big))
    assert _same(plain, _trained((FedSGD(EmptyConfig()),), recipe=big))  # plain FedSGD alone: the plain path


@pytest.mark.slow
def test_an_identity_defence_trains_the_same_weights_with_sgd_and_flips() -> None:
    sgd = TrainRecipe(optimizer="sgd", lr=0.05, batch_size=32, augment=True, seed=3)
    assert _same(_trained(None, recipe=sgd), _trained((FedSGD(EmptyConfig()), Scale(ScaleConfig(1.0))), recipe=sgd))


@pytest.mark.slow
def test_a_defence_changes_the_weights_deterministically() -> None:
    halved = (FedSGD(EmptyConfig()), Scale(ScaleConfig(0.5)))
    sgd = TrainRecipe(optimizer="sgd", lr=0.05, batch_size=32)
    assert not _same(_trained(None, recipe=sgd), _trained(halved, recipe=sgd))  # SGD: half the step size
    noisy = tuple(transforms(CellSpec(noise=0.05, **SMALL)))
    first, second = _trained(noisy), _trained(noisy)
    assert _same(first, second) and not _same(first, _trained(None))
    dp = tuple(transforms(CellSpec(dp=DPConfig(sigma=0.5, clip=1.0), **SMALL)))
    assert _same(_trained(dp), _trained(dp)) and not _same(_trained(dp), _trained(None))


def test_every_step_draws_its_own_noise() -> None:
    seeds = {step_seed(0, s) for s in range(1000)}
    assert len(seeds) == 1000 and step_seed(0, 5) == step_seed(0, 5) != step_seed(1, 5)


def test_undefended_cache_keys_are_unchanged_and_defended_keys_name_the_defence() -> None:
    data = load_dataset("digits")
    plain = CellSpec(train_epochs=1, **SMALL)
    key = victim_key(plain, data)
    assert set(key) == {"dataset", "dataset_size", "image_shape", "partition", "arch", "width", "depth", "init_seed",
                        "recipe", "epochs"}  # the key of every victim trained before issue 24
    fedavg = CellSpec(train_epochs=1, fedavg=FedAvgConfig(epochs=2), **SMALL)
    assert victim_key(fedavg, data) == key  # FedAvg is the attacked round's protocol: trained by FedSGD
    noisy = victim_key(CellSpec(train_epochs=1, noise=0.01, **SMALL), data)
    assert noisy["update"] == [{"name": "fedsgd", "config": {}},
                               {"name": "noise", "config": {"sigma": 0.01, "scale": "absolute"}}]
    scaled = CellSpec(train_epochs=1, defences=(DefenceSetting("test-scale", ScaleConfig(0.5)),), **SMALL)
    assert victim_key(scaled, data)["update"][1] == {"name": "test-scale", "config": {"factor": 0.5}}
    assert training_rule(scaled, data).defended() and not training_rule(fedavg, data).defended()


@pytest.mark.slow
def test_a_defended_victim_is_cached_under_its_own_key_and_reports_its_accuracy() -> None:
    _, plain = victim(CellSpec(train_epochs=2, **SMALL))
    spec = CellSpec(train_epochs=2, dp=DPConfig(sigma=4.0, clip=0.1), **SMALL)
    _, dp = victim(spec)
    assert dp.victim_info.trained_now and dp.victim_info.victim_hash != plain.victim_info.victim_hash
    assert 0.0 <= dp.victim_info.test_accuracy < plain.victim_info.test_accuracy  # heavy DP costs accuracy
    _, again = victim(spec)
    assert not again.victim_info.trained_now and again.victim_info.test_accuracy == dp.victim_info.test_accuracy


@pytest.mark.slow
def test_the_example_plugins_defence_trains_a_victim() -> None:
    """Any registered defence works in training: the example plugin's quantisation (imported from its source)."""
    sys.path.insert(0, str(REPO_ROOT / "examples" / "leakbench-example-plugin"))
    try:
        quantise = importlib.import_module("leakbench_example_plugin.defence").Quantise
    finally:
        sys.path.pop(0)
    rule = (FedSGD(EmptyConfig()), quantise(quantise.Config(bits=2)))
    weights = _trained(rule)
    assert _same(weights, _trained(rule)) and not _same(weights, _trained(None))


class BatchNormNet(ImageVictim):
    """A tiny victim with BatchNorm: flatten, linear, BatchNorm, ReLU, linear."""

    def __init__(self, inputs: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs, 16), torch.nn.BatchNorm1d(16),
                                        torch.nn.ReLU(), torch.nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_batchnorm_statistics_follow_defended_training() -> None:
    """The update is computed on a copy of the model; the running statistics are updated on the model as a
    training forward would (the identity defence gives exactly plain training's statistics)."""
    data = load_dataset("digits")
    train_part = torch.as_tensor(partition(data).train)
    models = []
    for rule in (None, UpdateRule((FedSGD(EmptyConfig()), Scale(ScaleConfig(1.0))), "digits", 10)):
        model = BatchNormNet(64)
        train(model, data.images, data.labels, train_part, TrainRecipe(), 1, rule=rule)
        models.append(model.state_dict())
    assert int(models[1]["body.2.num_batches_tracked"]) == -(-len(train_part) // 64)
    assert _same(models[0], models[1])


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["resnet", "precode"])
def test_shipped_victims_with_buffers_train_the_same_through_an_identity_defence(arch: str) -> None:
    """ResNet's BatchNorm statistics and PRECODE's noise stream (its forward count) move under defended
    training exactly as under plain training: the client's copy's buffers are carried back every step."""
    from leakbench.models.precode import add_precode

    data = load_dataset("digits")
    part = torch.as_tensor(partition(data).train[:256])
    states = []
    for rule in (None, UpdateRule((FedSGD(EmptyConfig()), Scale(ScaleConfig(1.0))), "digits", 10)):
        if arch == "resnet":
            model = build_model("resnet", (1, 8, 8), 10, width=8, depth=3, seed=0)
        else:
            model = add_precode(build_model("fc", data.image_shape, 10, width=32, depth=3, seed=0), 8, 1e-3, 0)
        train(model, data.images, data.labels, part, TrainRecipe(batch_size=32), 1, rule=rule)
        states.append(model.state_dict())
    assert _same(states[0], states[1])


def test_precode_trains_through_its_model_not_the_rule() -> None:
    """PRECODE changes the victim (its loss term), not the update: a PRECODE-only cell trains (and is keyed)
    as before; with noise on top, the rule holds the noise only."""
    from leakbench.fl.precode import PrecodeConfig

    data = load_dataset("digits")
    precode = (DefenceSetting("precode", PrecodeConfig(bottleneck=8)),)
    only = CellSpec(train_epochs=1, defences=precode, **SMALL)
    assert not training_rule(only, data).defended() and "update" not in victim_key(only, data)
    noisy = CellSpec(train_epochs=1, noise=0.01, defences=precode, **SMALL)
    assert [t.name for t in training_rule(noisy, data).transforms] == ["fedsgd", "noise"]


def test_client_transforms_in_training() -> None:
    """MixUp changes what the victim learns: its victim trains with it. Secure aggregation is the protocol
    of the attacked round (the mean of K FedSGD updates is the FedSGD update of their union): its victim is
    the undefended one, under the same key."""
    from leakbench.fl.mixup import MixUpConfig
    from leakbench.fl.secagg import SecAggConfig

    data = load_dataset("digits")
    plain = victim_key(CellSpec(train_epochs=1, **SMALL), data)
    mixup = CellSpec(train_epochs=1, defences=(DefenceSetting("mixup", MixUpConfig()),), **SMALL)
    assert [t.name for t in training_rule(mixup, data).transforms] == ["mixup"]
    assert victim_key(mixup, data)["update"][0]["name"] == "mixup"
    secagg = CellSpec(train_epochs=1, defences=(DefenceSetting("secagg", SecAggConfig(clients=2)),), **SMALL)
    assert not training_rule(secagg, data).defended() and victim_key(secagg, data) == plain


@pytest.mark.slow
@pytest.mark.parametrize("name", ["prune", "qsgd", "uniform-quantise", "soteria", "soteria-first", "mixup",
                                  "mixup-batch"])
def test_every_shipped_defence_trains_a_victim(name: str) -> None:
    """Each shipped defence (at its paper's settings) trains a victim through the harness: deterministic,
    other weights than plain training, a test accuracy recorded."""
    cls = TRANSFORMS.create(name)
    spec = CellSpec(train_epochs=1, recipe=TrainRecipe(batch_size=128),
                    defences=(DefenceSetting(name, cls.Config()),), **SMALL)
    _, first = victim(spec)
    assert first.victim_info.trained_now and 0.0 <= first.victim_info.test_accuracy <= 1.0
    _, plain = victim(CellSpec(train_epochs=1, recipe=TrainRecipe(batch_size=128), **SMALL))
    assert first.victim_info.victim_hash != plain.victim_info.victim_hash
    assert not _same(first.state_dict(), plain.state_dict())
