"""Statistics of groups of per-image records; failed images are counted, never dropped silently.

A failed cell's images carry no PSNR/SSIM and count as not exact: `exact %` is over all n images,
PSNR/SSIM statistics are over the images that have a reconstruction, and `failures` says how many
did not. PSNR mean ± std is over finite values (∞ = bit-identical); the median includes ∞.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

LPIPS_MISSING = "n/a — weights not available"


def group_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """Numbers for one group of records (rows of records.parquet) and their cells."""
    psnr = _column(records, "psnr")
    finite = psnr[np.isfinite(psnr)]
    present = psnr[~np.isnan(psnr)]
    rel = _column(records, "rel_error")
    return {
        "cells": int(len(cells)),
        "failed_cells": int((cells["status"] != "ok").sum()) if len(cells) else 0,
        "n": int(len(records)),
        "failures": int((records["status"] != "ok").sum()),
        "exact_pct": 100.0 * float(records["exact"].astype(bool).mean()) if len(records) else math.nan,
        "psnr_mean": float(finite.mean()) if finite.size else math.nan,
        "psnr_std": float(finite.std()) if finite.size else math.nan,
        "psnr_median": float(np.median(present)) if present.size else math.nan,
        "ssim_mean": _mean(_column(records, "ssim")),
        "lpips_mean": _mean(_column(records, "lpips")),
        "rel_error_median": float(np.median(rel[~np.isnan(rel)])) if (~np.isnan(rel)).any() else math.nan,
        "seconds_mean": float(cells["seconds"].mean()) if len(cells) else math.nan,
        "space": "/".join(sorted(set(records["space"]))) if "space" in records and len(records) else "",
        "reasons": sorted({str(r) for r in cells.get("reason", pd.Series(dtype=str)) if r}),
    }


def grouped(records: pd.DataFrame, cells: pd.DataFrame, by: Sequence[str]) -> list[tuple[tuple, dict[str, Any]]]:
    """`group_stats` for every combination of `by` present in `cells`, in sorted order."""
    out = []
    for key, cell_group in cells.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        ids = set(cell_group["cell_id"])
        out.append((key, group_stats(records[records["cell_id"].isin(ids)], cell_group)))
    return out


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table: '–' when missing, '∞' when infinite."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:.{digits}f}"


def stat_cells(s: dict[str, Any], *, lpips_note: str = LPIPS_MISSING) -> list[str]:
    """The shared statistic columns of every table (see STAT_HEADER)."""
    psnr = "–" if math.isnan(s["psnr_mean"]) else f"{s['psnr_mean']:.1f} ± {s['psnr_std']:.1f}"
    if not math.isnan(s["lpips_mean"]):
        lpips = fmt(s["lpips_mean"], 3)
    else:  # feature-space groups have no images to score: not a missing-weights case
        lpips = "–" if s["space"] == "feature" or s["n"] == s["failures"] else lpips_note
    failures = str(s["failures"]) + (f" ({s['failed_cells']} of {s['cells']} cells)" if s["failed_cells"] else "")
    return [str(s["n"]), failures, fmt(s["exact_pct"], 0), psnr, fmt(s["psnr_median"]),
            fmt(s["ssim_mean"], 4), lpips, _sci(s["rel_error_median"]), fmt(s["seconds_mean"], 2), s["space"]]


STAT_HEADER = ["n", "failures", "exact %", "PSNR mean ± std", "PSNR median", "SSIM", "LPIPS",
               "feature rel. error (median)", "seconds / cell", "space"]


def _sci(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1e}"


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame or not len(frame):
        return np.array([], dtype=float)
    return frame[name].to_numpy(dtype=float)


def _mean(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan
