"""Named report views (issue 15): `leakbench view NAME RUN`, and `leakbench reproduce` = suite + views, in process."""

from __future__ import annotations

import io
import json
import math
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from leakbench.cli import main
from leakbench.core.errors import ConfigError
from leakbench.records.runs import read_cells
from leakbench.reporting.views import VIEWS, apply_view, cell_text

TINY = """\
name = "tiny-views"
dataset = "embedded"
attacks = ["spear", "cpa", "ig"]
batch_sizes = [2]
models = [{width = 32, depth = 3}, {width = 24, depth = 2}]
noise = [0.0, 1e-4]
grid_images = 2

[hyperparameters.spear]
max_draws = 20000
max_seconds = 60.0

[hyperparameters.ig]
iterations = 2
"""
VIEW_NAMES = ("noise", "spear-speed", "baselines", "victims")


def _cells(**columns: list) -> pd.DataFrame:
    """A hand-built cells table: one FC-6 w200 SPEAR cell per entry unless a column says otherwise."""
    n = len(next(iter(columns.values())))
    base = {"attack": ["spear"] * n, "dataset": ["embedded"] * n, "arch": ["fc"] * n, "width": [200] * n,
            "depth": [6] * n, "layer": [1] * n, "seed": list(range(n)), "batch_size": [8] * n,
            "status": ["ok"] * n, "reason": [""] * n, "exact_fraction": [1.0] * n, "seconds": [1.0] * n,
            "psnr_mean": [140.0] * n, "psnr_median": [140.0] * n, "ssim_mean": [1.0] * n,
            "noise_sigma": [0.0] * n, "noise_scale": ["absolute"] * n, "attack_stats": ["{}"] * n}
    return pd.DataFrame({**base, **columns})


def test_noise_view_per_level() -> None:
    cells = _cells(noise_sigma=[0.0, 0.0, 1e-2], seed=[0, 1, 0], status=["ok", "ok", "failed"],
                   psnr_mean=[140.0, 150.0, math.nan], exact_fraction=[1.0, 0.5, 0.0], seconds=[1.0, 3.0, 60.0])
    table = apply_view("noise", cells).table.set_index("noise_sigma")
    assert list(table.columns) == ["n", "failed", "incomplete", "psnr_mean", "exact_pct", "seconds_median", "states"]
    assert table.loc[0.0, "psnr_mean"] == 145.0 and table.loc[0.0, "exact_pct"] == 75.0
    assert table.loc[1e-2, "failed"] == 1 and table.loc[0.0, "seconds_median"] == 2.0 and table.loc[0.0, "n"] == 2
    # a level whose only cell failed shows its state, never 0 % exact (issue 43): stored without a kind, "failed"
    assert math.isnan(table.loc[1e-2, "exact_pct"]) and table.loc[1e-2, "states"] == "failed"
    assert table.loc[0.0, "states"] == "1 exact, 1 re-identified"


def test_noise_view_keeps_batch_sizes_apart() -> None:
    cells = _cells(noise_sigma=[1e-4] * 4, batch_size=[25, 25, 50, 50], exact_fraction=[1.0, 1.0, 0.0, 0.5])
    table = apply_view("noise", cells).table
    assert list(table.columns[:2]) == ["batch_size", "noise_sigma"] and list(table["exact_pct"]) == [100.0, 25.0]


def test_spear_speed_view_reads_draws_from_the_attack_stats() -> None:
    stats = [json.dumps({"draws": d}) for d in (100, 300, 5000)] + ["{}"]
    cells = _cells(batch_size=[4, 4, 20, 20], attack_stats=stats, status=["ok", "partial", "ok", "failed"],
                   exact_fraction=[1.0, 0.5, 1.0, 0.0], seconds=[1.0, 2.0, 5.0, 900.0])
    table = apply_view("spear-speed", cells).table.set_index("batch_size")
    assert list(table.columns) == ["n", "failed", "incomplete", "exact_pct", "seconds_median", "seconds_max",
                                   "draws_median", "draws_max", "states"]
    assert table.loc[4, "draws_median"] == 200 and table.loc[4, "draws_max"] == 300
    assert table.loc[4, "failed"] == 0 and table.loc[4, "incomplete"] == 1 and table.loc[4, "exact_pct"] == 75
    # exact % over the cells that answered: the failed cell is counted as failed, not as 0 % exact (issue 43)
    assert table.loc[20, "draws_max"] == 5000 and table.loc[20, "failed"] == 1 and table.loc[20, "exact_pct"] == 100
    assert table.loc[20, "states"] == "1 exact, 1 failed"
    assert table.loc[20, "seconds_max"] == 900.0


def test_frontier_view_one_row_per_width_b_seed_with_samples_found() -> None:
    stats = [json.dumps({"samples_found": k}) for k in (160, 49, 3)]
    cells = _cells(attack=["spear-guided"] * 3, width=[400, 400, 1000], batch_size=[160, 160, 400], seed=[2, 0, 0],
                   status=["ok", "partial", "failed"], exact_fraction=[1.0, 49 / 160, 0.0], attack_stats=stats,
                   seconds=[24.0, 916.0, 1112.0])
    table = apply_view("frontier", cells).table
    assert list(table.columns) == ["width", "batch_size", "b_over_m", "seed", "found", "exact_pct", "seconds",
                                   "status", "state"]
    assert list(table["state"]) == ["re-identified (49 of 160)", "exact", "failed"]
    assert list(zip(table["width"], table["seed"], table["found"], strict=True)) == [
        (400, 0, 49.0), (400, 2, 160.0), (1000, 0, 3.0)]
    assert list(table["b_over_m"]) == [0.4, 0.4, 0.4] and table["exact_pct"].iloc[0] == pytest.approx(30.625)


def test_views_keep_varying_settings_apart() -> None:
    cells = _cells(attack=["spear", "spear", "cpa", "cpa"], width=[200, 400, 200, 400], batch_size=[4] * 4)
    speed = apply_view("spear-speed", cells).table
    assert list(speed.columns[:3]) == ["attack", "model", "batch_size"] and len(speed) == 4
    assert set(speed["model"]) == {"FC-6 w200", "FC-6 w400"}


def test_baselines_view_one_row_per_cell_in_suite_order_with_notes() -> None:
    cells = _cells(attack=["ig", "cpa", "ig"], width=[256, 200, 200], depth=[2, 6, 6], batch_size=[4, 1, 1],
                   status=["ok", "failed", "ok"], reason=["", "ICA exploded", ""], exact_fraction=[0.0, 0.0, 0.5],
                   attack_stats=[json.dumps({"initial_loss": 1.0, "final_loss": 0.25}), "{}",
                                 json.dumps({"converged": False})])
    table = apply_view("baselines", cells).table
    assert list(table.columns) == ["attack", "model", "batch_size", "seed", "exact_pct", "psnr_mean", "psnr_median",
                                   "ssim_mean", "seconds", "status", "note", "state"]
    assert list(zip(table["attack"], table["model"], strict=True)) == [("ig", "FC-6 w200"), ("ig", "FC-2 w256"),
                                                          ("cpa", "FC-6 w200")]
    assert list(table["note"]) == ["ICA not converged", "loss 1->0.25", "ICA exploded"]
    assert table["exact_pct"].tolist()[:2] == [50.0, 0.0] and math.isnan(table["exact_pct"].iloc[2])
    assert table["state"].iloc[1] == "not recovered" and table["state"].iloc[2] == "failed"  # not 0 % (issue 43)


def test_views_refuse_runs_without_their_columns() -> None:
    with pytest.raises(ConfigError, match="noise_sigma"):
        apply_view("noise", _cells(seed=[0]).drop(columns=["noise_sigma"]))
    with pytest.raises(ConfigError, match="no cells"):
        apply_view("noise", _cells(seed=[0]).iloc[:0])
    with pytest.raises(ConfigError, match="spear-speed"):
        apply_view("no-such-view", _cells(seed=[0]))


def test_cell_text() -> None:
    assert [cell_text(v) for v in (math.nan, None, math.inf, 3.0, 2, 0.5, 1e-4, "ok", True)] == \
        ["–", "–", "∞", "3", "2", "0.50", "0.0001", "ok", "True"]


def test_shipped_papers_name_existing_views_and_suites() -> None:
    from leakbench.harness.suite import find_suite, load_suite
    from leakbench.papers import PAPERS

    views = {}
    for entry in PAPERS.entries():
        paper = entry.factory()
        assert load_suite(find_suite(paper.suite)).cells
        views[entry.name] = paper.views
        for view in paper.views:
            VIEWS.entry(view)
    assert views["spear-noise"] == ("noise",) and views["spear-speed"] == ("spear-speed",)
    assert views["baselines"] == ("baselines",)


def test_paper_spear_speed_has_the_scripts_settings() -> None:
    from leakbench.harness.suite import find_suite, load_suite

    cells = load_suite(find_suite("paper/spear-speed")).cells
    assert sorted({c.batch_size for c in cells}) == [1, 2, 4, 8, 12, 16, 20, 25] and len(cells) == 40
    assert {(c.attack, c.arch, c.width, c.depth, c.layer) for c in cells} == {("spear", "fc", 200, 6, 1)}
    assert {c.seed for c in cells} == set(range(5)) and {c.hyperparameters["max_seconds"] for c in cells} == {900.0}


# --------------------------------------------------------------------------- a small real run, reproduced


def _no_scripts(*args, **kwargs):
    command = args[0] if args else kwargs.get("args")
    words = [str(w) for w in (command if isinstance(command, (list, tuple)) else [command])]
    if any("benchmarks" in w or w.endswith(".py") for w in words):
        raise AssertionError(f"reproduce shelled out to a script: {words}")
    return REAL_RUN(*args, **kwargs)


REAL_RUN = subprocess.run


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory):
    """`leakbench reproduce tiny-views` (a scoped paper entry: the TINY suite and every view), in process."""
    from leakbench import papers

    root = tmp_path_factory.mktemp("views")
    (root / "tiny.toml").write_text(TINY)
    mp = pytest.MonkeyPatch()
    mp.setattr(subprocess, "run", _no_scripts)  # the attack worker (Popen) and git (run) stay allowed
    try:
        with papers.PAPERS.scoped("tiny-views", lambda: papers.Paper(str(root / "tiny.toml"), VIEW_NAMES), "test"):
            rc = main(["reproduce", "tiny-views", "--out", str(root / "res"), "--reports", str(root / "rep")])
    finally:
        mp.undo()
    assert rc == 0
    return root


def test_papers_module_does_not_shell_out() -> None:
    from leakbench import papers

    assert "subprocess" not in vars(papers)


@pytest.mark.slow
def test_reproduce_writes_each_view_beside_the_report(reproduced: Path) -> None:
    folder = reproduced / "rep" / "tiny-views"
    assert (reproduced / "rep" / "tiny-views.md").is_file()
    marker = json.loads((folder / "report.json").read_text())
    cells = read_cells(reproduced / "res" / "tiny-views")  # with the states counted from its records (issue 43)
    assert len(cells) == 12 and set(cells["width"]) == {24, 32} and set(cells["depth"]) == {2, 3}
    for name in VIEW_NAMES:
        assert f"{name}.csv" in marker["files"] and f"{name}.md" in marker["files"]
        expected = apply_view(name, cells)
        pd.testing.assert_frame_equal(pd.read_csv(folder / f"{name}.csv"), pd.read_csv(io.StringIO(expected.csv())))
        assert (folder / f"{name}.md").read_text() == expected.markdown()
    noise = pd.read_csv(folder / "noise.csv")
    assert sorted(set(noise["noise_sigma"])) == [0.0, 1e-4] and set(noise["model"]) == {"FC-3 w32", "FC-2 w24"}
    speed = pd.read_csv(folder / "spear-speed.csv")
    assert (speed[speed["attack"] == "spear"]["draws_median"] > 0).all()
    assert speed[speed["attack"] == "cpa"]["draws_median"].isna().all()
    assert len(pd.read_csv(folder / "baselines.csv")) == 12


@pytest.mark.slow
def test_report_again_replaces_the_views(reproduced: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(reproduced / "res" / "tiny-views"), "--reports", str(reproduced / "rep")]) == 0
    assert not (reproduced / "rep" / "tiny-views" / "noise.csv").exists()  # owned by the report: replaced, not refused


@pytest.mark.slow
def test_view_command_prints_and_writes_csv(reproduced: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = reproduced / "view" / "speed.csv"
    assert main(["view", "spear-speed", str(reproduced / "res" / "tiny-views"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("## Speed per batch size")
    assert "| attack | model | noise\\_sigma | batch\\_size |" in printed
    cells = read_cells(reproduced / "res" / "tiny-views")
    assert out.read_text() == apply_view("spear-speed", cells).csv()
    run = str(reproduced / "res" / "tiny-views")
    assert main(["view", "frontier", run, run]) == 0  # several runs: their cells in one table
    assert capsys.readouterr().out.count("| spear |") == 2 * int((cells["attack"] == "spear").sum())


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown view", "no run", "garbage parquet", "out is a folder", "missing column"])
def test_view_bad_input_exits_2_writing_nothing(reproduced: Path, tmp_path: Path, case: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run, name, out = reproduced / "res" / "tiny-views", "noise", tmp_path / "out" / "v.csv"
    if case == "unknown view":
        name = "nope"
    elif case == "no run":
        run = tmp_path / "nothing"
    elif case == "garbage parquet":
        run = tmp_path / "run"
        run.mkdir()
        (run / "cells.parquet").write_text("not parquet")
    elif case == "out is a folder":
        out = tmp_path / "out"
        out.mkdir()
    else:
        run = tmp_path / "old"
        run.mkdir()
        pd.read_parquet(reproduced / "res" / "tiny-views" / "cells.parquet").drop(columns=["noise_sigma"]).to_parquet(
            run / "cells.parquet")
        (run / "records.parquet").write_bytes((reproduced / "res" / "tiny-views" / "records.parquet").read_bytes())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    rc = main(["view", name, str(run), "--out", str(out)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("leakbench: error:"), captured.err
    assert captured.out == "" and sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_noise_view_keeps_scales_apart_and_names_them() -> None:
    cells = _cells(noise_sigma=[0.0, 1e-4, 1e-4], noise_scale=["absolute", "max", "absolute"])
    view = apply_view("noise", cells)
    assert list(view.table.columns[:2]) == ["noise_scale", "noise_sigma"] and len(view.table) == 3
    only_max = apply_view("noise", _cells(noise_sigma=[0.0, 1e-4], noise_scale=["absolute", "max"]))
    assert "× max |g|" in only_max.title and list(only_max.table.columns[:1]) == ["noise_sigma"]


def test_views_refuse_damaged_attack_stats() -> None:
    with pytest.raises(ConfigError, match="attack_stats"):
        apply_view("spear-speed", _cells(attack_stats=["{not json"]))


def test_victims_view_one_row_per_victim() -> None:
    cells = _cells(train_epochs=[0, 0, 5, 5], seed=[0, 0, 0, 0], attack=["spear", "cpa", "spear", "cpa"],
                   train_accuracy=[math.nan, math.nan, 0.5, 0.5], test_accuracy=[math.nan, math.nan, 0.25, 0.25],
                   victim_hash=["", "", "abc", "abc"])
    table = apply_view("victims", cells).table
    assert list(table.columns) == ["train_epochs", "seed", "train_accuracy_pct", "test_accuracy_pct", "victim_hash"]
    assert len(table) == 2 and list(table["victim_hash"]) == ["", "abc"]
    assert table.loc[1, "train_accuracy_pct"] == 50.0 and math.isnan(table.loc[0, "test_accuracy_pct"])


@pytest.mark.slow
def test_reproduce_refuses_an_unknown_view_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench import papers

    (tmp_path / "tiny.toml").write_text(TINY)
    with papers.PAPERS.scoped("bad-view", lambda: papers.Paper(str(tmp_path / "tiny.toml"), ("nope",)), "test"):
        rc = main(["reproduce", "bad-view", "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "unknown report view 'nope'" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


def test_frontier_view_of_trained_victims_has_their_epochs() -> None:
    """paper/spear-trained*: the epochs × b × seed table (samples found, exact %, seconds) of the trained victims."""
    stats = [json.dumps({"samples_found": k}) for k in (0, 64, 62, 64)]
    cells = _cells(attack=["spear-guided"] * 4, width=[400] * 4, batch_size=[100, 64, 64, 64],
                   train_epochs=[5, 20, 5, 5], dataset=["tinyimagenet", "tinyimagenet", "cifar10", "tinyimagenet"],
                   status=["failed", "ok", "partial", "ok"], exact_fraction=[0.0, 1.0, 62 / 64, 1.0],
                   attack_stats=stats)
    table = apply_view("frontier", cells).table
    assert list(table.columns[:4]) == ["dataset", "train_epochs", "width", "batch_size"]
    assert list(zip(table["dataset"], table["train_epochs"], table["batch_size"], table["found"], strict=True)) == [
        ("cifar10", 5, 64, 62.0), ("tinyimagenet", 5, 64, 64.0), ("tinyimagenet", 5, 100, 0.0),
        ("tinyimagenet", 20, 64, 64.0)]
