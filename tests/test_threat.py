"""Issue 15: the threat-model axis (labels known, batch size estimated) and the additive-noise update."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from leakbench.api import scoped_attack
from leakbench.attacks import Attack, Reconstruction
from leakbench.attacks.base import Requirements
from leakbench.attacks.estimate import estimate_batch_size
from leakbench.cell.spec import CellSpec, cell_id
from leakbench.cli import main
from leakbench.core.errors import ConfigError
from leakbench.fl import DPConfig, FedAvgConfig, ThreatModel, fedsgd_update
from leakbench.harness.cell import run_cell
from leakbench.harness.suite import find_suite, load_suite
from leakbench.harness.victim import prepare, victim

SMALL = dict(dataset="embedded", batch_size=4, width=32, depth=3)
BASE = 'name = "threat"\ndataset = "embedded"\nattacks = ["cpa"]\nbatch_sizes = [4]\nwidth = 32\ndepth = 3\n'


def _suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


@dataclass(frozen=True)
class _NoConfig:
    layer: int = 1


class LabelAttack(Attack):
    """Needs the labels (no shipped attack does): answers grey images."""

    name = "needs-labels"
    description = "test attack requiring labels"
    Config = _NoConfig
    requires = Requirements(labels=True)

    def reconstruct(self, update, *, seed):
        self.check_update(update)
        return Reconstruction(status="ok", space="image", images=torch.full((len(update.labels), 3, 32, 32), 0.5))


def test_default_cell_ids_are_those_of_main() -> None:
    # computed on main (ae8c238) before the threat and noise fields existed
    assert cell_id(CellSpec(attack="spear", dataset="embedded", batch_size=4)) == "60f5640fe8447480"
    assert cell_id(CellSpec(attack="ig", dataset="embedded", batch_size=2, seed=3, layer=2)) == "d9e92a1f994da894"
    explicit = CellSpec(attack="spear", dataset="embedded", batch_size=4, labels_known=False, batch_size_known=True,
                        noise=0, noise_scale="max")  # σ = 0: the scale does not matter
    assert cell_id(explicit) == "60f5640fe8447480"


def test_threat_axis_sets_what_the_update_carries(tmp_path: Path) -> None:
    text = BASE.replace('"cpa"', '"ig"') + (
        'threat = ["default", {labels = "known"}, {batch_size = "estimated"},'
        ' {labels = "known", batch_size = "estimated"}]\n')
    cells = load_suite(_suite(tmp_path, text)).cells
    assert [(c.labels_known, c.batch_size_known) for c in cells] == [(False, True), (True, True), (False, False),
                                                                     (True, False)]
    assert len({cell_id(c) for c in cells}) == 4 and cell_id(cells[0]) == cell_id(CellSpec(attack="ig", **SMALL))
    for spec in cells:
        batch, _, update = prepare(spec)
        assert update.threat == spec.threat
        assert update.batch_size == (4 if spec.batch_size_known else None)
        if spec.labels_known:
            assert torch.equal(update.labels, batch.labels)
        else:
            assert update.labels is None


@pytest.mark.parametrize("client", [{"dp": DPConfig(sigma=0.0, clip=1.0)}, {"fedavg": FedAvgConfig(epochs=2)}])
def test_dp_and_fedavg_updates_follow_the_threat_model(client: dict) -> None:
    batch, _, update = prepare(CellSpec(attack="cpa", **SMALL, labels_known=True, batch_size_known=False, **client))
    assert torch.equal(update.labels, batch.labels) and update.batch_size is None


@pytest.mark.slow
def test_labels_attack_refused_up_front_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    path = _suite(tmp_path, BASE.replace('"cpa"', '"needs-labels"') + 'threat = [{labels = "known"}, "default"]\n')
    with scoped_attack(LabelAttack):
        rc = main(["run", str(path), "--out", str(out), "--reports", str(tmp_path / "rep")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "needs the labels" in lines[0], lines
    assert not out.exists() and not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_batch_size_attack_refused_when_estimated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["run", str(_suite(tmp_path, BASE + 'threat = [{batch_size = "estimated"}]\n')), "--out", str(out),
               "--reports", str(tmp_path / "rep")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "needs the batch size" in lines[0] and not out.exists()


def _withholding(field: str) -> tuple[Attack, object]:
    """An attack requiring only `field`, and an update that lacks it."""
    model = victim(CellSpec(attack="cpa", **SMALL))[1]
    conv = victim(CellSpec(attack="cpa", dataset="embedded", batch_size=4, width=32, depth=3, arch="conv"))[1]
    batch = victim(CellSpec(attack="cpa", **SMALL))[0]
    lacking = {"batch_size": fedsgd_update(model, batch, ThreatModel(batch_size_known=False)),
               "labels": fedsgd_update(model, batch),
               "linear_relu_layer": fedsgd_update(conv, batch)}[field]  # conv layer 1 is the conv trunk
    attack = type("Needs", (LabelAttack,), {"name": f"needs-{field}", "requires": Requirements(**{field: True})})()
    return attack, lacking


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Requirements)])
def test_every_requirement_is_enforced_by_check_update(field: str) -> None:
    attack, lacking = _withholding(field)
    with pytest.raises(ConfigError):
        attack.check_update(lacking)
    Attack.check_update(type(attack)(), prepare(CellSpec(attack="cpa", **SMALL, labels_known=True))[2])  # all given


def test_estimate_batch_size_is_the_rank_of_the_first_layer() -> None:
    for b in (1, 3, 8):
        spec = CellSpec(attack="spear", dataset="embedded", batch_size=b, batch_size_known=False)
        assert estimate_batch_size(prepare(spec)[2]) == b


def test_noise_zero_is_fedsgd_exactly_and_noise_is_seeded() -> None:
    batch, model, plain = prepare(CellSpec(attack="cpa", **SMALL))
    reference = fedsgd_update(model, batch)
    assert plain.kind == "fedsgd" and all(torch.equal(plain.gradients[k], g) for k, g in reference.gradients.items())
    noisy = [prepare(CellSpec(attack="cpa", **SMALL, noise=1e-3, **kw))[2] for kw in ({}, {}, {"seed": 1})]
    first, again, other = noisy
    assert first.kind == "fedsgd+noise"
    assert all(torch.equal(first.gradients[k], again.gradients[k]) for k in first.gradients)
    diff = torch.cat([(first.gradients[k] - reference.gradients[k]).flatten() for k in reference.gradients])
    assert 0.9e-3 < float(diff.std()) < 1.1e-3  # std σ on every entry
    other_ref = fedsgd_update(*reversed(victim(CellSpec(attack="cpa", **SMALL, seed=1))))
    other_diff = torch.cat([(other.gradients[k] - other_ref.gradients[k]).flatten() for k in other_ref.gradients])
    assert not torch.allclose(diff, other_diff)


def test_relative_noise_and_fedavg_noise() -> None:
    _, _, update = prepare(CellSpec(attack="cpa", **SMALL, fedavg=FedAvgConfig(), noise=1e-2,
                                    noise_scale="max"))
    assert update.kind == "fedavg+noise"
    clean = prepare(CellSpec(attack="cpa", **SMALL, fedavg=FedAvgConfig()))[2]
    name = next(iter(clean.gradients))
    std = float((update.gradients[name] - clean.gradients[name]).std())
    assert 0.8 < std / (1e-2 * float(clean.gradients[name].abs().max())) < 1.2


def test_noise_with_dp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        CellSpec(attack="cpa", **SMALL, noise=1e-4, dp=DPConfig(sigma=0.1, clip=1.0))
    with pytest.raises(ConfigError, match="not both") as info:
        load_suite(_suite(tmp_path, BASE + 'dp = ["none", {sigma = 0.1, clip = 1.0}]\nnoise = [0.0, 1e-4]\n'))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("extra,key", [
    ('threat = ["paranoid"]', "threat[0]"), ('threat = [{labels = "maybe"}]', "labels"),
    ('threat = [{epochs = "known"}]', "epochs"), ("threat = []", "threat"), ("noise = [-1.0]", "noise[0]"),
    ('noise = [1e-4]\nnoise_scale = "mean"', "noise_scale"), ('threat = ["default", {}]', "threat[1]"),
    ('threat = ["default", {labels = "withheld"}]', "twice"),
])
def test_malformed_threat_and_noise_keys(tmp_path: Path, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_suite(_suite(tmp_path, BASE + extra + "\n"))
    assert key in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_records_carry_threat_and_noise_columns() -> None:
    spec = CellSpec(attack="cpa", **SMALL, labels_known=True, noise=1e-4)
    result = run_cell(spec, isolate=False)
    row = result.records.iloc[0]
    assert (row["labels_known"], row["batch_size_known"], row["noise_sigma"], row["noise_scale"],
            row["threat"]) == (True, True, 1e-4, "absolute", "labels known")
    assert result.summary["noise_sigma"] == 1e-4 and result.summary["labels_known"]
    default = run_cell(CellSpec(attack="cpa", **SMALL), isolate=False).records.iloc[0]
    assert (default["labels_known"], default["batch_size_known"], default["noise_sigma"]) == (False, True, 0.0)


def test_spear_noise_suite_and_its_view() -> None:
    from leakbench.papers import PAPERS

    cells = load_suite(find_suite("paper/spear-noise")).cells
    assert sorted({c.noise for c in cells}) == [0.0, 1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2]
    assert {c.noise_scale for c in cells if c.noise} == {"max"} and {c.seed for c in cells} == {0, 1, 2}
    assert {(c.attack, c.batch_size, c.width, c.depth, c.layer) for c in cells} == {("spear", 8, 200, 6, 1)}
    assert PAPERS.create("spear-noise").views == ("noise",)  # the table: tests/test_views.py


def test_reports_keep_noise_and_threat_cells_apart() -> None:
    from leakbench.reporting.aggregate import with_model

    cells = pd.DataFrame({"arch": "fc", "client": "fedsgd", "depth": 6, "width": 200,
                          "noise_sigma": [0.0, 1e-4, 1e-4, 0.0],
                          "noise_scale": ["absolute", "max", "absolute", "absolute"],
                          "threat": ["default", "default", "labels known", "b estimated"]})
    assert list(with_model(cells)["client"]) == ["fedsgd", "fedsgd + noise σ=0.0001×max|g|",
                                                 "fedsgd + noise σ=0.0001 · labels known", "fedsgd · b estimated"]
    old = with_model(cells.drop(columns=["noise_sigma", "noise_scale", "threat"]))  # runs stored before issue 15
    assert set(old["client"]) == {"fedsgd"}
