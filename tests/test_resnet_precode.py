"""Issue 24: the victim registry, the ResNet victim with BatchNorm (train / eval mode, shared statistics),
outside victims behind the adapter, and PRECODE's bottleneck as a victim-changing defence."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from leakbench.cell.spec import CellSpec, cell_id
from leakbench.core.errors import ConfigError
from leakbench.datasets import Batch
from leakbench.fl.precode import Precode, PrecodeConfig
from leakbench.fl.transform import Client, DefenceSetting
from leakbench.fl.update import ThreatModel, fedsgd_update
from leakbench.models import VICTIMS, VictimFactory, build_model, first_attackable_layer, victim_label
from leakbench.models.base import training_loss
from leakbench.models.precode import PrecodeVictim, add_precode


def _batch(b: int = 4, side: int = 32, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(b, 3, side, side, generator=gen)
    return Batch(images=images, labels=torch.arange(b) % 10, indices=tuple(range(b)), dataset="random", num_classes=10)


def _linear_inputs(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """What every nn.Linear of `model` receives in a forward pass, in call order (hooks)."""
    seen: list[torch.Tensor] = []
    handles = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].flatten(1)))
               for m in model.modules() if isinstance(m, nn.Linear)]
    model(images)
    for handle in handles:
        handle.remove()
    return seen


def test_the_registry_lists_the_victims() -> None:
    assert {"fc", "conv", "resnet"} <= set(VICTIMS.names())
    assert [first_attackable_layer(a) for a in ("fc", "conv", "resnet")] == [1, 2, 2]
    assert victim_label("resnet", 3, 200) == "resnet-3 w200" and victim_label("fc", 6, 200) == "FC-6 w200"


@pytest.mark.parametrize("side", [32, 64])
def test_resnet_layer_inputs_and_names_agree_with_the_forward_pass(side: int) -> None:
    model = build_model("resnet", (3, side, side), 10, width=32, depth=4, seed=1).eval()
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    images = _batch(side=side).images
    seen = _linear_inputs(model, images)
    params = dict(model.named_parameters())
    for layer in range(2, 5):
        assert torch.allclose(model.layer_inputs(images, layer), seen[layer - 2], atol=1e-6)
        weight, bias = model.layer_param_names(layer)
        assert params[weight].shape[1] == seen[layer - 2].shape[1] and params[bias].shape[0] == params[weight].shape[0]
    model.check_attackable(2)
    for bad in (1, 4):
        with pytest.raises(ConfigError, match="not a linear layer followed by ReLU"):
            model.check_attackable(bad)


def test_train_and_eval_mode_updates_differ_and_are_deterministic() -> None:
    model = build_model("resnet", (3, 32, 32), 10, width=32, depth=3, seed=0)
    batch = _batch()
    train = ThreatModel(bn_mode="train")
    eval_a, eval_b = fedsgd_update(model, batch), fedsgd_update(model, batch)
    train_a, train_b = fedsgd_update(model, batch, train), fedsgd_update(model, batch, train)
    name = "head.0.weight"
    assert torch.equal(eval_a.gradients[name], eval_b.gradients[name])
    assert torch.equal(train_a.gradients[name], train_b.gradients[name])
    assert not torch.allclose(eval_a.gradients[name], train_a.gradients[name])
    assert eval_a.buffers is None and train_a.buffers is None  # statistics private by default
    shared = fedsgd_update(model, batch, ThreatModel(bn_mode="train", bn_stats_shared=True))
    assert shared.buffers is not None
    before = dict(model.named_buffers())["trunk.1.running_mean"]
    assert not torch.allclose(shared.buffers["trunk.1.running_mean"], before)  # the step moved them
    assert torch.equal(dict(shared.model.named_buffers())["trunk.1.running_mean"], before)  # the sent model's
    assert torch.equal(dict(model.named_buffers())["trunk.1.running_mean"], before)  # the client's model untouched


def test_bn_settings_are_checked_and_leave_old_ids_alone() -> None:
    with pytest.raises(ConfigError, match="bn_mode"):
        ThreatModel(bn_mode="batch")
    with pytest.raises(ConfigError, match="bn_stats_shared needs bn_mode 'train'"):
        CellSpec(attack="ig", dataset="embedded", batch_size=1, bn_stats_shared=True)
    plain = CellSpec(attack="ig", dataset="embedded", batch_size=1)
    assert cell_id(plain) == cell_id(CellSpec(attack="ig", dataset="embedded", batch_size=1, bn_mode="eval"))
    assert cell_id(plain) != cell_id(CellSpec(attack="ig", dataset="embedded", batch_size=1, bn_mode="train"))


def test_precode_forward_is_deterministic_per_seed_and_its_kl_enters_the_loss() -> None:
    images = _batch().images

    def victim(seed: int, beta: float = 1e-3) -> PrecodeVictim:
        return add_precode(build_model("fc", (3, 32, 32), 10, width=32, depth=3, seed=0), 16, beta, seed)

    a, b, c = victim(0), victim(0), victim(1)
    first = a(images)
    assert torch.equal(first, b(images)) and not torch.allclose(first, c(images))
    assert not torch.allclose(first, a(images))  # each forward draws fresh noise
    assert torch.equal(pickle.loads(pickle.dumps(a))(images), a(images))  # the noise state travels with it
    batch = _batch()
    with_kl, without = fedsgd_update(victim(0, beta=1.0), batch), fedsgd_update(victim(0, beta=0.0), batch)
    encoder = "base.body.4.vb.encoder.weight"
    assert encoder in with_kl.gradients and not torch.allclose(with_kl.gradients[encoder], without.gradients[encoder])
    model = victim(0, beta=1.0)
    logits = model(images)
    assert model.penalty() is not None
    with torch.no_grad():
        assert float(training_loss(model, logits, batch.labels)) > float(nn.functional.cross_entropy(logits,
                                                                                                     batch.labels))


def test_precode_layers_and_public_noise() -> None:
    base_depth = 4
    model = add_precode(build_model("fc", (3, 32, 32), 10, width=32, depth=base_depth, seed=0), 8, 1e-3, 0)
    params = dict(model.named_parameters())
    assert params[model.layer_param_names(model.depth)[0]].shape == (10, 32)  # the classifier stays the last layer
    assert params[model.layer_param_names(base_depth)[0]].shape == (16, 32)  # the encoder follows layer d − 1
    model.check_attackable(base_depth - 1)
    with pytest.raises(ConfigError, match="bottleneck"):
        model.check_attackable(base_depth)
    batch = _batch()
    update = fedsgd_update(model, batch)
    public = Precode(PrecodeConfig(bottleneck=8)).apply(update, Client(model, batch, 0, ThreatModel())).model
    assert isinstance(public, PrecodeVictim) and public.bottleneck.noise_seed != model.bottleneck.noise_seed


@pytest.mark.slow  # loads the embedded dataset twice
def test_precode_is_a_defence_level_that_changes_the_victim() -> None:
    from leakbench.harness.victim import prepare, victim_key

    spec = CellSpec(attack="spear", dataset="embedded", batch_size=2, width=32, depth=3,
                    defences=(DefenceSetting("precode", PrecodeConfig(bottleneck=8)),))
    _, model, update = prepare(spec)
    assert isinstance(model, PrecodeVictim) and update.kind == "fedsgd+precode"
    _, _, repeat = prepare(spec)
    assert all(torch.equal(update.gradients[n], repeat.gradients[n]) for n in update.gradients)  # same seed
    from leakbench.datasets import load_dataset

    data = load_dataset("embedded")
    trained = CellSpec(attack="spear", dataset="embedded", batch_size=2, train_epochs=1)
    assert "victim_defences" not in victim_key(trained, data)
    assert victim_key(CellSpec(**{**trained.__dict__, "defences": spec.defences}), data)["victim_defences"] == [
        {"name": "precode", "beta": 0.001, "bottleneck": 8}]


def _mlp(input_shape: tuple[int, int, int], num_classes: int, width: int, depth: int) -> nn.Module:
    n = input_shape[0] * input_shape[1] * input_shape[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(n, width), nn.ReLU(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, num_classes))


def test_an_outside_victim_behind_the_adapter() -> None:
    factory = VictimFactory(build=_mlp, linear_layers=("1", "3", "5"), relu_after=("1",), sized=True)
    model = factory((3, 8, 8), 4, width=16, depth=0, seed=3)
    images = _batch(side=8).images
    seen = _linear_inputs(model, images)
    assert model.depth == 4 and torch.allclose(model.layer_inputs(images, 3), seen[1])
    assert torch.equal(model.layer_inputs(images, 2), model.normalize(images))  # the first linear layer's input
    assert dict(model.named_parameters())[model.layer_param_names(4)[0]].shape == (4, 16)
    model.check_attackable(2)
    with pytest.raises(ConfigError, match="attackable: 2"):
        model.check_attackable(3)  # followed by tanh
    assert torch.equal(factory((3, 8, 8), 4, width=16, depth=0, seed=3)(images), model(images))  # seeded init
    with pytest.raises(ConfigError, match=r"not an nn\.Linear"):
        VictimFactory(build=_mlp, linear_layers=("2",))((3, 8, 8), 4, width=16, depth=0)


VICTIM_MODULE = '''
from torch import nn
from leakbench.models import VictimFactory, register_victim


def build(input_shape, num_classes, width, depth):
    n = input_shape[0] * input_shape[1] * input_shape[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(n, width), nn.ReLU(), nn.Linear(width, num_classes))


register_victim("tiny-mlp-i24", VictimFactory(build=build, linear_layers=("1", "3"), relu_after=("1",), sized=True))
'''


def test_a_suite_loads_victim_plugins_and_checks_their_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from leakbench.harness.suite import load_suite

    (tmp_path / "tiny_victims_i24.py").write_text(VICTIM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = tmp_path / "s.toml"
    base = ('name = "s"\nvictim_plugins = ["tiny_victims_i24"]\ndataset = "embedded"\narch = "tiny-mlp-i24"\n'
            'width = 16\nbatch_sizes = [2]\n')
    suite.write_text(base + 'attacks = ["spear", "ig"]\n')
    cells = load_suite(suite).cells
    assert [(c.attack, c.arch, c.layer) for c in cells] == [("spear", "tiny-mlp-i24", 2), ("ig", "tiny-mlp-i24", 1)]
    assert victim_label("tiny-mlp-i24", 3, 16) == "tiny-mlp-i24-3 w16"
    suite.write_text(base + 'attacks = ["spear"]\nlayers = [3]\n')
    with pytest.raises(ConfigError, match="layer 3 is not attackable in tiny-mlp-i24"):
        load_suite(suite)
    suite.write_text(base.replace('arch = "tiny-mlp-i24"', 'arch = "no-such-victim"') + 'attacks = ["ig"]\n')
    with pytest.raises(ConfigError, match=r"must be one of .*resnet.*tiny-mlp-i24"):
        load_suite(suite)


def test_the_truth_is_what_the_client_computed() -> None:
    """Scoring and inversion see the layer inputs in the client's BatchNorm mode, on a copy."""
    from leakbench.fl.update import client_view

    model = build_model("resnet", (3, 32, 32), 10, width=32, depth=3, seed=0).eval()
    images = _batch().images
    before = dict(model.named_buffers())["trunk.1.running_var"].clone()
    train = client_view(model, ThreatModel(bn_mode="train")).layer_inputs(images, 2)
    evald = client_view(model, ThreatModel()).layer_inputs(images, 2)
    assert torch.allclose(evald, model.layer_inputs(images, 2)) and not torch.allclose(train, evald)
    assert torch.equal(dict(model.named_buffers())["trunk.1.running_var"], before) and not model.training


def test_a_cached_precode_victim_draws_the_noise_a_fresh_one_would() -> None:
    """The forward count is part of the state dict: loading trained weights restores the noise stream."""
    images = _batch().images
    trained = add_precode(build_model("fc", (3, 32, 32), 10, width=32, depth=3, seed=0), 16, 1e-3, 0)
    for _ in range(3):
        trained(images)
    loaded = add_precode(build_model("fc", (3, 32, 32), 10, width=32, depth=3, seed=0), 16, 1e-3, 0)
    loaded.load_state_dict(trained.state_dict())
    assert torch.equal(loaded(images), trained(images))
