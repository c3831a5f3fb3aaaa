"""How attack plugins are described outside the attack worker: one slot, filled once per process.

The plugin loader (`leakbench.plugins`) reads it; the package root (`leakbench/__init__.py`, which every
import of leakbench runs first) fills it with the harness's sandboxed description
(`leakbench.harness.attack_plugins.describe`, imported only when a process has attack plugins to describe).
The slot sits in the base layer so that the loader imports neither the harness nor a registry, while every
process has the description, as when the loader imported the harness itself.
"""

from __future__ import annotations

from collections.abc import Callable

AttackDescriber = Callable[[tuple[str, ...], bool], None]
"""(modules, entry_points) → None: have a sandboxed attack worker import the attack plugins (`modules`, and
the attack entry points when `entry_points`) and register their stand-ins in this process."""

_describer: AttackDescriber | None = None


def set_attack_describer(describer: AttackDescriber) -> None:
    """Install how attack plugins are described outside the attack worker."""
    global _describer
    _describer = describer


def attack_describer() -> AttackDescriber | None:
    """The installed describer (None before `set_attack_describer`)."""
    return _describer
