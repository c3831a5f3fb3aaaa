"""Datasets, one registry. Every loader returns an `ImageDataset` (float [0,1], NCHW, labels)."""

from __future__ import annotations

from pathlib import Path

from leakbench.datasets.base import Batch, ImageDataset, Partition, partition, sample_batch
from leakbench.datasets.registry import DATASETS
from leakbench.plugins import serve


def load_dataset(name: str, *, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """Load dataset `name`; `data_root` and `image_size` are passed to loaders that use them."""
    return DATASETS.create(name, data_root=data_root, image_size=image_size)


def list_datasets() -> list[tuple[str, str]]:
    """(name, description) for every registered dataset."""
    return [(e.name, e.description) for e in DATASETS.entries()]


def describe_dataset(name: str) -> list[str]:
    """What `leakbench show dataset NAME` prints: its description and its loader's documentation."""
    import inspect

    entry = DATASETS.entry(name)
    return [f"{entry.name}: {entry.description}", "", inspect.getdoc(entry.factory) or ""]


def _admit(name: str, obj: object) -> bool:
    """A dataset entry point's object (`leakbench.plugins`): a loader (any callable) is registered under
    the entry point's name (unless it is registered already), its docstring's first line its description."""
    import inspect

    if not callable(obj):
        return False
    if name not in DATASETS.names() or DATASETS.entry(name).factory is not obj:
        DATASETS.register(name, obj, (inspect.getdoc(obj) or name).splitlines()[0])
    return True


# Loaders register themselves on import.
from leakbench.datasets import loaders as _loaders  # noqa: E402,F401

serve("datasets", DATASETS, _admit, "a loader")  # the shipped loaders are in

__all__ = [
    "DATASETS",
    "Batch",
    "ImageDataset",
    "Partition",
    "describe_dataset",
    "list_datasets",
    "load_dataset",
    "partition",
    "sample_batch",
]
