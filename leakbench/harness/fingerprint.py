"""Fingerprints of what a cell was computed from, beyond its id: the batch's images and the attack's code.

Stored in each cell's manifest (`provenance`) and compared before a stored cell is reused
(`harness.reuse`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from leakbench.attacks.base import Attack
from leakbench.datasets import Batch
from leakbench.records.artifacts import json_safe
from leakbench.records.trust import EVALUATED, PLUGIN, SHIPPED


def batch_fingerprint(batch: Batch) -> str:
    """A hash of the batch as the attack sees it: its images rounded to 8 bits (robust to float noise of
    resizing) and its labels, in batch order."""
    digest = hashlib.sha256()
    digest.update(str(tuple(batch.images.shape)).encode())
    pixels = (batch.images.detach().to(torch.float32) * 255).round().clamp(0, 255).to(torch.uint8)
    digest.update(pixels.numpy().tobytes())
    digest.update(batch.labels.to(torch.int64).numpy().tobytes())
    return digest.hexdigest()[:16]


def attack_code(cls: type) -> str:
    """A hash of the source of attack class `cls`: the files of its module and of its attack bases' modules
    (a module inside a sub-package of `leakbench.attacks` stands for the whole sub-package; the
    `Attack` base and modules the attack only imports are not covered). A plugin's attack, which the
    harness knows only from its description, carries the hash the harness computed of its plugin's files
    (`plugin_code`), or where it could not, the attack worker's (`leakbench.plugins`)."""
    described = getattr(cls, "code_hash", None)
    return described if isinstance(described, str) else _hash_files(tuple(sorted(_source_files(cls))))


LEAKBENCH_DIR = Path(__file__).resolve().parent.parent
"""The leakbench package's folder: code defined under it is shipped, any other third-party."""


def code_origin(cls: type) -> str:
    """'shipped' when class `cls` is defined in a file of the leakbench package, else 'plugin' (a defence
    plugin's, or a module the user imported). Only for classes imported here: a plugin's attack is known
    from its description only (`attack_origin`)."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return SHIPPED if path is not None and Path(path).resolve().is_relative_to(LEAKBENCH_DIR) else PLUGIN


def attack_origin(cls: type, evaluated: bool) -> str:
    """'evaluated' for a class run by `api.evaluate` (`evaluated`), 'plugin' for a plugin's attack (the
    harness's stand-in, `attacks.described`, whose module name is the worker's word), else `code_origin`."""
    if evaluated:
        return EVALUATED
    return PLUGIN if getattr(cls, "described", False) else code_origin(cls)


def plugin_code(module: str) -> str | None:
    """A hash of attack plugin `module`'s own source, found on the import path without importing (and so
    without running) any of it: every `.py` file of its top-level package, or the file of a top-level
    module; symbolic links are not followed. None where there is no such file to read (a plugin that is
    not on the path here, a namespace package without `.py` files, a module in a zip file or compiled only)."""
    import importlib.util
    import os

    top = module.partition(".")[0]
    if top in sys.modules:  # leakbench itself, or something imported already: its spec, no search
        spec = getattr(sys.modules[top], "__spec__", None)
    else:
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: no parent package is imported
        except (ImportError, ValueError):
            return None
    files: set[tuple[str, Path]] = set()
    if spec is not None and spec.submodule_search_locations:
        for folder in map(Path, spec.submodule_search_locations):
            for where, _dirs, names in os.walk(folder):  # followlinks=False
                files |= {(p.relative_to(folder.parent).as_posix(), p) for p in (Path(where, n) for n in names)
                          if p.suffix == ".py" and p.is_file() and not p.is_symlink()}
    elif spec is not None and spec.origin and spec.has_location and spec.origin.endswith(".py"):
        path = Path(spec.origin)
        if path.is_file() and not path.is_symlink():
            files.add((path.name, path))
    return _hash_files(tuple(sorted(files))) if files else None


def _source_files(cls: type) -> set[tuple[str, Path]]:
    """(name relative to its import root, path) of the source files that define `cls` and its bases."""
    files: set[tuple[str, Path]] = set()
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        path = getattr(module, "__file__", None)
        if path is None or not issubclass(klass, Attack) or klass is Attack:
            continue
        path = Path(path).resolve()
        parts = klass.__module__.split(".")
        if parts[:2] == ["leakbench", "attacks"] and len(parts) > 3:  # leakbench.attacks.spear.x: all of spear
            folder = path.parent
            files |= {(p.relative_to(folder.parent).as_posix(), p) for p in folder.rglob("*.py")}
        else:
            files.add((klass.__module__, path))
    return files


def _hash_files(files: tuple[tuple[str, Path], ...]) -> str:
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(f"{name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def resolved(hyperparameters: dict[str, Any]) -> str:
    """Resolved hyperparameters as canonical JSON (as stored: tuples as lists, non-finite floats as null)."""
    return json.dumps(json_safe(hyperparameters), sort_keys=True, separators=(",", ":"), default=str)


PROVENANCE = ("attack_code", "batch_fingerprint")
"""The keys `provenance` adds to a cell manifest."""


def provenance(attack: type, batch: Batch) -> dict[str, Any]:
    """What a cell manifest records for `stale_cells`: the attack's code and the batch's fingerprint."""
    return {"attack_code": attack_code(attack), "batch_fingerprint": batch_fingerprint(batch)}
