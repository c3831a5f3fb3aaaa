"""Client transforms in the `defences` axis (issue 24): MixUp and secure aggregation over K clients
replace the FedSGD client; a cell of K clients draws, scores and re-derives K·b images. `mixup` is
Huang et al.'s (issue 43: k images from the client's local data), `mixup-batch` the in-batch form."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from leakbench.cell.spec import CellSpec, batch_id, cell_columns, cell_id, spec_dict, spec_from_dict, truth_size
from leakbench.core.errors import ConfigError
from leakbench.fl import MixUpBatchConfig, MixUpConfig, SecAggConfig, fedsgd_update
from leakbench.fl.mixup import draw_mixing, local_pool, mixing, mixtures, mixup_batch_update, mixup_update
from leakbench.fl.transform import DefenceSetting
from leakbench.fl.update import ThreatModel
from leakbench.harness.suite import load_suite
from leakbench.harness.victim import load_batch, prepare, victim

B = 4


def _spec(*defences: DefenceSetting, **fields: object) -> CellSpec:
    return CellSpec("spear", "embedded", B, width=16, depth=3, defences=defences, **fields)  # type: ignore[arg-type]


def _secagg(k: int) -> DefenceSetting:
    return DefenceSetting("secagg", SecAggConfig(k))


def _mixup(alpha: float = 1.0) -> DefenceSetting:
    return DefenceSetting("mixup-batch", MixUpBatchConfig(alpha))


def _huang(k: int = 4, cap: float = 0.65, sign_flip: bool = False) -> DefenceSetting:
    return DefenceSetting("mixup", MixUpConfig(k, cap, sign_flip))


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float = 1e-6) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=tol, rtol=1e-5) for k in a)


# --------------------------------------------------------------------------- MixUp in the batch (mixup-batch)


def test_mixup_batch_update_is_the_gradient_of_the_mixed_loss_computed_by_hand() -> None:
    batch, model = victim(_spec())
    lam, perm = mixing(B, 1.0, seed=3)
    assert not torch.equal(perm, torch.arange(B)) or not torch.all(lam == 1)  # something is mixed
    params = list(model.parameters())
    total = torch.zeros(())
    for i in range(B):  # one sample at a time: λ_i x_i + (1 − λ_i) x_π(i), λ_i CE(y_i) + (1 − λ_i) CE(y_π(i))
        j, li = int(perm[i]), float(lam[i])
        mixed = li * batch.images[i] + (1 - li) * batch.images[j]
        logp = torch.log_softmax(model(mixed.unsqueeze(0))[0], dim=0)
        total = total - li * logp[batch.labels[i]] - (1 - li) * logp[batch.labels[j]]
    by_hand = torch.autograd.grad(total / B, params)
    update = mixup_batch_update(model, batch, MixUpBatchConfig(1.0), seed=3)
    names = [n for n, _ in model.named_parameters()]
    assert _close(update.gradients, dict(zip(names, by_hand, strict=True)), tol=1e-6)
    assert not _close(update.gradients, fedsgd_update(model, batch).gradients, tol=1e-4)  # not plain FedSGD
    assert update.kind == "mixup-batch" and update.batch_size == B


def test_mixup_batch_same_seed_same_update_and_the_cell_scores_the_original_images() -> None:
    spec = _spec(_mixup(0.4))
    batch, _, first = prepare(spec)
    _, _, again = prepare(spec)
    _, _, other = prepare(_spec(_mixup(0.4), seed=1))
    assert _close(first.gradients, again.gradients, tol=0)
    assert not _close(first.gradients, other.gradients, tol=1e-4)
    assert torch.equal(batch.images, load_batch(_spec()).images)  # the truth stays the batch
    assert truth_size(spec) == B and batch_id(spec) == batch_id(_spec())
    labelled = prepare(_spec(_mixup(0.4), labels_known=True))[2]
    assert labelled.labels is not None and torch.equal(labelled.labels, batch.labels)


# --------------------------------------------------------------------------- MixUp as Huang et al. (mixup)


@pytest.mark.parametrize(("k", "cap"), [(2, 0.65), (4, 0.65), (6, 0.4)])
def test_mixup_mixes_k_distinct_images_with_coefficients_that_sum_to_one_under_the_cap(k: int, cap: float) -> None:
    b = 16
    mix = draw_mixing(np.arange(b), 321, MixUpConfig(k, cap), seed=5, image_shape=(3, 8, 8))
    lam = mix.coefficients
    assert lam.shape == (b, k) and mix.partners.shape == (b, k - 1)
    assert torch.allclose(lam.sum(1), torch.ones(b, dtype=lam.dtype)) and (lam > 0).all() and lam.max() <= cap
    assert all(len({i, *map(int, row)}) == k for i, row in enumerate(mix.partners))  # k distinct images
    assert mix.signs is None


def test_mixup_update_is_the_soft_label_loss_of_k_image_mixtures_computed_by_hand() -> None:
    spec = _spec(_huang())
    batch, model = victim(spec)
    local, own = local_pool(batch)
    assert batch.local is not None and len(local) > B  # the client's local data: the whole dataset at init
    mix = draw_mixing(own, len(local), MixUpConfig(), 7, tuple(batch.images.shape[1:]))
    total = torch.zeros(())
    for i in range(B):  # x̃_i = Σ_j λ_ij x_ij over the private image and its 3 partners; Σ_j λ_ij CE(f(x̃_i), y_ij)
        rows = [int(batch.indices[i]), *(int(local.indices[int(p)]) for p in mix.partners[i])]
        lam = [float(v) for v in mix.coefficients[i]]
        assert rows[0] == int(local.indices[own[i]]) and len(set(rows)) == 4
        mixed = sum(w * local.images[r] for w, r in zip(lam, rows, strict=True))
        logp = torch.log_softmax(model(mixed.unsqueeze(0))[0], dim=0)
        total = total - sum(w * logp[local.labels[r]] for w, r in zip(lam, rows, strict=True))
    by_hand = torch.autograd.grad(total / B, list(model.parameters()))
    update = mixup_update(model, batch, MixUpConfig(), seed=7)
    names = [n for n, _ in model.named_parameters()]
    assert _close(update.gradients, dict(zip(names, by_hand, strict=True)), tol=1e-6)
    assert update.kind == "mixup" and update.batch_size == B


def test_mixup_partners_come_from_the_clients_local_data_beyond_the_batch() -> None:
    from dataclasses import replace

    batch = load_batch(_spec(_huang()))
    local, own = local_pool(batch)
    mix = draw_mixing(own, len(local), MixUpConfig(), 0, tuple(batch.images.shape[1:]))
    partners = {int(local.indices[int(p)]) for p in mix.partners.flatten()}
    assert partners - set(batch.indices)  # 12 partners among 321 images: not only the batch's
    alone = replace(batch, local=None)  # a batch without local data mixes within itself
    pool, own = local_pool(alone)
    mix = draw_mixing(own, len(pool), MixUpConfig(), 0, tuple(batch.images.shape[1:]))
    assert len(pool) == B and set(mix.partners.flatten().tolist()) <= set(range(B))
    trained = load_batch(_spec(_huang(), train_epochs=1))  # a trained victim's batch: from the attack part
    assert trained.local is not None and set(trained.indices) <= set(trained.local.indices.tolist())
    assert len(trained.local) < len(batch.local or ())


def test_mixup_same_seed_same_update_and_the_cell_scores_the_original_images() -> None:
    spec = _spec(_huang())
    batch, _, first = prepare(spec)
    _, _, again = prepare(spec)
    _, _, other = prepare(_spec(_huang(), seed=1))
    assert _close(first.gradients, again.gradients, tol=0)
    assert not _close(first.gradients, other.gradients, tol=1e-4)
    assert not _close(first.gradients, fedsgd_update(victim(spec)[1], batch).gradients, tol=1e-4)
    assert torch.equal(batch.images, load_batch(_spec()).images) and truth_size(spec) == B  # the truth is the batch
    labelled = prepare(_spec(_huang(), labels_known=True))[2]
    assert labelled.labels is not None and torch.equal(labelled.labels, batch.labels)


def test_mixup_sign_flips_change_signs_only_and_only_when_enabled() -> None:
    batch, model = victim(_spec(_huang()))
    local, own = local_pool(batch)
    shape = tuple(batch.images.shape[1:])
    plain = draw_mixing(own, len(local), MixUpConfig(), 3, shape)
    flipped = draw_mixing(own, len(local), MixUpConfig(sign_flip=True), 3, shape)
    assert plain.signs is None and flipped.signs is not None
    assert torch.equal(plain.partners, flipped.partners) and torch.equal(plain.coefficients, flipped.coefficients)
    mean = model.mean
    x, y = mixtures(batch, plain, local, mean, torch.float32)
    fx, fy = mixtures(batch, flipped, local, mean, torch.float32)
    assert torch.equal(y, fy)  # labels untouched
    assert torch.allclose((fx - mean).abs(), (x - mean).abs(), atol=1e-6)  # the same magnitudes about the mean
    assert ((fx - mean) * (x - mean) < 0).any() and ((fx - mean) * (x - mean) > 0).any()  # some signs flipped
    on = prepare(_spec(_huang(sign_flip=True)))[2]
    off = prepare(_spec(_huang()))[2]
    assert not _close(on.gradients, off.gradients, tol=1e-4)


def test_mixup_with_the_in_batch_alpha_is_one_line_naming_mixup_batch(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    with pytest.raises(ConfigError, match="mixup-batch") as caught:
        load_suite(_suite(tmp_path, 'defences = [{ name = "mixup", alpha = 0.4 }]\n'))
    assert "\n" not in str(caught.value) and "alpha" in str(caught.value)
    out = tmp_path / "out"
    args = ["attack", "--attack", "spear", "--batch-size", "2", "--defence", "mixup", "--defence-param", "alpha=1",
            "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "mixup-batch" in err and len(err.splitlines()) == 1 and not out.exists()
    stored = spec_dict(_spec(_mixup(0.4)))  # a cell stored when "mixup" was the in-batch form
    stored["defences"][0]["name"] = "mixup"
    with pytest.raises(ConfigError, match="mixup-batch"):
        spec_from_dict(stored)


def test_mixup_forms_are_labelled_apart() -> None:
    assert cell_columns(_spec(_huang()))["client"] == "mixup k=4 cap=0.65"
    assert cell_columns(_spec(_huang(sign_flip=True)))["client"] == "mixup k=4 cap=0.65 sign-flip"
    assert cell_columns(_spec(_mixup(0.4)))["client"] == "mixup-batch α=0.4"
    assert cell_id(_spec(_huang())) != cell_id(_spec(_mixup()))


# --------------------------------------------------------------------------- secure aggregation


def test_secagg_with_one_client_is_plain_fedsgd() -> None:
    plain, one = _spec(), _spec(_secagg(1))
    batch, _, update = prepare(one)
    plain_batch, _, plain_update = prepare(plain)
    assert batch.indices == plain_batch.indices and torch.equal(batch.images, plain_batch.images)
    assert _close(update.gradients, plain_update.gradients, tol=0)
    assert update.batch_size == B and truth_size(one) == B and batch_id(one) == batch_id(plain)


@pytest.mark.parametrize("k", [2, 3])
def test_secagg_update_is_fedsgd_of_the_union_and_client_0_holds_the_plain_batch(k: int) -> None:
    spec = _spec(_secagg(k), labels_known=True)
    batch, model, update = prepare(spec)
    plain = load_batch(_spec())
    assert batch.size == truth_size(spec) == k * B
    assert batch.indices[:B] == plain.indices  # client 0's batch is the K = 1 batch
    assert len(set(batch.indices)) == k * B  # the clients' batches are disjoint
    union = fedsgd_update(model, batch, ThreatModel(labels_known=True))
    assert _close(update.gradients, union.gradients, tol=1e-6)  # mean convention: the union's mean loss
    assert update.batch_size == k * B and update.labels is not None and torch.equal(update.labels, batch.labels)
    assert update.kind == "secagg" and batch_id(spec) != batch_id(_spec())
    assert prepare(_spec(_secagg(k), batch_size_known=False))[2].batch_size is None


def test_more_clients_keep_the_earlier_clients_batches() -> None:
    two, four = load_batch(_spec(_secagg(2))), load_batch(_spec(_secagg(4)))
    assert four.indices[:2 * B] == two.indices


def test_secagg_cells_round_trip_and_keep_plain_ids() -> None:
    spec = _spec(_secagg(2))
    assert spec_from_dict(spec_dict(spec)) == spec
    assert cell_id(spec) != cell_id(_spec()) and cell_id(_spec(_secagg(1))) != cell_id(_spec())
    columns = cell_columns(spec)
    assert columns["client"] == "secagg K=2" and columns["secagg_clients"] == 2 and columns["defence"] == ""
    assert "defence" not in cell_columns(_spec())


def test_too_many_clients_for_the_dataset_are_refused() -> None:
    with pytest.raises(ConfigError, match="distinct images"):
        load_batch(_spec(_secagg(1000)))


# --------------------------------------------------------------------------- the defences axis

BASE = """
name = "clients"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [2]
width = 32
depth = 3
grid_images = 8
[hyperparameters.spear]
max_draws = 20000
"""


def _suite(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(textwrap.dedent(extra) + BASE)
    return path


@pytest.mark.parametrize(("level", "message"), [
    ('[{ name = "mixup" }, { name = "secagg", clients = 2 }]', "one client computes the update, not 2"),
    ('[{ name = "mixup" }, { name = "dp", sigma = 1.0, clip = 1.0 }]', "one client computes the update, not 2"),
    ('[{ name = "secagg", clients = 2 }, { name = "fedavg", epochs = 2 }]', "one client computes the update"),
    ('{ name = "secagg", clients = 0 }', "clients"),
    ('{ name = "mixup-batch", alpha = 0.0 }', "alpha"),
    ('{ name = "mixup-batch", beta = 1.0 }', "beta"),
    ('{ name = "mixup", k = 4, cap = 0.25 }', "must be above 1/k"),
    ('{ name = "mixup", k = 0 }', "k"),
])
def test_bad_client_levels_are_refused(tmp_path: Path, level: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite(_suite(tmp_path, f"defences = [{level}]\n"))


def test_a_cell_refuses_two_clients_or_one_beside_dp() -> None:
    from leakbench.fl import DPConfig, NoiseConfig

    with pytest.raises(ConfigError, match="one client"):
        _spec(_mixup(), _secagg(2))
    with pytest.raises(ConfigError, match="cannot run with DP-SGD"):
        _spec(_mixup(), dp=DPConfig(sigma=1.0, clip=1.0))
    with pytest.raises(ConfigError, match="first"):
        _spec(DefenceSetting("noise", NoiseConfig(1e-3)), _mixup())


def test_a_client_level_runs_first_whatever_its_place_in_the_level(tmp_path: Path) -> None:
    level = '[{ name = "noise", sigma = 1e-6 }, { name = "mixup" }]'
    (spec,) = load_suite(_suite(tmp_path, f"defences = [{level}]\n")).cells
    assert spec.noise == 1e-6 and [d.name for d in spec.defences] == ["mixup"]


@pytest.mark.slow
def test_a_secagg_suite_runs_spear_and_scores_every_clients_images(tmp_path: Path) -> None:
    from leakbench.cli import main
    from leakbench.records.truth import load_truth

    path = _suite(tmp_path, 'defences = ["none", { name = "secagg", clients = 2 }]\n')
    assert main(["run", str(path), "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")]) == 0
    run = tmp_path / "res" / "clients"
    records, cells = pd.read_parquet(run / "records.parquet"), pd.read_parquet(run / "cells.parquet")
    counts = records.groupby("client", sort=False)["image"].count().to_dict()
    assert counts == {"fedsgd": 2, "secagg K=2": 4}
    assert set(cells["n_images"]) == {2, 4}
    secagg = cells[cells["client"] == "secagg K=2"]["cell_id"].item()
    truth = load_truth(run, secagg)
    plain = load_truth(run, cells[cells["client"] == "fedsgd"]["cell_id"].item())
    assert truth.truth.shape[0] == 4 and torch.equal(truth.truth[:2], plain.truth)
    assert (records[records["cell_id"] == secagg]["exact"]).all()  # SPEAR: 4 images, width 32, a small budget
    assert "secagg K=2" in (tmp_path / "rep" / "clients.md").read_text()


@pytest.mark.parametrize("fields", [{"defences": (_secagg(3),)}, {"train_epochs": 1}, {}])
def test_the_re_derived_truth_is_the_batch_the_cell_scored(fields: dict[str, object]) -> None:
    """`records.truth` re-derives every client's images, from the attack part for a trained victim."""
    from leakbench.records.truth import truth_images

    spec = CellSpec("spear", "embedded", B, width=16, depth=3, **fields)  # type: ignore[arg-type]
    truth = truth_images(spec)
    assert truth.shape[0] == truth_size(spec) and torch.equal(truth, load_batch(spec).images)


@pytest.mark.slow
def test_secagg_and_mixup_run_the_clients_batchnorm_mode_and_aggregate_shared_statistics() -> None:
    """BatchNorm in train mode: each client normalises by its own batch, so the aggregate is the mean of
    the clients' updates (not the union's) and carries the mean of their running statistics."""
    from leakbench.datasets.base import split_batch

    threat = {"arch": "resnet", "bn_mode": "train", "bn_stats_shared": True}
    spec = CellSpec("ig", "embedded", B, defences=(_secagg(2),), **threat)  # type: ignore[arg-type]
    batch, model, update = prepare(spec)
    clients = [fedsgd_update(model, part, spec.threat) for part in split_batch(batch, 2)]
    mean = {k: (clients[0].gradients[k] + clients[1].gradients[k]) / 2 for k in update.gradients}
    assert _close(update.gradients, mean, tol=1e-6)
    assert not _close(update.gradients, fedsgd_update(model, batch, spec.threat).gradients, tol=1e-5)
    assert update.buffers is not None and clients[0].buffers is not None and clients[1].buffers is not None
    name = next(k for k, v in update.buffers.items() if v.is_floating_point())
    assert torch.allclose(update.buffers[name], (clients[0].buffers[name] + clients[1].buffers[name]) / 2)
    mixed = prepare(CellSpec("ig", "embedded", B, defences=(_mixup(),), **threat))[2]  # type: ignore[arg-type]
    assert mixed.buffers is not None and mixed.kind == "mixup-batch"
    huang = prepare(CellSpec("ig", "embedded", B, defences=(_huang(),), **threat))[2]  # type: ignore[arg-type]
    assert huang.buffers is not None and huang.kind == "mixup"
