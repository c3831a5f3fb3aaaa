"""The defence leaderboard, the `defences` view and the privacy–utility figure (issue 24), from stored records
only: a synthetic records table (fast) and one tiny run end to end (slow)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from leakbench.reporting.aggregate import with_model
from leakbench.reporting.defences import defence_blocks, privacy_utility_data
from leakbench.reporting.figures import privacy_utility_figure
from leakbench.reporting.order import NONE, defence_levels
from leakbench.reporting.render import Table, markdown
from leakbench.reporting.views import apply_view

LEVELS = {  # level → (client, dp, noise σ, defence, test accuracy, {attack: (exact fraction, PSNR)})
    "none": ("fedsgd", "none", 0.0, None, 0.40, {"spear": (1.0, np.inf), "ig": (0.0, 20.0)}),
    "noise": ("fedsgd", "none", 0.01, None, 0.38, {"spear": (0.0, 15.0), "ig": (0.0, 18.0)}),
    "dp": ("fedsgd", "σ=1 C=1", 0.0, None, 0.20, {"spear": (0.0, 10.0), "ig": (0.0, 12.0)}),
    "prune": ("fedsgd", "none", 0.0, "prune keep=0.5", 0.37, {"spear": (0.5, 30.0), "ig": (0.0, 19.0)}),
}
DP_EPSILON = 0.9555491477031676
"""ε of σ = 1 (C = 1) for one step at q = 0.01 (Opacus RDP, δ = 1e-5: `fl.dp.epsilon`)."""
DP_LEVEL = "DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)"
"""The DP level's label (`order.defence_levels`: ε with its q and T)."""


def _tables(images: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    cells, records = [], []
    for name, (client, dp, sigma, defence, acc, attacks) in LEVELS.items():
        for attack, (exact, psnr) in attacks.items():
            cid = f"{name}-{attack}"
            cells.append({"suite": "s", "cell_id": cid, "attack": attack, "dataset": "cifar10", "batch_size": 4,
                          "width": 200, "depth": 6, "layer": 1, "seed": 0, "dp": dp,
                          "dp_sigma": 1.0 if dp != "none" else np.nan, "dp_clip": 1.0,
                          "dp_epsilon": DP_EPSILON if dp != "none" else np.inf, "dp_q": 0.01, "dp_steps": 1,
                          "arch": "fc", "client": client, "train_epochs": 2, "test_accuracy": acc,
                          "victim_hash": f"h-{name}", "status": "ok", "seconds": 1.0, "noise_sigma": sigma,
                          "noise_scale": "absolute", "defence": defence, "exact_fraction": exact,
                          "psnr_mean": psnr, "lpips_mean": 0.5 - exact / 4, "space": "image"})
            for i in range(images):
                records.append({"suite": "s", "cell_id": cid, "exact": i < exact * images, "psnr": psnr,
                                "ssim": 0.5, "lpips": 0.5 - exact / 4, "rel_error": np.nan, "status": "ok",
                                "space": "image"})
    return pd.DataFrame(records), with_model(pd.DataFrame(cells))


def test_defence_levels_name_dp_noise_and_defences() -> None:
    _, cells = _tables()
    assert dict(zip(cells["cell_id"], defence_levels(cells), strict=True)) == {
        "none-spear": NONE, "none-ig": NONE, "noise-spear": "noise σ=0.01", "noise-ig": "noise σ=0.01",
        "dp-spear": DP_LEVEL, "dp-ig": DP_LEVEL, "prune-spear": "prune keep=0.5", "prune-ig": "prune keep=0.5"}
    threat = cells.assign(client="fedsgd · labels known")
    assert set(defence_levels(threat)) == {"labels known", DP_LEVEL + " + labels known"}


def test_defences_ranked_by_their_worst_attack_with_the_accuracy_cost() -> None:
    """One victim per level (no interval: costs compared as shown), one seed (no spread): DP, noise and none
    are on the front (each leaks less or costs less than the others), prune is dominated by noise (it leaks
    more at a higher cost)."""
    records, cells = _tables()
    [table] = defence_blocks(records, cells)
    assert isinstance(table, Table) and table.title == "Defences: cifar10 · FC-6 w200 trained 2 ep · b=4 (suite s)"
    rows = {row[1]: dict(zip(table.header, row, strict=True)) for row in table.rows}
    assert [row[1] for row in table.rows] == [DP_LEVEL, "noise σ=0.01", "none", "prune keep=0.5"]
    assert [row[0] for row in table.rows] == ["1", "1", "1", "2"]
    dp = rows[DP_LEVEL]  # ig leaks more than spear
    assert [dp[k] for k in ("accuracy test %", "accuracy cost (pp) [95 % CI]", "worst non-adaptive attack",
                            "worst non-adaptive exact %", "worst non-adaptive PSNR med. (dB)")] \
        == ["20.0", "20.0 (1 victim)", "ig", "0", "12.0"]
    prune = rows["prune keep=0.5"]
    assert [prune[k] for k in ("accuracy cost (pp) [95 % CI]", "worst non-adaptive exact %",
                               "worst non-adaptive attack")] == ["3.0 (1 victim)", "50", "spear"]
    assert rows["none"]["accuracy cost (pp) [95 % CI]"] == "0.0" and rows["none"]["worst non-adaptive exact %"] == "100"
    assert f"| 1 | {DP_LEVEL} | no adaptive attack (potentially unreliable) | 20.0 | 20.0 (1 victim) |" \
        in markdown("board", [], [table])


def test_a_board_without_defences_is_left_out() -> None:
    records, cells = _tables()
    plain = cells[defence_levels(cells) == NONE]
    assert defence_blocks(records[records["cell_id"].isin(plain["cell_id"])], plain) == []
    [at_init] = defence_blocks(records, cells.assign(test_accuracy=np.nan))  # ranked by leakage, no cost
    assert [row[1] for row in at_init.rows][:2] == [DP_LEVEL, "noise σ=0.01"]
    assert "accuracy test %" not in at_init.header and at_init.rows[0][3] == "ig"


def test_defences_view_and_privacy_utility_data() -> None:
    records, cells = _tables()
    view = apply_view("defences", cells.assign(client="fedsgd")).table  # the view reads the stored cells table
    assert len(view) == 8 and set(view["defence"]) == {NONE, "noise σ=0.01", DP_LEVEL, "prune keep=0.5"}
    dp = view[(view["defence"] == DP_LEVEL) & (view["attack"] == "ig")].iloc[0]
    assert dp["test_accuracy_pct"] == pytest.approx(20.0) and dp["psnr_mean"] == 12.0
    data = privacy_utility_data(records, cells)
    spear = data[data["attack"] == "spear"].set_index("level")
    assert spear.loc["prune keep=0.5", "exact_pct"] == 50.0 and spear.loc[NONE, "accuracy_pct"] == pytest.approx(40)
    assert privacy_utility_data(records, cells.assign(test_accuracy=np.nan)).empty  # at init: no utility


def test_privacy_utility_figure_is_a_png(tmp_path: Path) -> None:
    records, cells = _tables()
    data = privacy_utility_data(records, cells)
    path = privacy_utility_figure(data[data["attack"] == "ig"], tmp_path / "pu.png", "ig: leakage against accuracy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


SUITE = """
name = "tiny-defences"
dataset = "digits"
attacks = ["spear", "cpa"]
batch_sizes = [2]
width = 32
depth = 3
train_epochs = [1]
train = { lr = 0.01, batch_size = 128 }
noise = [0.0, 0.05]
grid_images = 2

[hyperparameters.spear]
max_draws = 20000
[hyperparameters.cpa]
max_iter = 50
"""


@pytest.mark.slow
def test_a_run_with_defences_reports_the_figure_and_the_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run → records carry each victim's accuracy → report has the privacy–utility figure → leaderboard has the
    defence board, built from the stored records alone."""
    from leakbench.cli import main
    from leakbench.models import victims

    monkeypatch.setenv(victims.CACHE_ENV, str(tmp_path / "victims"))
    (tmp_path / "suite.toml").write_text(SUITE)
    assert main(["run", str(tmp_path / "suite.toml"), "--out", str(tmp_path / "res"),
                 "--reports", str(tmp_path / "rep")]) == 0
    run = tmp_path / "res" / "tiny-defences"
    cells, records = pd.read_parquet(run / "cells.parquet"), pd.read_parquet(run / "records.parquet")
    for table in (cells, records):
        accuracy = table.groupby("noise_sigma")["test_accuracy"].agg(["min", "max"])
        assert (accuracy["min"] == accuracy["max"]).all() and accuracy["min"].between(0.1, 1).all()
    assert cells.groupby("noise_sigma")["victim_hash"].nunique().tolist() == [1, 1]
    assert cells["victim_hash"].nunique() == 2  # the noised victim is another victim
    report = (tmp_path / "rep" / "tiny-defences.md").read_text()
    assert "Privacy–utility" in report
    figures = tmp_path / "rep" / "tiny-defences" / "figures"
    assert (figures / "privacy-utility-cpa-digits-FC-3-w32-trained-1-ep.png").is_file()
    # spear fails under the noise: a failed cell is no point at 0 % exact, so spear has one level, no figure
    assert cells.loc[(cells["attack"] == "spear") & (cells["noise_sigma"] > 0), "status"].tolist() == ["failed"]
    assert not (figures / "privacy-utility-spear-digits-FC-3-w32-trained-1-ep.png").exists()
    assert main(["leaderboard", "--results", str(tmp_path / "res"), "--reports", str(tmp_path / "board")]) == 0
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    section = board.split("## Defences ranked: digits · FC-3 w32 trained 1 ep · b=2")[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "rank" not in line]
    assert sorted(re.sub(r"\[(.*?)\]\(.*?\)", r"\1", r.split(" | ")[1]) for r in rows[:2]) == ["noise σ=0.05", "none"]
    assert "Defences ranked" in (tmp_path / "board" / "leaderboard.html").read_text()


def test_dp_ticks_keep_their_parentheses_and_clipping_plus_noise_is_one_family() -> None:
    """The words DP levels share ('C=1', 'at q=0.01, T=1 step') leave the ticks with ε closed, and a level past
    ε = 100 ('clipping + noise …') has its own panel named so. Old code: 'σ=1 (ε=0.956' and a panel 'clipping'
    whose tick began '+ noise'."""
    from leakbench.reporting.figures import tick_labels
    from leakbench.reporting.findings import family

    dp = ["DP σ=0.1 C=1 (ε=80.6 at q=0.01, T=1 step)", "DP σ=1 C=1 (ε=0.956 at q=0.01, T=1 step)"]
    assert tick_labels("DP", ["none", *dp]) == ["none", "σ=0.1 (ε=80.6)", "σ=1 (ε=0.956)"]
    clipping = "clipping + noise σ=0.01 C=1 (ε=5.56e+03 at q=0.01, T=1 step)"
    assert family(clipping) == "clipping + noise" and family(dp[0]) == "DP"
    assert tick_labels(family(clipping), ["none", clipping])[1].startswith("σ=0.01")
