"""Issue 44: the LT-code peeling paper's victim (`lt-mlp`), the float64 client (`fedsgd-f64`) and the peeling
attack (Shariati & Alambardar Meybodi 2026) — exact where degree-1 neurons exist, a typed failure where none do."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.core.errors import ConfigError
from leakbench.datasets.base import Batch
from leakbench.fl import Client, ThreatModel, client_update
from leakbench.fl.transform import transform_class
from leakbench.fl.update import fedsgd_update
from leakbench.metrics import score_images
from leakbench.models import build_model, default_depth, victim_label


def _batch(images: torch.Tensor, labels: list[int], classes: int) -> Batch:
    return Batch(images=images, labels=torch.tensor(labels), indices=tuple(range(len(labels))), dataset="synthetic",
                 num_classes=classes)


def test_lt_mlp_is_the_papers_victim() -> None:
    """Raw [0, 1] pixels, first layer N(0, 0.5²) with a zero bias (a parameter), Xavier-uniform classifier."""
    model = build_model("lt-mlp", (3, 32, 32), 10, width=1000, depth=default_depth("lt-mlp"), seed=3)
    first, classifier = model.linear_layers()
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(model.normalize(x), x.flatten(1))  # unnormalised inputs
    assert 0.49 < float(first.weight.detach().std()) < 0.51 and abs(float(first.weight.detach().mean())) < 0.01
    assert first.bias.requires_grad and not first.bias.any()  # zero-valued, still a parameter
    bound = math.sqrt(6 / (1000 + 10))
    largest = float(classifier.weight.detach().abs().max())
    assert 0.9 * bound < largest <= bound
    assert not classifier.bias.any()
    assert victim_label("lt-mlp", 2, 1000) == "LT-MLP-2 w1000"
    again = build_model("lt-mlp", (3, 32, 32), 10, width=1000, depth=2, seed=3)
    assert torch.equal(again.linear_layers()[0].weight, first.weight)  # drawn from the seed
    with pytest.raises(ConfigError, match="depth 2"):
        build_model("lt-mlp", (3, 32, 32), 10, width=100, depth=3, seed=0)


def test_fedsgd_f64_client_shares_float64_gradients() -> None:
    model = build_model("fc", (1, 4, 4), 3, width=8, depth=3, seed=0)
    batch = _batch(torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(0)), [0, 1, 2, 0], 3)
    client = Client(model, batch, 0, ThreatModel())
    update = client_update([transform_class("fedsgd-f64")(transform_class("fedsgd-f64").Config())], client)
    plain = fedsgd_update(model, batch)
    assert update.kind == "fedsgd-f64"
    assert all(g.dtype == torch.float64 for g in update.gradients.values())
    assert next(update.model.parameters()).dtype == torch.float32  # the model the server sent
    for name, g in plain.gradients.items():
        assert torch.allclose(update.gradients[name], g.double(), rtol=1e-4, atol=1e-6), name


def _two_neuron_cascade() -> tuple[torch.nn.Module, Batch]:
    """Two samples, two neurons: neuron 0 fires for sample 0 only (degree 1), neuron 1 for both (degree 2)."""
    model = build_model("lt-mlp", (1, 1, 2), 3, width=2, depth=2, seed=0)
    first = model.linear_layers()[0]
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[1.0, -1.0], [1.0, 1.0]]))
    images = torch.tensor([[1.0, 0.2], [0.2, 1.0]]).reshape(2, 1, 1, 2)
    return model, _batch(images, [0, 1], 3)


def test_peeling_cascades_from_a_degree_one_neuron_to_exact_batch() -> None:
    model, batch = _two_neuron_cascade()
    z = batch.images.flatten(1) @ model.linear_layers()[0].weight.T
    assert ((z > 0).sum(0) == torch.tensor([1, 2])).all()  # the premise: one singleton, one degree-2 neuron
    update = fedsgd_update(model, batch, dtype=torch.float64)
    recon = create_attack("peeling").reconstruct(update, seed=0)
    assert recon.status == "ok", recon.reason
    assert recon.images is not None and recon.images.shape[0] == 2
    assert score_images(recon.images, batch.images)["exact"].all()
    assert recon.stats["per_iteration"] == [1, 1]  # sample 1 only after sample 0 was peeled off
    assert sorted(recon.stats["labels"]) == [0, 1]


def test_peeling_is_exact_on_a_small_random_batch() -> None:
    images = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    model = build_model("lt-mlp", (1, 4, 4), 4, width=300, depth=2, seed=1)
    batch = _batch(images, [0, 1, 2, 3, 0, 1], 4)
    z = images.flatten(1) @ model.linear_layers()[0].weight.T
    assert ((z > 0).sum(0) == 1).any()  # degree-1 neurons exist
    recon = create_attack("peeling").reconstruct(fedsgd_update(model, batch, dtype=torch.float64), seed=0)
    assert recon.status == "ok", recon.reason
    assert recon.images is not None
    assert int(score_images(recon.images, batch.images)["exact"].sum()) == 6


def test_peeling_without_degree_one_neurons_is_not_applicable() -> None:
    """Every neuron fires for every sample: no singleton, so a typed failure, not an answer scored 0 %."""
    model, batch = _two_neuron_cascade()
    with torch.no_grad():
        model.linear_layers()[0].weight.abs_()
    recon = create_attack("peeling").reconstruct(fedsgd_update(model, batch, dtype=torch.float64), seed=0)
    assert recon.status == "failed" and recon.failure == "not-applicable"
    assert "degree-1" in recon.reason and recon.rows() == 0


def test_peeling_refuses_a_victim_without_an_fc_first_layer() -> None:
    model = build_model("conv", (3, 32, 32), 10, width=16, depth=3, seed=0)
    batch = _batch(torch.rand(2, 3, 32, 32), [0, 1], 10)
    with pytest.raises(ConfigError, match="not a linear layer followed by ReLU"):
        create_attack("peeling").reconstruct(fedsgd_update(model, batch), seed=0)


def _near_copy_batch() -> tuple[torch.nn.Module, Batch, int]:
    """Two samples, A (label 1) and B (label 0), on a 2-class lt-mlp whose logit difference is d·relu(z) + β:
    64 neurons fire for A only (degree 1: A exactly), 4 for B only, and neuron `shared` for both, with a small
    d there and B confidently of class 0, so B's coefficient on it is tiny (≈ 10⁻⁵ of A's): its ratio G/h is a
    near-copy of A, 10⁻⁵ away (past dedup_tol), whose residual on that one neuron is below cert_tol."""
    only_a, shared = 64, 64
    xa = torch.tensor([0.9, 0.8, 0.1, 0.2], dtype=torch.float64)
    xb = torch.tensor([0.1, 0.2, 0.9, 0.7], dtype=torch.float64)
    sign = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    noise = torch.randn(only_a, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w1 = torch.cat([sign * torch.linspace(0.5, 1.0, only_a, dtype=torch.float64)[:, None] + 0.05 * noise,
                    torch.full((1, 4), 0.5, dtype=torch.float64),
                    -sign * torch.tensor([0.5, 0.6, 0.7, 0.8], dtype=torch.float64)[:, None]])
    d = torch.cat([torch.full((only_a,), 0.004, dtype=torch.float64), torch.tensor([1e-3], dtype=torch.float64)])
    za, zb = w1 @ xa, w1 @ xb
    beta = -float(d @ za[:shared + 1])  # A's two logits equal: p = (½, ½)
    d_b = (-12.0 - beta - float(d[shared] * zb[shared])) / float(zb[shared + 1:].sum())  # B's logit gap −12
    model = build_model("lt-mlp", (1, 1, 4), 2, width=len(w1), depth=2, seed=0)
    first, last = model.linear_layers()
    with torch.no_grad():
        first.weight.copy_(w1)
        first.bias.zero_()
        last.weight.zero_()
        last.weight[1] = torch.cat([d, torch.full((4,), d_b, dtype=torch.float64)])
        last.bias.copy_(torch.tensor([0.0, beta]))
    return model, _batch(torch.stack([xa, xb]).reshape(2, 1, 1, 4).float(), [1, 0], 2), shared


def test_peeling_certifies_no_near_copy_of_a_sample() -> None:
    """The released code's certificate takes ε over every live row the candidate fires that fits, not over its
    own neuron alone: A's near-copy (from the shared neuron) fits A's 64 degree-1 rows only approximately, and
    those residuals add up past cert_tol, so each sample is certified once (main's certificate, on the
    candidate's own neuron, accepted the near-copy too and peeled A twice)."""
    from leakbench.attacks.peeling import PeelingConfig

    cfg = PeelingConfig()
    model, batch, shared = _near_copy_batch()
    update = fedsgd_update(model, batch, dtype=torch.float64)
    weight, bias = model.layer_param_names(1)
    G, h = update.gradients[weight], update.gradients[bias]
    near = G[shared] / h[shared]
    assert cfg.dedup_tol < float(torch.linalg.vector_norm(near - batch.images[0].flatten())) < 1e-3  # near-copy of A
    net = copy.deepcopy(model).double()
    loss = torch.nn.functional.cross_entropy(net(near.reshape(1, 1, 1, 4)), torch.tensor([1])) / 2
    alone = torch.autograd.grad(loss, net.linear_layers()[0].bias)[0][shared] - h[shared]
    assert float(alone.abs()) < cfg.cert_tol  # which its own neuron alone would certify (with A's label)
    recon = create_attack("peeling").reconstruct(update, seed=0)
    assert recon.status == "ok", recon.reason
    assert recon.images is not None and recon.images.shape[0] == 2, recon.stats  # A and B, each once
    assert score_images(recon.images, batch.images)["exact"].all()
    assert recon.stats["per_iteration"] == [2] and sorted(recon.stats["labels"]) == [0, 1]


def test_the_range_filter_is_the_papers_and_can_be_dropped_as_the_released_code() -> None:
    """A candidate outside the data range is dropped before certification with `range_filter` (the paper's §VII) and
    kept without it (the released code); candidates inside are kept either way, in neuron order."""
    from leakbench.attacks.peeling import PeelingConfig, Residual, candidates

    model = build_model("lt-mlp", (1, 2, 2), 2, width=3, depth=2, seed=0)
    G = torch.tensor([[0.5, 0.5, 0.5, 0.5], [5.0, 0.0, 0.0, 0.0], [0.2, 0.4, 0.6, 0.8]], dtype=torch.float64)
    res = Residual(G=G, h=torch.ones(3, dtype=torch.float64), net=None, weight=G, bias=torch.zeros(3), B=1)
    kept, _ = candidates(res, model, PeelingConfig())
    assert kept.tolist() == [0, 2]
    kept, ratios = candidates(res, model, PeelingConfig(range_filter=False))
    assert kept.tolist() == [0, 1, 2] and float(ratios[1, 0]) == 5.0
