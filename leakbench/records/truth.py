"""A stored cell's ground truth beside its stored answer, for grids and comparison figures.

Ground truth is never stored: it is re-derived from the cell's spec (dataset, image size, batch size,
seed, clients, trained or not) as scoring derived it (`cell.draw.draw_client_batches`). The stored
reconstruction (`records.artifacts`) and its stored matching (the records' `matched_recon`, one per
ground-truth image) align the two. Loads datasets and the
victim's batch code (when a truth is drawn) only: no attack and none of the harness runner.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from leakbench.core.errors import LeakbenchError
from leakbench.metrics.score import aligned_to_truth, stored_matching
from leakbench.records.artifacts import AttackOutput, load_attack_output
from leakbench.records.cells import CELLS_DIR, cell_path

if TYPE_CHECKING:  # specs, datasets and models load when a truth is drawn, not when reports import this
    from leakbench.cell.spec import CellSpec


@dataclass(frozen=True)
class CellTruth:
    """A cell's re-derived ground truth (`truth`, the batch's images), the spec of its batch (`stored_spec`),
    its stored answer and its stored matching (`matching[i]`: the reconstruction paired with ground-truth
    image i, or UNMATCHED)."""

    spec: CellSpec
    truth: torch.Tensor
    output: AttackOutput
    matching: np.ndarray

    def aligned(self) -> torch.Tensor | None:
        """The reconstructed images (or images inverted from the features) in ground-truth order; unmatched
        positions NaN. None when the attack produced no images."""
        output = self.output
        images = output.reconstruction.images if output.reconstruction.space == "image" else output.inverted
        if images is None or not output.reconstruction.answered:
            return None
        return aligned_to_truth(images, self.matching)


def cell_folder(path: Path, cell_id: str) -> Path:
    """The cell's folder, given a run folder (holding cells/) or the cell folder itself."""
    return cell_path(path, cell_id) if (path / CELLS_DIR).is_dir() else path


BATCH_FIELDS = ("attack", "dataset", "batch_size", "seed", "data_root", "image_size", "train_epochs", "recipe",
                "data_fingerprint")
"""The fields of a stored spec that choose a cell's batch (with the number of clients: `load_truth`)."""


def stored_spec(cell_dir: Path, data_root: str | None = None) -> CellSpec:
    """The spec of the batch a cell folder's manifest stores: its `BATCH_FIELDS`, each checked as a suite's
    (its dataset found under `data_root` when given). Its update is left out, so no transform is looked up:
    a cell whose defence came from a plugin that is not installed here still has its truth."""
    from leakbench.cell.spec import spec_from_dict

    data = json.loads((cell_dir / "manifest.json").read_text())["spec"]
    spec = spec_from_dict({k: v for k, v in data.items() if k in BATCH_FIELDS} if isinstance(data, dict) else data)
    return spec if data_root is None else dataclasses.replace(spec, data_root=data_root)


def truth_images(spec: CellSpec) -> torch.Tensor:
    """The cell's ground truth (`cell.spec.truth_size` images: every client's batch), re-derived from
    its dataset, image size, batch size, seed, number of clients and whether its victim is trained (its
    batch then comes from the attack part); cached: the attacks of one setting share a batch."""
    from leakbench.cell.spec import client_count

    return _truth(spec.dataset, spec.data_root, spec.image_size, spec.batch_size, spec.seed, client_count(spec),
                  spec.train_epochs > 0, spec.data_fingerprint)


@lru_cache(maxsize=16)
def _truth(dataset: str, data_root: str | None, image_size: int | None, batch_size: int, seed: int, clients: int,
           trained: bool, fingerprint: str | None) -> torch.Tensor:
    from leakbench.cell.draw import draw_client_batches
    from leakbench.datasets import load_dataset

    data = load_dataset(dataset, data_root=Path(data_root) if data_root else None, image_size=image_size,
                        fingerprint=fingerprint)
    return draw_client_batches(data, batch_size, seed, clients, trained=trained).images


def cell_matching(cell_dir: Path) -> np.ndarray:
    """The stored matching of a cell folder (`metrics.stored_matching` of its records)."""
    return stored_matching(pd.read_parquet(cell_dir / "records.parquet", columns=["image", "matched_recon"]))


def load_truth(path: Path, cell_id: str, *, data_root: str | None = None) -> CellTruth:
    """Cell `cell_id` of a run folder (or the cell folder `path` itself): its re-derived ground truth (K·b
    images: the number of clients K from its records, one row per ground-truth image), its stored
    reconstruction and its stored matching."""
    cell_dir = cell_folder(Path(path), cell_id)
    spec, matching = stored_spec(cell_dir, data_root), cell_matching(cell_dir)
    clients, rest = divmod(len(matching), spec.batch_size)
    if clients < 1 or rest:
        raise LeakbenchError(f"cell {cell_id}: its records hold {len(matching)} images, not a multiple of its "
                             f"batch size {spec.batch_size}")
    truth = _truth(spec.dataset, spec.data_root, spec.image_size, spec.batch_size, spec.seed, clients,
                   spec.train_epochs > 0, spec.data_fingerprint)
    return CellTruth(spec, truth, load_attack_output(cell_dir), matching)
