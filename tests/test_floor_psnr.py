"""benchmarks/floor_psnr.py: PSNR of batch-agnostic images (grey, dataset mean) on the harness's batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leakbench.datasets import load_dataset
from leakbench.datasets.base import sample_batch
from tests.conftest import load_benchmark

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow


def _module():
    return load_benchmark("floor_psnr")


def test_grey_floor_matches_direct_computation(capsys):
    floor_psnr = _module()
    dataset = load_dataset("embedded")
    result = floor_psnr.floors(dataset, 4, [0, 1])
    truth = torch.cat([sample_batch(dataset, 4, s).images for s in (0, 1)]).double()
    grey = 10 * torch.log10(1 / (truth - 0.5).pow(2).flatten(1).mean(1))
    assert result["images"] == 8
    assert result["grey 0.5"] == pytest.approx(float(np.median(grey.numpy())), rel=1e-9)
    assert 5.0 < result["dataset mean image"] < 30.0
    floor_psnr.main(["--dataset", "embedded", "--batch-size", "4", "--seeds", "0", "1"])
    assert "embedded, b = 4, seeds [0, 1] (8 images): grey 0.5" in capsys.readouterr().out


def test_bad_input_is_one_line():
    with pytest.raises(SystemExit, match="floor_psnr: unknown dataset"):
        _module().main(["--dataset", "nosuch", "--batch-size", "4"])
    with pytest.raises(SystemExit, match="floor_psnr: batch size must be at least 1"):
        _module().main(["--dataset", "embedded", "--batch-size", "0"])
