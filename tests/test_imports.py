"""Reporting reads stored runs through `leakbench.records` only: it never loads an attack nor the harness runner.

Checked twice: in a fresh interpreter (what importing the reporting modules really loads, through every
chain of imports) and statically (no file under leakbench/reporting/ names such a module, not even in a
function body that the first check would not run).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORTING = ROOT / "leakbench" / "reporting"
RUNNER = ("cell", "run", "executors", "isolation", "job")
FORBIDDEN = ("leakbench.attacks", *(f"leakbench.harness.{name}" for name in RUNNER))
MODULES = ("leakbench.reporting", "leakbench.reporting.report", "leakbench.reporting.leaderboard",
           "leakbench.reporting.compare", "leakbench.reporting.grid", "leakbench.reporting.views",
           "leakbench.records", "leakbench.records.runs", "leakbench.records.cells", "leakbench.records.truth",
           "leakbench.harness")


def forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def loaded_after_import(module: str) -> list[str]:
    """The leakbench modules a fresh interpreter holds after `import module`."""
    code = (f"import json, sys; import {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('leakbench'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", MODULES)
def test_reporting_and_records_load_no_attack_and_no_runner(module: str) -> None:
    loaded = loaded_after_import(module)
    assert module in loaded
    assert [m for m in loaded if forbidden(m)] == []


def imported_names(tree: ast.AST) -> list[str]:
    """Every module an import statement in `tree` names (also `from leakbench.harness import run` → .run)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def test_no_reporting_file_imports_an_attack_or_the_runner() -> None:
    files = sorted(REPORTING.glob("*.py"))
    assert files
    found = {f"{path.name}: {name}" for path in files for name in imported_names(ast.parse(path.read_text()))
             if forbidden(name)}
    assert not found, sorted(found)


def test_the_static_check_sees_every_form_of_import() -> None:
    code = ("import leakbench.attacks.spear\nfrom leakbench.harness import run\n"
            "def f():\n    from leakbench import attacks\n    from leakbench.harness.job import attack_seed\n")
    assert [n for n in imported_names(ast.parse(code)) if forbidden(n)] == [
        "leakbench.attacks.spear", "leakbench.harness.run", "leakbench.attacks", "leakbench.harness.job",
        "leakbench.harness.job.attack_seed"]
