"""Grids drawn from stored artifacts: a cell's reconstructions, aligned with a re-derived ground truth.

A cell folder keeps the attack's answer (`reconstruction.npz`) and its scored records, whose
`matched_recon` column pairs each ground-truth image with a reconstruction; the ground truth itself is
re-derived from the cell's spec (never stored). Comparison figures put every attack on the same batch
and setting side by side — ground truth on top, one row per attack, the images chosen before any
attack ran (`cell.selection`), PSNR and LPIPS under each tile, failures shown. Truth, answer and
matching come from `records.truth.load_truth`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from leakbench.core.errors import LeakbenchError
from leakbench.records.cell_state import cell_state
from leakbench.records.truth import load_truth
from leakbench.reporting.aggregate import Key, key_values, psnr_text
from leakbench.reporting.grid import ComparisonRow, save_comparison, save_grid
from leakbench.reporting.order import level_sorter

GROUP = ["dataset", "model", "batch_size", "seed", "layer", "dp", "client"]
"""Cells that share these share a batch and a setting: one comparison figure."""


def cell_grid(cell_dir: Path, path: Path, caption: str) -> None:
    """The classic two-row grid of one cell (reconstructions above ground truth), every image."""
    cell = load_truth(cell_dir, cell_dir.name)
    aligned = cell.aligned()
    failed = [aligned is None or not bool(torch.isfinite(aligned[i]).all()) for i in range(len(cell.truth))]
    save_grid(path, cell.truth, aligned, caption=caption, failed=failed)


def tile_text(row: pd.Series, failed: str = "failed") -> str:
    """PSNR and LPIPS under a tile (`failed`, the cell's state such as 'failed (budget)', when the image has no
    reconstruction — 'not verified' when an incomplete batch's attack did not verify one for it —, 'exact' when it
    is exact, whatever its PSNR: ∞ for one attack and 147 dB for another are the same answer)."""
    psnr = row.get("psnr", math.nan)
    if row["status"] == "failed" or psnr is None or math.isnan(psnr):
        return "not verified" if row["status"] == "partial" else failed
    lpips = row.get("lpips", math.nan)
    return psnr_text(psnr, exact=bool(row.get("exact", False))) + ("" if math.isnan(lpips) else f"\nLPIPS {lpips:.3f}")


def slug(*parts: Any) -> str:
    """A readable file name from setting values ('σ=0.01 C=1' → 'sigma0.01-C1')."""
    text = "_".join(str(p) for p in parts).replace("σ", "sigma").replace("η", "eta").replace("=", "")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def grid_name(dataset: str, model: str, b: int, layer: int, dp: str, client: str, seed: int) -> str:
    """The file name of a comparison figure, e.g. 'embedded_FC-6-w200_b4_layer1_dp-none_fedsgd_seed0.png'."""
    return slug(dataset, model, f"b{b}", f"layer{layer}", f"dp-{dp}", client, f"seed{seed}") + ".png"


def comparison_figures(run_dir: Path, manifest: dict[str, Any], records: pd.DataFrame, cells: pd.DataFrame,
                       folder: Path) -> tuple[list[tuple[str, str, Key]], list[str]]:
    """One figure per batch and setting with every attack that has images; (file name, caption, key) each,
    and why the settings left out have none ('tinyflat: unknown dataset …', once per dataset and reason:
    a dataset not found here, so their ground truth cannot be re-derived)."""
    picks = {c["cell_id"]: c["grid_selection"] for c in manifest["cells"]}
    with_images = cells[(cells["space"] == "image") | (cells["inversion_steps"] > 0)]
    out = []
    missing: dict[str, None] = {}
    order = level_sorter(cells)
    for group_key, group in sorted(with_images.groupby(GROUP, sort=True), key=lambda g: order(g[0])):
        key = key_values(group_key)
        dataset, model, b, seed, layer, dp, client = key
        name = grid_name(dataset, model, b, layer, dp, client, seed)
        first = group.iloc[0]
        selection = picks[first["cell_id"]]
        try:
            truth = load_truth(run_dir, first["cell_id"]).truth[selection]
        except LeakbenchError as exc:  # its dataset (a plugin's, a data root) is not here: no truth, no grid
            missing[f"{dataset}: {exc}"] = None
            continue
        rows = [_row(run_dir, cell, records[records["cell_id"] == cell["cell_id"]], selection)
                for _, cell in group.sort_values("attack").iterrows()]  # rows by name, as every table lists ties
        caption = (f"{dataset} · {model} · b={b} · layer {layer} · dp {dp} · {client} · seed {seed} · images "
                   f"{selection} of the batch, drawn before any attack ran (grid seed {manifest['grid_seed']})")
        save_comparison(folder / name, truth, rows, caption=caption)
        out.append((name, caption, key))
    return out, list(missing)


def _image_row(by_image: pd.DataFrame, image: int) -> pd.Series:
    """The one record of `image` (records hold one row per image of a cell)."""
    row = by_image.loc[image]
    if not isinstance(row, pd.Series):
        raise LeakbenchError(f"image {image} has {len(row)} records in one cell (expected one)")
    return row


def _row(run_dir: Path, cell: pd.Series, records: pd.DataFrame, selection: list[int]) -> ComparisonRow:
    aligned = load_truth(run_dir, cell["cell_id"]).aligned()
    by_image = records.set_index("image")
    failed = cell_state(cell) if cell["status"] == "failed" else "failed"  # 'failed (budget)', 'not applicable'
    texts = [tile_text(_image_row(by_image, i), failed) for i in selection]
    shown = aligned[selection] if aligned is not None else None
    missing = [shown is None or not bool(torch.isfinite(shown[k]).all()) for k in range(len(selection))]
    label = str(cell["attack"]) + ("" if cell["space"] == "image" else " + inversion")
    return ComparisonRow(label, shown, texts, missing)
