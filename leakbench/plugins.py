"""Plugins: attacks and datasets from other packages, registered beside the shipped ones.

**An attack plugin's code never runs in the harness process**, which holds the private batch: the
harness asks a sandboxed attack worker to import the attack plugins and describe them
(`leakbench.attacks.described`), and registers stand-ins built from those descriptions; only the
worker imports the real code (`in_attack_worker()`). A dataset plugin serves the private data,
so it is loaded where the data is, in the harness: only through its entry point or a suite's
`dataset_plugins`. A defence plugin (`leakbench.fl.transform`) changes the client's update, so it
too runs on the client's side, in the harness: its entry point (group `leakbench.defences`) or a
suite's `defence_plugins`. A victim plugin (`leakbench.models.outside`) builds the client's model, in
the harness: its entry point (group `leakbench.victims`) or a suite's `victim_plugins`; the attack
worker imports only the classes of the model it unpickles.

Three ways in, all ending in `load_plugin(module)` or an entry point:

- installed distributions declare entry points in the groups `leakbench.attacks` / `leakbench.datasets` /
  `leakbench.defences`
  (`name = "package.module"` or `"package.module:Object"`), loaded once, on the first lookup of that
  registry;
  an object that is an `Attack` subclass is registered under its `name`, a dataset loader under the
  entry point's name (unless its module registered that very object already); a module registers
  what it holds itself (`@register_attack`, `DATASETS.register`);
- `--plugin MODULE` on the command line, and `plugins = ["module.path"]` in a suite: attack plugins
  (a module loaded by name that registers a dataset is refused: declare it as an entry point).

A plugin whose attack or dataset takes a registered name or a name that is not `registry.NAME`, or
that cannot be imported (any exception, `SystemExit` and `KeyboardInterrupt` raised at import
included), is a ConfigError naming it (one line, exit 2). Modules loaded by name are listed in the environment
variable LEAKBENCH_PLUGINS as well, so worker processes (spawned, they inherit the environment)
load them too. `loaded_plugins()` is what run and cell manifests record: each plugin's module, its
distribution and version, and the names it registered.

This module imports no registry and nothing of the harness (`python benchmarks/import_knot.py`): each
registry module hands its registry to the loader (`serve`), and the package root installs how attack
plugins are described outside the attack worker (`leakbench.core.plugin_hooks`: by the harness's
sandboxed worker, `leakbench.harness.attack_plugins`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from importlib.metadata import Distribution, EntryPoint, entry_points, packages_distributions, version
from typing import Any

from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.plugin_hooks import attack_describer
from leakbench.core.registry import DuplicateNameError, Registry

GROUPS = {"attacks": "leakbench.attacks", "datasets": "leakbench.datasets", "defences": "leakbench.defences",
          "victims": "leakbench.victims"}
"""Registry kind → entry-point group."""
ENV_VAR = "LEAKBENCH_PLUGINS"
"""Modules loaded by name, comma-separated: worker processes load them on their first lookup."""

_LOADED: dict[str, dict[str, Any]] = {}
_STARTED: set[str] = set()
_IN_WORKER = False


@dataclass(frozen=True)
class Served:
    """One registry as its module hands it to the loader (`serve`)."""

    registry: Registry[Any]
    admit: Callable[[str, object], bool]
    """Register the object an entry point loaded (not a module) under the entry point's name, unless
    that very object is registered already; False when the object is not of this registry's kind."""
    wanted: str
    """What an entry point of this kind must load, in words ('an Attack subclass')."""
    shipped: frozenset[str]
    """The names registered when the registry was served (its shipped entries)."""


_SERVED: dict[str, Served] = {}
"""Registry kind (a key of GROUPS) → its registry, filled by the registry modules as they are imported."""



def serve(kind: str, registry: Registry[Any], admit: Callable[[str, object], bool], wanted: str) -> None:
    """Hand `registry`, of `kind` (a key of GROUPS), to the loader. Its module calls this as its last
    statement, once the shipped entries are registered: a plugin loaded before the module was imported
    (which imports it itself) is credited with what it registered beyond those."""
    if kind not in GROUPS or kind in _SERVED:
        raise ValueError(f"registry kind {kind!r} is not one of {sorted(GROUPS)} or is served already")
    _SERVED[kind] = Served(registry, admit, wanted, frozenset(registry.registered()))


def enter_attack_worker() -> None:
    """Mark this process as a sandboxed attack worker: from now on attack plugins are imported here;
    dataset plugins never are (an attack has no use for them)."""
    global _IN_WORKER
    _IN_WORKER = True
    _STARTED.update(("datasets", "defences", "victims"))


def in_attack_worker() -> bool:
    return _IN_WORKER


def load_dataset_plugins() -> None:
    """The `leakbench.datasets` entry points, imported here (dataset code runs beside the data), once."""
    _load_client_side("datasets")


def load_defence_plugins() -> None:
    """The `leakbench.defences` entry points, imported here (a defence runs on the client's side), once."""
    _load_client_side("defences")


def load_victim_plugins() -> None:
    """The `leakbench.victims` entry points, imported here (the client builds its victim), once. The
    attack worker never loads them: it unpickles the update's model, importing just its classes."""
    _load_client_side("victims")


def _load_client_side(kind: str) -> None:
    if kind not in _STARTED:
        _STARTED.add(kind)
        _load_entry_points(kind)


def load_attack_plugins() -> None:
    """The `leakbench.attacks` entry points and the modules named in LEAKBENCH_PLUGINS, once: imported
    in an attack worker, described by one anywhere else."""
    if "attacks" in _STARTED:
        return
    _STARTED.add("attacks")  # before loading: plugins look registries up while they are imported
    if not _IN_WORKER:
        _describe(named_plugins(), entry_points=True)
        return
    _load_entry_points("attacks")
    for module in named_plugins():
        load_plugin(module)


def load_client_plugin(module: str) -> None:
    """Import client-side plugin `module` here, in the harness: datasets (they serve the private data)
    and defences (they change the client's update); a suite's `dataset_plugins` and `defence_plugins`.
    A module that registers an attack too is refused: attack code never runs here."""
    _check_module_path(module)
    if module in _LOADED:
        return
    _register(f"client-side plugin {module!r}", module, lambda: importlib.import_module(module), None)
    if _LOADED[module]["attacks"]:  # what it registered in the attack registry (`_register`)
        raise ConfigError(f"client-side plugin {module!r} registers attacks: list it under 'plugins' (attack code "
                          "runs only in the sandboxed attack worker) and its datasets and defences apart")


def load_plugin(module: str) -> None:
    """Load attack plugin `module` (imported in an attack worker, described by one elsewhere); a
    ConfigError when it cannot be."""
    _check_module_path(module)
    load_attack_plugins()
    if module in _LOADED:
        return
    if _IN_WORKER:
        _register(f"plugin {module!r}", module, lambda: importlib.import_module(module), None)
    else:
        _describe((module,), entry_points=False)
    os.environ[ENV_VAR] = ",".join(dict.fromkeys([*named_plugins(), module]))


def _check_module_path(module: str) -> None:
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"plugin {module!r} is not a module path (like 'package.module')")


def load_in_attack_worker(modules: list[str], entry_points: bool) -> None:
    """In the attack worker: import the attack entry points (when `entry_points`) and `modules`, for the
    worker to describe what they registered (`leakbench.harness.job.described_plugins`)."""
    enter_attack_worker()
    _STARTED.add("attacks")
    if entry_points:
        _load_entry_points("attacks")
    for module in modules:
        load_plugin(module)


def _describe(modules: tuple[str, ...], *, entry_points: bool) -> None:
    """Have a sandboxed attack worker import the attack plugins and register their stand-ins here
    (`core.plugin_hooks`: the describer the package root installs); nothing to do without attack plugins."""
    if not modules and not (entry_points and list(entry_points_of("attacks"))):
        return
    describe = attack_describer()
    if describe is None:  # the package root installs it: only a process that removed it gets here
        raise LeakbenchError("attack plugins: no describer is installed (leakbench.core.plugin_hooks)")
    describe(modules, entry_points)


def note_described(plugins: list[dict[str, Any]]) -> None:
    """Record plugins that a sandboxed attack worker described (each as `loaded_plugins` lists one)."""
    for plugin in plugins:
        _LOADED.setdefault(plugin["module"], plugin)


@lru_cache(maxsize=4)
def entry_points_of(kind: str) -> tuple[EntryPoint, ...]:
    """The installed entry points of one registry kind, by name (read once per process)."""
    return tuple(sorted(entry_points(group=GROUPS[kind]), key=lambda p: p.name))


def _load_entry_points(kind: str) -> None:
    for point in entry_points_of(kind):
        _register(f"entry point {point.name!r} ({GROUPS[kind]})", point.value.partition(":")[0],
                  partial(_load_entry_point, point, kind), point.dist)


def named_plugins() -> tuple[str, ...]:
    """The plugin modules loaded by name in this process or its parents (LEAKBENCH_PLUGINS)."""
    return tuple(m for m in os.environ.get(ENV_VAR, "").split(",") if m)


def loaded_plugins() -> list[dict[str, Any]]:
    """What manifests record: per plugin its module, distribution, version and registered names."""
    return [dict(v) for _, v in sorted(_LOADED.items())]


def _register(what: str, module: str, load: Callable[[], Any], dist: Distribution | None) -> None:
    """Run `load` and note what it registered in each served registry (a registry served while `load` ran,
    its module imported by the plugin: what it holds beyond its shipped entries); any failure is one
    ConfigError line."""
    before = {kind: set(_names(_SERVED[kind].registry, kind)) for kind in GROUPS if kind in _SERVED}
    try:
        load()
    except DuplicateNameError as exc:
        raise ConfigError(f"{what}: {exc} (a shipped attack or dataset, or another plugin, has that name)") from None
    except LeakbenchError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001  (a third-party import: any error,
        # even sys.exit() or a KeyboardInterrupt raised at import, is the plugin's, not leakbench's exit)
        raise ConfigError(f"{what} cannot be loaded: {type(exc).__name__}: {exc}") from None
    name, ver = _distribution(module, dist)
    entry = _LOADED.setdefault(module, {"module": module, "distribution": name, "version": ver,
                                        "attacks": [], "datasets": []})
    for kind in (kind for kind in GROUPS if kind in _SERVED):
        served = _SERVED[kind]
        now = _names(served.registry, kind) if kind in before else served.registry.registered()
        added = sorted(set(now) - before.get(kind, served.shipped))
        if added or kind not in ("defences", "victims"):  # a plugin without defences or victims: recorded as before
            entry[kind] = entry.get(kind, []) + added


def _names(registry: Registry[Any], kind: str) -> list[str]:
    """A registry's names; for defences and victims without loading their entry points (a run that
    uses none records none)."""
    return registry.registered() if kind in ("defences", "victims") else registry.names()


def _load_entry_point(point: EntryPoint, kind: str) -> None:
    """Load one entry point: an object of the kind is registered (its registry's `admit`); a module
    registers itself."""
    served = _SERVED.get(kind)
    if served is None:
        raise LeakbenchError(f"the {kind} registry is not imported: its entry points cannot be registered")
    obj = point.load()
    if inspect.ismodule(obj):
        return
    if not served.admit(point.name, obj):
        raise ConfigError(f"{point.value} is neither a module nor {served.wanted}")


def _distribution(module: str, dist: Distribution | None) -> tuple[str | None, str | None]:
    """The distribution that installs `module` and its version; for a module on the path only, no
    distribution and its top package's `__version__` (None when it has none)."""
    if dist is not None:
        return dist.metadata["Name"], dist.version
    top = module.partition(".")[0]
    names = packages_distributions().get(top, [])
    if names:
        return names[0], version(names[0])
    return None, getattr(sys.modules.get(top), "__version__", None)
