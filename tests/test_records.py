"""The record store's column rules and the stored budget (`leakbench.records`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from leakbench.records.runs import cell_row, cell_summary, with_budgets
from leakbench.records.schema import AXIS_COLUMNS, CELL_EXTRA_COLUMNS, SUMMARY_COLUMNS, axis_columns, per_image_columns


def test_known_axes_keep_their_order_and_a_new_axis_follows_them() -> None:
    columns = ["defence_rate", *reversed(AXIS_COLUMNS), *per_image_columns(), "defence_kind"]
    assert axis_columns(columns) == [*AXIS_COLUMNS, "defence_rate", "defence_kind"]
    assert axis_columns(["cell_id", "psnr", "status", "isolation", "lpips_net"]) == ["cell_id"]


def test_a_cell_row_takes_a_new_axis_from_the_records(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"status": "ok", "hyperparameters": {"steps": 3}}))
    records = pd.DataFrame({"cell_id": ["c", "c"], "attack": ["a", "a"], "image": [0, 1], "status": ["ok", "failed"],
                            "defence": ["clip", "clip"]})
    row = cell_row(tmp_path, records)
    assert list(row) == ["cell_id", "attack", "defence", *SUMMARY_COLUMNS, *CELL_EXTRA_COLUMNS]
    assert (row["defence"], row["failures"], row["hyperparameters"]) == ("clip", 1, '{"steps": 3}')


def test_the_budget_is_read_from_summary_json_and_never_from_a_foreign_id(tmp_path: Path) -> None:
    for cid, summary in (("a", {"budget": "3 steps"}), ("b", {})):
        (tmp_path / "cells" / cid).mkdir(parents=True)
        (tmp_path / "cells" / cid / "summary.json").write_text(json.dumps(summary))
    cells = pd.DataFrame({"cell_id": ["a", "b", "missing", "../a", None]})
    assert list(with_budgets(tmp_path, cells)["budget"]) == ["3 steps", "", "", "", ""]
    assert cell_summary(tmp_path / "nowhere") == {}
    assert "budget" not in with_budgets(tmp_path, pd.DataFrame())
