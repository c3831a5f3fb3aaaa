"""Attacks see the client's update only: no copy of the images in it, and no path back to them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from leakbench.attacks import ATTACKS, Reconstruction, attack_class, create_attack
from leakbench.datasets import Batch, load_dataset, sample_batch
from leakbench.fl import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.models import FCNet, build_fc

B, WIDTH, DEPTH, SEED = 4, 64, 3, 0

# Caps applied to an attack's Config when it has such a field, so every attack runs a small case.
# No time budgets: a run cut short by the clock would not be reproducible.
SMALL_BUDGET = {"iterations": 10, "inner_iterations": 5, "max_iterations": 10, "steps": 10, "max_steps": 10,
                "restarts": 1, "trials": 1, "max_iter": 100, "max_draws": 2_000_000}
"""Small budgets for every attack; a draw budget (not seconds: the four calls must agree) bounds a SPEAR
search that stalls to seconds (spear-paper once spent its 900 s default four times here)."""


def _case(*, labels_known: bool = False, seed: int = SEED) -> tuple[Batch, FCNet, ClientUpdate]:
    ds = load_dataset("embedded")
    batch = sample_batch(ds, B, seed=seed)
    model = build_fc(ds.image_shape, ds.num_classes, width=WIDTH, depth=DEPTH, seed=seed)
    return batch, model, fedsgd_update(model, batch, ThreatModel(labels_known=labels_known))


def _tensors(obj: Any, path: str, seen: set[int] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor reachable from `obj` through dataclass fields, containers and module attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, nn.Module):
        for name, t in obj.state_dict(keep_vars=True).items():
            yield from _tensors(t, f"{path}.{name}", seen)
        for mod_name, module in obj.named_modules():
            for key, value in vars(module).items():
                if key in ("_parameters", "_buffers", "_modules"):
                    continue
                if isinstance(value, (torch.Tensor, dict, list, tuple)):
                    yield from _tensors(value, f"{path}.{mod_name or '<root>'}.{key}", seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _tensors(getattr(obj, f.name), f"{path}.{f.name}", seen)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{path}[{key!r}]", seen)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _tensors(value, f"{path}[{i}]", seen)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().to("cpu", torch.float64).flatten(), b.detach().to("cpu", torch.float64).flatten()
    return a.numel() == b.numel() and bool(torch.allclose(a, b, rtol=1e-5, atol=1e-7))


# --------------------------------------------------------------------------- the update itself


def test_update_holds_no_image() -> None:
    batch, model, update = _case()
    raw = batch.images.detach().to(torch.float64)
    normalized = model.normalize(batch.images).detach().to(torch.float64)
    found = list(_tensors(update, "update"))
    names = [name for name, _ in found]
    assert any(".gradients[" in n for n in names) and any(".model." in n for n in names)
    image_storage = batch.images.untyped_storage().data_ptr()
    for name, t in found:
        assert t.untyped_storage().data_ptr() != image_storage, f"{name} shares memory with the images"
        assert tuple(t.shape) != tuple(batch.images.shape), f"{name} has the batch's image shape"
        for whole in (raw, normalized):
            assert not _same(t, whole), f"{name} equals the batch"
        for i in range(B):
            for image in (raw[i], normalized[i]):
                assert not _same(t, image), f"{name} equals image {i}"
                if t.dim() == 2 and t.shape[1] == image.numel():
                    rows = t.detach().to(torch.float64)
                    hit = torch.isclose(rows, image.flatten()[None], rtol=1e-5, atol=1e-7).all(dim=1)
                    assert not bool(hit.any()), f"a row of {name} equals image {i}"


def test_update_fields_follow_threat_model() -> None:
    batch, model, update = _case()
    assert update.labels is None
    assert update.batch_size == B
    assert update.kind == "fedsgd"
    assert set(update.gradients) == {n for n, _ in model.named_parameters()}
    assert not any(p.requires_grad for p in update.model.parameters())

    hidden = fedsgd_update(model, batch, ThreatModel(batch_size_known=False))
    assert hidden.batch_size is None and hidden.labels is None

    known = fedsgd_update(model, batch, ThreatModel(labels_known=True))
    assert torch.equal(known.labels, batch.labels)
    assert known.labels.untyped_storage().data_ptr() != batch.labels.untyped_storage().data_ptr()


def test_update_is_detached_from_client_model_and_batch() -> None:
    batch, model, update = _case(labels_known=True)
    grads = {k: v.clone() for k, v in update.gradients.items()}
    params = {k: v.clone() for k, v in update.model.state_dict().items()}
    labels = update.labels.clone()
    assert update.model is not model
    assert all(p.grad is None for p in model.parameters())  # the client's model is not touched
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    batch.images.zero_()
    batch.labels.zero_()
    assert all(torch.equal(update.gradients[k], grads[k]) for k in grads)
    assert all(torch.equal(update.model.state_dict()[k], params[k]) for k in params)
    assert torch.equal(update.labels, labels)


# --------------------------------------------------------------------------- every attack


def _assert_same_reconstruction(a: Reconstruction, b: Reconstruction, what: str) -> None:
    assert (a.status, a.space, a.layer, a.reason) == (b.status, b.space, b.layer, b.reason), what
    for field in ("images", "features"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), f"{field} {what}"
        if x is not None:
            assert torch.equal(x, y), f"{field} {what}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS.names())
def test_attack_output_ignores_ground_truth(name: str) -> None:
    cls = attack_class(name)
    fields = cls.Config.__dataclass_fields__
    attack = create_attack(name, **{k: v for k, v in SMALL_BUDGET.items() if k in fields})
    batch, _, update = _case(labels_known=cls.requires.labels)
    original = batch.images.clone()
    cached = load_dataset("embedded").images[list(batch.indices)].clone()
    grads = {k: v.clone() for k, v in update.gradients.items()}
    attack.check_update(update)

    first = attack.reconstruct(update, seed=7)
    assert all(torch.equal(update.gradients[k], grads[k]) for k in grads), "the attack modified the update"

    noise = torch.rand(batch.images.shape, generator=torch.Generator().manual_seed(123))
    for label, fill in (("noise", lambda t: t.copy_(noise)), ("zeros", torch.Tensor.zero_)):
        fill(batch.images)
        batch.labels.zero_()
        again = attack.reconstruct(update, seed=7)
        _assert_same_reconstruction(first, again, f"changed after the images were overwritten with {label}")

    fresh = create_attack(name, **{k: v for k, v in SMALL_BUDGET.items() if k in fields})
    _assert_same_reconstruction(first, fresh.reconstruct(update, seed=7), "differs for a fresh attack object")
    # sample_batch copies: the cached dataset still holds the true images
    assert torch.equal(load_dataset("embedded").images[list(batch.indices)], cached)
    assert torch.equal(cached, original)


@pytest.mark.slow
def test_spear_small_case_is_exact_and_independent_of_truth() -> None:
    batch, _, update = _case()
    truth = batch.images.clone()
    batch.images.copy_(torch.rand(batch.images.shape, generator=torch.Generator().manual_seed(1)))
    recon = create_attack("spear").reconstruct(update, seed=7)
    assert recon.status == "ok", recon.reason
    def key(imgs: torch.Tensor) -> list[tuple[int, ...]]:
        return sorted(tuple(r) for r in (imgs * 255).round().flatten(1).to(torch.int64).tolist())

    assert key(recon.images) == key(truth)
