"""Defences that change a computed update (issue 24): pruning, quantisation, Soteria, DP in the CPA code's
convention; `attack --defence`; the `defence_known` threat model and the adaptive (masked) attacks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from leakbench.cell.spec import CellSpec, cell_columns, cell_id, cell_settings, spec_dict, spec_from_dict, transforms
from leakbench.cli import main
from leakbench.core.errors import ConfigError
from leakbench.core.settings import build_config
from leakbench.datasets.base import Batch
from leakbench.fl import Client, ClientUpdate, DPConfig, ThreatModel, client_update
from leakbench.fl.dp import clip_and_noise, dp_columns
from leakbench.fl.noise import Noise, NoiseConfig
from leakbench.fl.prune import Prune, PruneConfig
from leakbench.fl.quantise import QuantiseConfig, UniformQuantise
from leakbench.fl.soteria import Soteria, SoteriaConfig, SoteriaFirst, SoteriaFirstConfig, feature_scores, soteria_mask
from leakbench.fl.transform import DefenceSetting, FedSGD, UpdateTransform
from leakbench.harness.suite import load_suite
from leakbench.harness.victim import victim
from leakbench.models import ConvNet, build_fc


def _defended(client: Client, *defences: UpdateTransform) -> ClientUpdate:
    return client_update([FedSGD(FedSGD.Config()), *defences], client)


# --------------------------------------------------------------------------- pruning


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_prune_zeroes_the_smallest_fraction_of_each_tensor(client: Client, fraction: float) -> None:
    plain, pruned = _defended(client), _defended(client, Prune(PruneConfig(fraction)))
    assert pruned.kind == "fedsgd+prune"
    for name, g in plain.gradients.items():
        p, k = pruned.gradients[name], round(fraction * g.numel())
        zeroed = (p == 0) & (g != 0)
        assert int((p == 0).sum()) == max(k, int((g == 0).sum()))  # entries already 0 are the smallest
        assert torch.equal(p[p != 0], g[p != 0])  # kept entries are untouched
        if zeroed.any():
            assert g[zeroed].abs().max() <= g[p != 0].abs().min()  # no zeroed entry is larger than a kept one


def test_prune_breaks_ties_by_position() -> None:
    from leakbench.fl.prune import prune

    assert prune(torch.tensor([1.0, -1.0, 1.0, 2.0]), 0.5).tolist() == [0.0, 0.0, 1.0, 2.0]


# --------------------------------------------------------------------------- quantisation


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_stochastic_quantisation_uses_at_most_2_to_the_bits_levels(client: Client, bits: int) -> None:
    plain, q = _defended(client), _defended(client, UniformQuantise(QuantiseConfig(bits=bits)))
    for name, g in plain.gradients.items():
        levels = torch.unique(q.gradients[name])
        assert 1 < levels.numel() <= 2**bits
        scale = float(g.abs().max())
        step = 2 * scale / (2**bits - 1)
        assert (q.gradients[name] - g).abs().max() <= step * (1 + 1e-5)  # one of the two nearest levels
        assert levels.min() >= -scale * (1 + 1e-6) and levels.max() <= scale * (1 + 1e-6)


def test_stochastic_rounding_is_unbiased() -> None:
    from leakbench.fl.quantise import stochastic_round

    g = torch.linspace(-1, 1, 7, dtype=torch.float64).repeat(20_000, 1)
    q = stochastic_round(g, 2, torch.Generator().manual_seed(0))
    torch.testing.assert_close(q.mean(0), g[0], atol=0.01, rtol=0)


def test_sign_compression_shares_signs(client: Client) -> None:
    plain, q = _defended(client), _defended(client, UniformQuantise(QuantiseConfig(mode="sign")))
    for name, g in plain.gradients.items():
        assert torch.equal(q.gradients[name], torch.sign(g))
    assert UniformQuantise(QuantiseConfig(mode="sign")).label() == "uniform-quantise sign"


# --------------------------------------------------------------------------- Soteria


def _slow_scores(model: Any, images: torch.Tensor, layer: int) -> torch.Tensor:
    """The released code's loop (`GS_attack/reconstruct_image.py`): one backward pass per feature."""
    x = images.clone().requires_grad_(True)
    r = model.layer_inputs(x, layer)
    scores = torch.zeros(r.shape[1])
    for j in range(r.shape[1]):
        (g,) = torch.autograd.grad(r[:, j].sum(), x, retain_graph=True)
        # the released code: ‖∂r_j/∂z‖ for z the normalised image (x = z·std + mean), over r_j + 0.1
        ratio = (g * model.std).reshape(len(x), -1).norm(dim=1) / (r[:, j].detach() + 0.1)
        scores[j] = ratio.sum().abs()
    return scores


@pytest.mark.parametrize("arch,layer", [("fc", 1), ("fc", 2), ("conv", 2)])
def test_soteria_scores_match_the_released_loop(arch: str, layer: int) -> None:
    shape = (3, 8, 8) if arch == "fc" else (3, 16, 16)
    torch.manual_seed(0)  # the test's own model; defences never draw from the global generator
    model = build_fc(shape, 10, width=16, depth=3, seed=0) if arch == "fc" else ConvNet(shape, 10, width=16, depth=3,
                                                                                        channels=2)
    images = torch.rand((3, *shape), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(feature_scores(model, images, layer), _slow_scores(model, images, layer))


def test_soteria_zeroes_the_columns_of_the_lowest_scores(client: Client) -> None:
    plain = _defended(client)
    defended = _defended(client, Soteria(SoteriaConfig(fraction=0.4, layer=2)))
    scores = feature_scores(client.model, client.batch.images, 2)
    cut = sorted(torch.argsort(scores, stable=True)[:round(0.4 * 32)].tolist())
    weight, _ = client.model.layer_param_names(2)
    assert (defended.gradients[weight][:, cut] == 0).all()
    keep = [j for j in range(32) if j not in cut]
    assert torch.equal(defended.gradients[weight][:, keep], plain.gradients[weight][:, keep])
    assert all(torch.equal(defended.gradients[n], g) for n, g in plain.gradients.items() if n != weight)


def _changed(client: Client, defence: UpdateTransform) -> list[str]:
    defended, plain = _defended(client, defence), _defended(client)
    return [n for n, g in plain.gradients.items() if not torch.equal(g, defended.gradients[n])]


@pytest.mark.parametrize("arch", ["fc", "conv"])
def test_soteria_defends_the_papers_placement_by_default(arch: str) -> None:
    """The released code prunes the FC layer that reads the feature extractor's output (`dy_dx[8]` of its
    LeNet, `input_gradient[-2]` of its ConvNet): the victim's last linear layer, FC-6's layer 6, the conv
    victim's last head layer."""
    shape = (3, 8, 8) if arch == "fc" else (3, 16, 16)
    model = build_fc(shape, 10, width=16, depth=6, seed=0) if arch == "fc" else ConvNet(shape, 10, width=16, depth=3,
                                                                                        channels=2)
    images = torch.rand((4, *shape), generator=torch.Generator().manual_seed(1))
    batch = Batch(images, torch.arange(4), (0, 1, 2, 3), "embedded", 10)
    client = Client(model, batch, 0, ThreatModel())
    last = 6 if arch == "fc" else 3
    assert _changed(client, Soteria(SoteriaConfig(fraction=0.9))) == [model.layer_param_names(last)[0]]
    first = 1 if arch == "fc" else 2
    assert _changed(client, SoteriaFirst(SoteriaFirstConfig(fraction=0.5))) == [model.layer_param_names(first)[0]]
    assert _changed(client, Soteria(SoteriaConfig(fraction=0.5, layer=0))) == [model.layer_param_names(first)[0]]


class _Linear(torch.nn.Module):
    """A victim whose layer 1 reads r = x·A (b = 1, x = e_1): feature 0 has r = 0.01 and ‖∂r/∂x‖ = 1,
    feature 1 has r = 1 and ‖∂r/∂x‖ = 20."""

    mean, std = 0.0, 1.0

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([[0.01, 1.0], [math.sqrt(1 - 0.01**2), math.sqrt(399.0)]]))

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1)

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        return images.flatten(1) @ self.a


def test_soteria_divides_by_r_plus_a_tenth() -> None:
    """By ‖∂r/∂x‖ / r feature 0 reveals most (100 against 20) and feature 1 is pruned; by the released code's
    ‖∂r/∂x‖ / (r + 0.1) it is 9.1 against 18.2, and feature 0 is pruned."""
    model, x = _Linear(), torch.tensor([[[[1.0, 0.0]]]])
    torch.testing.assert_close(feature_scores(model, x, 1), torch.tensor([1 / 0.11, 20 / 1.1]))  # type: ignore[arg-type]
    assert soteria_mask(model, x, 1, 0.5).tolist() == [True, False]  # type: ignore[arg-type]


# --------------------------------------------------------------------------- DP in the CPA code's convention


def test_cpa_convention_noise_is_b_times_opacus() -> None:
    per_sample = {"w": torch.zeros(4, 200_000, dtype=torch.float64)}
    opacus = clip_and_noise(per_sample, DPConfig(sigma=2.0, clip=0.5), seed=3)["w"]
    cpa = clip_and_noise(per_sample, DPConfig(sigma=2.0, clip=0.5, convention="cpa"), seed=3)["w"]
    torch.testing.assert_close(cpa, 4 * opacus)  # same seed, same draws: the noise is b times larger
    assert cpa.std().item() == pytest.approx(2.0 * 0.5, rel=0.01)


def test_cpa_convention_epsilon_label_and_columns() -> None:
    cpa = DPConfig(sigma=0.5, clip=1.0, q=0.04, steps=100, convention="cpa")
    assert cpa.epsilon(8) == DPConfig(sigma=4.0, clip=1.0, q=0.04, steps=100).epsilon()
    with pytest.raises(ConfigError, match="batch size"):
        cpa.epsilon()
    assert cpa.label() == "(CPA code) σ=0.5 C=1"
    assert dp_columns(cpa, 8)["dp_convention"] == "cpa"
    assert "dp_convention" not in dp_columns(DPConfig(sigma=0.5, clip=1.0), 8)


def test_the_opacus_convention_keeps_old_cell_ids() -> None:
    old = CellSpec("spear", "embedded", 4, dp=DPConfig(sigma=1e-2, clip=1.0))
    assert "convention" not in spec_dict(old)["dp"]
    cpa = CellSpec("spear", "embedded", 4, dp=DPConfig(sigma=1e-2, clip=1.0, convention="cpa"))
    assert spec_dict(cpa)["dp"]["convention"] == "cpa" and cell_id(cpa) != cell_id(old)
    assert spec_from_dict(spec_dict(cpa)) == cpa and spec_from_dict(spec_dict(old)) == old
    assert cell_columns(cpa)["dp_epsilon"] == DPConfig(sigma=4e-2, clip=1.0).epsilon()


# --------------------------------------------------------------------------- shared behaviour


@pytest.mark.parametrize("defence", [Prune(PruneConfig(0.5)), UniformQuantise(QuantiseConfig(bits=2)),
                                     Soteria(SoteriaConfig(0.5))], ids=lambda d: d.name)
def test_same_seed_same_update(client: Client, defence: UpdateTransform) -> None:
    a, b = _defended(client, defence), _defended(client, defence)
    assert all(torch.equal(a.gradients[n], b.gradients[n]) for n in a.gradients)


def test_quantisation_draws_from_the_client_seed(client: Client) -> None:
    q = UniformQuantise(QuantiseConfig(bits=2))
    other = Client(client.model, client.batch, 1, client.threat)
    first, second = _defended(client, q), _defended(other, q)
    assert not torch.equal(first.gradients["body.0.weight"], second.gradients["body.0.weight"])


@pytest.mark.parametrize("cls,settings,message", [
    (PruneConfig, {"fraction": 1.0}, "fraction"), (PruneConfig, {"fraction": -0.1}, "fraction"),
    (QuantiseConfig, {"bits": 0}, "bits"), (QuantiseConfig, {"bits": 25}, "bits"),
    (QuantiseConfig, {"mode": "round"}, "mode"), (QuantiseConfig, {"mode": "sign", "bits": 2}, "does not apply"),
    (SoteriaConfig, {"fraction": 1.0}, "fraction"), (SoteriaConfig, {"layer": -2}, "layer"),
    (DPConfig, {"sigma": 1.0, "clip": 1.0, "convention": "tf"}, "convention"),
])
def test_bad_settings_are_refused_in_one_line(cls: type, settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        build_config(cls, settings, "key")
    assert "\n" not in str(info.value)


def test_soteria_refuses_a_layer_that_is_not_linear(client: Client) -> None:
    with pytest.raises(ConfigError, match="no linear layer 9"):
        _defended(client, Soteria(SoteriaConfig(layer=9)))


# --------------------------------------------------------------------------- suites


SUITE = """
name = "update-defences"
dataset = "embedded"
attacks = ["ig"]
batch_sizes = [2]
width = 32
depth = 3
"""


@pytest.mark.parametrize("level", ['{ name = "prune", fraction = 0.5 }', '{ name = "uniform-quantise", bits = 4 }',
                                   '{ name = "uniform-quantise", mode = "sign" }',
                                   '{ name = "soteria", fraction = 0.4 }',
                                   '{ name = "soteria", fraction = 0.4, layer = 2 }',
                                   '{ name = "soteria-first", fraction = 0.4 }', '{ name = "qsgd", levels = 16 }',
                                   '{ name = "dp", sigma = 0.1, clip = 1.0, convention = "cpa" }'])
def test_a_suite_level_of_each_defence_builds_cells(tmp_path: Path, level: str) -> None:
    (tmp_path / "plain.toml").write_text(SUITE)
    (tmp_path / "defended.toml").write_text(SUITE + f"defences = [\"none\", {level}]\n")
    plain = load_suite(tmp_path / "plain.toml").cells
    none, defended = load_suite(tmp_path / "defended.toml").cells
    assert [cell_id(c) for c in plain] == [cell_id(none)]
    assert cell_id(defended) != cell_id(none)
    assert spec_from_dict(spec_dict(defended)) == defended


def test_a_threat_level_knows_the_defence(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SUITE + 'defences = [{ name = "prune", fraction = 0.5 }]\n'
                                     'threat = ["default", { defence = "known" }]\n')
    unknown, known = load_suite(tmp_path / "s.toml").cells
    assert not unknown.defence_known and known.defence_known
    assert "defence_known" not in spec_dict(unknown) and "defence_known" not in cell_columns(unknown)
    assert cell_columns(known)["threat"] == "defence known"


# --------------------------------------------------------------------------- the threat model


def test_the_update_lists_its_defences_only_when_they_are_known(client: Client) -> None:
    prune, soteria = Prune(PruneConfig(0.3)), Soteria(SoteriaConfig(0.2))
    assert _defended(client, prune, soteria).defences is None
    known = Client(client.model, client.batch, 0, ThreatModel(defence_known=True))
    assert _defended(known, prune, soteria).defences == ({"name": "prune", "fraction": 0.3},
                                                         {"name": "soteria", "fraction": 0.2, "layer": -1})
    assert _defended(known).defences == ()


def test_masks_follow_what_the_attacker_knows(client: Client) -> None:
    from leakbench.attacks.adaptive import nonzero_masks

    soteria = Soteria(SoteriaConfig(0.5))
    unknown = _defended(client, soteria)
    known = _defended(Client(client.model, client.batch, 0, ThreatModel(defence_known=True)), soteria)
    assert nonzero_masks(unknown) == {}  # unknown: the zeros may be ReLUs that are off (information)
    assert set(nonzero_masks(known)) == {client.model.layer_param_names(3)[0]}  # only the defended weight
    first = _defended(Client(client.model, client.batch, 0, ThreatModel(defence_known=True)),
                      SoteriaFirst(SoteriaFirstConfig(0.5)))
    assert set(nonzero_masks(first)) == {client.model.layer_param_names(1)[0]}
    plain_known = _defended(Client(client.model, client.batch, 0, ThreatModel(defence_known=True)))
    assert nonzero_masks(plain_known) == {}


@pytest.mark.slow
def test_masked_ig_beats_ig_on_a_pruned_update() -> None:
    """90 % pruning: IG asks the dummy image for zero gradient on 90 % of the entries and lands ~10 dB
    below the masked form, which compares only the entries the defence kept (b = 1, FC-2 w64)."""
    from leakbench.attacks import create_attack
    from leakbench.metrics.image import psnr

    batch, model = victim(CellSpec(attack="ig", dataset="embedded", batch_size=1, width=64, depth=2))
    update = client_update([FedSGD(FedSGD.Config()), Prune(PruneConfig(0.9))],
                           Client(model, batch, 0, ThreatModel(labels_known=True, defence_known=True)))
    scores = {name: float(psnr(create_attack(name, iterations=200).reconstruct(update, seed=0).images,
                               batch.images).mean()) for name in ("ig", "ig-masked")}
    assert scores["ig-masked"] > scores["ig"] + 5, scores


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("argv,message", [
    (["--defence-param", "fraction=0.5"], "needs a --defence before it"),
    (["--defence", "prune", "--defence-param", "fraction=2"], "fraction"),
    (["--defence", "prune", "--defence-param", "fraction"], "KEY=VALUE"),
    (["--defence", "prune", "--defence-param", "fraction=0.1", "--defence-param", "fraction=0.2"], "twice"),
    (["--defence", "nope"], "unknown update transform 'nope'"),
    (["--defence", "quantise"], "'quantise' is retired"),
    (["--defence", "dp", "--defence-param", "sigma=1", "--defence-param", "clip=1", "--dp-sigma", "1"], "give one"),
])
def test_bad_defence_options_exit_2_in_one_line(argv: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "--attack", "ig", "--batch-size", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.slow
def test_attack_with_a_defence_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    argv = ["attack", "--attack", "ig", "--batch-size", "1", "--width", "32", "--depth", "2",
            "--param", "iterations=5", "--defence", "prune", "--defence-param", "fraction=0.5",
            "--defence", "uniform-quantise", "--defence-param", "bits=4", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["defence"] == "prune p=0.5 + uniform-quantise 4-bit"
    assert summary["prune_fraction"] == 0.5 and summary["uniform_quantise_bits"] == 4


def test_defence_options_keep_their_order_and_settings() -> None:
    from leakbench.cli import build_parser, defence_options

    args = build_parser().parse_args(["attack", "--attack", "ig", "--batch-size", "1", "--defence", "uniform-quantise",
                                      "--defence-param", "mode=sign", "--defence", "prune",
                                      "--defence-param", "fraction=0.25", "--defence", "noise",
                                      "--defence-param", "sigma=0.001"])
    fields = defence_options(args)
    assert [(d.name, d.config) for d in fields["defences"]] == [("uniform-quantise", QuantiseConfig(mode="sign")),
                                                                ("prune", PruneConfig(0.25)),
                                                                ("noise", NoiseConfig(0.001))]
    assert fields["dp"] is None and "noise" not in fields


# --------------------------------------------------------------------------- one ordered update (issue 42)


ORDERED = SUITE.replace("batch_sizes = [2]", "batch_sizes = [4]") + """defences = [
    [{ name = "prune", fraction = 0.5 }, { name = "noise", sigma = 0.1 }],
    [{ name = "noise", sigma = 0.1 }, { name = "prune", fraction = 0.5 }]]
"""


def _ordered_cells(tmp_path: Path) -> tuple[CellSpec, CellSpec]:
    (tmp_path / "ordered.toml").write_text(ORDERED)
    prune_noise, noise_prune = load_suite(tmp_path / "ordered.toml").cells
    return prune_noise, noise_prune


def test_prune_then_noise_and_noise_then_prune_are_two_updates(tmp_path: Path, client: Client) -> None:
    """The update each cell hands the attack is its steps applied in the order written: noise after
    pruning leaves no exact zero; pruning after noise zeroes half of every tensor."""
    from leakbench.harness.victim import prepare

    prune_noise, noise_prune = _ordered_cells(tmp_path)
    assert [s.name for s in prune_noise.update] == ["fedsgd", "prune", "noise"]
    assert [s.name for s in noise_prune.update] == ["fedsgd", "noise", "prune"]
    assert cell_id(prune_noise) != cell_id(noise_prune)
    prune, noise = Prune(PruneConfig(0.5)), Noise(NoiseConfig(0.1))
    for spec, expected in ((prune_noise, _defended(client, prune, noise)),
                           (noise_prune, _defended(client, noise, prune))):
        update = prepare(spec)[2]
        assert update.gradients.keys() == expected.gradients.keys()
        for name, g in update.gradients.items():
            assert torch.equal(g, expected.gradients[name]), (spec.update, name)
    w1 = client.model.layer_param_names(1)[0]
    zeros = {id(spec): int((prepare(spec)[2].gradients[w1] == 0).sum()) for spec in (prune_noise, noise_prune)}
    numel = prepare(noise_prune)[2].gradients[w1].numel()
    assert zeros[id(prune_noise)] == 0 and zeros[id(noise_prune)] == numel // 2


def test_an_update_written_in_the_old_order_keeps_its_stored_id(tmp_path: Path) -> None:
    """Noise before every defence is kept in the cell's own `noise` field: the id stored before ordered
    updates (8af01fed84ad04a8, computed by main ffc0258) stays; noise after a defence gets its own id."""
    text = ORDERED.replace("batch_sizes = [4]", "batch_sizes = [2]").replace('attacks = ["ig"]', 'attacks = ["spear"]')
    (tmp_path / "old.toml").write_text(text.replace("width = 32\ndepth = 3\n", ""))
    prune_noise, noise_prune = load_suite(tmp_path / "old.toml").cells
    assert cell_id(noise_prune) == "8af01fed84ad04a8"
    assert noise_prune == CellSpec(attack="spear", dataset="embedded", batch_size=2, noise=0.1,
                                   defences=(DefenceSetting("prune", PruneConfig(0.5)),))
    assert cell_id(prune_noise) not in ("8af01fed84ad04a8", cell_id(noise_prune))
    for spec in (prune_noise, noise_prune):
        assert spec_from_dict(json.loads(json.dumps(spec_dict(spec)))) == spec


def test_the_defence_label_names_every_step_in_order(tmp_path: Path) -> None:
    prune_noise, noise_prune = _ordered_cells(tmp_path)
    assert cell_columns(prune_noise)["defence"] == "prune p=0.5 + noise σ=0.1"
    assert cell_columns(prune_noise)["noise_sigma"] == 0.0  # `noise_sigma`: the noise before every defence
    assert (cell_columns(noise_prune)["noise_sigma"], cell_columns(noise_prune)["defence"]) == (0.1, "prune p=0.5")
    assert "defence=prune_p=0.5+noise_σ=0.1" in cell_settings(prune_noise)


def test_cli_defences_in_either_order_are_two_cells() -> None:
    from leakbench.cli import build_parser, defence_options

    def spec(*names: str) -> CellSpec:
        argv = ["attack", "--attack", "ig", "--batch-size", "1"]
        for name in names:
            argv += ["--defence", name, "--defence-param", "sigma=0.1" if name == "noise" else "fraction=0.5"]
        fields = defence_options(build_parser().parse_args(argv))
        return CellSpec(attack="ig", dataset="embedded", batch_size=1, **fields)

    assert [s.name for s in spec("prune", "noise").update] == ["fedsgd", "prune", "noise"]
    assert [s.name for s in spec("noise", "prune").update] == ["fedsgd", "noise", "prune"]
    assert cell_id(spec("prune", "noise")) != cell_id(spec("noise", "prune"))


def test_the_update_is_one_ordered_tuple_of_every_transform() -> None:
    prune = DefenceSetting("prune", PruneConfig(0.5))
    assert [s.name for s in CellSpec(attack="ig", dataset="embedded", batch_size=1).update] == ["fedsgd"]
    assert [(s.name, s.config) for s in CellSpec(attack="ig", dataset="embedded", batch_size=1,
                                                 dp=DPConfig(sigma=0.1, clip=1.0), defences=(prune,)).update] == \
        [("dp", DPConfig(sigma=0.1, clip=1.0)), ("prune", PruneConfig(0.5))]
    no_noise = DefenceSetting("noise", NoiseConfig(0.0))
    spec = CellSpec(attack="ig", dataset="embedded", batch_size=1, defences=(prune, no_noise))
    assert spec.defences == (prune,)  # σ = 0 is no noise, wherever written
    assert [type(t).__name__ for t in transforms(spec)] == ["FedSGD", "Prune"]


@pytest.mark.parametrize("fields,message", [
    ({"noise": 0.1, "defences": (DefenceSetting("prune", PruneConfig(0.5)), DefenceSetting("noise", NoiseConfig(0.1)))},
     "noise once"),
    ({"dp": DPConfig(sigma=0.1, clip=1.0),
      "defences": (DefenceSetting("prune", PruneConfig(0.5)), DefenceSetting("noise", NoiseConfig(0.1)))}, "DP-SGD"),
])
def test_noise_twice_or_beside_dp_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CellSpec(attack="ig", dataset="embedded", batch_size=1, **fields)



# --------------------------------------------------------------------------- renamed: quantise → uniform-quantise


def test_a_suite_naming_quantise_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SUITE + 'defences = ["none", { name = "quantise", bits = 4 }]\n')
    with pytest.raises(ConfigError, match="'quantise' is retired") as info:
        load_suite(tmp_path / "s.toml")
    assert "uniform-quantise" in str(info.value) and "qsgd" in str(info.value) and "\n" not in str(info.value)


def test_a_stored_quantise_cell_reads_back_as_stored() -> None:
    """Cells run before the rename keep their stored name, label, columns and id."""
    spec = CellSpec("ig", "embedded", 2, width=32, depth=3,
                    defences=(DefenceSetting("uniform-quantise", QuantiseConfig(bits=4)),))
    stored = json.loads(json.dumps(spec_dict(spec)).replace('"uniform-quantise"', '"quantise"'))
    back = spec_from_dict(stored)
    assert json.loads(json.dumps(spec_dict(back))) == stored and transforms(back)[-1].label() == "quantise 4-bit"
    assert cell_columns(back)["quantise_bits"] == 4 and cell_id(back) != cell_id(spec)
