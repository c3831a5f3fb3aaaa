"""SPEAR on deeper layers: features recovered exactly; the two-sided route and its batch span."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear.active import find_batch_span
from leakbench.cell.spec import CellSpec
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare


def _assert_features_exact(spec: CellSpec) -> dict:
    s = run_cell(spec).summary
    assert s["status"] == "ok", s["reason"]
    assert s["space"] == "feature" and s["exact_fraction"] == 1.0
    return s["attack_stats"]


@pytest.mark.slow
@pytest.mark.parametrize("layer", [2, 3, 4])
def test_spear_recovers_deeper_layer_features_embedded(layer: int) -> None:
    _assert_features_exact(CellSpec(attack="spear", dataset="embedded", batch_size=8, seed=0, layer=layer))


def _layer_problem(spec: CellSpec):
    batch, model, update = prepare(spec)
    weight, bias = model.layer_param_names(spec.layer)
    params = dict(model.named_parameters())
    problem = create_attack("spear", layer=spec.layer).layer_problem(update)
    with torch.no_grad():
        inputs = model.layer_inputs(batch.images, spec.layer).double()
        pre = inputs @ params[weight].detach().double()[problem.rows].T + params[bias].detach().double()[problem.rows]
    return problem, pre


@pytest.mark.slow
def test_batch_span_informative_neurons_are_those_not_always_active(tinyimagenet_root: Path) -> None:
    spec = CellSpec(attack="spear", dataset="tinyimagenet", batch_size=12, seed=0, layer=5,
                    data_root=str(tinyimagenet_root))
    problem, pre = _layer_problem(spec)
    span = find_batch_span(problem)
    assert span is not None
    always_active = (pre > 0).all(dim=0)
    informative = torch.zeros(problem.m, dtype=torch.bool)
    informative[span.informative] = True
    assert torch.equal(informative, ~always_active)
    # the samples themselves lie in the span W: (a, c, 1) with h = V a, x = Rᵀ c
    c = torch.linalg.lstsq(problem.A, (pre - problem.bias).T).solution.T
    a = pre.clamp_min(0) @ problem.V_next / span.scale
    v = torch.cat([a, c, torch.ones(c.shape[0], 1, dtype=c.dtype)], dim=1)
    assert ((v - (v @ span.W) @ span.W.T).norm(dim=1) / v.norm(dim=1)).max() < 1e-4


def test_batch_span_absent_at_first_layer() -> None:
    problem, _ = _layer_problem(CellSpec(attack="spear", dataset="embedded", batch_size=8, seed=0, layer=1))
    assert find_batch_span(problem) is None


@pytest.mark.slow
def test_spear_layer5_where_samples_have_fewer_than_b_minus_1_zeros(tinyimagenet_root: Path) -> None:
    spec = CellSpec(attack="spear", dataset="tinyimagenet", batch_size=16, seed=0, layer=5,
                    data_root=str(tinyimagenet_root))
    _, pre = _layer_problem(spec)
    live = (pre > 0).any(dim=0)
    assert int((pre[:, live] <= 0).sum(dim=1).min()) < spec.batch_size - 1  # plain SPEAR cannot isolate it
    stats = _assert_features_exact(spec)
    assert stats["two_sided_route"] and stats["two_sided_draws"] > 0
