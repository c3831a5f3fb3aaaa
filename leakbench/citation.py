"""The papers of the registered attacks and defences (`registered_papers`), and the documented import path of
`Citation` for plugins (`from leakbench.citation import Citation`, docs/api.md). `Citation` and `Papers`
live in the base layer (`leakbench.core.citation`); collecting the papers reads every registry, so it
stays above them, here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from leakbench.core.citation import Citation, Papers

__all__ = ["Citation", "Papers", "registered_adaptations", "registered_papers"]


def registered_papers() -> Papers:
    """The papers of every registered attack and update transform (shipped and installed plugins) that
    declares one."""
    from leakbench.attacks import ATTACKS
    from leakbench.fl.transform import TRANSFORMS

    def collect(entries: Iterable[Any]) -> dict[str, Citation]:
        found = {}
        for entry in entries:
            paper = getattr(entry.factory(), "paper", None)
            if isinstance(paper, Citation):
                found[entry.name] = paper
        return found
    return Papers(collect(ATTACKS.entries()), collect(TRANSFORMS.entries()))


def registered_adaptations() -> dict[str, frozenset[str]]:
    """The defences (update-transform names) each registered attack (shipped and installed plugins) adapts to
    when the threat model grants it the defence (`Attack.adapts_to`) or is aware of by construction
    (`Attack.aware_of`: secure aggregation for the batch attacks); attacks with neither left out. Reports take it
    as data (`reporting.defences.Adaptations`): an attack not installed counts as non-adaptive."""
    from leakbench.attacks import ATTACKS

    def aware(attack: Any) -> frozenset[str]:
        none: frozenset[str] = frozenset()
        return frozenset(getattr(attack, "adapts_to", none)) | frozenset(getattr(attack, "aware_of", none))

    found = {entry.name: aware(entry.factory()) for entry in ATTACKS.entries()}
    return {name: adapts for name, adapts in found.items() if adapts}
