"""Captions of a cell's grid (the report's tables are built by `leakbench.reporting.report`)."""

from __future__ import annotations

from typing import Any

from leakbench.records.labels import stored_columns
from leakbench.reporting.aggregate import victim_name


def cell_caption(summary: dict[str, Any]) -> str:
    """The caption printed under a cell's grid."""
    victim = victim_name(stored_columns(summary)["victim"], summary.get("arch", "fc"), summary["depth"],
                         summary["width"], summary.get("train_epochs") or 0)
    return (f"{summary['attack']} · {summary['dataset']} · b={summary['batch_size']} · {victim} · "
            f"layer {summary['layer']} · dp {summary.get('dp', 'none')} · seed {summary['seed']} · "
            f"status {summary['status']} · rows: reconstruction above ground truth")
