"""Datasets, one registry. Every loader returns an `ImageDataset` (float [0,1], NCHW, labels)."""

from __future__ import annotations

from pathlib import Path

from leakbench.core.registry import Registry
from leakbench.datasets.base import Batch, ImageDataset, Partition, partition, sample_batch
from leakbench.plugins import load_dataset_plugins

DATASETS: Registry[ImageDataset] = Registry("dataset", on_first_use=load_dataset_plugins)  # entry-point plugins


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


# Loaders register themselves on import.
from leakbench.datasets import loaders as _loaders  # noqa: E402,F401

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
