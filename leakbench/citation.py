"""The papers of the registered attacks and defences (`registered_papers`), and the documented import path of
`Citation` for plugins (`from leakbench.citation import Citation`, docs/api.md). `Citation` and `Papers`
live in the base layer (`leakbench.core.citation`); collecting the papers reads every registry, so it
stays above them, here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from leakbench.core.citation import Citation, Papers

__all__ = ["Citation", "Papers", "registered_papers"]


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
