"""SPEAR fails fast where its structure cannot be seen (issue 44, `attacks.spear.applicability`): refused before any
search under strong noise, pruning and quantisation, with the reason; never refused undefended, nor under a mild
defence SPEAR attacks, nor in its adaptive forms. Bounds and properties only, no timing asserts."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear.applicability import (
    quantisation_levels,
    rows_above_floor,
    structure_refusal,
    unexplained_zeros,
)
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.fl.noise import add_noise
from leakbench.fl.prune import prune
from leakbench.fl.quantise import stochastic_round
from leakbench.models import build_model

FAMILY = ("spear", "spear-guided", "spear-paper", "spear-dl")
"""The SPEAR family the check runs for (every registered SPEAR search without `adapts_to`)."""


def _clean(b: int, *, width: int = 100, depth: int = 3, seed: int = 0, arch: str = "fc",
           threat: ThreatModel | None = None) -> ClientUpdate:
    """The FedSGD update of `b` embedded images on a victim at init."""
    ds = load_dataset("embedded")
    model = build_model(arch, ds.image_shape, ds.num_classes, width=width, depth=depth, seed=seed)
    return fedsgd_update(model, sample_batch(ds, b, seed=seed), threat or ThreatModel())


def _pruned(update: ClientUpdate, fraction: float) -> ClientUpdate:
    return update.with_gradients({k: prune(g, fraction) for k, g in update.gradients.items()}, "prune")


def _quantised(update: ClientUpdate, bits: int) -> ClientUpdate:
    gen = torch.Generator().manual_seed(0)
    return update.with_gradients({k: stochastic_round(g, bits, gen) for k, g in update.gradients.items()},
                                 "uniform-quantise")


DEFENDED = {"noise": (lambda u: add_noise(u, 1e-2, 1), "above SPEAR's zero test"),
            "prune": (lambda u: _pruned(u, 0.9), "exact zeros (pruned)"),
            "quantise": (lambda u: _quantised(u, 2), "levels (quantised)")}
"""FC-3 w100 b = 8 under each defence at a level SPEAR's zero test cannot see through, and what the reason says."""


@pytest.mark.parametrize("defence", sorted(DEFENDED))
@pytest.mark.parametrize("attack", FAMILY)
def test_refused_before_any_search_with_the_reason(attack: str, defence: str) -> None:
    """Old code: spear-paper spent its budget (failure "budget"), the deflated ones ran their sources (the guide,
    the dictionary) before finding nothing to draw."""
    transform, words = DEFENDED[defence]
    update = transform(_clean(8))
    result = create_attack(attack, max_seconds=20).reconstruct(update, seed=0)
    assert result.status == "failed" and result.failure == "not-applicable"
    assert result.reason.startswith("not applicable: ") and words in result.reason
    assert result.stats["mode"] == "not applicable" and result.stats["draws"] == 0  # no search ran
    assert result.stats["rows_above_floor"] < result.stats["rows_needed"]


@pytest.mark.parametrize("b,width,depth,seed", [(2, 100, 3, 0), (4, 100, 3, 1), (8, 100, 3, 2), (16, 200, 3, 0),
                                                (32, 200, 6, 1), (8, 200, 6, 2)])
def test_never_refused_undefended(b: int, width: int, depth: int, seed: int) -> None:
    update = _clean(b, width=width, depth=depth, seed=seed)
    problem = create_attack("spear").layer_problem(update)
    verdict = structure_refusal(problem, update.gradients[update.model.layer_param_names(1)[0]])
    assert verdict.applicable and verdict.reason == ""
    assert rows_above_floor(problem) >= problem.m - 1  # at the rounding level every live neuron stands above


@pytest.mark.parametrize("arch", ["conv", "resnet"])
def test_never_refused_after_a_trunk(arch: str) -> None:
    """The FC head after a conv or BatchNorm trunk (layer 2), undefended."""
    update = _clean(4, width=64, depth=3, arch=arch)
    attack = create_attack("spear", layer=2)
    problem = attack.layer_problem(update)
    assert structure_refusal(problem, update.gradients[update.model.layer_param_names(2)[0]]).applicable


def test_mild_noise_is_left_to_the_search() -> None:
    """σ = 1e-4 on FC-3 w100 b = 4: SPEAR still answers (verified samples), so the check lets it run."""
    result = create_attack("spear", max_seconds=300).reconstruct(add_noise(_clean(4), 1e-4, 1), seed=0)
    assert result.failure != "not-applicable" and not result.reason.startswith("not applicable")
    assert result.answered


@pytest.mark.parametrize("attack,defence", [("spear-approx", "noise"), ("spear-approx", "quantise"),
                                            ("spear-masked", "prune")])
def test_adaptive_forms_are_never_refused(attack: str, defence: str) -> None:
    transform, _ = DEFENDED[defence]
    update = transform(_clean(8, threat=ThreatModel(defence_known=True)))
    update = dataclasses.replace(update, defences=({"name": "prune", "fraction": 0.9},)) if defence == "prune" \
        else update
    result = create_attack(attack, max_draws=2_000, max_seconds=60).reconstruct(update, seed=0)
    assert not result.reason.startswith("not applicable") and result.failure != "not-applicable"
    assert result.stats.get("mode") != "not applicable"


def test_the_approximate_form_of_spear_paper_is_never_refused() -> None:
    """`return_unverified` answers the best batch as the paper scores SPEAR under noise: an answer, not a refusal."""
    transform, _ = DEFENDED["noise"]
    result = create_attack("spear-paper", return_unverified=True, max_draws=2_000, max_seconds=60).reconstruct(
        transform(_clean(8)), seed=0)
    assert result.stats.get("mode") != "not applicable" and result.failure != "not-applicable"


def test_signature_of_quantised_and_pruned_gradients() -> None:
    update = _clean(8)
    G = update.gradients[update.model.layer_param_names(1)[0]]
    assert quantisation_levels(G) is None and unexplained_zeros(G) == 0.0
    levels = quantisation_levels(_quantised(update, 4).gradients[update.model.layer_param_names(1)[0]])
    assert levels is not None and levels <= 16
    pruned = prune(G, 0.9)
    assert quantisation_levels(pruned) is None  # few non-zero entries, each its own value: not a grid
    assert unexplained_zeros(pruned) > 0.5


@pytest.mark.parametrize("attack", ["spear", "spear-guided"])
def test_a_stalled_search_on_a_defended_update_stops_on_the_stall_rule(attack: str) -> None:
    """8-bit quantisation on FC-3 w200 b = 16 (embedded): the structure check lets the search run (its zeros are
    mostly kept), and the draws find no sample. Old code: every draw of the budget, then "time budget spent". Now the
    stall rule stops it after its limit in draws, with the reason and the update's evidence; failed or partial, never
    scored as no leakage by silence."""
    update = _quantised(_clean(16, width=200), 8)
    result = create_attack(attack, max_draws=10**9, max_seconds=600).reconstruct(update, seed=0)
    assert "no new sample in the last" in result.reason and "levels (quantised)" in result.reason
    assert "time budget" not in result.reason and result.stats["draws"] < 10**9
    if result.status == "failed":
        assert result.failure == "not-applicable"
        assert result.reason.startswith("not applicable: ") == (result.stats["samples_found"] == 0)


def test_the_stall_rule_counts_draws_since_the_best_count() -> None:
    """No stop before the limit; a new best count restarts it; a count that drops and comes back is no progress;
    columns kept beyond b are no progress; the deflated route's draws take fewer rows as samples are found."""
    from leakbench.attacks.spear.samples import SampleState
    from leakbench.attacks.spear.search import ColumnState
    from leakbench.attacks.spear.stall import StallRule
    from leakbench.attacks.spear.state import stalled

    rule = StallRule(b=8, evidence="test", factor=10.0, min_draws=1)
    columns = ColumnState(columns=torch.zeros(0, 8))
    limit = rule.limit(columns.draw_rows(8), 8)
    assert limit == 10 * 2**7 / 8
    columns.draws = int(limit) - 1
    assert not stalled(columns, rule) and not columns.stalled
    columns.columns = torch.zeros(3, 8)
    columns.draws += 5
    assert not stalled(columns, rule) and columns.best_found == 3  # progress: the count restarts here
    restart = columns.progress_draw
    for count in (2, 3):  # down (a sample set aside) and back up: no progress
        columns.columns = torch.zeros(count, 8)
        columns.draws += 1
        assert not stalled(columns, rule) and columns.best_found == 3 and columns.progress_draw == restart
    columns.draws = restart + int(rule.limit(7, 5)) - 1
    assert not stalled(columns, rule)
    columns.columns = torch.zeros(20, 8)  # beyond b: counted as b
    assert not stalled(columns, rule) and columns.best_found == 8
    columns.draws += int(rule.limit(7, 1))
    assert stalled(columns, rule) and "no new sample" in columns.stalled
    samples = SampleState(samples=torch.zeros(5, 8))
    assert samples.draw_rows(8) == 2 and columns.draw_rows(8) == 7
    assert rule.limit(2, 3) < rule.limit(7, 3)


def test_no_stall_rule_without_a_defence_nor_for_the_forms_that_answer_anyway() -> None:
    update = _clean(16, width=200)
    quantised = _quantised(update, 8)
    spear = create_attack("spear")
    assert spear._stall_rule(spear.layer_problem(update), update) is None
    rule = spear._stall_rule(spear.layer_problem(quantised), quantised)
    assert rule is not None and rule.b == 16 and "quantised" in rule.evidence
    for attack in (create_attack("spear-approx"), create_attack("spear-paper", return_unverified=True)):
        assert attack._stall_rule(attack.layer_problem(quantised), quantised) is None
