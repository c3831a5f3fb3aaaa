"""Baselines as published (issue 15): the presets' values, IG's TV forms, the checkpoint hook.

The published values are written out here, from their sources, independently of
`leakbench.attacks.presets.PRESETS`: a value that drifts there fails here.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from leakbench.attacks import ATTACKS, attack_class, create_attack
from leakbench.attacks.base import Checkpoints, Reconstruction
from leakbench.attacks.cpa import total_variation
from leakbench.attacks.gradient_matching import TV_FORMS, padded_total_variation
from leakbench.attacks.params import field_help
from leakbench.attacks.presets import PRESETS
from leakbench.core.errors import ConfigError
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import fedsgd_update
from leakbench.models import build_fc

# The released Cocktail Party Attack code: Adam, lr 1e-3, 25,000 steps; Tiny-ImageNet FC-2 values.
CPA_RELEASED = {"method": "official", "iterations": 25_000, "lr": 1e-3, "decor": 1.47, "temperature": 12.4,
                "tv": 3.1, "prefilter": "none"}
# breaching's config/attack/invertinggradients.yaml.
IG_BREACHING = {"iterations": 24_000, "restarts": 1, "step_size": 0.1, "tv": 0.2, "tv_form": "breaching",
                "signed": True, "boxed": True, "decay": True}


def _case(b: int, *, width: int = 32, depth: int = 2, seed: int = 0):
    ds = load_dataset("embedded")
    batch = sample_batch(ds, b, seed)
    model = build_fc(ds.image_shape, ds.num_classes, width=width, depth=depth, seed=seed)
    return batch, model, fedsgd_update(model, batch)


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name,published", [("cpa-released", CPA_RELEASED), ("ig-breaching", IG_BREACHING),
                                            ("cpa-derivative", {"method": "fastica", "prefilter": "derivative"})])
def test_presets_resolve_to_published_values(name: str, published: dict) -> None:
    assert name in ATTACKS.names()
    config = asdict(create_attack(name).config)
    assert {k: config[k] for k in published} == published


def test_presets_leave_the_cpu_sized_defaults_alone() -> None:
    cpa, ig = asdict(create_attack("cpa").config), asdict(create_attack("ig").config)
    assert (cpa["method"], cpa["iterations"]) == ("fastica", 2000)
    assert (ig["iterations"], ig["tv_form"]) == (500, "inversefed")


def test_preset_values_override_and_keep_the_rest() -> None:
    attack = create_attack("cpa-released", iterations=10)
    assert attack.config.iterations == 10 and attack.config.decor == 1.47
    assert attack.hyperparameters()["iterations"] == 10  # what a record stores: the budget
    with pytest.raises(ConfigError, match="unknown hyperparameter"):
        create_attack("ig-breaching", nonsense=1)


def test_presets_document_every_field_and_their_source() -> None:
    for preset in PRESETS:
        cls = attack_class(preset.name)
        assert issubclass(cls, preset.base) and cls.Config.__dataclass_params__.frozen
        helps = field_help(cls.Config)
        assert all(helps.get(f) for f in cls.Config.__dataclass_fields__)
        assert preset.source in cls.Config.__doc__ and cls.description == preset.description
        assert preset.published == ("not in the paper" not in preset.description)  # an addition says so


# --------------------------------------------------------------------------- IG's TV forms


def test_tv_forms_on_a_small_tensor() -> None:
    x = torch.tensor([[[[1.0, 2.0], [3.0, 5.0]]]])
    # inversefed: mean|dx| = (1 + 2) / 2, mean|dy| = (2 + 3) / 2.
    assert float(total_variation(x)) == pytest.approx(4.0)
    # breaching: zero padding adds the border values: |dx| = 1, 2, 2, 5; |dy| = 2, 3, 3, 5; mean over 4 pixels.
    assert float(padded_total_variation(x)) == pytest.approx(23 / 4, abs=1e-6)
    assert TV_FORMS["inversefed"] is total_variation and TV_FORMS["breaching"] is padded_total_variation


def test_breaching_tv_is_breachings_convolution() -> None:
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(0))
    kernel = torch.tensor([[0.0, 0, 0], [0, -1, 1], [0, 0, 0]])[None, None]
    weight = torch.cat([kernel.transpose(2, 3), kernel], 0).repeat(3, 1, 1, 1)  # breaching's grad_weight
    diffs = F.conv2d(x, weight, padding=1, groups=3)
    expected = ((diffs.abs() + 1e-8)[:, 0::2] + (diffs.abs() + 1e-8)[:, 1::2]).mean()
    assert float(padded_total_variation(x)) == pytest.approx(float(expected), rel=1e-6)
    assert float(total_variation(x)) != pytest.approx(float(expected), rel=1e-3)


@pytest.mark.slow
def test_ig_tv_form_changes_the_run_and_is_checked() -> None:
    _, _, update = _case(2)
    a = create_attack("ig", iterations=5).reconstruct(update, seed=0)
    b = create_attack("ig", iterations=5, tv_form="breaching").reconstruct(update, seed=0)
    assert not torch.equal(a.images, b.images)
    with pytest.raises(ConfigError, match="tv_form"):
        create_attack("ig", tv_form="isotropic").check_update(update)


# --------------------------------------------------------------------------- checkpoints


def _collect() -> tuple[dict[int, Reconstruction], Checkpoints]:
    seen: dict[int, Reconstruction] = {}
    return seen, Checkpoints(frozenset({3, 7}), lambda step, recon: seen.setdefault(step, recon))


@pytest.mark.slow
@pytest.mark.parametrize("attack,params", [("cpa-released", {}), ("ig", {"decay": False})])
def test_checkpoints_equal_shorter_runs_and_leave_the_answer(attack: str, params: dict) -> None:
    _, _, update = _case(3)
    seen, checkpoints = _collect()
    full = create_attack(attack, iterations=10, **params).reconstruct(update, seed=0, checkpoints=checkpoints)
    plain = create_attack(attack, iterations=10, **params).reconstruct(update, seed=0)
    assert torch.equal(full.images, plain.images)
    assert sorted(seen) == [3, 7]
    for step, recon in seen.items():
        short = create_attack(attack, iterations=step, **params).reconstruct(update, seed=0)
        assert torch.allclose(recon.images, short.images, atol=1e-6), step
        assert recon.stats["iterations"] == step


@pytest.mark.slow
def test_checkpoints_refused_where_there_are_no_steps() -> None:
    _, _, update = _case(2)
    _, checkpoints = _collect()
    with pytest.raises(ConfigError, match="official"):
        create_attack("cpa").reconstruct(update, seed=0, checkpoints=checkpoints)
    with pytest.raises(ConfigError, match="restarts"):
        create_attack("ig", iterations=4, restarts=2).reconstruct(update, seed=0, checkpoints=checkpoints)


# --------------------------------------------------------------------------- budgets in tables


def test_budget_words_come_from_the_stored_hyperparameters() -> None:
    from leakbench.attacks import attack_budget

    stored = create_attack("cpa-released").hyperparameters()
    assert attack_budget("cpa-released", stored) == "25,000 steps"
    assert attack_budget("ig-breaching", create_attack("ig-breaching").hyperparameters()) == "24,000 steps"
    assert attack_budget("cpa", {}) == "FastICA ≤ 1,000 iterations"  # FastICA has no steps
    assert attack_budget("ig", {"iterations": 200, "restarts": 4}) == "200 steps × 4"
    assert attack_budget("not-installed", {}) == ""


# --------------------------------------------------------------------------- suites


def test_paper_suites_run_the_baselines_as_published_and_the_default_suite_stays_cpu_sized() -> None:
    from leakbench.harness.suite import load_suite, shipped_suite

    published = {p.name: p.values for p in PRESETS if p.published}
    seen = set()
    for name in ("dp", "fedavg", "conv", "conv-embedded"):
        cells = load_suite(shipped_suite(f"paper/{name}")).cells
        attacks = {c.attack for c in cells}
        assert "ig" not in attacks and {"ig-breaching", "cpa-released"} <= attacks, name
        for cell in cells:
            if cell.attack in published:  # no suite shrinks a published budget
                seen.add(cell.attack)
                assert not set(cell.hyperparameters) & set(published[cell.attack]), (name, cell.attack)
    assert seen == {"cpa-released", "ig-breaching"}
    default = load_suite(shipped_suite("default")).cells
    assert {c.hyperparameters.get("iterations") for c in default if c.attack == "ig"} == {100}  # smoke-test budget
    assert not {c.attack for c in default} & set(published)
