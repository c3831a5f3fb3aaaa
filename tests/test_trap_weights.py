"""Trap weights (Boenisch et al., EuroS&P 2023), a malicious server's attack: the server's modification of the first
layer, and the extraction of the images that a neuron isolated, on a synthetic batch (no data folder)."""

from __future__ import annotations

import inspect

import pytest
import torch

from leakbench.attacks import attack_class, create_attack
from leakbench.attacks.malicious import is_malicious, server_columns
from leakbench.attacks.trap import TrapWeights
from leakbench.datasets.base import Batch
from leakbench.fl.update import fedsgd_update
from leakbench.metrics.image import exact
from leakbench.models import build_fc
from leakbench.models.fc import FCNet
from leakbench.server.model import ModifiedVictim, modified_victim

SHAPE = (3, 8, 8)


def _batch(b: int, seed: int) -> Batch:
    """b random images of SHAPE, 8-bit (k/255), random labels of 10 classes."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (b, *SHAPE), generator=generator).float() / 255
    labels = torch.randint(0, 10, (b,), generator=generator)
    return Batch(images=images, labels=labels, indices=tuple(range(b)), dataset="synthetic", num_classes=10)


def _victim(width: int, seed: int = 0) -> FCNet:
    return build_fc(SHAPE, 10, width=width, depth=6, seed=seed)


def _first_layer(model: FCNet | ModifiedVictim) -> tuple[str, str]:
    weight, bias = model.layer_param_names(1)
    return (weight, bias) if isinstance(model, ModifiedVictim) else (f"base.{weight}", f"base.{bias}")


def test_single_image_neurons_give_their_image_exactly() -> None:
    """b = 4 on FC-6 w200: at least one image comes back 8-bit exact, and every answer row read from a neuron that
    fired for exactly one image of the batch (the ground truth of the client's forward pass) is that image."""
    b, model = 4, _victim(200)
    batch = _batch(b, seed=1)
    attack = create_attack("trap-weights")
    victim = modified_victim(model, attack.modify(model, seed=0))
    update = fedsgd_update(victim, batch)
    assert update.model.layer_param_names(1)[0] in update.gradients
    recon = attack.reconstruct(update, seed=0)
    assert recon.status == "ok", recon.reason
    assert recon.images is not None and recon.images.shape == (b, *SHAPE)
    hits = torch.stack([exact(recon.images, batch.images[j].expand(b, *SHAPE)) for j in range(b)], dim=1)
    assert hits.any(), f"no image recovered exactly ({recon.stats})"

    with torch.no_grad():  # which images each neuron fired for, as the client's forward pass computed it
        fired = victim.base.body[0](victim.base.normalize(batch.images)) > 0  # (b, width)
    stats = recon.stats
    assert stats["kept"] + stats["padded"] == b and len(stats["rows"]) == stats["kept"]
    checked = 0
    for row, neuron in enumerate(stats["rows"]):  # the rows before the padding, each with its neuron
        images = torch.nonzero(fired[:, neuron]).flatten()
        assert len(images) >= 1  # every answer row came from a neuron that fired
        if len(images) == 1:
            checked += 1
            n = int(images[0])
            assert bool(exact(recon.images[row:row + 1], batch.images[n:n + 1])[0]), (row, neuron, n)
    assert checked >= 1
    padding = recon.images[stats["kept"]:]
    assert torch.allclose(padding, torch.full_like(padding, model.mean))  # blank: the victim's mean image


def test_modification_reads_only_the_model_and_its_seed() -> None:
    """`modify` takes the public model and a seed, nothing else: the same seed gives the same values, another seed
    other values; it draws from its own generator (the global one is untouched) and leaves the model as it was."""
    assert list(inspect.signature(TrapWeights.modify).parameters) == ["self", "model", "seed"]
    assert is_malicious(attack_class("trap-weights")) and server_columns("trap-weights") == {"server": "malicious"}
    model = _victim(200)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    attack = create_attack("trap-weights")
    global_state = torch.get_rng_state()
    first, again, other = (attack.modify(model, seed=s) for s in (5, 5, 6))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())
    assert first.values.keys() == again.values.keys() == other.values.keys()
    assert all(torch.equal(first.values[k], again.values[k]) for k in first.values)
    weight = _first_layer(model)[0]
    assert not torch.equal(first.values[weight], other.values[weight])


def test_trap_weights_replace_the_first_layer_and_keep_the_architecture() -> None:
    """No imprint block (block 0): the victim's own parameters, same names and shapes; only layer 1 is new, every
    other parameter the public model's. Each trap row: ⌊d/2⌋ negative and ⌊d/2⌋ positive entries, the positive side
    the scale factor (0.95) × the negative side's magnitude."""
    model = _victim(400)
    attack = create_attack("trap-weights")
    server = attack.modify(model, seed=0)
    weight_name, bias_name = _first_layer(model)
    assert server.block == 0 and set(server.values) == {weight_name, bias_name}
    victim = modified_victim(model, server)
    assert victim.bins == 0 and isinstance(victim.block, torch.nn.Identity)
    public = {f"base.{name}": p for name, p in model.named_parameters()}
    sent = dict(victim.named_parameters())
    assert {n: tuple(p.shape) for n, p in sent.items()} == {n: tuple(p.shape) for n, p in public.items()}
    assert not torch.equal(sent[weight_name], public[weight_name])
    assert all(torch.equal(sent[n], public[n]) for n in public if n not in (weight_name, bias_name))

    trap = sent[weight_name].detach().double() / model.std  # the rows on the pixels (normalisation folded in)
    half = trap.shape[1] // 2
    assert ((trap < 0).sum(dim=1) == half).all() and ((trap > 0).sum(dim=1) == half).all()
    positive, negative = trap.clamp(min=0).sum(dim=1), -trap.clamp(max=0).sum(dim=1)
    assert torch.allclose(positive, attack.config.scale_factor * negative, rtol=1e-5)
    assert torch.allclose(sent[bias_name].double(), trap.sum(dim=1) * model.mean, rtol=1e-5, atol=1e-6)


def test_no_candidate_is_a_not_applicable_failure() -> None:
    """An update in which no neuron of layer 1 fired (every bias gradient 0) gives no image: failed, not applicable."""
    model = _victim(200)
    attack = create_attack("trap-weights")
    update = fedsgd_update(modified_victim(model, attack.modify(model, seed=0)), _batch(4, seed=2))
    zeros = {name: torch.zeros_like(g) for name, g in update.gradients.items()}
    recon = attack.reconstruct(update.with_gradients(zeros, "zero"), seed=0)
    assert recon.status == "failed" and recon.failure == "not-applicable"
    assert recon.stats["fired"] == 0 and recon.stats["padded"] == 4


def test_a_client_checking_weight_magnitudes_refuses_trap_weights_and_not_their_adaptive_form() -> None:
    """`check-weights` (×10) refuses breaching's trap weights (σ = 0.5 folded with the victim's normalisation: far over
    the public layer's scale) and passes the honest model; `trap-weights-adaptive` scales its traps under the public
    model's largest weight and bias, and its answer still holds images the client's batch held, 8-bit exact."""
    from leakbench.fl.model_check import CheckWeights, CheckWeightsConfig, ClientRefused
    from leakbench.fl.transform import Client

    b, model = 4, _victim(200)
    batch = _batch(b, seed=1)
    check = CheckWeights(CheckWeightsConfig())
    honest = fedsgd_update(model, batch)
    assert check.apply(honest, Client(model, batch, 0, honest.threat)) is honest
    trapped = modified_victim(model, create_attack("trap-weights").modify(model, seed=0))
    update = fedsgd_update(trapped, batch)
    with pytest.raises(ClientRefused, match="over 10 × the agreed"):
        check.apply(update, Client(trapped, batch, 0, update.threat))

    adaptive = create_attack("trap-weights-adaptive")
    sent = adaptive.modify(model, seed=0)
    public = dict(model.named_parameters())
    for name, value in sent.values.items():
        assert float(value.abs().max()) <= float(public[name.removeprefix("base.")].detach().abs().max()) * (1 + 1e-6)
    scaled = modified_victim(model, sent)
    update = fedsgd_update(scaled, batch)
    assert check.apply(update, Client(scaled, batch, 0, update.threat)) is update
    recon = adaptive.reconstruct(update, seed=0)
    assert recon.status == "ok" and recon.images is not None
    hits = torch.stack([exact(recon.images, batch.images[j].expand(b, *SHAPE)) for j in range(b)], dim=1)
    assert hits.any(), f"no image recovered exactly ({recon.stats})"
