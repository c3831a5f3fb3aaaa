"""SPEAR's steps as named functions: the selection step, and which knob each route reads."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear import SpearConfig
from leakbench.attacks.spear.attack import ROUTE_ONLY, ROUTES
from leakbench.attacks.spear.select import select_independent
from leakbench.attacks.spear.state import SearchSettings
from leakbench.errors import ConfigError
from leakbench.harness.spec import CellSpec
from leakbench.harness.victim import prepare


def test_selection_takes_sparsest_first_and_skips_dependent_directions() -> None:
    e = torch.eye(3, dtype=torch.float64)
    directions = torch.stack([e[0], e[0] + e[1], e[1], e[2]])
    zeros = torch.tensor([5, 9, 7, 1])
    # sparsest (index 1), then 2; 0 is in their span; 3 completes the basis
    assert select_independent(directions, zeros, 3, rtol=1e-9).tolist() == [1, 2, 3]
    assert select_independent(directions, zeros, 2, rtol=1e-9).tolist() == [1, 2]
    assert select_independent(directions, zeros, 3, rtol=1e-9, pool=3).tolist() == [1, 2]


@pytest.mark.parametrize("knob, route", sorted(ROUTE_ONLY.items()))
def test_a_knob_of_one_route_raises_on_the_other_naming_knob_and_route(knob: str, route: str) -> None:
    other = next(r for r in ROUTES if r != route)
    value = {"residual_tol": 1e-3, "sampler": "zeros", "row_weight_power": 1.0, "unique_gap": 1e-3,
             "last_column": False}[knob]
    assert value != SpearConfig.__dataclass_fields__[knob].default
    with pytest.raises(ConfigError, match=rf"route={other} ignores {knob} \(read only by route={route}"):
        create_attack("spear", route=other, **{knob: value})
    create_attack("spear", route=route, **{knob: value})  # its own route takes it


def test_route_only_table_names_real_knobs_and_routes() -> None:
    assert set(ROUTE_ONLY) <= set(SpearConfig.__dataclass_fields__)
    assert set(ROUTE_ONLY.values()) <= set(ROUTES)


def test_defaults_never_raise_on_either_route_and_variants() -> None:
    for route in ROUTES:
        create_attack("spear", route=route)
    create_attack("spear-guided")
    create_attack("spear-dl")


def test_next_layer_check_is_gone_route_paper_is_its_one_home() -> None:
    with pytest.raises(ConfigError, match=r"unknown hyperparameter.*next_layer_check"):
        create_attack("spear", next_layer_check=False)


def test_search_settings_are_spear_config_fields() -> None:
    """SearchSettings is the run's view of SpearConfig, not a second home for knobs."""
    assert {f.name for f in fields(SearchSettings)} - {"label"} <= set(SpearConfig.__dataclass_fields__)


@pytest.mark.slow
def test_cli_refuses_a_knob_the_route_ignores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    rc = main(["attack", "--attack", "spear", "--batch-size", "2", "--param", "route=paper", "--param",
               "sampler=zeros", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "route=paper ignores sampler" in err[0], err


def _paper_run(**params: object) -> dict:
    """Route=paper on embedded b = 6, batch seed 0, attack seed 0 (the same draws whatever the knobs)."""
    _, _, update = prepare(CellSpec(attack="spear", dataset="embedded", batch_size=6, seed=0, width=200))
    recon = create_attack("spear", route="paper", max_seconds=60.0, **params).reconstruct(update, seed=0)
    return {"status": recon.status, **recon.stats}


@pytest.mark.slow
def test_unique_gap_is_read_by_the_paper_route() -> None:
    """σ_{b−1} > 1·σ_1 never holds: no candidate passes the filter, so the run fails at its draw budget."""
    stats = _paper_run(unique_gap=1.0, max_draws=20_000)
    assert stats["status"] == "failed" and stats["samples_found"] == 0


@pytest.mark.slow
def test_last_column_is_read_by_the_paper_route() -> None:
    """Measured: the 6th column comes in closed form with last_column (45 k draws), else from 2× the draws."""
    on, off = _paper_run(), _paper_run(last_column=False)
    assert on["status"] == off["status"] == "ok"
    assert on["last_sample_closed_form"] is True and off["last_sample_closed_form"] is False
    assert off["draws"] > on["draws"]


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
