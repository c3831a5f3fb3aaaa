"""Scoring a cell: the attack's output against the re-derived ground truth, as per-image records and a summary."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from leakbench.attacks import Reconstruction
from leakbench.cell.spec import CellSpec, cell_columns
from leakbench.core.reconstruction import incomplete_reason
from leakbench.datasets import Batch
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
               lpips: LpipsScorer | None = None, lpips_note: str = "") -> CellResult:
    """The scoring step: a pure function of the attack's output and the re-derived ground truth."""
    output = admitted(output, len(batch.images))
    recon = output.reconstruction
    records, aligned = score(recon, batch, client_view(model, spec.threat), lpips)  # truth as the client ran it
    if spec.inversion is not None and spec.inversion.steps and recon.space == "feature":
        aligned = add_inversion(records, output.inverted, batch, lpips)
    records.insert(0, "dataset_index", list(batch.indices))
    for key, value in reversed(list(cell_columns(spec).items())):
        records.insert(0, key, value)
    for key, value in {**victim_columns(model), **noise_columns(spec, batch, model)}.items():
        records[key] = value
    records["lpips_net"] = lpips.net if lpips is not None else ""
    records["isolation"] = output.isolation
    summary = summarize(spec, recon, records, output.seconds, lpips is not None, lpips_note)
    summary.update(lpips_columns(lpips))
    summary["hyperparameters"] = output.hyperparameters
    summary["isolation"] = output.isolation
    summary["images"] = images_of(batch.public)  # whether a third-party attack could carry them (records.trust)
    summary.update(victim_columns(model))
    return CellResult(spec, summary, records, batch.images, aligned, output)


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
    failed = Reconstruction.failed(reason, space=recon.space, layer=recon.layer, stats=recon.stats)
    return dataclasses.replace(output, reconstruction=failed, inverted=None)


def score(recon: Reconstruction, batch: Batch, model: ImageVictim, lpips: LpipsScorer | None
          ) -> tuple[pd.DataFrame, torch.Tensor | None]:
    """Per-image metrics in the reconstruction's space, and the reconstruction aligned to truth."""
    if recon.space == "image":
        images = recon.images if recon.answered else None
        records = score_images(images, batch.images, lpips=lpips)
    else:
        truth = model.layer_inputs(batch.images.to(next(model.parameters()).dtype), recon.layer or 1)
        images = None
        records = score_features(recon.features if recon.answered else None, truth.detach())
    aligned = aligned_to_truth(images, stored_matching(records))
    records.insert(0, "space", recon.space)
    records["status"] = recon.status
    return records, aligned


INVERSION_COLUMNS = {"mse": "mse", "psnr": "psnr", "ssim": "ssim", "lpips": "lpips", "exact": "image_exact"}
"""Columns of `score_images` added to a feature cell's records for its inverted images, and their names there."""


def add_inversion(records: pd.DataFrame, images: torch.Tensor | None, batch: Batch, lpips: LpipsScorer | None
                  ) -> torch.Tensor | None:
    """Add image metrics of the inverted images (`images`, from recovered features) to `records`.

    Each ground-truth row keeps the reconstruction the feature matching gave it; the image metrics
    (mse, psnr, ssim, lpips, image_exact) are of that reconstruction's inverted image. `exact` stays
    the feature-space exactness. Returns the inverted images aligned to the truth (None if none).
    """
    perm = stored_matching(records)
    scored = score_images(images, batch.images.to(torch.float32), lpips=lpips, perm=perm)
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
    out: dict[str, Any] = dict(cell_columns(spec))
    out.update({
        "space": recon.space,
        "n_images": len(records),
        "exact_fraction": float(records["exact"].astype(bool).mean()),
        "psnr_mean": or_none(psnr.mean), "psnr_median": or_none(psnr.median), "psnr_min": or_none(psnr.min),
        "psnr_inf": psnr.n_inf, "ssim_mean": or_none(ssim.mean),
        "lpips_mean": or_none(lp.mean) if have_lpips else None,
        "lpips_note": "" if have_lpips else lpips_note,
        "seconds": seconds, "status": recon.status, "reason": cell_reason(recon, len(records)),
        "matching": MATCHING, "attack_stats": plain_stats(recon.stats),
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
