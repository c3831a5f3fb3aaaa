"""Utility with error bars and honest DP labels (issue 43): each cell seed may train its own victim
(`train = { seed = "cell" }`), the trained victim's own ε is recorded, DP levels name their ε with its q and T
(and are 'clipping + noise' past ε = 100), and a noise level's per-tensor SNR is measured on the cell's update."""

from __future__ import annotations

import json
import math
from importlib.resources import as_file

import pandas as pd
import pytest
import torch

from leakbench.cell.spec import CellSpec, cell_id
from leakbench.core.errors import ConfigError
from leakbench.datasets import load_dataset, partition
from leakbench.fl import DPConfig
from leakbench.fl.dp import epsilon
from leakbench.fl.transform import Client, FedSGD, client_update
from leakbench.harness.suite import SUITES, load_suite
from leakbench.harness.victim import victim, victim_columns, victim_key
from leakbench.models import victims as victims_module
from leakbench.models.training import TrainRecipe
from leakbench.models.victims import victim_hash
from leakbench.reporting.order import defence_levels

SMALL = dict(attack="spear", dataset="digits", batch_size=4, width=32, depth=3)
"""A victim that trains in well under a second (digits, FC-3 width 32)."""


@pytest.fixture(autouse=True)
def victim_cache(tmp_path, monkeypatch):
    """Every test gets its own, empty victim cache."""
    monkeypatch.setenv(victims_module.CACHE_ENV, str(tmp_path / "victims"))


def _suite(tmp_path, train: str, seeds: str = "[0, 1, 2]"):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\ndataset = "digits"\nattacks = ["spear"]\nbatch_sizes = [4]\nwidth = 32\n'
                    f'depth = 3\nseeds = {seeds}\ntrain_epochs = [1]\ntrain = {train}\n')
    return load_suite(path)


def _hashes(cells: list[CellSpec]) -> list[str]:
    data = load_dataset("digits")
    return [victim_hash(victim_key(c, data)) for c in cells]


def test_cell_seeded_training_gives_each_cell_seed_a_victim_of_its_own(tmp_path) -> None:
    cells = _suite(tmp_path, '{ batch_size = 32, seed = "cell" }').cells
    assert [(c.seed, c.recipe.seed) for c in cells] == [(0, 0), (1, 1), (2, 2)]  # type: ignore[union-attr]
    hashes = _hashes(cells)
    assert len(set(hashes)) == 3 and _hashes(cells) == hashes  # distinct victims; the same one for the same seed
    shared = _suite(tmp_path, "{ batch_size = 32 }").cells  # the default: one training seed (0) for every cell
    assert [c.recipe.seed for c in shared] == [0, 0, 0]  # type: ignore[union-attr]
    assert _hashes(shared)[0] == hashes[0] and _hashes(shared)[1:] != hashes[1:]  # the training seed is in the key
    _, one = victim(cells[1])
    _, other = victim(shared[1])  # same init seed 1, training seed 0: other weights
    assert one.victim_info.victim_hash == hashes[1]
    assert not all(torch.equal(v, other.state_dict()[k]) for k, v in one.state_dict().items())


def test_cell_seeded_training_keeps_the_ids_of_seed_zero(tmp_path) -> None:
    """Seed 0's cells are those of `seed = 0`: a suite moved to per-cell training seeds keeps its stored cells."""
    ids = [cell_id(c) for c in _suite(tmp_path, '{ seed = "cell" }', "[0]").cells]
    assert ids == [cell_id(c) for c in _suite(tmp_path, "{ seed = 0 }", "[0]").cells]
    with as_file(SUITES / "paper" / "defences.toml") as path:
        shipped = load_suite(path)
        (tmp_path / "d.toml").write_text(path.read_text().replace('seed = "cell"', "seed = 0"))
    assert all(c.recipe.seed == c.seed for c in shipped.cells if c.recipe)  # the paper suite trains per cell seed
    fixed = load_suite(tmp_path / "d.toml").cells  # seed 0's cells: the same ids whatever the seed rule
    assert [cell_id(c) for c in shipped.cells if c.seed == 0] == [cell_id(c) for c in fixed if c.seed == 0]
    assert {c.seed for c in shipped.cells} == {0, 1, 2}


def test_a_training_seed_that_is_not_a_number_or_cell_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match='"cell"'):
        _suite(tmp_path, '{ seed = "each" }')


def test_the_dp_trained_victim_records_its_own_epsilon() -> None:
    dp = DPConfig(sigma=1.0, clip=1.0)
    spec = CellSpec(train_epochs=2, recipe=TrainRecipe(batch_size=32), dp=dp, **SMALL)
    _, model = victim(spec)
    n = len(partition(load_dataset("digits")).train)
    expected = epsilon(1.0, 32 / n, 2 * math.ceil(n / 32), dp.delta)
    assert model.victim_info.train_epsilon == pytest.approx(expected, rel=1e-12)
    assert expected > dp.epsilon()  # more than the one step at q = 0.01 the cell's dp_epsilon accounts for
    assert victim_columns(model)["train_epsilon"] == model.victim_info.train_epsilon
    _, again = victim(spec)  # from the cache: the same ε
    assert not again.victim_info.trained_now and again.victim_info.train_epsilon == model.victim_info.train_epsilon
    _, plain = victim(CellSpec(train_epochs=2, recipe=TrainRecipe(batch_size=32), **SMALL))
    assert "train_epsilon" not in victim_columns(plain)  # only a DP-trained victim has the column
    _, at_init = victim(CellSpec(dp=dp, **SMALL))
    assert "train_epsilon" not in victim_columns(at_init)


def _dp_cells(sigmas: list[float]) -> pd.DataFrame:
    rows = []
    for sigma in sigmas:
        dp = DPConfig(sigma=sigma, clip=1.0)
        rows.append({"dp": dp.label(), "dp_epsilon": dp.epsilon(), "dp_q": dp.q, "dp_steps": dp.steps,
                     "client": "fedsgd"})
    return pd.DataFrame(rows)


def test_dp_level_labels_name_epsilon_q_and_steps() -> None:
    levels = list(defence_levels(_dp_cells([1.0])))
    assert levels == ["DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)"]
    from leakbench.fl.dp import level_label

    assert level_label("σ=1 C=1", 0.752, 64 / 40000, 625) == "DP σ=1 C=1 (ε=0.752 at q=0.0016, T=625 steps)"


def test_a_dp_level_past_epsilon_100_is_clipping_and_noise() -> None:
    low, high, none = defence_levels(_dp_cells([0.01, 0.1, 0.0]))
    assert low == "clipping + noise σ=0.01 C=1 (ε=5.56e+03 at q=0.01, T=1 step)"
    assert high == "DP σ=0.1 C=1 (ε=80.6 at q=0.01, T=1 step)"  # ε = 80.6 ≤ 100
    assert none.startswith("clipping + noise σ=0 C=1 (ε=∞")  # clipping only: no guarantee at all
    assert not low.startswith("DP") and not none.startswith("DP")


def test_noise_snr_is_measured_on_the_cells_own_update() -> None:
    from leakbench.fl.noise import noise_snr
    from leakbench.harness.victim import noise_columns

    spec = CellSpec(noise=1e-3, **SMALL)
    batch, model = victim(spec)
    clean = client_update([FedSGD(FedSGD.Config())], Client(model, batch, spec.seed, spec.threat))
    snr = json.loads(noise_columns(spec, batch, model)["noise_snr"])
    assert list(snr) == list(clean.gradients)
    for name, g in clean.gradients.items():
        assert snr[name] == pytest.approx(float(g.pow(2).mean().sqrt()) / 1e-3, rel=2e-3)
    assert noise_columns(CellSpec(**SMALL), batch, model) == {}  # no noise, no column
    scaled = noise_snr(clean.gradients, 0.1, "max")
    g = next(iter(clean.gradients.values()))
    assert scaled[next(iter(clean.gradients))] == pytest.approx(
        float(g.pow(2).mean().sqrt() / (0.1 * g.abs().max())), rel=2e-3)
