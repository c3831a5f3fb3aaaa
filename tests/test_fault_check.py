"""Issue 12's bad inputs and faults, one test each, through `benchmarks/fault_check.py`'s own cases.

Every bad input runs the real CLI in a subprocess (all of them at once: they are mostly interpreter
start-up) and must be refused cleanly: exit 2, exactly one `leakbench: error:` line on stderr, nothing
on stdout, the case folder unchanged. Every fault scenario (damaged cell folders, user files in output
folders, Ctrl-C with --jobs 2, a manifest naming a path outside --reports) must recover, and so must issue
22's faults (marked slow). The regression cases that behaved before issue 12 run with the whole script
(`python benchmarks/fault_check.py`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import fault_check_with_zygote, load_benchmark

fault_check = fault_check_with_zygote(load_benchmark("fault_check"))

# The cases run the real CLI in subprocesses (a module fixture runs them all first): `make test` only.
pytestmark = pytest.mark.slow
BAD = [case for case in fault_check.ISSUE_12]
FAULTS = [case for case in fault_check.FAULTS if 0 < case.item <= 10]
FAULTS_22 = [case for case in fault_check.FAULTS if case.item == 22]
"""Issue 22's faults (signals, same-name suites, code changes, other images, disk full, foreign temporary
names, interrupted reports): slow (the SIGTERM case interrupts and resumes a 16-cell run)."""


@pytest.fixture(scope="module")
def bad_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("bad")
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda case: fault_check.check_bad_input(case, root), BAD))
    return {case.name: outcome for case, outcome in zip(BAD, outcomes, strict=True)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fault_check.reference_run(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder holding every fault case's folder, as the script lays them out: the signal scenarios on
    SLOW_SUITE then share its uninterrupted reference (made once, in `_reference_slow` beside the
    case folders) instead of making it again for each case."""
    return tmp_path_factory.mktemp("cases")


@pytest.mark.parametrize("case", BAD, ids=[f"item{c.item}-{c.name}" for c in BAD])
def test_bad_input_is_refused_cleanly(bad_outcomes: dict[str, object], case) -> None:
    outcome = bad_outcomes[case.name]
    assert outcome.ok, outcome.detail
    assert outcome.outside == 0 and outcome.deleted == 0


@pytest.mark.parametrize("case", FAULTS, ids=[f"item{c.item}-{c.name}" for c in FAULTS])
def test_fault_is_recovered(reference: Path, case, cases: Path) -> None:
    outcome = fault_check.run_fault(case, cases / case.name, reference)
    assert outcome.ok, outcome.detail
    assert outcome.outside == 0 and outcome.deleted == 0


@pytest.mark.parametrize("case", FAULTS_22, ids=[c.name for c in FAULTS_22])
def test_issue_22_fault_is_recovered(reference: Path, case, cases: Path) -> None:
    outcome = fault_check.run_fault(case, cases / case.name, reference)
    assert outcome.ok, outcome.detail
    assert outcome.outside == 0 and outcome.deleted == 0


def test_every_issue_12_item_has_a_case() -> None:
    assert {c.item for c in [*BAD, *FAULTS]} == set(range(1, 11))


def test_layer_as_a_hyperparameter_is_refused(tmp_path: Path) -> None:
    """Found by the regression cases: `--param layer=2 --layer 3` attacked layer 2 and recorded layer 3."""
    case = next(c for c in fault_check.REGRESSION if c.name == "attack_param_layer_conflict")
    outcome = fault_check.check_bad_input(case, tmp_path)
    assert outcome.ok, outcome.detail
