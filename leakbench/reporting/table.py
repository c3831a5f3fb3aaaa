"""Captions of a cell's grid (the report's tables are built by `leakbench.reporting.report`)."""

from __future__ import annotations

from typing import Any

from leakbench.models import victim_label
from leakbench.records.labels import stored_columns


def cell_caption(summary: dict[str, Any]) -> str:
    """The caption printed under a cell's grid."""
    stored = stored_columns(summary)["victim"]  # the name it ran under (`records.labels`), else the registry's
    victim = stored or victim_label(summary.get("arch", "fc"), summary["depth"], summary["width"],
                                    summary.get("train_epochs") or 0)
    return (f"{summary['attack']} · {summary['dataset']} · b={summary['batch_size']} · {victim} · "
            f"layer {summary['layer']} · dp {summary.get('dp', 'none')} · seed {summary['seed']} · "
            f"status {summary['status']} · rows: reconstruction above ground truth")
