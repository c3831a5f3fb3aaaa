"""Fishing for User Data (Wen et al., ICML 2022), class fishing, a malicious server's attack: the server's
modification of the last layer, and the image read from the first layer's rows, on a synthetic batch (no data
folder)."""

from __future__ import annotations

import inspect

import torch

from leakbench.attacks import attack_class, create_attack
from leakbench.attacks.fishing import Fishing
from leakbench.attacks.malicious import is_malicious, server_columns
from leakbench.datasets.base import Batch
from leakbench.fl.update import fedsgd_update
from leakbench.metrics.image import exact
from leakbench.models import build_model
from leakbench.models.base import ImageVictim
from leakbench.server.model import modified_victim

SHAPE = (3, 8, 8)


def _victim(seed: int = 0) -> ImageVictim:
    model = build_model("fc", SHAPE, 10, width=64, depth=3, seed=seed)
    assert isinstance(model, ImageVictim)
    return model


def _batch(labels: list[int], seed: int) -> Batch:
    """Random 8-bit images (k/255) of SHAPE with the given labels."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (len(labels), *SHAPE), generator=generator).float() / 255
    return Batch(images, torch.tensor(labels), tuple(range(len(labels))), "synthetic", 10)


def test_the_one_image_of_the_target_class_comes_back_exactly() -> None:
    """b = 4, one image of the target class among three of other classes (for each of several batches, targets and
    positions): that image is answer row 0, exact at 8 bits; every active row of layer 1 agrees on it (spread at
    rounding level), the last layer counts one image of the class, and the rest of the answer is blank padding."""
    model = _victim()
    for seed, target, labels in [(0, 0, [3, 0, 7, 9]), (1, 4, [4, 1, 1, 2]), (2, 9, [5, 6, 8, 9]),
                                 (3, 0, [0, 2, 2, 2])]:
        batch = _batch(labels, seed)
        attack = create_attack("fishing", target_class=target)
        update = fedsgd_update(modified_victim(model, attack.modify(model, seed=0)), batch)
        recon = attack.reconstruct(update, seed=0)
        assert recon.status == "ok", recon.reason
        assert recon.images is not None and recon.images.shape == (4, *SHAPE)
        n = labels.index(target)
        assert bool(exact(recon.images[:1], batch.images[n:n + 1])[0]), (seed, recon.stats)
        stats = recon.stats
        assert stats["kept"] == 1 and stats["padded"] == 3 and stats["support"] == [stats["active"]] > [1]
        assert abs(stats["target_count"] - 1) < 1e-3 and stats["spread"] < 1e-4 and not stats["mixture"]
        padding = recon.images[1:]
        assert torch.allclose(padding, torch.full_like(padding, model.mean))  # blank: the victim's mean image


def test_no_image_of_the_target_class_is_a_not_applicable_failure() -> None:
    """The rule: a batch without the target class leaves every gradient below the last layer exactly 0 (the other
    classes' softmax saturates, their rows are 0), so no row of layer 1 is active and the answer is a failed one,
    not applicable — never an image made up of the other classes."""
    model = _victim()
    attack = create_attack("fishing", target_class=0)
    update = fedsgd_update(modified_victim(model, attack.modify(model, seed=0)), _batch([1, 2, 3, 9], seed=4))
    weight, bias = update.model.layer_param_names(1)
    assert not update.gradients[weight].any() and not update.gradients[bias].any()
    recon = attack.reconstruct(update, seed=0)
    assert recon.status == "failed" and recon.failure == "not-applicable"
    assert recon.stats["active"] == 0 and recon.stats["target_count"] == 0 and recon.stats["kept"] == 0


def test_several_images_of_the_target_class_are_counted_as_a_mixture() -> None:
    """Two images of the target class in a batch of 4: the last layer counts 2 and the reads say a mixture; rows of
    layer 1 that one of the two alone drives give it exactly, so the answer holds at most two images, each that of
    a neuron's single image — on this batch both images of the class, exact at 8 bits (a seeded example)."""
    model = _victim()
    batch = _batch([0, 5, 0, 7], seed=5)
    attack = create_attack("fishing")
    recon = attack.reconstruct(fedsgd_update(modified_victim(model, attack.modify(model, seed=0)), batch), seed=0)
    assert recon.status == "ok" and recon.images is not None and recon.images.shape == (4, *SHAPE)
    stats = recon.stats
    assert abs(stats["target_count"] - 2) < 1e-3 and stats["mixture"] and not stats["median"]
    assert stats["kept"] == 2 and stats["padded"] == 2 and min(stats["support"]) >= 2
    for n in (0, 2):
        assert bool(exact(recon.images[:2], batch.images[n:n + 1].expand(2, *SHAPE)).any()), n


def test_modification_is_deterministic_and_keeps_the_architecture() -> None:
    """`modify` takes the public model and a seed, nothing else; its answer depends on the model and the Config
    alone (the same for every seed; the global generator untouched, the model unchanged); no imprint block
    (block 0): only the last layer is new — 0 but the target row (class_multiplier), biases bias_multiplier but the
    target's — every other parameter the public model's, names and shapes the victim's."""
    assert list(inspect.signature(Fishing.modify).parameters) == ["self", "model", "seed"]
    assert is_malicious(attack_class("fishing")) and server_columns("fishing") == {"server": "malicious"}
    model = _victim()
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    attack = create_attack("fishing", target_class=3)
    global_state = torch.get_rng_state()
    first, again, other = (attack.modify(model, seed=s) for s in (5, 5, 6))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())
    assert first.block == again.block == other.block == 0
    assert first.values.keys() == again.values.keys() == other.values.keys()
    assert all(torch.equal(first.values[k], again.values[k]) and torch.equal(first.values[k], other.values[k])
               for k in first.values)
    assert not all(torch.equal(first.values[k], v)
                   for k, v in create_attack("fishing", target_class=4).modify(model, seed=5).values.items())

    weight_name, bias_name = (f"base.{n}" for n in model.layer_param_names(model.depth))
    assert set(first.values) == {weight_name, bias_name}
    victim = modified_victim(model, first)
    assert victim.bins == 0 and isinstance(victim.block, torch.nn.Identity)
    public = {f"base.{name}": p for name, p in model.named_parameters()}
    sent = dict(victim.named_parameters())
    assert {n: tuple(p.shape) for n, p in sent.items()} == {n: tuple(p.shape) for n, p in public.items()}
    assert all(torch.equal(sent[n], public[n]) for n in public if n not in (weight_name, bias_name))
    weight, bias = sent[weight_name], sent[bias_name]
    others = [i for i in range(10) if i != 3]
    assert torch.equal(weight[3], torch.full_like(weight[3], 0.5)) and not weight[others].any()
    assert bias[3] == public[bias_name][3] and bool((bias[others] == 1000).all())
