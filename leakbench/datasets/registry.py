"""The dataset registry, `DATASETS`, in a module of its own: the shipped loaders (`datasets.loaders`)
register in it without importing the package that imports them (`leakbench.datasets` re-exports it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from leakbench.core.registry import Registry
from leakbench.datasets.base import ImageDataset
from leakbench.plugins import load_dataset_plugins

DATASETS: Registry[ImageDataset] = Registry("dataset", on_first_use=load_dataset_plugins)  # entry-point plugins
"""Every dataset by name: the shipped loaders and the dataset plugins (`leakbench.plugins`)."""
FINGERPRINTS: dict[str, Callable[[Path], str]] = {}
"""Per dataset whose data root is a user's own folder (`imagefolder`), how to fingerprint the files it
serves from a root without loading it (what its `ImageDataset.fingerprint` says once loaded)."""
