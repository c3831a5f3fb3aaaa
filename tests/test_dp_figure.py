"""benchmarks/dp_figure.py: PSNR / exact % against ε from stored records (issue 6)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_benchmark

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow


def _module():
    return load_benchmark("dp_figure")


def _records(tmp_path):
    """Two attacks, three DP levels (none, σ = 0, σ = 0.1), two images each; 'a' fails under noise."""
    rows = []
    levels = [("none", math.nan, math.inf), ("σ=0 C=1", 0.0, math.inf), ("σ=0.1 C=1", 0.1, 80.6)]
    for dp, sigma, eps in levels:
        for attack in ("a", "b"):
            for image, psnr in enumerate((20.0, 30.0) if attack == "b" else (140.0, 150.0)):
                failed = attack == "a" and sigma == 0.1
                rows.append({"attack": attack, "dataset": "embedded", "batch_size": 2, "seed": 0, "dp": dp,
                             "dp_sigma": sigma, "dp_clip": 1.0, "dp_q": 0.01,
                             "dp_steps": 1, "dp_delta": 1e-5, "dp_epsilon": eps, "image": image,
                             "psnr": math.nan if failed else psnr - 10 * (sigma == 0.1),
                             "exact": attack == "a" and not failed, "status": "failed" if failed else "ok"})
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    pd.DataFrame(rows).to_parquet(run / "records.parquet", index=False)
    return run


def test_points_table_and_png(tmp_path, capsys):
    dp_figure = _module()
    run = _records(tmp_path)
    pts = dp_figure.points(dp_figure.load([run])).set_index(["dp", "attack"])
    assert pts.loc[("σ=0.1 C=1", "b"), "psnr_median"] == pytest.approx(15.0)
    assert pts.loc[("σ=0.1 C=1", "b"), "epsilon"] == pytest.approx(80.6)
    assert math.isnan(pts.loc[("σ=0.1 C=1", "a"), "psnr_median"])
    assert pts.loc[("σ=0.1 C=1", "a"), "failed"] == 2
    assert pts.loc[("σ=0 C=1", "a"), "exact_pct"] == 100.0
    assert pts.loc[("σ=0.1 C=1", "a"), "exact_pct"] == 0.0
    out = tmp_path / "fig" / "dp.png"
    dp_figure.main([str(run), "--out", str(out)])
    text = capsys.readouterr().out
    assert "| σ=0.1 C=1 | 0.1 | 80.6 | 0 / – [2/2 failed] | 0 / 15.0 |" in text
    assert "| σ=0 C=1 | 0 | ∞ | 100 / 145.0 | 0 / 25.0 |" in text
    assert "q = 0.01, steps = 1, δ = 1e-05" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dp_figure.main([str(run), "--out", str(out), "--data-root", str(tmp_path)])
    assert "floor (same batches): grey 0.5 " in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path):
    dp_figure = _module()
    with pytest.raises(SystemExit, match=r"no .*records\.parquet"):
        dp_figure.main([str(tmp_path / "missing")])
    run = tmp_path / "nodp"
    run.mkdir()
    pd.DataFrame({"attack": ["a"], "psnr": [1.0]}).to_parquet(run / "records.parquet")
    with pytest.raises(SystemExit, match="lacks column"):
        dp_figure.main([str(run)])
    mixed = pd.read_parquet(_records(tmp_path) / "records.parquet")
    mixed.loc[0, "batch_size"] = 4
    mixed.to_parquet(run / "records.parquet")
    with pytest.raises(SystemExit, match="one dataset and one batch size"):
        dp_figure.main([str(run), "--out", str(tmp_path / "x.png"), "--data-root", str(tmp_path)])
    frame = pd.read_parquet(_records(tmp_path) / "records.parquet").assign(dp_sigma=np.nan)
    frame.to_parquet(run / "records.parquet")
    with pytest.raises(SystemExit, match="no DP level"):
        dp_figure.main([str(run)])
