"""The harness: it runs cells (the client, the sandboxed attack worker, scoring) and writes their records.

Importing it (any of its modules) installs how attack plugins are described outside the attack worker
(`leakbench.plugins.set_attack_describer`): by a sandboxed worker, `leakbench.harness.attack_plugins`,
imported only when a process has attack plugins to describe (importing the harness loads no attack).
"""

from __future__ import annotations

from leakbench.plugins import set_attack_describer


def _describe_attack_plugins(modules: tuple[str, ...], entry_points: bool) -> None:
    """`leakbench.harness.attack_plugins.describe`, imported on first use."""
    from leakbench.harness.attack_plugins import describe

    describe(modules, entry_points)


set_attack_describer(_describe_attack_plugins)
