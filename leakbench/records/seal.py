"""A cell folder's seal: its cell id and a SHA-256 of each of its files, written last (`seal.json`).

`damage(folder, cell_id)` is '' for an intact cell folder, else why it is not: a missing, truncated
or foreign file, a file whose bytes are not those sealed, or files of another cell copied in.
Cell folders written before seals existed (no seal.json) count as intact when summary.json,
manifest.json and records.parquet parse and all carry the folder's cell id, and grid.png (image
cells) is a PNG; anything less is damage, and `leakbench run` recomputes the cell. Such legacy cells
have no stored reconstruction, so `leakbench rescore` cannot score them again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from leakbench.records.folders import TEMP_MARKER, foreign_entries, is_plain_file

SEAL = "seal.json"
MARKER = "leakbench cell"
REQUIRED = ("records.parquet", "summary.json", "manifest.json")
"""What every cell folder holds, sealed or from before seals."""
STORED = ("reconstruction.npz", "attack.json")
"""The attack's answer (`records.artifacts`): in every sealed cell folder."""
CELL_FILES = (*REQUIRED, *STORED, "grid.png", SEAL)
"""Everything leakbench writes into a cell folder (grid.png only in folders from before stored
reconstructions; `attack --out` folders also get one)."""


def is_cell_file(path: Path) -> bool:
    """One of the files leakbench writes into a cell folder."""
    return path.name in CELL_FILES and is_plain_file(path)


def foreign_cell_entries(folder: Path) -> list[str]:
    """Entries of a cell folder that leakbench did not write there."""
    return foreign_entries(folder, is_cell_file)


def write_seal(folder: Path, cell_id: str) -> None:
    """Seal the files now in `folder` (call once they are all written)."""
    files = {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.name not in (SEAL, TEMP_MARKER)}
    seal = {"leakbench": MARKER, "cell_id": cell_id, "sha256": files}
    (folder / SEAL).write_text(json.dumps(seal, indent=2, sort_keys=True) + "\n")


def is_cell_folder(folder: Path) -> bool:
    """Whether `folder` holds a leakbench cell's output and nothing else (intact or not)."""
    if foreign_cell_entries(folder) or not folder.is_dir():
        return False
    return _read_seal(folder) is not None or isinstance(_json(folder / "summary.json").get("cell_id"), str)


def damage(folder: Path, cell_id: str | None = None) -> str:
    """'' when `folder` is an intact cell folder (of `cell_id`, when given), else what is wrong with it."""
    foreign = foreign_cell_entries(folder)
    if foreign:
        return f"files leakbench did not write: {', '.join(foreign)}"
    seal = _read_seal(folder)
    if seal is None:
        return "seal.json is invalid" if (folder / SEAL).exists() else _legacy_damage(folder, cell_id)
    if cell_id is not None and seal["cell_id"] != cell_id:
        return f"its seal is cell {seal['cell_id']}'s"
    sealed, present = set(seal["sha256"]), {p.name for p in folder.iterdir()} - {SEAL}
    wrong = sorted((sealed ^ present) | (set(REQUIRED) - sealed) | (set(STORED) - sealed))
    if wrong:
        return f"{wrong[0]} is {'missing' if wrong[0] not in present else 'not sealed'}"
    for name in sorted(sealed):
        if _sha256(folder / name) != seal["sha256"][name]:
            return f"{name} differs from the sealed file (truncated, rewritten or another cell's)"
    return ""


def _legacy_damage(folder: Path, cell_id: str | None) -> str:
    """Damage of a cell folder stored before seals: every file must parse and carry one cell id."""
    import pandas as pd
    from PIL import Image

    for name in REQUIRED:
        if not (folder / name).is_file():
            return f"{name} is missing"
    if any((folder / name).exists() for name in STORED):  # written with a seal, which is gone
        return "seal.json is missing"
    try:
        summary = json.loads((folder / "summary.json").read_text())
        manifest = json.loads((folder / "manifest.json").read_text())
        ids = {summary["cell_id"], manifest["cell_id"], *pd.read_parquet(folder / "records.parquet")["cell_id"]}
        if summary.get("space") == "image" and (folder / "grid.png").exists():
            with Image.open(folder / "grid.png") as grid:
                grid.verify()
    except Exception as exc:  # noqa: BLE001 — a file that does not parse, however it fails, is damage
        return f"unreadable ({type(exc).__name__}: {exc})".replace("\n", " ")[:200]
    expected = {cell_id} if cell_id is not None else {summary["cell_id"]}
    return "" if ids == expected else f"its files carry cell ids {sorted(map(str, ids))}"


def _read_seal(folder: Path) -> dict[str, Any] | None:
    """The seal when it is leakbench's and well formed, else None."""
    seal = _json(folder / SEAL)
    files = seal.get("sha256")
    ok = (seal.get("leakbench") == MARKER and isinstance(seal.get("cell_id"), str) and isinstance(files, dict)
          and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
          and set(files) <= set(CELL_FILES) - {SEAL})
    return seal if ok else None


def _json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or {} when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
