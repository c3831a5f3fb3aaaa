"""Plugins: attacks and datasets from other packages, registered beside the shipped ones.

Three ways in, all ending in `load_plugin(module)` or an entry point:

- installed distributions declare entry points in the groups `leakbench.attacks` / `leakbench.datasets`
  (`name = "package.module"` or `"package.module:Object"`), loaded once, on the first registry lookup;
  an object that is an `Attack` subclass is registered under its `name`, a dataset loader under the
  entry point's name (unless its module registered that very object already); a module registers
  what it holds itself (`@register_attack`, `DATASETS.register`);
- `--plugin MODULE` on the command line;
- `plugins = ["module.path"]` in a suite.

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
from importlib.metadata import Distribution, EntryPoint, entry_points, packages_distributions, version
from typing import Any

from leakbench.errors import ConfigError, LeakbenchError
from leakbench.registry import DuplicateNameError

GROUPS = {"attacks": "leakbench.attacks", "datasets": "leakbench.datasets"}
"""Registry kind → entry-point group."""
ENV_VAR = "LEAKBENCH_PLUGINS"
"""Modules loaded by name, comma-separated: worker processes load them on their first lookup."""

_LOADED: dict[str, dict[str, Any]] = {}
_STARTED = False


def load_installed() -> None:
    """Load the entry points of both groups and the modules named in LEAKBENCH_PLUGINS, once per process."""
    global _STARTED
    if _STARTED:
        return
    _STARTED = True  # before loading: plugins look registries up while they are imported
    for kind, group in GROUPS.items():
        for point in sorted(entry_points(group=group), key=lambda p: p.name):
            _register(f"entry point {point.name!r} ({group})", point.value.partition(":")[0],
                      lambda point=point, kind=kind: _load_entry_point(point, kind), point.dist)
    for module in filter(None, os.environ.get(ENV_VAR, "").split(",")):
        load_plugin(module)


def load_plugin(module: str) -> None:
    """Import plugin `module` (it registers its attacks and datasets); a ConfigError when it cannot."""
    load_installed()
    if module in _LOADED:
        return
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"plugin {module!r} is not a module path (like 'package.module')")
    _register(f"plugin {module!r}", module, lambda: importlib.import_module(module), None)
    os.environ[ENV_VAR] = ",".join(dict.fromkeys([*named_plugins(), module]))


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

    before = set(ATTACKS.names()), set(DATASETS.names())
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
    entry["attacks"] += sorted(set(ATTACKS.names()) - before[0])
    entry["datasets"] += sorted(set(DATASETS.names()) - before[1])


def _load_entry_point(point: EntryPoint, kind: str) -> None:
    """Load one entry point: an Attack subclass or a dataset loader is registered; a module registers itself."""
    from leakbench.attacks import ATTACKS, Attack, register_attack
    from leakbench.datasets import DATASETS

    obj = point.load()
    if inspect.ismodule(obj):
        return
    if kind == "attacks" and isinstance(obj, type) and issubclass(obj, Attack):
        if obj.name not in ATTACKS.names() or ATTACKS.create(obj.name) is not obj:
            register_attack(obj)
    elif kind == "datasets" and callable(obj):
        if point.name not in DATASETS.names() or DATASETS.entry(point.name).factory is not obj:
            DATASETS.register(point.name, obj, (inspect.getdoc(obj) or point.name).splitlines()[0])
    else:
        raise ConfigError(f"{point.value} is neither a module nor {'an Attack subclass' if kind == 'attacks' else 'a loader'}")


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
