"""Discoverability (issue 14): every hyperparameter shown with type, default and help; shipped suites
listed and planned without running anything."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from leakbench.attacks import ATTACKS, attack_class
from leakbench.attacks.params import config_params, field_help
from leakbench.cell.spec import cell_id
from leakbench.cli import main
from leakbench.harness.suite import list_suites, load_suite

SUITE = """\
name = "plan-me"
dataset = "embedded"
attacks = ["spear", "ig"]
batch_sizes = [1, 2]
layers = [1, 2]
dp = ["none", { sigma = 1e-4, clip = 1.0 }]
[hyperparameters.ig]
iterations = 5
"""


@pytest.mark.parametrize("name", ATTACKS.names())
def test_every_field_of_every_attack_has_help(name: str) -> None:
    config = attack_class(name).Config
    params = config_params(config)
    assert [p.name for p in params] == [f.name for f in fields(config)]
    assert all(p.help.strip() for p in params), [p.name for p in params if not p.help.strip()]
    assert all(p.type for p in params)


@dataclass(frozen=True)
class _Base:
    """Base.

    alpha / beta: shared help,
        continued here.
    gamma: base help.
    """

    alpha: int = 1
    beta: float = 2.0
    gamma: str = "g"


@dataclass(frozen=True)
class _Child(_Base):
    """Child.

    gamma: overridden help.
    delta: one line.
    Not an entry: a note at the margin ends the entry above.
    unknown: not a field, so not an entry.
    """

    delta: bool = False


def test_docstring_entries_grouped_continued_and_inherited() -> None:
    helps = field_help(_Child)
    assert helps == {"alpha": "shared help, continued here.", "beta": "shared help, continued here.",
                     "gamma": "overridden help.", "delta": "one line."}
    assert [p.line() for p in config_params(_Child)][-1] == "delta (bool, default False): one line."


@pytest.mark.slow
def test_list_attacks_params(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "attacks", "--params"]) == 0
    out = capsys.readouterr().out
    for name in ATTACKS.names():
        assert any(line.startswith(name + " ") for line in out.splitlines())
        for p in config_params(attack_class(name).Config):
            assert f"    {p.name} ({p.type}{p.range}, default {p.default!r}): {p.help}" in out


@pytest.mark.slow
def test_show_attack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "attack", "spear-guided"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("spear-guided: ")
    assert "  refine_first (bool, default False): try each guide's whole pool as a zero set" in out
    assert "  max_seconds (float in (0, 604800], default 900.0): budget of the search" in out  # inherited
    assert "  guide (str, default 'cpa'): " in out  # no range for a string


@pytest.mark.slow
def test_show_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "dataset", "digits"]) == 0
    assert "1,797" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["show", "attack", "nope"], ["show", "dataset", "nope"],
                                  ["list", "datasets", "--params"], ["run", "no-such-suite", "--plan"]])
def test_discovery_bad_input_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakbench: error:") and captured.out == ""


@pytest.mark.slow
def test_list_suites(capsys: pytest.CaptureFixture[str]) -> None:
    names = {name for name, _ in list_suites()}
    assert {"default", "nightly", "paper/dp", "paper/spear-batch-size"} <= names
    assert main(["list", "suites"]) == 0
    assert "paper/dp" in capsys.readouterr().out


@pytest.mark.slow
def test_run_plan_prints_cells_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plan-me.toml"
    path.write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--plan", "--out", "o", "--reports", "r"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    cells = load_suite(path).cells
    assert len(cells) == 12  # spear: 2 b × 2 layers × 2 dp; ig: 2 b × 2 dp (layer axis does not apply)
    assert lines[-1].startswith("12 cells in suite plan-me")
    assert [line.split()[0] for line in lines[:-1]] == [cell_id(c) for c in cells]
    assert "ig embedded b=2 FC-6 w200 layer=1 dp=σ=0.0001 C=1 client=FedSGD seed=0 {\"iterations\":5}" in lines[-2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan-me.toml"]


@pytest.mark.slow
def test_run_plan_of_a_shipped_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "paper/spear-layers", "--plan"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith(f"{len(lines) - 1} cells in suite paper-spear-layers")
