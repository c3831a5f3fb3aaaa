"""FedAvg clients: local epochs of mini-batch SGD shared as (θ₀ − θ_K) / (η K)."""

from __future__ import annotations

import pytest
import torch

from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.fl import FedAvgConfig, fedavg_update, fedsgd_update
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare


@pytest.fixture(scope="module")
def victim():
    batch, model, _ = prepare(CellSpec(attack="cpa", dataset="embedded", batch_size=4, width=32, depth=3))
    return batch, model


def _max_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)


def test_one_full_batch_step_is_the_fedsgd_gradient(victim) -> None:
    batch, model = victim
    update = fedavg_update(model, batch, FedAvgConfig(epochs=1, minibatch=0, lr=0.1), seed=0)
    assert update.kind == "fedavg"
    assert _max_rel_diff(update.gradients, fedsgd_update(model, batch).gradients) < 1e-4


def test_local_epochs_move_away_from_the_gradient_and_are_seeded(victim) -> None:
    batch, model = victim
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = FedAvgConfig(epochs=3, minibatch=1, lr=0.5)
    first, again = (fedavg_update(model, batch, config, seed=7) for _ in range(2))
    other = fedavg_update(model, batch, config, seed=8)
    assert all(torch.equal(first.gradients[k], again.gradients[k]) for k in first.gradients)
    assert any(not torch.equal(first.gradients[k], other.gradients[k]) for k in first.gradients)  # shuffle order
    assert _max_rel_diff(first.gradients, fedsgd_update(model, batch).gradients) > 1e-3
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # victim untouched
    assert config.steps(batch.size) == 12


@pytest.mark.parametrize("kwargs,key", [({"epochs": 0}, "epochs"), ({"minibatch": -1}, "minibatch"),
                                        ({"lr": 0.0}, "lr"), ({"epochs": 1.5}, "epochs")])
def test_bad_settings_name_the_field(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        FedAvgConfig(**kwargs)


def test_minibatch_larger_than_batch_is_bad_input(victim) -> None:
    batch, model = victim
    with pytest.raises(ConfigError, match="minibatch 5 is larger"):
        fedavg_update(model, batch, FedAvgConfig(minibatch=5), seed=0)


@pytest.mark.slow
def test_attack_runs_on_a_fedavg_update_and_records_the_client() -> None:
    spec = CellSpec(attack="cpa", dataset="embedded", batch_size=2, width=32, depth=3,
                    fedavg=FedAvgConfig(epochs=2, minibatch=1, lr=0.1))
    result = run_cell(spec)
    assert result.summary["status"] == "ok"
    row = result.records.iloc[0]
    client = (row["client"], row["fedavg_epochs"], row["fedavg_minibatch"], row["fedavg_lr"])
    assert client == ("E=2 mb=1 η=0.1", 2, 1, 0.1)


def test_dp_and_fedavg_together_is_bad_input() -> None:
    from leakbench.fl import DPConfig

    with pytest.raises(ConfigError, match="not both"):
        prepare(CellSpec(attack="cpa", dataset="embedded", batch_size=2, dp=DPConfig(sigma=0.1, clip=1.0),
                         fedavg=FedAvgConfig()))
