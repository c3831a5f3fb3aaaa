"""Issue 22's bad inputs, one test each, through `benchmarks/fault_check.py`'s own cases (item 22).

Every case runs the real CLI in a subprocess (all of them at once: they are mostly interpreter
start-up) and must be refused cleanly: exit 2, exactly one `leakbench: error:` line on stderr naming
what is wrong, nothing on stdout, the case folder unchanged (nothing written, nothing deleted).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import fault_check_with_zygote, load_benchmark

fault_check = fault_check_with_zygote(load_benchmark("fault_check"))

# The cases run the real CLI in subprocesses (a module fixture runs them all first): `make test` only.
pytestmark = pytest.mark.slow
CASES = fault_check.ISSUE_22


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("bad22")
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: fault_check.check_bad_input(case, root), CASES))
    return {case.name: outcome for case, outcome in zip(CASES, results, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_cleanly(outcomes: dict[str, object], case) -> None:
    outcome = outcomes[case.name]
    assert outcome.ok, outcome.detail
    assert outcome.outside == 0 and outcome.deleted == 0


def test_cases_are_selected_as_item_22_and_not_as_issue_12() -> None:
    bad, _ = fault_check.selected("item:22")
    assert [c.name for c in bad] == [c.name for c in CASES] and len(CASES) >= 32
    assert not {c.name for c in CASES} & {c.name for c in fault_check.selected("issue12")[0]}
    assert len({c.name for c in fault_check.selected(None)[0]}) == len(fault_check.selected(None)[0])  # unique names
