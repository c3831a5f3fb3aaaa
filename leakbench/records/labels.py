"""What reports need of a cell besides its columns, stored as data: its victim's name, its update, its papers.

A cell's summary.json holds `labels` (`labels_data`, written by the harness when the cell ran):

    {"victim": "FC-6 w200",
     "update": [["fedsgd", {}], ["prune", {"keep": 0.5}], ["noise", {"sigma": 0.01, "scale": "absolute"}]],
     "papers": {"attack": {"short": ..., "url": ...} | null, "update": {"prune": {"short": ..., "url": ...}}}}

`update` is the client's update in the order it ran (`CellSpec.update`: the client first, then every
step), each step its transform's name and settings; `papers` the citations of the attack and of every
transform that declared one, as known at run time. Reports read these (`stored_columns`) instead of
asking a registry, so a run that used a plugin victim, attack or defence reports and ranks without the
plugin installed. Cells stored before `labels` existed have none: reports fall back to their columns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from leakbench.core.citation import Citation, Papers, stored_citation

LABELS = "labels"
"""The summary.json key holding a cell's `labels_data`."""
STORED_COLUMNS = ("victim", "update", "papers")
"""The columns `stored_columns` gives a cell (never written to cells.parquet): the victim's label, and its update
and papers as canonical JSON text ('' when the cell stored none)."""

Step = tuple[str, Mapping[str, Any]]
"""One step of an update: a transform's name and its settings."""


def labels_data(victim: str, update: Sequence[Step], attack_paper: Citation | None,
                update_papers: Mapping[str, Citation]) -> dict[str, Any]:
    """The `labels` of a cell's summary.json (see the module docstring)."""
    return {"victim": victim, "update": [[name, dict(settings)] for name, settings in update],
            "papers": {"attack": asdict(attack_paper) if attack_paper else None,
                       "update": {name: asdict(paper) for name, paper in update_papers.items()}}}


def stored_columns(summary: Mapping[str, Any]) -> dict[str, str]:
    """A summary's `labels` as the columns `STORED_COLUMNS` ('' each for a summary without them, or with
    malformed ones: a report then falls back to the cell's columns)."""
    labels = summary.get(LABELS)
    if not isinstance(labels, dict):
        return dict.fromkeys(STORED_COLUMNS, "")
    victim, update, papers = labels.get("victim"), labels.get("update"), labels.get("papers")
    return {"victim": victim if isinstance(victim, str) else "",
            "update": _text(update) if _steps(update) is not None else "",
            "papers": _text(papers) if isinstance(papers, dict) else ""}


def update_steps(text: object) -> list[Step] | None:
    """The update a cell stored (its `update` column), or None when it stored none (or a malformed one)."""
    return _steps(_json(text))


def stored_papers(attacks: Sequence[object], papers: Sequence[object]) -> Papers:
    """The papers cells stored (their `attack` and `papers` columns, row by row): each attack's and each
    transform's first citation found; a malformed entry is left out."""
    found_attacks: dict[str, Citation] = {}
    found_transforms: dict[str, Citation] = {}
    for attack, text in zip(attacks, papers, strict=True):
        data = _json(text)
        if not isinstance(data, dict):
            continue
        if (paper := stored_citation(data.get("attack"))) is not None:
            found_attacks.setdefault(str(attack), paper)
        update = data.get("update")
        for name, entry in (update.items() if isinstance(update, dict) else ()):
            if (paper := stored_citation(entry)) is not None:
                found_transforms.setdefault(str(name), paper)
    return Papers(found_attacks, found_transforms)


def _json(text: object) -> object:
    """Stored JSON text parsed; None for '' or anything that is not JSON text."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _steps(data: object) -> list[Step] | None:
    """`data` as update steps when it is a list of [name, settings] pairs, else None."""
    if not isinstance(data, list):
        return None
    steps: list[Step] = []
    for step in data:
        if not (isinstance(step, list) and len(step) == 2 and isinstance(step[0], str) and isinstance(step[1], dict)):
            return None
        steps.append((step[0], step[1]))
    return steps


def _text(data: object) -> str:
    """Canonical JSON text (sorted keys inside each settings object; step order kept)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
