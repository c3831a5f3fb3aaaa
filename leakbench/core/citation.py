"""The paper an attack or a defence comes from: a short reference and a link (leaderboards link each name).

An attack class (`leakbench.attacks.Attack`) and an update transform (`leakbench.fl.UpdateTransform`)
carry one as their class attribute `paper`; a plugin sets it the same way, and one without a paper
leaves it None (tables then show the bare name). Subclasses inherit it (presets, adaptive variants).
Plugins import it from its documented path, `leakbench.citation`, which also collects the registered
papers (`registered_papers`: it reads the registries, which the base layer never does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Citation:
    """`short`: authors, venue and year ('Zhu et al., NeurIPS 2019'); `url`: where the paper can be read."""

    short: str
    url: str


@dataclass(frozen=True)
class Papers:
    """The papers tables link to: attack name → citation, update transform (defence) name → citation.
    Reports read stored runs only and never load an attack, so whoever writes a table hands this over
    (`registered_papers` from the command line); empty: names stand bare."""

    attacks: Mapping[str, Citation] = field(default_factory=dict)
    defences: Mapping[str, Citation] = field(default_factory=dict)
