"""Markdown tables from cell summaries and per-image records (failures shown, never dropped)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

HEADER = ("| attack | dataset | b | layer | n | failed | exact % | PSNR mean ± std | PSNR median | PSNR min "
          "| SSIM | LPIPS | seconds | status |")


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if np.isinf(value):
        return "∞"
    return f"{value:.{digits}f}"


def _psnr_spread(psnr: pd.Series) -> str:
    values = psnr.to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return "–"
    return f"{values.mean():.1f} ± {values.std():.1f}"


def summary_row(summary: dict[str, Any], records: pd.DataFrame) -> str:
    """One table row; a failed cell still shows its n and its reason."""
    failed = int((records["status"] != "ok").sum())
    reason = str(summary["reason"]).replace("|", "\\|")
    status = summary["status"] if summary["status"] == "ok" else f"failed: {reason}"
    lpips = _fmt(summary["lpips_mean"], 3) if summary["lpips_mean"] is not None else "n/a"
    psnr = records["psnr"] if "psnr" in records else pd.Series(dtype=float)
    cells = [summary["attack"], summary["dataset"], str(summary["batch_size"]), str(summary["layer"]),
             str(summary["n_images"]), str(failed), f"{100 * summary['exact_fraction']:.0f}",
             _psnr_spread(psnr), _fmt(summary["psnr_median"], 1), _fmt(summary["psnr_min"], 1),
             _fmt(summary["ssim_mean"], 4), lpips, _fmt(summary["seconds"], 2), status]
    return "| " + " | ".join(cells) + " |"


def markdown_table(rows: list[tuple[dict[str, Any], pd.DataFrame]], *, title: str) -> str:
    """A titled Markdown table with the matching method and LPIPS availability stated."""
    rule = "|" + "|".join("---" for _ in range(HEADER.count("|") - 1)) + "|"
    lines = [f"# {title}", "", HEADER, rule]
    lines += [summary_row(summary, records) for summary, records in rows]
    notes = sorted({s["lpips_note"] for s, _ in rows if s.get("lpips_note")})
    lines += ["", f"Matching: {rows[0][0]['matching'] if rows else 'hungarian-mse'} (reconstructions "
              "assigned to ground truth by the Hungarian method on MSE). PSNR peak 1; ∞ = bit-identical. "
              "Exact = every pixel rounds to the same 8-bit value. Failed images count as not exact "
              "and carry no PSNR."]
    lines += [f"LPIPS: n/a — {note}" for note in notes]
    return "\n".join(lines) + "\n"


def cell_caption(summary: dict[str, Any]) -> str:
    """The caption printed under a cell's grid."""
    return (f"{summary['attack']} · {summary['dataset']} · b={summary['batch_size']} · FC-{summary['depth']} "
            f"width {summary['width']} · layer {summary['layer']} · dp {summary.get('dp', 'none')} · seed {summary['seed']} · "
            f"status {summary['status']} · rows: reconstruction above ground truth")
