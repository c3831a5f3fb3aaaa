"""DP-SGD client updates: Opacus's ε, clipping and noise semantics, seeded noise."""

from __future__ import annotations

import math

import pytest
import torch

from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.fl import DPConfig, dp_update, fedsgd_update
from leakbench.fl.dp import clip_and_noise, per_sample_gradients
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare


@pytest.fixture(scope="module")
def victim():
    batch, model, update = prepare(CellSpec(attack="spear", dataset="embedded", batch_size=4, width=32, depth=3))
    return batch, model, update


def test_epsilon_matches_opacus_documented_value() -> None:
    # Opacus documents ε ≈ 7.33 for σ = 1.5, q = 0.04, 2250 steps (MNIST tutorial), δ = 1e-5.
    assert DPConfig(sigma=1.5, clip=1.0, delta=1e-5, q=0.04, steps=2250).epsilon() == pytest.approx(7.329, abs=1e-3)


def test_no_noise_is_infinite_epsilon() -> None:
    assert DPConfig(sigma=0.0, clip=1.0).epsilon() == math.inf


@pytest.mark.parametrize("kwargs,key", [({"sigma": -1.0, "clip": 1.0}, "sigma"), ({"sigma": 1.0, "clip": 0.0}, "clip"),
                                        ({"sigma": 1.0, "clip": 1.0, "delta": 1.0}, "delta"),
                                        ({"sigma": 1.0, "clip": 1.0, "q": 0.0}, "q"),
                                        ({"sigma": 1.0, "clip": 1.0, "steps": 0}, "steps")])
def test_bad_dp_settings_name_the_field(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        DPConfig(**kwargs)


def test_per_sample_gradients_sum_to_the_batch_gradient(victim) -> None:
    batch, model, update = victim
    per_sample = per_sample_gradients(model, batch)
    for name, g in update.gradients.items():
        assert per_sample[name].shape == (4, *g.shape)
        torch.testing.assert_close(per_sample[name].mean(0), g, atol=1e-6, rtol=1e-4)


def test_no_clipping_no_noise_equals_fedsgd(victim) -> None:
    batch, model, update = victim
    dp = dp_update(model, batch, DPConfig(sigma=0.0, clip=1e9), seed=0)
    assert dp.kind == "dp-sgd" and update.kind == "fedsgd"
    for name, g in update.gradients.items():
        torch.testing.assert_close(dp.gradients[name], g, atol=1e-6, rtol=1e-4)


def test_clipping_bounds_every_sample_norm() -> None:
    per_sample = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]]), "b": torch.zeros(2, 1)}  # norms 5 and 0.5
    out = clip_and_noise(per_sample, DPConfig(sigma=0.0, clip=1.0), seed=0)
    expected = (torch.tensor([0.6, 0.8]) * (1.0 / (1.0 + 1e-6 / 5)) + torch.tensor([0.3, 0.4])) / 2
    torch.testing.assert_close(out["w"], expected)


def test_noise_std_is_sigma_times_clip_over_b() -> None:
    per_sample = {"w": torch.zeros(4, 200_000, dtype=torch.float64)}
    out = clip_and_noise(per_sample, DPConfig(sigma=2.0, clip=0.5), seed=3)
    assert out["w"].std().item() == pytest.approx(2.0 * 0.5 / 4, rel=0.01)


def test_noise_is_seeded(victim) -> None:
    batch, model, _ = victim
    dp = DPConfig(sigma=1e-2, clip=1.0)
    a, b, c = (dp_update(model, batch, dp, seed=s) for s in (7, 7, 8))
    assert all(torch.equal(a.gradients[k], b.gradients[k]) for k in a.gradients)
    assert not torch.equal(a.gradients["body.0.weight"], c.gradients["body.0.weight"])


def test_fedsgd_unchanged_without_dp(victim) -> None:
    batch, model, update = victim
    again = fedsgd_update(model, batch)
    assert all(torch.equal(again.gradients[k], update.gradients[k]) for k in update.gradients)


@pytest.mark.slow
@pytest.mark.parametrize("attack,params", [("spear", {"max_draws": 20_000}), ("cpa", {}), ("ig", {"iterations": 3}),
                                           ("dlg", {"iterations": 2})])
def test_attacks_do_not_crash_under_noise(attack: str, params: dict) -> None:
    spec = CellSpec(attack=attack, dataset="embedded", batch_size=2, width=32, depth=3, hyperparameters=params,
                    dp=DPConfig(sigma=1e-2, clip=1.0))
    result = run_cell(spec)
    assert result.summary["status"] in ("ok", "failed")
    assert result.summary["status"] == "ok" or result.summary["reason"]
    if attack != "spear":  # optimisation and ICA always return an answer; SPEAR may fail, with a reason
        assert result.summary["status"] == "ok", result.summary["reason"]
    records = result.records
    assert (records["dp_sigma"] == 1e-2).all() and (records["dp_clip"] == 1.0).all()
    assert records["dp_accountant"].iloc[0] == "opacus-rdp" and records["dp_epsilon"].iloc[0] > 0
    assert {"dp_delta", "dp_q", "dp_steps"} <= set(records.columns)
