"""Trained victims (issue 15): deterministic training, the content-addressed cache, a training split
disjoint from every attacked batch, train_epochs = 0 as before, and bad input refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT

from leakbench.cell.spec import CellSpec, cell_id, spec_dict, spec_from_dict
from leakbench.core.errors import ConfigError
from leakbench.datasets import load_dataset, partition, sample_batch
from leakbench.fl import DPConfig, FedAvgConfig
from leakbench.harness.scoring import score_cell
from leakbench.harness.suite import load_suite
from leakbench.harness.victim import prepare, victim
from leakbench.models import build_model
from leakbench.models import victims as victims_module
from leakbench.models.training import TrainRecipe

SMALL = dict(dataset="digits", batch_size=4, width=32, depth=3)
"""A victim that trains in well under a second (digits, FC-3 width 32)."""


@pytest.fixture(autouse=True)
def victim_cache(tmp_path, monkeypatch):
    """Every test gets its own, empty victim cache."""
    folder = tmp_path / "victims"
    monkeypatch.setenv(victims_module.CACHE_ENV, str(folder))
    return folder


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_is_deterministic(victim_cache, tmp_path, monkeypatch):
    spec = CellSpec(attack="spear", train_epochs=2, **SMALL)
    _, first = victim(spec)
    monkeypatch.setenv(victims_module.CACHE_ENV, str(tmp_path / "other"))  # an empty cache: trains again
    _, second = victim(spec)
    assert first.victim_info.trained_now and second.victim_info.trained_now
    assert first.victim_info.victim_hash == second.victim_info.victim_hash
    a, b = _weights(first), _weights(second)
    assert all(torch.equal(a[k], b[k]) for k in a)
    _, init = victim(CellSpec(attack="spear", **SMALL))
    assert not all(torch.equal(a[k], init.state_dict()[k]) for k in a)  # training changed the weights
    _, reshuffled = victim(CellSpec(attack="spear", train_epochs=2, recipe=TrainRecipe(seed=1), **SMALL))
    assert reshuffled.victim_info.victim_hash != first.victim_info.victim_hash
    assert not all(torch.equal(a[k], reshuffled.state_dict()[k]) for k in a)


def test_trained_victim_learns_and_reports_accuracy():
    _, model = victim(CellSpec(attack="spear", train_epochs=5, **SMALL))
    info = model.victim_info
    assert info.train_epochs == 5
    assert 0.5 < info.train_accuracy <= 1 and 0.5 < info.test_accuracy <= 1  # digits: chance is 0.1


def test_cache_is_hit_the_second_time(victim_cache, monkeypatch):
    spec = CellSpec(attack="spear", train_epochs=1, **SMALL)
    _, first = victim(spec)
    files = list(victim_cache.glob("*.pt"))
    assert [f.name for f in files] == [f"{first.victim_info.victim_hash}.pt"]
    assert not list(victim_cache.glob("*.tmp"))  # written atomically, nothing left beside it

    def no_training(*args, **kwargs):
        raise AssertionError("the cached victim was trained again")

    monkeypatch.setattr(victims_module, "train", no_training)
    for other in (spec, CellSpec(attack="cpa", train_epochs=1, seed=0, **{**SMALL, "batch_size": 8})):
        _, again = victim(other)  # another attack and batch size: the same victim
        assert not again.victim_info.trained_now
        assert again.victim_info == first.victim_info.__class__(**{**first.victim_info.__dict__, "trained_now": False})
        assert all(torch.equal(v, first.state_dict()[k]) for k, v in again.state_dict().items())
    with pytest.raises(AssertionError, match="trained again"):  # a different victim misses the cache
        victim(CellSpec(attack="spear", train_epochs=2, **SMALL))


def test_damaged_cache_file_is_retrained(victim_cache):
    spec = CellSpec(attack="spear", train_epochs=1, **SMALL)
    _, first = victim(spec)
    path = victim_cache / f"{first.victim_info.victim_hash}.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.warns(Warning, match="unusable"):
        _, again = victim(spec)
    assert again.victim_info.trained_now
    assert all(torch.equal(v, first.state_dict()[k]) for k, v in again.state_dict().items())


@pytest.mark.parametrize("name", ["digits", "embedded"])
def test_partition_parts_are_disjoint_and_cover(name):
    dataset = load_dataset(name)
    parts = partition(dataset)
    sets = [set(parts.attack.tolist()), set(parts.test.tolist()), set(parts.train.tolist())]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert set().union(*sets) == set(range(len(dataset)))
    assert len(sets[2]) >= 0.79 * len(dataset)
    again = partition(load_dataset(name))
    assert np.array_equal(parts.attack, again.attack) and np.array_equal(parts.train, again.train)


@pytest.mark.slow
def test_training_never_sees_an_attacked_image(monkeypatch):
    """Every batch a trained victim is attacked on lies in the attack part; the indices the training
    loop actually reads (recorded here) never meet it."""
    seen: list[torch.Tensor] = []
    real_train = victims_module.train

    def recording_train(model, images, labels, indices, recipe, epochs, **options):
        seen.append(indices.clone())
        return real_train(model, images, labels, indices, recipe, epochs, **options)

    monkeypatch.setattr(victims_module, "train", recording_train)
    batch, _ = victim(CellSpec(attack="spear", train_epochs=1, **SMALL))
    trained_on = set(seen[0].tolist())
    assert trained_on and not trained_on & set(batch.indices)
    attack_part = set(partition(load_dataset("digits")).attack.tolist())
    assert not trained_on & attack_part
    for seed in range(50):
        for b in (1, 4, 16, 64):
            spec = CellSpec(attack="spear", train_epochs=1, seed=seed, **{**SMALL, "batch_size": b})
            assert set(victim(spec, with_model=False)[0].indices) <= attack_part


OLD_IDS = {  # computed with main before trained victims existed (f4395d1)
    "ea7304d7fc324182": CellSpec(attack="spear", dataset="digits", batch_size=4, width=50, depth=3),
    "f9fcb1bffaff4042": CellSpec(attack="cpa", dataset="tinyimagenet", batch_size=16, seed=3),
    "da64fee615fe6593": CellSpec(attack="ig", dataset="embedded", batch_size=8, dp=DPConfig(sigma=1e-4, clip=1.0)),
    "ccd83f6b922665ee": CellSpec(attack="dlg", dataset="embedded", batch_size=2,
                                 fedavg=FedAvgConfig(epochs=2, minibatch=0, lr=0.1)),
}


def test_train_epochs_zero_keeps_old_ids_and_batches():
    for old, spec in OLD_IDS.items():
        assert cell_id(spec) == old and cell_id(CellSpec(**{**spec.__dict__, "train_epochs": 0})) == old
        assert "train_epochs" not in spec_dict(spec) and "recipe" not in spec_dict(spec)
    batch, _, update = prepare(OLD_IDS["ea7304d7fc324182"])
    assert batch.indices == (1382, 1523, 1670, 1729)  # main's batch for this seed
    # rel 1e-6, not 1e-9: Pillow releases decode and resize the bundled photos a few ULPs apart
    # (a fresh venv of the same requirements.txt gives 44.11213984228277)
    assert float(sum(g.double().abs().sum() for g in update.gradients.values())) == pytest.approx(44.112139490524555,
                                                                                                   rel=1e-6)


@pytest.mark.slow
def test_train_epochs_zero_records_are_todays():
    """At init a cell is scored against the batch and victim built as before (the whole dataset,
    build_model at the cell's seed): its records equal the records of its attack's output scored on
    those, with the new columns at their init values."""
    from leakbench.harness.cell import run_cell

    spec = CellSpec(attack="spear", **SMALL)
    dataset = load_dataset("digits")
    batch = sample_batch(dataset, 4, 0)
    model = build_model("fc", dataset.image_shape, 10, width=32, depth=3, seed=0)
    result = run_cell(spec)
    before = score_cell(spec, result.output, batch, model).records
    assert result.records.equals(before)
    assert result.records["status"].eq("ok").all()
    assert (result.records["train_epochs"] == 0).all() and result.records["train_accuracy"].isna().all()
    assert (result.records["victim_hash"] == "").all()
    other = sample_batch(dataset, 4, 0, pool=partition(dataset).attack)  # what a trained victim is attacked on
    assert other.indices != batch.indices


@pytest.mark.slow
def test_trained_cell_records_name_the_victim():
    from leakbench.harness.cell import run_cell

    result = run_cell(CellSpec(attack="spear", train_epochs=1, **SMALL))
    rec = result.records
    assert (rec["train_epochs"] == 1).all() and rec["train_accuracy"].between(0, 1).all()
    assert rec["victim_hash"].str.len().eq(32).all()
    assert result.summary["test_accuracy"] == rec["test_accuracy"].iloc[0]
    spec = result.spec
    assert spec.recipe == TrainRecipe() and spec_from_dict(spec_dict(spec)) == spec
    assert cell_id(spec) != cell_id(CellSpec(attack="spear", **SMALL))


def test_spec_refuses_bad_training():
    with pytest.raises(ConfigError, match="train_epochs"):
        CellSpec(attack="spear", train_epochs=-1, **SMALL)
    with pytest.raises(ConfigError, match="needs train_epochs"):
        CellSpec(attack="spear", recipe=TrainRecipe(), **SMALL)
    for bad in ({"optimizer": "rmsprop"}, {"lr": 0.0}, {"batch_size": 0}, {"momentum": 1.0}):
        with pytest.raises(ConfigError):
            TrainRecipe(**bad)


def _suite(tmp_path, body: str):
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\ndataset = "digits"\nattacks = ["spear", "ig"]\nbatch_sizes = [2, 4]\n' + body)
    return load_suite(path)


def test_suite_train_epochs_axis(tmp_path):
    suite = _suite(tmp_path, 'train_epochs = [0, 1, 5]\ntrain = { lr = 0.01, optimizer = "sgd" }\n')
    assert len(suite.cells) == 2 * 2 * 3
    assert sorted({c.train_epochs for c in suite.cells}) == [0, 1, 5]
    assert all(c.recipe is None for c in suite.cells if c.train_epochs == 0)
    assert all(c.recipe == TrainRecipe(lr=0.01, optimizer="sgd") for c in suite.cells if c.train_epochs)
    assert len({cell_id(c) for c in suite.cells}) == len(suite.cells)
    assert [cell_id(c) for c in _suite(tmp_path, "").cells] == \
        [cell_id(c) for c in suite.cells if c.train_epochs == 0]


@pytest.mark.parametrize("body, message", [
    ("train_epochs = [1, 1]\n", "twice"),
    ("train_epochs = [-1]\n", "integers"),
    ("train_epochs = [2000]\n", "train_epochs"),
    ('train_epochs = [1]\ntrain = { lr = "fast" }\n', "number"),
    ("train_epochs = [1]\ntrain = { steps = 3 }\n", "unknown key"),
    ("train_epochs = [1]\ntrain = { augment = 1 }\n", "boolean"),
    ("train = { lr = 0.1 }\n", "needs key 'train_epochs'"),
])
def test_suite_refuses_bad_training(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message):
        _suite(tmp_path, body)


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-1", "1001", "x", "1.5"])
def test_cli_bad_train_epochs(tmp_path, value):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "leakbench", "attack", "--attack", "spear", "--dataset", "digits",
                           "--batch-size", "2", "--train-epochs", value, "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and "--train-epochs" in proc.stderr
    assert not out.exists()


def test_check_cells_refuses_a_batch_larger_than_the_attack_part():
    from leakbench.harness.run import check_cells

    check_cells([CellSpec(attack="ig", dataset="digits", batch_size=200, width=32, depth=3)])  # whole dataset
    with pytest.raises(ConfigError, match="attack part"):
        check_cells([CellSpec(attack="ig", dataset="digits", batch_size=200, width=32, depth=3, train_epochs=1)])


@pytest.mark.slow
def test_victims_table_from_a_stored_run(tmp_path):
    """The doc's tables come from the stored records; the ReLU sparsity at init is that of the victim
    and batch built directly; prose outside the markers survives a regeneration."""
    from conftest import load_benchmark

    from leakbench.harness.run import run_sweep

    suite = tmp_path / "v.toml"
    suite.write_text('name = "v"\ndataset = "digits"\nattacks = ["spear"]\nbatch_sizes = [4]\nlayers = [1]\n'
                     'width = 32\ndepth = 3\ntrain_epochs = [0, 1]\n')
    run_sweep(str(suite), out=tmp_path / "results")
    doc = tmp_path / "victims.md"
    doc.write_text("# prose before\n\n<!-- victims-table:begin -->\nold\n<!-- victims-table:end -->\n\nprose after\n")
    table = load_benchmark("victims_table")
    assert table.main([str(tmp_path / "results" / "v"), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# prose before") and text.rstrip().endswith("prose after") and "\nold\n" not in text
    assert "| spear | 0 | 4 | 0 | ok |" in text and "| spear | 1 | 4 | 0 |" in text
    dataset = load_dataset("digits")
    batch = sample_batch(dataset, 4, 0)
    model = build_model("fc", dataset.image_shape, 10, width=32, depth=3, seed=0)
    inactive = float((model.layer_inputs(batch.images, 2) <= 0).float().mean())
    assert f"| 0 | {100 * inactive:.1f} · " in text
    assert table.main([str(tmp_path / "nothing")]) == 2
