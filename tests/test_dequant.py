"""The dequantising gradient matching (`ig-dequant`, `dlg-dequant`, `leakbench.attacks.dequant`): the box of gradients
a known quantiser's levels allow holds the true gradient, the loss is zero there and positive elsewhere, the box comes
from the threat model's listing, and the attack answers from the update alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.dequant import (
    bucket_steps,
    qsgd_bounds,
    qsgd_steps,
    quantised_bounds,
    quantised_weights,
    uniform_bounds,
)
from leakbench.attacks.gradient_matching import GradientOracle, cosine_distance, l2_distance
from leakbench.datasets import Batch
from leakbench.fl.qsgd import QSGD, QSGDConfig, qsgd
from leakbench.fl.quantise import QuantiseConfig, UniformQuantise, stochastic_round
from leakbench.fl.transform import Client, FedSGD, UpdateTransform, client_update
from leakbench.fl.update import ClientUpdate, ThreatModel
from leakbench.models import build_model

QUANTISERS = [QSGD(QSGDConfig(levels=4, bucket=16)), QSGD(QSGDConfig(levels=256, bucket=0, norm="max")),
              UniformQuantise(QuantiseConfig(bits=4)), UniformQuantise(QuantiseConfig(mode="sign"))]


def _batch(b: int = 2) -> Batch:
    images = torch.rand(b, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    return Batch(images=images, labels=torch.arange(b) % 10, indices=tuple(range(b)), dataset="random",
                 num_classes=10)


def _update(quantiser: UpdateTransform, known: bool, batch: Batch | None = None) -> ClientUpdate:
    """A FedSGD update of an FC-3 w32 victim on random 8×8 images, quantised by `quantiser`."""
    model = build_model("fc", (3, 8, 8), 10, width=32, depth=3, seed=0)
    client = Client(model, batch or _batch(), 0, ThreatModel(defence_known=known))
    return client_update([FedSGD(FedSGD.Config()), quantiser], client)


def _sparse(n: int, seed: int = 0) -> torch.Tensor:
    """A gradient-like tensor: half its entries exactly zero (off ReLUs)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen) * (torch.rand(n, generator=gen) < 0.5)


@pytest.mark.parametrize("levels,bucket,norm", [(256, 512, "l2"), (16, 512, "l2"), (4, 128, "l2"), (1, 0, "l2"),
                                                (2, 7, "l2"), (16, 512, "max")])
def test_the_qsgd_box_holds_the_true_gradient(levels: int, bucket: int, norm: str) -> None:
    g = _sparse(3000)
    q = qsgd(g, levels, bucket, torch.Generator().manual_seed(1), norm)
    low, high = qsgd_bounds(q, levels, bucket, norm)
    assert bool(((low <= g) & (g <= high)).all())
    assert bool((low[q > 0] >= 0).all()) and bool((high[q < 0] <= 0).all())  # QSGD keeps signs
    width = (high - low)[q != 0]  # (an all-zero bucket may say nothing: module doc)
    assert bool(torch.isfinite(width).all()) and bool((width > 0).all())


@pytest.mark.parametrize("bits,mode", [(8, "stochastic"), (4, "stochastic"), (1, "stochastic"), (8, "sign")])
def test_the_uniform_box_holds_the_true_gradient(bits: int, mode: str) -> None:
    g = _sparse(3000)
    q = torch.sign(g) if mode == "sign" else stochastic_round(g, bits, torch.Generator().manual_seed(1))
    low, high = uniform_bounds(q, bits, mode)
    assert bool(((low <= g) & (g <= high)).all())


def test_the_qsgd_step_read_from_the_levels_is_the_bucket_norm_over_s_or_a_multiple() -> None:
    g, levels, bucket = _sparse(512 * 40) * 1e-3, 16, 512
    q = qsgd(g, levels, bucket, torch.Generator().manual_seed(1))
    true = g.reshape(-1, bucket).norm(dim=1, keepdim=True).double() / levels
    ratio = bucket_steps(q.reshape(-1, bucket).abs().double(), levels) / true
    assert bool(((ratio - ratio.round()).abs() < 1e-4).all()) and bool((ratio >= 1 - 1e-4).all())  # never tighter
    assert float((ratio - 1).abs().lt(1e-4).double().mean()) > 0.9


@pytest.mark.parametrize("quantiser", QUANTISERS, ids=lambda t: t.label())
@pytest.mark.parametrize("distance", [cosine_distance, l2_distance], ids=["cosine", "l2"])
def test_the_interval_loss_is_zero_at_the_true_batch_and_positive_elsewhere(quantiser: UpdateTransform,
                                                                            distance: object) -> None:
    batch = _batch()
    update = _update(quantiser, known=True, batch=batch)
    oracle = GradientOracle(update, None, quantised_bounds(update))
    truth = (batch.images.to(oracle.dtype) - oracle.mean) / oracle.std  # the test may use it; the attack never does
    at_truth = float(oracle.distance(truth, batch.labels, distance).detach())  # type: ignore[arg-type]
    assert at_truth == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(truth.shape, generator=torch.Generator().manual_seed(3), dtype=oracle.dtype)
    assert float(oracle.distance(other, batch.labels, distance).detach()) > 1e-4  # type: ignore[arg-type]
    plain = float(GradientOracle(update).distance(truth, batch.labels, distance).detach())  # type: ignore[arg-type]
    assert plain > 10 * max(at_truth, 1e-9)  # matched as exact, the shared levels miss the true batch


def test_the_box_is_read_from_the_threat_models_listing() -> None:
    update = _update(QSGD(QSGDConfig(levels=4, bucket=16)), known=True)
    assert update.defences is not None and set(quantised_bounds(update)) == set(update.gradients)
    assert quantised_bounds(_update(QSGD(QSGDConfig(levels=4, bucket=16)), known=False)) == {}
    listed = quantised_bounds(update)
    for setting, value in (("levels", 2), ("bucket", 32)):  # s² < d: a zero bucket says nothing; d groups the steps
        other = quantised_bounds(dataclasses.replace(update, defences=({**update.defences[0], setting: value},)))
        assert any(not torch.equal(other[n][side], listed[n][side]) for n in listed for side in (0, 1)), setting
    after = dataclasses.replace(update, defences=(*update.defences, {"name": "secagg", "clients": 2}))
    assert quantised_bounds(after) == {}  # summed after quantising: the levels no longer say where each entry lay


def _ratios(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each tensor's weight over its expected weight (one number per tensor: the weights are constant)."""
    assert all(bool((w == w.reshape(-1)[0]).all()) for w in weights.values())
    return torch.stack([weights[n].reshape(-1)[0] / expected[n] for n in sorted(weights)])


def test_the_whitened_fit_weighs_each_tensor_by_one_over_its_rms_step() -> None:
    levels, bucket = 4, 16
    update = _update(QSGD(QSGDConfig(levels=levels, bucket=bucket)), known=True)
    expected = {}
    for name, g in update.gradients.items():
        step = qsgd_steps(g, levels, bucket, "l2")
        expected[name] = 1 / step[(step > 0) & torch.isfinite(step)].pow(2).mean().sqrt()
    ratios = _ratios(quantised_weights(update), expected)
    assert torch.allclose(ratios, ratios[0].expand(ratios.shape))  # up to one common factor
    bits = _update(UniformQuantise(QuantiseConfig(bits=4)), known=True)  # one step per tensor: 2·max|q| / 15
    ratios = _ratios(quantised_weights(bits), {n: 15 / (2 * g.abs().max()) for n, g in bits.gradients.items()})
    assert torch.allclose(ratios, ratios[0].expand(ratios.shape))
    weighted = sum(float((w * bits.gradients[n]).pow(2).sum()) for n, w in quantised_weights(bits).items())
    assert weighted == pytest.approx(sum(float(g.pow(2).sum()) for g in bits.gradients.values()), rel=1e-5)
    sign = _update(UniformQuantise(QuantiseConfig(mode="sign")), known=True)
    assert all(torch.allclose(w, torch.ones(()).double()) for w in quantised_weights(sign).values())


@pytest.mark.parametrize("fit", ["box", "whitened"])
@pytest.mark.parametrize("name", ["ig-dequant", "dlg-dequant"])
def test_with_the_defence_unknown_the_dequant_variants_are_their_plain_forms(name: str, fit: str) -> None:
    quantiser = QSGD(QSGDConfig(levels=4, bucket=16))
    budget: dict[str, Any] = {"iterations": 5}
    adaptive = create_attack(name, fit=fit, **budget).reconstruct(_update(quantiser, known=False), seed=3)
    plain = create_attack(name.removesuffix("-dequant"), **budget).reconstruct(_update(quantiser, known=False), seed=3)
    assert adaptive.images is not None and plain.images is not None and torch.equal(adaptive.images, plain.images)
    known = create_attack(name, fit=fit, **budget).reconstruct(_update(quantiser, known=True), seed=3)
    assert known.images is not None and not torch.equal(known.images, plain.images)  # known: it does adapt


@pytest.mark.parametrize("name", ["ig-dequant", "dlg-dequant"])
def test_the_dequant_variants_answer_from_the_update_alone(name: str) -> None:
    batch = _batch()
    update = _update(QSGD(QSGDConfig(levels=4, bucket=16)), known=True, batch=batch)
    before = create_attack(name, iterations=5).reconstruct(update, seed=3)
    batch.images.fill_(float("nan"))  # the client's images gone: the attack must not have kept a way to them
    batch.labels.fill_(0)
    after = create_attack(name, iterations=5).reconstruct(update, seed=3)
    assert before.images is not None and after.images is not None and torch.equal(before.images, after.images)
    assert bool(torch.isfinite(after.images).all())
