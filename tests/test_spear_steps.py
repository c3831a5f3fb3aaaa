"""SPEAR's steps as named functions: the selection step, and which knob each route reads."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch
from spear_helpers import layer_problem  # tests/ is on the path

from leakbench.attacks import attack_class, create_attack
from leakbench.attacks.spear import SpearPaperConfig
from leakbench.attacks.spear.attack import DeflatedSpear
from leakbench.attacks.spear.candidates import zero_tolerance
from leakbench.attacks.spear.search import search_columns
from leakbench.attacks.spear.select import improve_by_swaps, select_independent, sparsity_matching
from leakbench.attacks.spear.state import SearchSettings
from leakbench.attacks.spear.tolerances import TOLERANCES, Tolerances
from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.harness.victim import prepare


def test_selection_takes_sparsest_first_and_skips_dependent_directions() -> None:
    e = torch.eye(3, dtype=torch.float64)
    directions = torch.stack([e[0], e[0] + e[1], e[1], e[2]])
    zeros = torch.tensor([5, 9, 7, 1])
    # sparsest (index 1), then 2; 0 is in their span; 3 completes the basis
    assert select_independent(directions, zeros, 3, rtol=1e-9).tolist() == [1, 2, 3]
    assert select_independent(directions, zeros, 2, rtol=1e-9).tolist() == [1, 2]
    assert select_independent(directions, zeros, 3, rtol=1e-9, pool=3).tolist() == [1, 2]


@pytest.mark.parametrize("attack, knob, value", [
    ("spear", "lp_check", True), ("spear", "last_column", True), ("spear", "second_stage", False),
    ("spear-paper", "sampler", "zeros"), ("spear-paper", "row_weight_power", 1.0),
    ("spear-guided", "lp_check", True), ("spear-dl", "last_column", True),
    ("spear", "zero_tol", 1e-3), ("spear-guided", "pool_start", 2.0), ("spear-dl", "min_remaining", 5)])
def test_a_knob_the_attack_never_reads_is_unknown(attack: str, knob: str, value: object) -> None:
    """spear-paper and the deflated search have separate Configs; the fixed tolerances are no knobs at all."""
    with pytest.raises(ConfigError, match=rf"unknown hyperparameter.*{knob}"):
        create_attack(attack, **{knob: value})


def test_spear_paper_has_no_method_of_the_deflated_search() -> None:
    """spear-paper's Config lacks the deflated search's knobs (`sampler`, `row_weight_power`), so it has none of
    the methods that read them (issue 42; `make types` checks every `self.config` field each attack reads)."""
    paper = attack_class("spear-paper")
    assert not issubclass(paper, DeflatedSpear)
    assert not any(hasattr(paper, method) for method in ("_deflated", "_sources"))
    assert all(issubclass(attack_class(name), DeflatedSpear) for name in ("spear", "spear-guided", "spear-dl"))


def test_tolerances_have_one_home() -> None:
    """No Config field shadows a tolerance, and every SearchSettings field is a budget knob, a
    spear-paper knob, the tolerances object, the next-layer weight check (leakbench's, set by the deflated
    search's column fallback), the stall rule (set from the update, stall.py) or the seconds spent before the search
    (spear-guided's guide, `state.charge_before`): the last three never user knobs."""
    tolerance_names = {f.name for f in fields(Tolerances)}
    for name in ("spear", "spear-paper", "spear-guided", "spear-dl"):
        assert not tolerance_names & {f.name for f in fields(attack_class(name).Config)}, name
    known = {f.name for f in fields(SpearPaperConfig)} | {"tolerances", "label", "next_weight_check", "stall",
                                                       "spent"}
    assert {f.name for f in fields(SearchSettings)} <= known


def test_defaults_never_raise() -> None:
    for name in ("spear", "spear-paper", "spear-guided", "spear-dl"):
        create_attack(name)


def test_next_layer_check_is_gone() -> None:
    with pytest.raises(ConfigError, match=r"unknown hyperparameter.*next_layer_check"):
        create_attack("spear", next_layer_check=False)


def test_second_stage_swaps_a_mixture_for_the_true_column() -> None:
    """Columns of Q from the ground truth (tests may read it): a selection holding q1 + q2 instead of q1
    scores below 1 in sparsity matching, and the second greedy stage swaps q1 back in."""
    problem, X = layer_problem(b=6, width=200)
    C = X @ problem.R.T
    Q = torch.linalg.inv(C)
    Q = Q / Q.norm(dim=0, keepdim=True)
    mix = (Q[:, 0] + Q[:, 1]) / (Q[:, 0] + Q[:, 1]).norm()
    columns = torch.cat([Q.T, mix[None]])
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    assert float(sparsity_matching(problem, Q[None], tol)[0]) == pytest.approx(1.0)
    wrong = torch.tensor([6, 1, 2, 3, 4, 5])
    assert float(sparsity_matching(problem, columns[wrong].T[None], tol)[0]) < 0.99
    zeros = torch.tensor([10, 10, 10, 10, 10, 10, 50])  # the mixture looks sparsest: the first stage takes it
    picked = improve_by_swaps(problem, columns, wrong, zeros, tol, pool=7)
    assert sorted(picked.tolist()) == [0, 1, 2, 3, 4, 5]


def test_scheduler_asks_sources_in_order_and_counts_turns() -> None:
    """The first source that takes the turn runs; the ones after it are not asked; `shares_turn` is the rule."""
    from leakbench.attacks.spear.scheduler import Scheduler, shares_turn

    class Source:
        def __init__(self, name: str, takes: object) -> None:
            self.name, self.takes, self.seen = name, takes, []

        def turn(self, search: object, asked: int) -> bool:
            self.seen.append(asked)
            return bool(self.takes(asked))  # type: ignore[operator]

        def stats(self) -> dict:
            return {f"{self.name}_seen": len(self.seen)}

    first = Source("first", lambda asked: not shares_turn(asked, stalled=True))  # odd turns
    last = Source("last", lambda asked: True)
    scheduler = Scheduler([first, last])
    taken = [scheduler.turn(None) for _ in range(4)]  # type: ignore[arg-type]
    assert taken == ["first", "last", "first", "last"]
    assert first.seen == [1, 2, 3, 4] and last.seen == [1, 2]
    assert scheduler.stats() == {"turns_first": 2, "turns_last": 2, "first_seen": 4, "last_seen": 2}


def _paper_run(**params: object) -> dict:
    """spear-paper on embedded b = 6, batch seed 0, attack seed 0 (the same draws whatever the knobs)."""
    _, _, update = prepare(CellSpec(attack="spear-paper", dataset="embedded", batch_size=6, seed=0, width=200))
    recon = create_attack("spear-paper", max_seconds=60.0, **params).reconstruct(update, seed=0)
    return {"status": recon.status, **recon.stats}


@pytest.mark.slow
def test_unique_gap_is_read_by_the_column_search() -> None:
    """σ_{b−1} > 1·σ_1 never holds: no candidate passes the filter, so the search ends at its draw budget. (The time
    budget is out of reach: at 60 s, 4 threads sharing 2 loaded cores stopped it at 8,192 draws.)"""
    problem, _ = layer_problem(b=6, width=200)
    tight = SearchSettings(max_draws=20_000, max_seconds=3600.0, chunk=4096,
                           tolerances=replace(TOLERANCES, unique_gap=1.0))
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    state, solution = search_columns(problem, tol, tight, torch.Generator().manual_seed(0))
    assert solution is None and state.found == 0 and state.draws >= 20_000


@pytest.mark.slow
def test_spear_paper_is_exact_and_last_column_is_read() -> None:
    """As published (no LP check, no closed-form last column) it is exact at b = 6; the closed-form last
    column (a leakbench addition, off by default) finds the 6th column without drawing it."""
    plain, closed = _paper_run(), _paper_run(last_column=True, lp_check=True)
    assert plain["status"] == closed["status"] == "ok"
    assert plain["mode"] == "sampling" and closed["mode"] == "sampling+lp"
    assert closed["last_sample_closed_form"] is True and plain["last_sample_closed_form"] is False


def test_every_function_in_the_step_table_exists() -> None:
    """The package docstring's step → function table names real functions (`module.name`, and the
    bare names after a comma continue the module before them)."""
    import importlib
    import re

    import leakbench.attacks.spear as spear

    doc = spear.__doc__ or ""
    table = doc[doc.index("Paper step → function"):doc.index("Knobs:")]
    named = 0
    for line in table.splitlines():
        module = None
        for token in re.findall(r"\b([a-z_]+)\.([A-Za-z_]+)\b|,\s*([A-Za-z_]+)\b(?!\.)", line):
            mod, name, bare = token
            if mod:
                module = importlib.import_module(f"leakbench.attacks.spear.{mod}")
            elif module is None:
                continue
            assert hasattr(module, name or bare), f"{module.__name__}.{name or bare} named in the table"
            named += 1
    assert named >= 30


def test_records_stored_before_a_knob_was_removed_keep_their_budget() -> None:
    """A record's full hyperparameters from before `next_layer_check` was removed still give its budget."""
    from dataclasses import asdict

    from leakbench.attacks import attack_budget

    stored = {**asdict(create_attack("spear", max_draws=300000).config), "next_layer_check": True}
    assert attack_budget("spear", stored) == "300,000 draws, 900 s"
