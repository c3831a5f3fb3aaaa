"""The import rules of leakbench's layers (docs/reference/layout.md#layers).

Reporting reads stored runs through `leakbench.records` only: it never loads an attack nor the harness runner.
`core/` imports nothing else from leakbench and holds no registry's contents; `cell/` imports only core,
fl, models and datasets; `records/` only core, cell, metrics and datasets; `fl/`, `models/` and `attacks/`
never import `harness/`; the plugin loader (`leakbench.plugins`) imports only core. The module knot (modules
that import each other, `benchmarks/import_knot.py`) stays at most `KNOT_BOUND` modules.

Checked twice: in a fresh interpreter (what importing the modules really loads, through every chain of
imports) and statically (no file of a layer names a module outside its rule, not even in a function body
that the first check would not run, nor under `if TYPE_CHECKING:`).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

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


def imported_names(tree: ast.AST, module: str = "", package: bool = False) -> list[str]:
    """Every module an import statement in `tree` names (also `from leakbench.harness import run` → .run);
    a relative import is resolved against `module`, the importing module (`package`: its `__init__`)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if package else module.split(".")[:-1]
                base = ".".join([*here[:len(here) - node.level + 1], *([base] if base else [])])
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names


def file_imports(module: str, path: Path) -> list[str]:
    """Every module the file `path` of `module` names in an import statement (`imported_names`)."""
    return imported_names(ast.parse(path.read_text()), module, package=path.name == "__init__.py")


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


# --------------------------------------------------------------------------- the layers

LAYERS = {
    "leakbench.core": ("leakbench.core",),
    "leakbench.cell": ("leakbench.cell", "leakbench.core", "leakbench.fl", "leakbench.models", "leakbench.datasets"),
    "leakbench.records": ("leakbench.records", "leakbench.core", "leakbench.cell", "leakbench.metrics",
                          "leakbench.datasets"),
}
"""Layer → the only leakbench packages its files may import (itself included). `cell/` names the update's
transforms (fl), the victim's label and training recipe (models) and draws the batch (datasets);
`records/` re-loads a cell's dataset to re-derive its ground truth (`records.truth`, datasets)."""
NEVER_HARNESS = ("leakbench.fl", "leakbench.models", "leakbench.attacks")
ABOVE_THE_CELL = ("leakbench.harness", "leakbench.attacks", "leakbench.reporting", "leakbench.pipeline",
                  "leakbench.papers", "leakbench.cli", "leakbench.api", "leakbench.citation", "leakbench.progress")
"""What neither the cell nor the record store loads when imported."""


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def layer_modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by dotted name; a package's `__init__` is its own."""
    folder = root.joinpath(*package.split("."))
    found = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def outside_imports(package: str, allowed: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """'module: name' for each leakbench module a file of `package` imports (lazily too) outside `allowed`."""
    modules = layer_modules(package, root)
    assert modules, f"no module under {package}"
    return sorted({f"{module}: {name}" for module, path in modules.items()
                   for name in file_imports(module, path)
                   if within(name, ("leakbench",)) and not within(name, allowed)})


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_imports_only_what_its_rule_allows(layer: str) -> None:
    assert outside_imports(layer, LAYERS[layer]) == []


@pytest.mark.parametrize("package", NEVER_HARNESS)
def test_fl_models_and_attacks_never_import_the_harness(package: str) -> None:
    modules = layer_modules(package)
    assert modules
    found = {f"{module}: {name}" for module, path in modules.items()
             for name in file_imports(module, path) if within(name, ("leakbench.harness",))}
    assert not found, sorted(found)


def test_the_base_layer_holds_no_registry_contents() -> None:
    """Core has the registry mechanism (`core.registry.Registry`) but no registry: ATTACKS, DATASETS,
    TRANSFORMS and VICTIMS live with what they register. Checked on the imported modules (no Registry
    object in any core module) and statically (no core file calls `Registry(...)`)."""
    modules = sorted(layer_modules("leakbench.core"))
    code = ("import importlib, json; from leakbench.core.registry import Registry; "
            f"found = [f'{{m}}.{{n}}' for m in {modules!r} for n, v in vars(importlib.import_module(m)).items() "
            "if isinstance(v, Registry)]; print(json.dumps(found))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    calls = [f"{path.name}:{node.lineno}" for path in layer_modules("leakbench.core").values()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Registry"]
    assert calls == []


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_importing_a_layer_loads_nothing_above_it(layer: str) -> None:
    """Every module of the layer imported in one fresh interpreter: core loads only core, the cell and the
    record store load neither the runner, nor an attack, nor reporting."""
    modules = sorted(layer_modules(layer))
    loaded = loaded_after_import(", ".join(modules))
    assert set(modules) <= set(loaded)
    if layer == "leakbench.core":
        assert [m for m in loaded if m != "leakbench" and not within(m, ("leakbench.core",))] == []
    else:
        assert [m for m in loaded if within(m, ABOVE_THE_CELL)] == []


@pytest.mark.parametrize("package", NEVER_HARNESS)
def test_importing_fl_models_or_attacks_loads_no_harness(package: str) -> None:
    loaded = loaded_after_import(", ".join(sorted(layer_modules(package))))
    assert [m for m in loaded if within(m, ("leakbench.harness",))] == []


def test_the_layer_check_resolves_relative_imports() -> None:
    code = "from . import spec\nfrom ..harness import run\nfrom ..core.errors import ConfigError\n"
    assert imported_names(ast.parse(code), "leakbench.cell.draw") == [
        "leakbench.cell", "leakbench.cell.spec", "leakbench.harness", "leakbench.harness.run",
        "leakbench.core.errors", "leakbench.core.errors.ConfigError"]
    assert imported_names(ast.parse("from .spec import CellSpec\n"), "leakbench.cell", package=True) == [
        "leakbench.cell.spec", "leakbench.cell.spec.CellSpec"]


# --------------------------------------------------------------------------- the module knot

KNOT_BOUND = 2
"""The most modules one strongly connected component of the import graph (lazy imports included) may hold:
42 at afdbe90, 41 once the layers moved, 2 after issue 42's inversion of the plugin loader (`attacks.spear.guided`
and `attacks.spear.residual`, the first for a type annotation only)."""


def largest_knot(root: Path = ROOT) -> list[str]:
    """The largest knot of the checkout `root` (`benchmarks/import_knot.py`), its modules sorted."""
    knot = load_benchmark("import_knot")
    return max((c for c in knot.components(knot.graph(root)) if len(c) > 1), key=len, default=[])


def test_the_module_knot_stays_small() -> None:
    found = largest_knot()
    assert len(found) <= KNOT_BOUND, found


def test_the_knot_finder_sees_a_lazy_cycle(tmp_path: Path) -> None:
    """Two modules that import each other, one of them only inside a function body, are one knot."""
    package = tmp_path / "leakbench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from leakbench.b import g\n")
    (package / "b.py").write_text("def g():\n    from leakbench import a\n")
    assert largest_knot(tmp_path) == ["leakbench.a", "leakbench.b"]


def test_the_plugin_loader_imports_only_core() -> None:
    """Registries hand themselves to the loader (`plugins.serve`) and the package root installs how attack
    plugins are described (`core.plugin_hooks`): the loader imports no registry and nothing of the harness."""
    found = [name for name in file_imports("leakbench.plugins", ROOT / "leakbench" / "plugins.py")
             if within(name, ("leakbench",)) and not within(name, ("leakbench.core",))]
    assert found == []


LATE_VICTIM = '''"""A victim plugin that is the first to import leakbench.models."""
from leakbench.models import register_victim
from leakbench.models.outside import VictimFactory


def build(input_shape, num_classes, *, width, depth, seed=0, dtype=None):
    raise NotImplementedError


register_victim("late-victim", VictimFactory(build=build, linear_layers=("1",)))
'''


def test_a_plugin_that_imports_a_registry_first_is_credited_with_its_own_names(tmp_path: Path) -> None:
    """A registry served while a plugin loads (its module imported by the plugin, not before): the plugin is
    credited with what it registered, not with the shipped entries (`plugins.serve` notes those)."""
    (tmp_path / "late_victim.py").write_text(LATE_VICTIM)
    code = ("import json, sys; from leakbench import plugins; before = 'leakbench.models' in sys.modules; "
            "plugins.load_client_plugin('late_victim'); print(json.dumps([before, plugins.loaded_plugins()]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True, env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin",
                                          "OMP_NUM_THREADS": "1"})
    before, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert before is False
    assert loaded == [{"module": "late_victim", "distribution": None, "version": None, "attacks": [], "datasets": [],
                       "victims": ["late-victim"]}]
