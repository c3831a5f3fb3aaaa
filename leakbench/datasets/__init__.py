"""Datasets, one registry. Every loader returns an `ImageDataset` (float [0,1], NCHW, labels)."""

from __future__ import annotations

from pathlib import Path

from leakbench.core.errors import DatasetError
from leakbench.datasets.base import Batch, ImageDataset, Partition, partition, sample_batch
from leakbench.datasets.registry import DATASETS, FINGERPRINTS
from leakbench.plugins import serve


def data_fingerprint(name: str, data_root: Path | str | None) -> str | None:
    """The identity of the data a cell of dataset `name` reads under `data_root`, for its id
    (`CellSpec.data_fingerprint`): the hash of the served files (16 hex digits) for a dataset in
    FINGERPRINTS given a root; None for every other (a published dataset: its name says its data, and
    its cells' ids stay as they were)."""
    fingerprint = FINGERPRINTS.get(name)
    return fingerprint(Path(data_root)) if fingerprint is not None and data_root else None


def load_dataset(name: str, *, data_root: Path | None = None, image_size: int | None = None,
                 fingerprint: str | None = None) -> ImageDataset:
    """Load dataset `name`; `data_root` and `image_size` are passed to loaders that use them. With
    `fingerprint` (a cell's `data_fingerprint`), files other than those the cell was planned on are one
    DatasetError line, never other images under the cell's id."""
    dataset = DATASETS.create(name, data_root=data_root, image_size=image_size)
    if fingerprint is not None and dataset.fingerprint != fingerprint:
        raise DatasetError(f"{name}: {data_root} does not serve the files the cell was planned on (their fingerprint "
                           f"{fingerprint}, found {dataset.fingerprint or 'none'}): give it the folder it was run on")
    return dataset


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
    "FINGERPRINTS",
    "Batch",
    "ImageDataset",
    "Partition",
    "data_fingerprint",
    "describe_dataset",
    "list_datasets",
    "load_dataset",
    "partition",
    "sample_batch",
]
