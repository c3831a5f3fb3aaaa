"""Captions of a cell's grid (the report's tables are built by `leakbench.reporting.report`)."""

from __future__ import annotations

from typing import Any


def cell_caption(summary: dict[str, Any]) -> str:
    """The caption printed under a cell's grid."""
    return (f"{summary['attack']} · {summary['dataset']} · b={summary['batch_size']} · FC-{summary['depth']} "
            f"width {summary['width']} · layer {summary['layer']} · dp {summary.get('dp', 'none')} · seed {summary['seed']} · "
            f"status {summary['status']} · rows: reconstruction above ground truth")
