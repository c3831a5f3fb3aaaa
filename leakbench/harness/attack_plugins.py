"""Attack plugins seen from the harness: a sandboxed attack worker imports and describes them
(`leakbench.harness.job.described_plugins`), and the harness registers stand-ins built from those
descriptions (`leakbench.attacks.described`). `describe` is the describer that the package root
installs for the plugin loader (`leakbench.core.plugin_hooks`), which itself imports nothing of the harness.
"""

from __future__ import annotations

from typing import Any

from leakbench.attacks import ATTACKS
from leakbench.attacks.described import described_attack
from leakbench.core.errors import ConfigError
from leakbench.core.registry import DuplicateNameError
from leakbench.harness.fingerprint import plugin_code
from leakbench.harness.isolation import describe_plugins
from leakbench.plugins import entry_points_of, note_described


def describe(modules: tuple[str, ...], entry_points: bool) -> None:
    """Have a sandboxed attack worker import the attack plugins (`modules`, and the attack entry points
    when `entry_points`) and register their stand-ins here."""
    found = describe_plugins(list(modules), entry_points)
    for plugin in found["plugins"]:
        if plugin["datasets"]:
            raise ConfigError(f"plugin {plugin['module']!r} registers datasets ({', '.join(plugin['datasets'])}) "
                              "but is loaded as an attack plugin: list it under a suite's 'dataset_plugins', "
                              "or declare it under the 'leakbench.datasets' entry point group (dataset code "
                              "runs beside the data, attack code only in the sandboxed attack worker)")
    codes = plugin_codes(found, modules, entry_points)
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
    note_described(found["plugins"])


def plugin_codes(found: dict[str, Any], modules: tuple[str, ...], entry_points: bool) -> dict[str, str]:
    """Attack name → the hash of its plugin's files, computed here (`fingerprint.plugin_code`, without
    importing the plugin), for the attacks the worker says a plugin registered when that plugin is one
    the harness asked for (`modules`, the attack entry points' modules). An attack missing here keeps
    the worker's hash: its plugin's files could not be found on this process's import path."""
    asked = set(modules) | ({point.value.partition(":")[0] for point in entry_points_of("attacks")}
                            if entry_points else set())
    codes: dict[str, str] = {}
    for plugin in found["plugins"]:
        module = plugin.get("module") if isinstance(plugin, dict) else None
        if module in asked and isinstance(plugin.get("attacks"), list):
            code = plugin_code(module)
            codes.update({name: code for name in plugin["attacks"] if isinstance(name, str) and code})
    return codes
