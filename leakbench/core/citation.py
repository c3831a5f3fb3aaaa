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


MAX_CITATION_TEXT = 500
"""The longest `short` or `url` a citation read back from data (`stored_citation`) may have."""


def stored_citation(data: object) -> Citation | None:
    """A citation written as data (`{"short": ..., "url": ...}`: stored in a cell's records, or in a plugin
    attack's description from the sandboxed worker), or None unless both are strings of at most
    `MAX_CITATION_TEXT` characters and the url is http(s): such text comes from code leakbench does not
    trust, and pages link to it."""
    if not isinstance(data, dict):
        return None
    short, url = data.get("short"), data.get("url")
    if not (isinstance(short, str) and isinstance(url, str)) or max(len(short), len(url)) > MAX_CITATION_TEXT:
        return None
    return Citation(short, url) if url.startswith(("https://", "http://")) else None


@dataclass(frozen=True)
class Papers:
    """The papers tables link to: attack name → citation, update transform (defence) name → citation.
    Reports read stored runs only and never load an attack, so whoever writes a table hands this over
    (`registered_papers` from the command line); empty: names stand bare."""

    attacks: Mapping[str, Citation] = field(default_factory=dict)
    defences: Mapping[str, Citation] = field(default_factory=dict)
