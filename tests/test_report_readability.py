"""The report reads right: levels in numeric order, one colour per attack, exact shown as exact, titles
that wrap, no single-point panel, ties only beyond the shown precision, a self-contained page.

Each test names the misleading figure or table it guards against (issue 25): the spear-noise figure
going 100 % → 0 → 100 % because 1e-05 sorted after 0.0001 as text, the same attack in two colours,
'∞ dB' beside '150 dB' for two exact attacks, a cut-off title.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import reference_run

from leakbench.records.schema import FULL
from leakbench.reporting import figures as figures_module
from leakbench.reporting.aggregate import grouped, psnr_cell, psnr_text, stat_cells
from leakbench.reporting.compare import tile_text
from leakbench.reporting.findings import headline_table, settings
from leakbench.reporting.order import level_key, ordered
from leakbench.reporting.palette import colour
from leakbench.reporting.pivot import pivot_table, triple
from leakbench.reporting.render import html_document, markdown

NOISE = ["noise σ=0.001", "noise σ=1e-05", "noise σ=0.0001", "noise σ=0.01"]


def test_levels_sort_as_numbers_not_text() -> None:
    assert ordered(NOISE) == ["noise σ=1e-05", "noise σ=0.0001", "noise σ=0.001", "noise σ=0.01"]
    assert sorted(NOISE) != ordered(NOISE)  # text order is the bug this guards against
    precode = [f"precode beta=0.001 bottleneck={k}" for k in (256, 16, 64)]
    assert [p.rsplit("=", 1)[1] for p in ordered(precode)] == ["16", "64", "256"]
    assert ordered(["secagg K=8", "none", "secagg K=2", "secagg K=16"]) == ["none", "secagg K=2", "secagg K=8",
                                                                          "secagg K=16"]
    assert ordered(["DP σ=1 C=1 (ε=0.956)", "DP σ=0.1 C=1 (ε=80.6)", "DP σ=0.01 C=1 (ε=5.56e+03)"])[0].startswith(
        "DP σ=0.01")
    assert level_key("FC-6 w200 trained 5 ep") < level_key("FC-6 w200 trained 20 ep")


def _cells_records(levels: list[str], attacks: dict[str, list[bool]], *, b: int = 2,
                   psnr: dict[str, float] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A synthetic run: one cell per attack and level, `b` images each; attacks[a][i] says whether attack a
    is exact at level i (exact images get PSNR `psnr[a]`, others 12 dB)."""
    cells, records = [], []
    for a, flags in attacks.items():
        for level, exact in zip(levels, flags, strict=True):
            cid = f"{a}-{level}"
            cells.append({"cell_id": cid, "attack": a, "dataset": "embedded", "model": "FC-6 w200", "layer": 1,
                          "dp": "none", "client": "fedsgd" if level == "none" else f"fedsgd + {level}",
                          "batch_size": b, "status": "ok", "reason": "", "seconds": 1.0, "seed": 0,
                          "isolation": FULL, "budget": "", "dp_sigma": np.nan, "dp_clip": np.nan,
                          "dp_epsilon": math.inf, "arch": "fc", "depth": 6, "width": 200, "train_epochs": 0})
            value = (psnr or {}).get(a, math.inf) if exact else 12.0
            records += [{"cell_id": cid, "image": i, "exact": exact, "psnr": value, "ssim": 1.0, "lpips": 0.0,
                         "status": "ok", "space": "image"} for i in range(b)]
    return pd.DataFrame(cells), pd.DataFrame(records)


def test_pivot_and_grouped_tables_order_levels_numerically() -> None:
    cells, records = _cells_records(["none", *NOISE], {"spear": [True, True, True, False, False]})
    table = pivot_table(records, cells, title="t", columns=["client"], label=lambda c: str(c[0]), entry=triple)
    sigmas = [h for h in table.header if "σ=" in h]
    assert sigmas == [f"fedsgd + {n}" for n in ordered(NOISE)]
    rows = [key[1] for key, _ in grouped(records, cells, ["attack", "client"])]
    assert rows == ["fedsgd", *(f"fedsgd + {n}" for n in ordered(NOISE))]


class Captured:
    """The figures `save_figure` was asked to write, kept open (monkeypatched: nothing is written)."""

    def __init__(self) -> None:
        self.figures: list[Any] = []

    def __call__(self, fig: Any, path: Path) -> Path:
        self.figures.append(fig)
        return path


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Captured:
    capture = Captured()
    monkeypatch.setattr(figures_module, "save_figure", capture)
    return capture


def _line_colours(fig: Any) -> dict[str, set[str]]:
    """Each legend/line label → the colours its lines and points are drawn in, as '#rrggbb'."""
    from matplotlib.colors import to_hex

    found: dict[str, set[str]] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            label = str(line.get_label())
            if not label.startswith("_"):
                found.setdefault(label, set()).add(to_hex(line.get_color()))
    for legend in fig.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            found.setdefault(text.get_text(), set()).add(to_hex(handle.get_color()))
    return found


def test_defence_figure_orders_noise_numerically_and_colours_attacks_by_palette(captured: Captured) -> None:
    levels = ["none", *NOISE]
    per_cell = pd.DataFrame([{"attack": a, "level": lv, "psnr": math.inf if a == "spear" and lv == "none" else 12.0,
                              "exact_pct": 100.0 if a == "spear" and lv == "none" else 0.0}
                             for a in ("spear", "ig", "my-plugin") for lv in levels])
    figures_module.defence_figure(per_cell, Path("unused.png"), "t")
    fig = captured.figures[0]
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["none", "1e-05", "0.0001", "0.001", "0.01"]
    assert fig.axes[0].get_title() == "noise (σ)"
    # the 'exact' band: the undefended exact point is drawn above the capped axis, labelled exact
    psnr_ax = fig.axes[1]
    assert "exact" in [t.get_text() for t in psnr_ax.get_yticklabels()]
    assert psnr_ax.get_ylim()[1] < 100  # not stretched to 150 dB
    defence_colours = _line_colours(fig)
    per_axis = pd.DataFrame([{"attack": a, "batch_size": b, "psnr": 12.0, "exact_pct": 0.0}
                             for a in ("ig", "my-plugin", "spear") for b in (1, 2)])
    figures_module.axis_figure(per_axis, "batch_size", [1, 2], "batch size", Path("unused.png"), "t")
    axis_colours = _line_colours(captured.figures[1])
    for attack in ("spear", "ig", "my-plugin"):
        assert defence_colours[attack] == axis_colours[attack] == {colour(attack)}, attack


def test_exact_is_labelled_exact_in_tables_and_grids() -> None:
    """Two exact attacks, one bit-identical (∞ dB) and one float-exact (147 dB), read the same."""
    cells, records = _cells_records(["none"], {"spear": [True], "spear-guided": [True], "ig": [False]},
                                    psnr={"spear": math.inf, "spear-guided": 147.3})
    table = pivot_table(records, cells, title="t", columns=["batch_size"], label=lambda c: f"b={c[0]}", entry=triple)
    stats = dict(grouped(records, cells, ["attack"]))
    rendered = markdown("r", [], [table]) + html_document("r", [], [table]) + " ".join(
        " ".join(stat_cells(s)) + psnr_cell(s) for s in stats.values())
    rendered += " ".join(tile_text(pd.Series(r)) for r in records.to_dict("records"))
    assert "∞" not in rendered and "147" not in rendered and "150 dB" not in rendered
    assert "100 % exact" in markdown("r", [], [table])
    assert tile_text(pd.Series({"status": "ok", "psnr": 147.3, "exact": True})) == "exact"
    assert psnr_text(75.0) == "≥ 60 dB" and psnr_text(21.25) == "21.2 dB"


def test_equal_shown_values_share_a_rank() -> None:
    cells, records = _cells_records(["none"], {"spear-guided": [True], "spear": [True], "ig": [False]},
                                    psnr={"spear": 147.3, "spear-guided": 147.1})
    table = pivot_table(records, cells, title="t", columns=["batch_size"], label=lambda c: f"b={c[0]}", entry=triple)
    ranks = {row[1]: row[0] for row in table.rows}
    assert ranks == {"spear": "1", "spear-guided": "1", "ig": "3"}
    assert [row[1] for row in table.rows][:2] == ["spear", "spear-guided"]  # equal: by name


def test_headline_names_the_strongest_attack_and_where_all_fail() -> None:
    cells, records = _cells_records(["none", "noise σ=0.01"], {"spear": [True, False], "ig": [False, False]})
    table = headline_table(settings(records, cells))
    by_level = {row[0]: row for row in table.rows}
    assert by_level["none"][1] == "spear" and by_level["none"][2] == "2"
    assert by_level["noise σ=0.01"][1].startswith("none exact")
    assert by_level["none"][4] == "2 / 0"  # n / failures always shown


def test_titles_wrap_to_the_figure(captured: Captured) -> None:
    title = "paper-spear-noise: PSNR (image space only) and exact % against client, defences and threat model " * 2
    per_axis = pd.DataFrame([{"attack": "spear", "batch_size": b, "psnr": 12.0, "exact_pct": 0.0} for b in (1, 2)])
    figures_module.axis_figure(per_axis, "batch_size", [1, 2], "b", Path("unused.png"), title)
    fig = captured.figures[0]
    fig.canvas.draw()
    suptitle = fig._suptitle
    assert "\n" in suptitle.get_text()
    box = suptitle.get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_a_single_level_gets_no_figure(tmp_path: Path, captured: Captured) -> None:
    from leakbench.reporting.report import figures

    cells, records = _cells_records(["none"], {"spear": [True], "ig": [False]})
    block = figures({"batch_size": cells}, records, cells, tmp_path, "s")
    assert block.items == [] and captured.figures == []


SUITE = """\
name = "readable"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [2]
layers = [1]
width = 32
depth = 3
noise = [0.0, 1e-5, 1e-4, 1e-3]
grid_images = 2
"""


@pytest.mark.slow
def test_self_contained_report_has_no_external_images(tmp_path_factory: pytest.TempPathFactory) -> None:
    from leakbench.reporting.report import write_report

    run_dir = reference_run(tmp_path_factory, SUITE, "readable")
    reports = tmp_path_factory.mktemp("rep")
    write_report(run_dir, reports, self_contained=True)
    page = (reports / "readable.html").read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert page.index("Key findings") < page.index("Headline") < page.index("<img") < page.index("Per-setting")
    linked = (reports / "readable.md").read_text()
    assert "](readable/figures/" in linked  # the Markdown still links its PNGs
    write_report(run_dir, reports)  # the default page links them
    assert re.findall(r'<img src="([^"]*)"', (reports / "readable.html").read_text())[0].startswith("readable/")


def test_a_panel_with_one_level_of_data_draws_no_lone_point(captured: Captured) -> None:
    per_axis = pd.DataFrame([{"attack": "spear", "batch_size": b, "psnr": math.inf if b == 1 else math.nan,
                              "exact_pct": 100.0 if b == 1 else 0.0} for b in (1, 2, 4)])
    figures_module.axis_figure(per_axis, "batch_size", [1, 2, 4], "batch size", Path("unused.png"), "t")
    psnr_ax, exact_ax = captured.figures[0].axes[:2]
    def drawn(ax: Any) -> list[Any]:
        return [line for line in ax.get_lines() if len(line.get_xdata())] + [
            c for c in ax.collections if len(c.get_offsets())]

    assert not drawn(psnr_ax) and "one batch size only" in " ".join(t.get_text() for t in psnr_ax.texts)
    assert drawn(exact_ax)  # the exact % panel has its points


def test_privacy_utility_names_only_the_front() -> None:
    levels = pd.DataFrame({"level": ["none", "noise σ=0.01", "prune p=0.9", "DP σ=1 C=1"],
                           "accuracy_pct": [44.0, 43.0, 40.0, 25.0], "exact_pct": [100.0, 0.0, 0.0, 0.0],
                           "lpips_mean": [0.0, 0.3, 0.2, 0.4]})
    assert figures_module.on_front(levels, "exact_pct") == {"none", "noise σ=0.01"}  # prune: dominated by noise
    assert figures_module.on_front(levels, "lpips_mean") == {"none", "noise σ=0.01", "DP σ=1 C=1"}


def test_key_findings_say_what_leaks_where_no_image_is_exact() -> None:
    """Issue 43: a level where no image is exact is not 'every attack fails' when an attack re-identifies
    images: the finding names the highest re-identification rate beside the closest PSNR."""
    from leakbench.reporting.findings import AttackResult, Setting, findings_block

    def stats(reid: float) -> dict[str, float]:
        return {"exact_pct": 0.0, "psnr_median": 18.0, "n": 16, "failures": 0, "reid_pct": reid}

    level = Setting("cifar10", "FC-6 w200", "prune p=0.5",
                    [AttackResult("cpa", {16: (1, stats(75.0))}), AttackResult("ig", {16: (1, stats(0.0))})], False)
    [bullet] = findings_block([level]).bullets
    assert "every attack fails" not in bullet and "no attack recovers an image exactly under prune p=0.5" in bullet
    assert "re-identified: 75 % of images by cpa at b = 16 under prune p=0.5" in bullet


def test_long_table_cells_wrap_and_numbers_stay_on_one_line() -> None:
    """A verdict or a long level label wraps inside its column (the defence board fits 1,400 px with its
    re-identification columns), a number never does."""
    from leakbench.reporting.render import Table, html_document

    verdict = "not evaluated: every attack failed; no adaptive attack (potentially unreliable)"
    page = html_document("t", [], [Table("board", ["level", "verdict", "PSNR"], [["none", verdict, "16.6 ± 0.8"]])])
    assert f'<td class="prose">{verdict}</td>' in page and "<td>16.6 ± 0.8</td>" in page and "<td>none</td>" in page
    assert "td.prose{white-space:normal" in page
