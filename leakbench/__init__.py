"""leakbench: how much private training data leaks from federated-learning client updates.

Importing any part of leakbench runs this file first, and it wires the plugin loader to the harness:
attack plugins are described by a sandboxed attack worker (`leakbench.harness.attack_plugins`, imported only
when a process has attack plugins to describe; `leakbench.core.plugin_hooks`). The loader itself imports
nothing of the harness (docs/reference/layout.md#layers).
"""

from __future__ import annotations

from leakbench.core.plugin_hooks import set_attack_describer

__version__ = "0.1.0"


def _describe_attack_plugins(modules: tuple[str, ...], entry_points: bool) -> None:
    """`leakbench.harness.attack_plugins.describe`, imported on first use."""
    from leakbench.harness.attack_plugins import describe

    describe(modules, entry_points)


set_attack_describer(_describe_attack_plugins)
