"""Scoring a cell: the attack's output against the re-derived ground truth, as per-image records and a summary."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from leakbench.attacks import Reconstruction
from leakbench.attacks.malicious import server_columns
from leakbench.cell.draw import draw_distractors
from leakbench.cell.spec import CellSpec, cell_columns
from leakbench.core.reconstruction import incomplete_reason
from leakbench.datasets import Batch, ImageDataset, load_dataset
from leakbench.fl.update import client_view
from leakbench.harness.victim import noise_columns, victim_columns
from leakbench.metrics import (
    MATCHING,
    LpipsScorer,
    aligned_to_truth,
    score_features,
    score_images,
    stored_matching,
)
from leakbench.metrics.reid import DEFAULT_DISTRACTORS, distance_name
from leakbench.metrics.stats import describe, or_none
from leakbench.models import ImageVictim
from leakbench.records.artifacts import AttackOutput, plain_stats
from leakbench.records.trust import images_of


@dataclass
class CellResult:
    """The outcome of a cell: the attack's stored output, a summary row, per-image records and what a
    grid needs (the ground truth and the reconstruction aligned to it; neither is stored)."""

    spec: CellSpec
    summary: dict[str, Any]
    records: pd.DataFrame
    truth: torch.Tensor
    aligned: torch.Tensor | None
    output: AttackOutput
    provenance: dict[str, Any] = field(default_factory=dict)
    """The attack's code and the batch's fingerprint (`fingerprint.provenance`), for the cell manifest."""

    @property
    def reconstruction(self) -> Reconstruction:
        return self.output.reconstruction


def score_cell(spec: CellSpec, output: AttackOutput, batch: Batch, model: ImageVictim, *,
               lpips: LpipsScorer | None = None, lpips_note: str = "",
               n_distractors: int = DEFAULT_DISTRACTORS) -> CellResult:
    """The scoring step: a pure function of the attack's output, the re-derived ground truth and (for
    re-identification) up to `n_distractors` other images of the batch's split, drawn here, after the attack."""
    output = admitted(output, len(batch.images))
    recon = output.reconstruction
    inverted = spec.inversion is not None and bool(spec.inversion.steps) and recon.space == "feature"
    gallery = cell_distractors(spec, batch, n_distractors) if recon.space == "image" or inverted else None
    records, aligned = score(recon, batch, client_view(model, spec.threat), lpips,  # truth as the client ran it
                             gallery)
    if inverted:
        aligned = add_inversion(records, output.inverted, batch, lpips, gallery)
    records.insert(0, "dataset_index", list(batch.indices))
    for key, value in reversed(list(scored_columns(spec).items())):
        records.insert(0, key, value)
    for key, value in {**victim_columns(model), **noise_columns(spec, batch, model)}.items():
        records[key] = value
    records["lpips_net"] = lpips.net if lpips is not None else ""
    records["isolation"] = output.isolation
    summary = summarize(spec, recon, records, output.seconds, lpips is not None, lpips_note)
    summary.update(lpips_columns(lpips))
    summary.update(reid_columns(records, gallery, lpips))
    summary["hyperparameters"] = output.hyperparameters
    summary["isolation"] = output.isolation
    summary["images"] = images_of(batch.public)  # whether a third-party attack could carry them (records.trust)
    summary.update(victim_columns(model))
    return CellResult(spec, summary, records, batch.images, aligned, output)


def scored_columns(spec: CellSpec) -> dict[str, Any]:
    """The cell's columns in its records and summary: its axes (`cell.spec.cell_columns`), then `server` for a
    malicious server's attack (`attacks.malicious.server_columns`; none for an honest one)."""
    return {**cell_columns(spec), **server_columns(spec.attack)}


def admitted(output: AttackOutput, b: int) -> AttackOutput:
    """The output as scored: a partial answer must hold 1 to b − 1 samples (the ones its attack verified);
    one holding none, or as many as the batch or more, is refused and scored as a failed cell saying why.

    Whatever an answer claims, scoring pairs each ground-truth image with at most one reconstruction
    (Hungarian matching) and the ground truth alone decides what is exact, so a partial answer can never
    count more images than it holds, nor one image twice; its unmatched ground-truth images count as not
    recovered.
    """
    recon = output.reconstruction
    if recon.status != "partial" or 0 < recon.rows() < b:
        return output
    reason = (f"error: a partial answer holds 1 to {b - 1} verified samples of the batch of {b}; this one "
              f"held {recon.rows()}")
    failed = Reconstruction.failed(reason, failure="error", space=recon.space, layer=recon.layer, stats=recon.stats)
    return dataclasses.replace(output, reconstruction=failed, inverted=None)


def cell_distractors(spec: CellSpec, batch: Batch, n: int) -> torch.Tensor:
    """The cell's re-identification distractors (`cell.draw.draw_distractors`): up to `n` images of the batch's
    split, disjoint from the batch, fixed per (dataset, seed)."""
    dataset = _scoring_dataset(spec.dataset, spec.data_root, spec.image_size, spec.data_fingerprint)
    return dataset.images[torch.as_tensor(draw_distractors(dataset, spec, batch, n), dtype=torch.long)]


@lru_cache(maxsize=1)
def _scoring_dataset(name: str, data_root: str | None, image_size: int | None, fingerprint: str | None
                     ) -> ImageDataset:
    """The dataset distractors are drawn from, loaded once per process and dataset (loaders that do not cache,
    `imagefolder` and `mnist`, would read their files again for every cell; the cell's victim has already
    checked the fingerprint of the files it reads)."""
    return load_dataset(name, data_root=Path(data_root) if data_root else None, image_size=image_size,
                        fingerprint=fingerprint)


def reid_columns(records: pd.DataFrame, gallery: torch.Tensor | None, lpips: LpipsScorer | None) -> dict[str, Any]:
    """The cell's re-identification (`metrics.reid`): `reid_top1`, the fraction of its batch's images whose
    reconstruction ranks their true image first (an image without one counts as not re-identified),
    `reid_n`, the distractors besides the batch, and `reid_distance`; None, None, '' for a cell with no images
    to rank (feature space without inversion)."""
    if gallery is None or "reid_rank" not in records:
        return {"reid_top1": None, "reid_n": None, "reid_distance": ""}
    return {"reid_top1": float((records["reid_rank"] == 1).mean()), "reid_n": int(gallery.shape[0]),
            "reid_distance": distance_name(lpips)}


def score(recon: Reconstruction, batch: Batch, model: ImageVictim, lpips: LpipsScorer | None,
          distractors: torch.Tensor | None = None) -> tuple[pd.DataFrame, torch.Tensor | None]:
    """Per-image metrics in the reconstruction's space (re-identified among `distractors` when given), and the
    reconstruction aligned to truth."""
    if recon.space == "image":
        images = recon.images if recon.answered else None
        records = score_images(images, batch.images, lpips=lpips, distractors=distractors)
    else:
        truth = model.layer_inputs(batch.images.to(next(model.parameters()).dtype), recon.layer or 1)
        images = None
        records = score_features(recon.features if recon.answered else None, truth.detach())
    aligned = aligned_to_truth(images, stored_matching(records))
    records.insert(0, "space", recon.space)
    records["status"] = recon.status
    return records, aligned


INVERSION_COLUMNS = {"mse": "mse", "psnr": "psnr", "ssim": "ssim", "lpips": "lpips", "exact": "image_exact",
                     "reid_rank": "reid_rank"}
"""Columns of `score_images` added to a feature cell's records for its inverted images, and their names there."""


def add_inversion(records: pd.DataFrame, images: torch.Tensor | None, batch: Batch, lpips: LpipsScorer | None,
                  distractors: torch.Tensor | None = None) -> torch.Tensor | None:
    """Add image metrics of the inverted images (`images`, from recovered features) to `records`.

    Each ground-truth row keeps the reconstruction the feature matching gave it; the image metrics
    (mse, psnr, ssim, lpips, image_exact, reid_rank) are of that reconstruction's inverted image. `exact`
    stays the feature-space exactness. Returns the inverted images aligned to the truth (None if none).
    """
    perm = stored_matching(records)
    scored = score_images(images, batch.images.to(torch.float32), lpips=lpips, perm=perm, distractors=distractors)
    for column, name in INVERSION_COLUMNS.items():
        records[name] = scored[column].to_numpy()
    return aligned_to_truth(images, perm)


def lpips_columns(lpips: LpipsScorer | None) -> dict[str, Any]:
    """Which LPIPS network scored the cell: net, where its weights came from, whether it was verified."""
    if lpips is None:
        return {"lpips_net": "", "lpips_source": "", "lpips_verified": False}
    return {"lpips_net": lpips.net, "lpips_source": lpips.source, "lpips_verified": lpips.verified}


def summarize(spec: CellSpec, recon: Reconstruction, records: pd.DataFrame, seconds: float,
              have_lpips: bool, lpips_note: str) -> dict[str, Any]:
    """The one-object summary printed by `leakbench attack --json`."""
    psnr, ssim, lp = (describe(_values(records, name)) for name in ("psnr", "ssim", "lpips"))
    out: dict[str, Any] = dict(scored_columns(spec))
    out.update({
        "space": recon.space,
        "n_images": len(records),
        "exact_fraction": float(records["exact"].astype(bool).mean()),
        "psnr_mean": or_none(psnr.mean), "psnr_median": or_none(psnr.median), "psnr_min": or_none(psnr.min),
        "psnr_inf": psnr.n_inf, "ssim_mean": or_none(ssim.mean),
        "lpips_mean": or_none(lp.mean) if have_lpips else None,
        "lpips_note": "" if have_lpips else lpips_note,
        "seconds": seconds, "status": recon.status, "reason": cell_reason(recon, len(records)),
        "matching": MATCHING, "attack_stats": plain_stats(recon.stats), "failure": recon.failure,
    })
    if recon.space == "feature":
        out["feature_rel_error_max"] = or_none(describe(_values(records, "rel_error")).max)
    return out


def cell_reason(recon: Reconstruction, b: int) -> str:
    """The reason a cell's records keep: the attack's own, or for a partial answer "batch incomplete: k of b
    verified (the attack's reason)", k counted by the harness (the samples the answer holds)."""
    return incomplete_reason(recon.rows(), b, recon.reason) if recon.status == "partial" else recon.reason


def _values(records: pd.DataFrame, name: str) -> np.ndarray:
    """A metric column as floats (empty when the records have no such column)."""
    return records[name].to_numpy(dtype=float) if name in records else np.array([], dtype=float)
