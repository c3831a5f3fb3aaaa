"""Statistics of groups of per-image records; failed images are counted, never dropped silently.

A failed cell's images carry no PSNR/SSIM and count as not exact: `exact %` is over all n images,
PSNR/SSIM statistics are over the images that have a reconstruction, and `failures` says how many
did not. PSNR mean ± std is over finite values (∞ = bit-identical); the median includes ∞.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from leakbench.metrics.stats import describe
from leakbench.models import victim_label

LPIPS_MISSING = "n/a — weights not available"


def group_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """Numbers for one group of records (rows of records.parquet) and their cells (see metrics.stats)."""
    psnr = describe(_column(records, "psnr"))
    return {
        "cells": len(cells),
        "failed_cells": int((cells["status"] != "ok").sum()) if len(cells) else 0,
        "n": len(records),
        "failures": int((records["status"] != "ok").sum()),
        "exact_pct": 100.0 * float(records["exact"].astype(bool).mean()) if len(records) else math.nan,
        "psnr_mean": psnr.mean, "psnr_std": psnr.std, "psnr_median": psnr.median, "psnr_inf": psnr.n_inf,
        "ssim_mean": describe(_column(records, "ssim")).mean,
        "lpips_mean": describe(_column(records, "lpips")).mean,
        "rel_error_median": describe(_column(records, "rel_error")).median,
        "seconds_mean": describe(cells["seconds"].to_numpy(dtype=float)).mean if len(cells) else math.nan,
        "space": "/".join(sorted(set(records["space"]))) if "space" in records and len(records) else "",
        "reasons": sorted({str(r) for r in cells.get("reason", pd.Series(dtype=str)) if r}),
    }


Key = tuple[Any, ...]
"""A group's key: the values of its `by` columns, in order."""


def key_values(key: Hashable) -> Key:
    """A pandas group key as a `Key` (pandas gives a tuple for several columns, the bare value for one)."""
    return key if isinstance(key, tuple) else (key,)


def grouped(records: pd.DataFrame, cells: pd.DataFrame, by: Sequence[str]) -> list[tuple[Key, dict[str, Any]]]:
    """`group_stats` for every combination of `by` present in `cells`, in sorted order."""
    out = []
    for key, cell_group in cells.groupby(list(by), sort=True, dropna=False):
        ids = set(cell_group["cell_id"])
        out.append((key_values(key), group_stats(records[records["cell_id"].isin(ids)], cell_group)))
    return out


def dp_order(cells: pd.DataFrame) -> list[str]:
    """DP labels from no noise to most noise ("none" first)."""
    table = cells.drop_duplicates("dp").assign(s=lambda d: d["dp_sigma"].fillna(-1.0),
                                               c=lambda d: d["dp_clip"].fillna(-1.0))
    return list(table.sort_values(["s", "c"])["dp"])


def epsilon_labels(cells: pd.DataFrame) -> dict[Hashable, str]:
    """'σ=0.01 C=1 (ε=…)' for every DP label."""
    eps = cells.drop_duplicates("dp").set_index("dp")["dp_epsilon"]
    return {dp: f"{dp} (ε={'∞' if math.isinf(e) else f'{e:.3g}'})" for dp, e in eps.items()}


def with_model(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with a readable `model` column ('FC-6 w200', 'conv-3 w200', 'FC-6 w200 trained 5 ep') and
    a `client` naming the update's noise, defences and threat model when not the default ('fedsgd + noise
    σ=0.0001×max|g| + prune keep=0.5 · labels known'), so tables and grids never pool them; runs stored before the
    arch and client axes existed get their defaults."""
    cells = cells.copy()
    for column, default in (("arch", "fc"), ("client", "fedsgd")):
        cells[column] = cells[column].fillna(default) if column in cells else default
    if "noise_sigma" in cells:
        noise = cells["noise_sigma"].fillna(0.0)
        scale = (cells["noise_scale"] == "max").map({True: "×max|g|", False: ""})
        noised = cells["client"] + " + noise σ=" + noise.map("{:g}".format) + scale
        cells["client"] = cells["client"].where(noise == 0, noised)
    if "defence" in cells:  # the labels of a cell's defences (update transforms past the noise), '' for none
        defence = cells["defence"].fillna("")
        cells["client"] = cells["client"].where(defence == "", cells["client"] + " + " + defence)
    if "threat" in cells:
        threat = cells["threat"].fillna("default")
        cells["client"] = cells["client"].where(threat == "default", cells["client"] + " · " + threat)
    # a trained victim is another model (and other batches): its own tables, grids
    epochs = cells["train_epochs"].fillna(0).astype(int) if "train_epochs" in cells else pd.Series(0, index=cells.index)
    cells["model"] = [victim_label(*victim)
                      for victim in zip(cells["arch"], cells["depth"], cells["width"], epochs, strict=True)]
    return cells


def model_order(cells: pd.DataFrame) -> list[str]:
    """Victim model labels by architecture, depth, width, then training epochs (numerically: 5 before 20)."""
    keys = [c for c in ("arch", "depth", "width", "train_epochs") if c in cells]
    return list(cells.assign(**{c: cells[c].fillna(0) for c in keys if c == "train_epochs"})
                .sort_values(keys).drop_duplicates("model")["model"])


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table: '–' when missing, '∞' when infinite."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:.{digits}f}"


def stat_cells(s: dict[str, Any], *, lpips_note: str = LPIPS_MISSING) -> list[str]:
    """The shared statistic columns of every table (see STAT_HEADER)."""
    psnr = psnr_cell(s)
    if not math.isnan(s["lpips_mean"]):
        lpips = fmt(s["lpips_mean"], 3)
    else:  # feature-space groups have no images to score: not a missing-weights case
        lpips = "–" if s["space"] == "feature" or s["n"] == s["failures"] else lpips_note
    failures = str(s["failures"]) + (f" ({s['failed_cells']} of {s['cells']} cells)" if s["failed_cells"] else "")
    return [str(s["n"]), failures, fmt(s["exact_pct"], 0), psnr, fmt(s["psnr_median"]),
            fmt(s["ssim_mean"], 4), lpips, _sci(s["rel_error_median"]), fmt(s["seconds_mean"], 2), s["space"]]


def psnr_cell(s: dict[str, Any]) -> str:
    """'mean ± std' over finite PSNRs, with the count of infinite (bit-identical) ones beside it."""
    inf = s.get("psnr_inf", 0)
    if math.isnan(s["psnr_mean"]):
        return f"∞ ({inf} of {inf})" if inf else "–"
    return f"{s['psnr_mean']:.1f} ± {s['psnr_std']:.1f}" + (f" (+{inf} ∞)" if inf else "")


STAT_HEADER = ["n", "failures", "exact %", "PSNR mean ± std", "PSNR median", "SSIM", "LPIPS",
               "feature rel. error (median)", "seconds / cell", "space"]


def _sci(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1e}"


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame or not len(frame):
        return np.array([], dtype=float)
    return frame[name].to_numpy(dtype=float)
