"""Row-norm weighted zero draws (scheduler.ZeroDraws.weights): small gradient rows are more often inactive."""

from __future__ import annotations

import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear.deflation import null_basis
from leakbench.attacks.spear.scheduler import ZeroDraws
from leakbench.cell.spec import CellSpec
from leakbench.harness.victim import prepare


def _problem_and_zeros(layer: int, b: int = 8):
    spec = CellSpec(attack="spear", dataset="embedded", batch_size=b, seed=0, layer=layer)
    batch, model, update = prepare(spec)
    problem = create_attack("spear", layer=layer).layer_problem(update)
    with torch.no_grad():
        C = model.layer_inputs(batch.images, layer).double() @ problem.R.T
    return problem, (C @ problem.A.T + problem.bias) <= 0


def test_row_weights_alternate_with_uniform_and_favour_small_rows() -> None:
    problem, _ = _problem_and_zeros(2)
    N = null_basis(problem.L[:0], problem.b)
    live = torch.ones(problem.m, dtype=torch.bool)
    zeros = ZeroDraws(power=2.0)
    w = zeros.weights(problem, N, live)
    assert w is not None and w.shape == (problem.m,)
    norms = problem.L.norm(dim=1)
    assert torch.equal(torch.argsort(w), torch.argsort(norms, descending=True))
    assert zeros.weights(problem, N, live) is None  # the next chunk is uniform
    assert ZeroDraws(power=0.0).weights(problem, N, live) is None


def test_weighted_draws_land_in_one_samples_zero_set_more_often() -> None:
    problem, zero = _problem_and_zeros(2)
    b, m = problem.b, problem.m
    w = problem.L.norm(dim=1).pow(-2.0)
    gen = torch.Generator().manual_seed(0)
    hits = []
    for weights in (None, w):
        keys = torch.rand(20000, m, generator=gen, dtype=torch.float64)
        if weights is not None:
            keys = keys.log().neg().log().neg() + weights.log()
        idx = keys.topk(b - 1, dim=1).indices
        hits.append(int(zero[:, idx].all(dim=-1).any(dim=0).sum()))
    assert hits[1] >= 2 * max(hits[0], 1)
