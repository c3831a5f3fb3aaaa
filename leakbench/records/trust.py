"""Whose code a cell ran and whether its images are public: what the trust model needs
(docs/reference/sandbox.md, "Trust model").

Every cell records (summary.json, then cells.parquet):

- `attack_origin`: 'shipped' (an attack of the leakbench package), 'plugin' (a plugin's attack, which the
  harness knows only from the attack worker's description) or 'evaluated' (a class run by
  `leakbench.api.evaluate`); both of the latter are *third-party*;
- `defence_origin`: 'shipped' when every update transform of the cell (its client, noise and defences)
  is leakbench's own, 'plugin' when one comes from elsewhere (a defence plugin, or a module imported by
  the user): trusted client-side code that runs beside the batch;
- `images`: 'public' (a dataset anyone can have: every shipped dataset but `imagefolder`, and a dataset
  plugin unless its `ImageDataset` says `public=False`) or 'private' (`imagefolder`, the evaluator's own
  images, unless its folder holds a file named `PUBLIC`).

A third-party attack is *verified* only on private images: on public ones it could carry the data and
match the batch behind any defence. A cell pairing a third-party attack with a third-party defence is
no result (the defence runs with the batch and may hand it over) and is kept out of every ranking.

Cells stored before these columns existed get them from their cell folder's manifest (`derived`):
its `plugins` (module, version and the names each plugin registered) and the run folder's name
(`SUITE--NAME` for `api.evaluate`); what cannot be derived is 'unknown', which counts as third-party
and as unverified.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by the harness's fingerprint, in the attack worker too: no pandas there
    import pandas as pd

SHIPPED, PLUGIN, EVALUATED, UNKNOWN = "shipped", "plugin", "evaluated", "unknown"
PUBLIC, PRIVATE = "public", "private"
ORIGIN_COLUMNS = ("attack_origin", "defence_origin")
"""Whose code the cell ran: set when the attack runs, kept when the cell is rescored."""
TRUST_COLUMNS = (*ORIGIN_COLUMNS, "images")
"""The cells.parquet columns of the trust model (after the other summary columns)."""

VERIFIED = "verified (private images)"
UNVERIFIED = "unverified (public images: the attack could embed them)"
UNVERIFIED_UNKNOWN = "unverified (images of unknown provenance)"
PAIRING_REASON = ("A defence (or client) that is not leakbench's own runs beside the batch and could hand it to a "
                  "third-party attack written to read it: such a pairing is no result")
"""Why a cell pairing a third-party defence with a third-party attack is ranked nowhere."""


def third_party(origin: object) -> bool:
    """Whether an `attack_origin` or `defence_origin` is not leakbench's own code ('unknown' included)."""
    return origin != SHIPPED


def images_of(public: bool) -> str:
    """The `images` value of a cell whose dataset says `public`."""
    return PUBLIC if public else PRIVATE


def pairings(cells: pd.DataFrame) -> pd.Series:
    """Per cell: whether it pairs a third-party attack with a third-party defence (never ranked)."""
    columns = trusted_columns(cells)
    return columns["attack_origin"].map(third_party) & columns["defence_origin"].map(third_party)


def verification(images: Iterable[object]) -> str:
    """A third-party attack's mark from the `images` of its cells: verified only when every one is private."""
    found = set(images)
    if found == {PRIVATE}:
        return VERIFIED
    return UNVERIFIED if PUBLIC in found else UNVERIFIED_UNKNOWN


def trusted_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """The trust columns of `cells` (tables of other tools or tests without them: 'unknown')."""
    import pandas as pd

    return pd.DataFrame({c: cells[c].fillna(UNKNOWN) if c in cells else UNKNOWN for c in TRUST_COLUMNS},
                        index=cells.index)


def derived(manifest: dict[str, Any] | None, run_name: str, attack: str, dataset: str) -> dict[str, str]:
    """The trust columns of a cell stored before they were recorded, from its cell manifest (None: unreadable).

    A manifest without `plugins` predates plugins and `api.evaluate`: its attack and defences were leakbench's.
    Otherwise an attack a plugin registered is a plugin's, one of a run folder `SUITE--NAME` evaluated, any
    other shipped; a defence is a plugin's when a plugin registered it. `imagefolder` images were never
    declared either way ('unknown'); every other dataset is public."""
    images = UNKNOWN if dataset == "imagefolder" else PUBLIC
    if manifest is None:
        return {"attack_origin": UNKNOWN, "defence_origin": UNKNOWN, "images": images}
    plugins = manifest.get("plugins")
    if not isinstance(plugins, list):
        return {"attack_origin": SHIPPED, "defence_origin": SHIPPED, "images": images}
    listed = [p for p in plugins if isinstance(p, dict)]
    spec = manifest.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    defences = {str(d.get("name")) for d in spec.get("defences") or [] if isinstance(d, dict)}
    attack_origin = (PLUGIN if any(attack in (p.get("attacks") or []) for p in listed)
                     else EVALUATED if run_name.endswith(f"--{attack}") else SHIPPED)
    defence_origin = PLUGIN if any(defences & set(p.get("defences") or []) for p in listed) else SHIPPED
    return {"attack_origin": attack_origin, "defence_origin": defence_origin, "images": images}


def read_manifest(cell_dir: Path) -> dict[str, Any] | None:
    """A cell folder's manifest.json, or None when it cannot be read."""
    try:
        data = json.loads((cell_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stored_origins(cell_dir: Path, summary: dict[str, Any], manifest: dict[str, Any] | None) -> dict[str, str]:
    """The origins a stored cell keeps when it is scored again: its summary's, else `derived` from its manifest."""
    if all(isinstance(summary.get(c), str) for c in ORIGIN_COLUMNS):
        return {c: str(summary[c]) for c in ORIGIN_COLUMNS}
    spec = (manifest or {}).get("spec") or {}
    found = derived(manifest, cell_dir.parent.parent.name, str(spec.get("attack")), str(spec.get("dataset")))
    return {c: found[c] for c in ORIGIN_COLUMNS}
