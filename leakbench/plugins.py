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
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from functools import lru_cache, partial
from importlib.metadata import Distribution, EntryPoint, entry_points, packages_distributions, version
from typing import Any

from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.registry import DuplicateNameError, Registry

GROUPS = {"attacks": "leakbench.attacks", "datasets": "leakbench.datasets", "defences": "leakbench.defences",
          "victims": "leakbench.victims"}
"""Registry kind → entry-point group."""
ENV_VAR = "LEAKBENCH_PLUGINS"
"""Modules loaded by name, comma-separated: worker processes load them on their first lookup."""

_LOADED: dict[str, dict[str, Any]] = {}
_STARTED: set[str] = set()
_IN_WORKER = False


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
    from leakbench.attacks import ATTACKS

    _check_module_path(module)
    if module in _LOADED:
        return
    before = set(ATTACKS.names())
    _register(f"client-side plugin {module!r}", module, lambda: importlib.import_module(module), None)
    if set(ATTACKS.names()) - before:
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


def described_plugins(modules: list[str], entry_points: bool) -> dict[str, Any]:
    """In the attack worker: import the attack entry points (when `entry_points`) and `modules`,
    then describe what they registered as JSON data: {"plugins": [...], "attacks": [...]}."""
    from leakbench.attacks import attack_class
    from leakbench.attacks.described import describe

    enter_attack_worker()
    _STARTED.add("attacks")
    if entry_points:
        _load_entry_points("attacks")
    for module in modules:
        load_plugin(module)
    from leakbench.harness.fingerprint import attack_code

    plugins = loaded_plugins()
    names = sorted({name for p in plugins for name in p["attacks"]})
    return {"plugins": plugins,
            "attacks": [{**describe(attack_class(name)), "code_hash": attack_code(attack_class(name))}
                        for name in names]}


def _describe(modules: tuple[str, ...], *, entry_points: bool) -> None:
    """Have a sandboxed attack worker import the attack plugins and register their stand-ins here."""
    from leakbench.attacks import ATTACKS
    from leakbench.attacks.described import described_attack

    if not modules and not (entry_points and list(entry_points_of("attacks"))):
        return
    from leakbench.harness.isolation import describe_plugins

    found = describe_plugins(list(modules), entry_points)
    for plugin in found["plugins"]:
        if plugin["datasets"]:
            raise ConfigError(f"plugin {plugin['module']!r} registers datasets ({', '.join(plugin['datasets'])}) "
                              "but is loaded as an attack plugin: list it under a suite's 'dataset_plugins', "
                              "or declare it under the 'leakbench.datasets' entry point group (dataset code "
                              "runs beside the data, attack code only in the sandboxed attack worker)")
    codes = _plugin_codes(found, modules, entry_points)
    for data in found["attacks"]:
        try:
            name = data.get("name") if isinstance(data, dict) else None
            if isinstance(name, str) and name in codes:
                data = {**data, "code_hash": codes[name]}
            ATTACKS.register(data["name"], (lambda cls: lambda: cls)(described_attack(data)), data["description"])
        except DuplicateNameError as exc:
            raise ConfigError(f"plugin: {exc} (a shipped attack or another plugin has that name)") from None
        except (TypeError, KeyError, ValueError, AttributeError) as exc:  # the worker ran a plugin: its word is data
            raise ConfigError(f"plugin: a malformed attack description ({type(exc).__name__}: {exc})") from None
    for plugin in found["plugins"]:
        _LOADED.setdefault(plugin["module"], plugin)


def _plugin_codes(found: dict[str, Any], modules: tuple[str, ...], entry_points: bool) -> dict[str, str]:
    """Attack name → the hash of its plugin's files, computed here (`fingerprint.plugin_code`, without
    importing the plugin), for the attacks the worker says a plugin registered when that plugin is one
    the harness asked for (`modules`, the attack entry points' modules). An attack missing here keeps
    the worker's hash: its plugin's files could not be found on this process's import path."""
    from leakbench.harness.fingerprint import plugin_code

    asked = set(modules) | ({point.value.partition(":")[0] for point in entry_points_of("attacks")}
                            if entry_points else set())
    codes: dict[str, str] = {}
    for plugin in found["plugins"]:
        module = plugin.get("module") if isinstance(plugin, dict) else None
        if module in asked and isinstance(plugin.get("attacks"), list):
            code = plugin_code(module)
            codes.update({name: code for name in plugin["attacks"] if isinstance(name, str) and code})
    return codes


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
    """Run `load` and note the attacks and datasets it registered; any failure is one ConfigError line."""
    from leakbench.attacks import ATTACKS
    from leakbench.datasets import DATASETS
    from leakbench.fl.transform import TRANSFORMS
    from leakbench.models import VICTIMS

    registries: dict[str, Registry[Any]] = {"attacks": ATTACKS, "datasets": DATASETS, "defences": TRANSFORMS,
                                            "victims": VICTIMS}
    before = {kind: set(_names(registry, kind)) for kind, registry in registries.items()}
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
    for kind, registry in registries.items():
        added = sorted(set(_names(registry, kind)) - before[kind])
        if added or kind not in ("defences", "victims"):  # a plugin without defences or victims: recorded as before
            entry[kind] = entry.get(kind, []) + added


def _names(registry: Registry[Any], kind: str) -> list[str]:
    """A registry's names; for defences and victims without loading their entry points (a run that
    uses none records none)."""
    return registry.registered() if kind in ("defences", "victims") else registry.names()


def _load_entry_point(point: EntryPoint, kind: str) -> None:
    """Load one entry point: an Attack subclass or a dataset loader is registered; a module registers itself."""
    from leakbench.attacks import ATTACKS, Attack, register_attack
    from leakbench.datasets import DATASETS
    from leakbench.fl.transform import TRANSFORMS, UpdateTransform, register_transform
    from leakbench.models import VICTIMS, VictimFactory, register_victim

    obj = point.load()
    if inspect.ismodule(obj):
        return
    if kind == "attacks" and isinstance(obj, type) and issubclass(obj, Attack):
        if obj.name not in ATTACKS.names() or ATTACKS.create(obj.name) is not obj:
            register_attack(obj)
    elif kind == "datasets" and callable(obj):
        if point.name not in DATASETS.names() or DATASETS.entry(point.name).factory is not obj:
            DATASETS.register(point.name, obj, (inspect.getdoc(obj) or point.name).splitlines()[0])
    elif kind == "defences" and isinstance(obj, type) and issubclass(obj, UpdateTransform):
        if obj.name not in TRANSFORMS.names() or TRANSFORMS.create(obj.name) is not obj:
            register_transform(obj)
    elif kind == "victims" and isinstance(obj, VictimFactory):
        if point.name not in VICTIMS.registered():
            register_victim(point.name, obj)
    else:
        wanted = {"attacks": "an Attack subclass", "datasets": "a loader", "defences": "an UpdateTransform subclass",
                  "victims": "a VictimFactory"}
        raise ConfigError(f"{point.value} is neither a module nor {wanted[kind]}")


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
