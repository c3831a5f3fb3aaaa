"""Trained victims, cached by content: `<cache>/<hash>.pt`, the hash over everything that makes the weights.

The key is plain data (dataset, its size and image size, the partition, arch, width, depth, init seed,
recipe, epochs, and — only for a victim trained under defences — its update transforms as names and
settings); the same key always gives the same weights, so a sweep trains each victim once and every
later cell (or run) loads it. Files are written atomically (a temporary file, then a rename), so
an interrupted training leaves no half-written victim. The cache lies in $LEAKBENCH_VICTIM_CACHE,
else ~/.cache/leakbench/victims.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from leakbench.core.errors import LeakbenchWarning
from leakbench.models.base import VictimInfo
from leakbench.models.training import TrainRecipe, UpdateRule, accuracy, train

CACHE_ENV = "LEAKBENCH_VICTIM_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "leakbench" / "victims"
FORMAT = 1
"""Version of the cache key and file layout (part of the hash)."""


AT_INIT = VictimInfo(0, float("nan"), float("nan"), "")


def cache_dir() -> Path:
    """Where trained victims are stored: $LEAKBENCH_VICTIM_CACHE, else ~/.cache/leakbench/victims."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else DEFAULT_CACHE


def victim_hash(key: dict[str, Any]) -> str:
    """sha256 of the key as canonical JSON (sorted keys), first 32 hex digits."""
    text = json.dumps({**key, "format": FORMAT}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def trained_victim(model: nn.Module, key: dict[str, Any], images: torch.Tensor, labels: torch.Tensor,
                   parts: tuple[torch.Tensor, torch.Tensor], recipe: TrainRecipe, epochs: int, *,
                   rule: UpdateRule | None = None) -> VictimInfo:
    """Load `model`'s trained weights for `key` from the cache, or train it (on `images[parts[0]]`, every
    step's update made by `rule` when defended: `training.train`), measure its accuracies (train part, test
    part `parts[1]`) and store it. `model` is the victim at init and is changed in place. A defended rule
    must be in `key` (`UpdateRule.key`). An unreadable cache file is replaced (one warning)."""
    digest = victim_hash(key)
    path = cache_dir() / f"{digest}.pt"
    stored = _load(path, key)
    if stored is not None:
        model.load_state_dict(stored["state_dict"])
        model.eval()
        return VictimInfo(epochs, stored["train_accuracy"], stored["test_accuracy"], digest)
    train(model, images, labels, parts[0], recipe, epochs, rule=rule)
    info = VictimInfo(epochs, accuracy(model, images, labels, parts[0]), accuracy(model, images, labels, parts[1]),
                      digest, trained_now=True)
    _save(path, {"key": key, "state_dict": model.state_dict(), "train_accuracy": info.train_accuracy,
                 "test_accuracy": info.test_accuracy})
    return info


def _load(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The stored victim at `path` when it is there, readable and made from `key`; else None."""
    if not path.is_file():
        return None
    try:
        stored: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        if json.dumps(stored["key"], sort_keys=True, default=str) == json.dumps(key, sort_keys=True, default=str):
            return stored
        reason = "its key differs"
    except Exception as exc:  # noqa: BLE001 — any damage: retrain and replace
        reason = f"{type(exc).__name__}: {exc}"
    warnings.warn(LeakbenchWarning(f"trained victim {path} is unusable ({' '.join(reason.split())}); retraining"),
                  stacklevel=3)
    return None


def _save(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` to `path` atomically (temporary file in the same folder, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
