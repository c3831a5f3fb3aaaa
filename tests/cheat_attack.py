"""A plugin attack that cheats: it tries to reach the client's batch instead of inverting the update.

`route` picks how: issue 14's six Python routes, and issue 22's routes around a Python guard
(`cheat_native.py`: native readers, new processes, the harness's memory, other folders, the reply,
the guard itself). Each route only accepts a candidate batch whose FedSGD gradient on the public
model equals the shared one, so a hit is the true batch, never a guess; routes that read memory or
files report how many bytes they read. When a route finds nothing (or raises: the guard's or the
kernel's PermissionError) the attack answers with uniform noise, which scores like noise.
`tests/test_cheating.py` runs it, registered for the test only (`leakbench.api.scoped_attack`).
"""

from __future__ import annotations

import copy
import gc
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cheat_native
import torch

from leakbench.attacks import Attack, Reconstruction
from leakbench.fl.update import ClientUpdate

ROUTES = ("stack", "gc", "seed", "cache", "data_root", "globals")
"""Issue 14's routes (Python only)."""
NATIVE_ROUTES = (*cheat_native.READERS, *cheat_native.COPIERS)
"""Issue 22's routes that copy the private data root (hyperparameter data_root) and load the copy."""
READ_ROUTES = (*cheat_native.MEMORY, "results")
"""Routes that read the harness's memory, or a file (data_root: an earlier cell's or a report's)."""
OTHER_ROUTES = ("copy", "reply_pickle", "sabotage", "sitecustomize")
"""copy: the data under a folder that is not a listed data location; reply_pickle: a reply that
would run code where it is unpickled; sabotage: patch the SPEAR attack for later cells;
sitecustomize: whether a sitecustomize on the import path ran in this process."""
SEED_GUESSES = range(4)


@dataclass(frozen=True)
class CheatConfig:
    """route: one of stack, gc, seed, cache, data_root, globals.
    data_root: where the cheater believes the client's images lie (the test tells it: the worst case)."""

    route: str = "stack"
    data_root: str = ""


class CheatAttack(Attack):
    name = "cheat"
    description = "tries to read the private batch (test plugin)"
    Config = CheatConfig

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        route, found, stats = self.config.route, None, {}
        try:
            if route in READ_ROUTES:
                why = f"read {_read(route, self.config.data_root)} bytes"
            elif route in OTHER_ROUTES[1:]:
                why, stats = OTHER_FUNCTIONS[route]()
            else:
                found = ROUTE_FUNCTIONS[route](update, seed, self.config.data_root)
                why = "found" if found is not None else "nothing found"
        except Exception as exc:  # noqa: BLE001 — a blocked route is a failed cheat, not a failed cell
            found, why = None, f"{type(exc).__name__}: {exc}"
        b = update.batch_size or 1
        if found is None:
            found = torch.rand((b, *update.model.input_shape), generator=torch.Generator().manual_seed(seed))
        return Reconstruction("ok", "image", images=found.clone(), stats={"route": route, "outcome": why, **stats})


def _matches(update: ClientUpdate, images: torch.Tensor, labels: torch.Tensor) -> bool:
    """Whether (images, labels) give the shared gradient on the public model."""
    from leakbench.datasets.base import Batch
    from leakbench.fl.update import fedsgd_update

    if images.shape[0] != update.batch_size:
        return False
    batch = Batch(images, labels, tuple(range(len(labels))), "", 0)
    name = next(iter(update.gradients))
    model = copy.deepcopy(update.model).requires_grad_(True)
    return bool(torch.allclose(fedsgd_update(model, batch).gradients[name], update.gradients[name],
                               rtol=1e-4, atol=1e-7))


def _first_batch(update: ClientUpdate, objects: Any) -> torch.Tensor | None:
    """The images of the first Batch among `objects` that produced the update."""
    from leakbench.datasets.base import Batch

    for obj in objects:
        if isinstance(obj, Batch) and _matches(update, obj.images, obj.labels):
            return obj.images
    return None


def _stack(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    frame = sys._getframe()
    while frame is not None:
        hit = _first_batch(update, list(frame.f_locals.values()))
        if hit is not None:
            return hit
        frame = frame.f_back
    return None


def _gc(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    return _first_batch(update, gc.get_objects())


def _draw(update: ClientUpdate, dataset: Any, seeds: Any) -> torch.Tensor | None:
    from leakbench.datasets import sample_batch

    b = update.batch_size
    for s in seeds:
        if b is not None and b <= len(dataset):
            batch = sample_batch(dataset, b, s)
            if _matches(update, batch.images, batch.labels):
                return batch.images
    return None


def _seed(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    """Re-derive the batch from the handed seed (the harness once handed the batch's own seed)."""
    from leakbench.datasets import load_dataset

    return _draw(update, load_dataset("embedded"), [seed])


def _cache(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    """The dataset cache of this process (the loaders' in-memory copies), seeds guessed."""
    from leakbench.datasets import loaders

    side = update.model.input_shape[-1]
    return _draw(update, loaders._embedded_cached(side), SEED_GUESSES)


def _data_root(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    """Read the image files under the data root directly, seeds guessed."""
    from leakbench.datasets.loaders import load_imagefolder

    root = Path(data_root)
    for path in sorted(root.rglob("*.png"))[:1]:
        path.read_bytes()  # the raw file itself
    return _draw(update, load_imagefolder(data_root=root, image_size=update.model.input_shape[-1]), SEED_GUESSES)


def _globals(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    """Module globals of the harness (and everything they hold one level down), including cell specs
    from which the batch could be re-derived."""
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.victim import load_batch

    seen: list[Any] = []
    for name, module in list(sys.modules.items()):
        if name.startswith("leakbench") and module is not None:
            for value in vars(module).values():
                seen.append(value)
                if isinstance(value, (list, tuple, set, dict)):
                    seen.extend(value.values() if isinstance(value, dict) else value)
    specs = [load_batch(v) for v in seen if isinstance(v, CellSpec)]
    return _first_batch(update, seen + specs)


def _native(route: str) -> Any:
    """A route that copies the data root by `route` and draws the batch from the copy."""
    def steal(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
        from leakbench.datasets.loaders import load_imagefolder

        copy = cheat_native.exfiltrate(route, data_root)
        return _draw(update, load_imagefolder(data_root=Path(copy), image_size=update.model.input_shape[-1]),
                     SEED_GUESSES)
    return steal


def _copy(update: ClientUpdate, seed: int, data_root: str) -> torch.Tensor | None:
    """The data under a folder no data location lists (a wheel cache, a backup), loaded from Python."""
    from leakbench.datasets.loaders import load_imagefolder

    return _draw(update, load_imagefolder(data_root=Path(data_root), image_size=update.model.input_shape[-1]),
                 SEED_GUESSES)


def _read(route: str, path: str) -> int:
    """Bytes read by a memory route (`path`: the harness's process id), or of the file at `path` (a
    results folder's)."""
    if route in cheat_native.MEMORY:
        cheat_native.TARGET = int(path or 0)
        return cheat_native.MEMORY[route]()
    with open(path, "rb") as f:
        return len(f.read())


class _Evil:
    """Unpickled, it creates the file `marker` (code run wherever the reply is unpickled)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return Path.touch, (Path(self.marker),)


REPLY_MARKER = Path(tempfile.gettempdir(), "leakbench-cheat-reply-ran")
"""Where `_Evil` leaves its mark when the harness unpickles the reply (it never should)."""


def _reply_pickle() -> tuple[str, dict[str, Any]]:
    return "sent", {"evil": _Evil(str(REPLY_MARKER))}


def _sabotage() -> tuple[str, dict[str, Any]]:
    """Break SPEAR in this process: a worker shared with later cells would give them noise."""
    from leakbench.attacks.spear.attack import SpearAttack

    SpearAttack.reconstruct = lambda self, update, *, seed: Reconstruction.failed("sabotaged")  # type: ignore[method-assign]
    return "patched", {}


def _sitecustomize() -> tuple[str, dict[str, Any]]:
    return ("sitecustomize ran" if getattr(sys.modules.get("sitecustomize"), "CHEAT", False) else "nothing found"), {}


ROUTE_FUNCTIONS = {"stack": _stack, "gc": _gc, "seed": _seed, "cache": _cache, "data_root": _data_root,
                   "globals": _globals, "copy": _copy, **{r: _native(r) for r in NATIVE_ROUTES}}
OTHER_FUNCTIONS = {"reply_pickle": _reply_pickle, "sabotage": _sabotage, "sitecustomize": _sitecustomize}
