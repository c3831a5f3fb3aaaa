"""The paper an attack or a defence comes from: a short reference and a link (leaderboards link each name).

An attack class (`leakbench.attacks.Attack`) and an update transform (`leakbench.fl.UpdateTransform`)
carry one as their class attribute `paper`; a plugin sets it the same way, and one without a paper
leaves it None (tables then show the bare name). Subclasses inherit it (presets, adaptive variants).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Citation:
    """`short`: authors, venue and year ('Zhu et al., NeurIPS 2019'); `url`: where the paper can be read."""

    short: str
    url: str
