"""Issue 23: one name for a victim (`leakbench.models.victim_label`) in tables, grids, captions and
progress lines; a conv victim is never captioned as an FC one."""

from __future__ import annotations

import pandas as pd

from leakbench.cell.spec import CellSpec, cell_settings
from leakbench.models import victim_label
from leakbench.reporting.aggregate import with_model
from leakbench.reporting.table import cell_caption


def test_victim_label_names_arch_depth_width_and_training() -> None:
    assert victim_label("fc", 6, 200) == "FC-6 w200"
    assert victim_label("conv", 3, 64) == "conv-3 w64"
    assert victim_label("fc", 6, 200, 5) == "FC-6 w200 trained 5 ep"


def test_report_model_column_uses_it() -> None:
    cells = pd.DataFrame({"arch": ["fc", "conv", None], "depth": [6, 3, 2], "width": [200, 64, 24],
                          "train_epochs": [0, 5, None]})
    assert list(with_model(cells)["model"]) == ["FC-6 w200", "conv-3 w64 trained 5 ep", "FC-2 w24"]
    assert list(with_model(cells.drop(columns="train_epochs"))["model"]) == ["FC-6 w200", "conv-3 w64", "FC-2 w24"]


def test_a_conv_cell_is_captioned_conv() -> None:
    summary = {"attack": "spear", "dataset": "embedded", "batch_size": 4, "arch": "conv", "depth": 3, "width": 64,
               "layer": 2, "dp": "none", "seed": 0, "status": "ok"}
    caption = cell_caption(summary)
    assert "conv-3 w64" in caption and "FC-" not in caption
    assert "FC-6 w200" in cell_caption({**summary, "arch": "fc", "depth": 6, "width": 200})


def test_progress_words_use_it() -> None:
    spec = CellSpec(attack="spear", dataset="embedded", batch_size=4, seed=0, arch="conv", depth=3, width=64, layer=2)
    assert "conv-3 w64" in " ".join(cell_settings(spec))
