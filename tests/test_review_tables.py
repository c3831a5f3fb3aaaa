"""benchmarks/review_tables.py: exact % / PSNR per attack against the varying axis, per seed on request."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.conftest import load_benchmark

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow


def _module():
    return load_benchmark("review_tables")


def _run(tmp_path):
    """Layer 2, one attack, seeds 0–2 with two images each; seed 1 fails (no PSNR, not exact)."""
    rows = [{"attack": "spear", "layer": layer, "seed": seed, "image": i, "space": "feature", "rel_error": 1e-7,
             "exact": seed != 1, "psnr": math.nan if seed == 1 else 10.0 + seed + i,
             "status": "failed" if seed == 1 else "ok"}
            for layer in (2, 3) for seed in (0, 1, 2) for i in (0, 1)]
    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame(rows).to_parquet(run / "records.parquet", index=False)
    return run


def test_table_pools_seeds_and_counts_failures(tmp_path):
    text = _module().table(_run(tmp_path))
    assert "| layer | spear |" in text
    # PSNR median of seeds 0 and 2 (10, 11, 12, 13); 4 of 6 images exact; 2 failed images.
    assert "| 2 | 67 / 11.5 (feat. err 1.0e-07) [2 failed] |" in text
    assert " seeds " not in text.split("\n", 1)[1]


def test_per_seed_column(tmp_path, capsys):
    _module().main(["--per-seed", str(_run(tmp_path))])
    assert "| 3 | 67 / 11.5 (feat. err 1.0e-07) seeds 100/0/100 [2 failed] |" in capsys.readouterr().out


def test_batch_size_axis(tmp_path):
    run = _run(tmp_path)
    records = pd.read_parquet(run / "records.parquet").assign(batch_size=lambda f: 4 + 4 * (f["layer"] == 3))
    records.to_parquet(run / "records.parquet", index=False)
    text = _module().table(run)
    assert "| batch_size | spear |" in text and "| 8 | 67 / 11.5" in text


def test_missing_run_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"no .*records\.parquet"):
        _module().main([str(tmp_path / "nothing")])
