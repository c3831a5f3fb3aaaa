"""Tests for leakbench.reporting.grid.save_grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from leakbench.core.errors import LeakbenchError
from leakbench.reporting.grid import MAX_COLUMNS, MIN_TILE, save_grid

CAPTION = "spear · embedded · b=16 · seed 0 · rows: reconstruction above ground truth"


def _images(b: int, c: int = 3, h: int = 32, w: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(seed))


def _read(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as img:
        assert img.format == "PNG"
        return np.asarray(img.convert("RGB"))


def _only_png(folder: Path, name: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == [name]  # no temp file left behind


def test_grid_basic(tmp_path: Path) -> None:
    truth = _images(16)
    path = tmp_path / "out" / "grid.png"
    save_grid(path, truth, truth.flip(0), caption=CAPTION)
    px = _read(path)
    _only_png(path.parent, "grid.png")
    # 16 tiles of 64 px in one block, two rows, plus a caption underneath.
    assert px.shape[1] >= 16 * MIN_TILE
    assert 2 * MIN_TILE < px.shape[0] < 2 * MIN_TILE + 200
    below = px[2 * MIN_TILE + 12 :]
    assert (below.max(axis=-1) < 100).sum() > 100  # dark caption text under the grid


def test_grid_single_image(tmp_path: Path) -> None:
    path = tmp_path / "one.png"
    save_grid(path, _images(1), _images(1, seed=1), caption="b=1")
    px = _read(path)
    assert px.shape[0] >= 2 * MIN_TILE and px.shape[1] >= MIN_TILE


def test_grid_wraps_large_batches(tmp_path: Path) -> None:
    path = tmp_path / "forty.png"
    save_grid(path, _images(40), _images(40, seed=1), caption=CAPTION)
    px = _read(path)
    blocks = -(-40 // MAX_COLUMNS)
    assert blocks == 3
    assert px.shape[0] >= blocks * 2 * MIN_TILE  # three recon/truth block pairs
    assert px.shape[1] < (MAX_COLUMNS + 2) * (MIN_TILE + 4)  # never wider than one full block


def test_grid_grey_small_images(tmp_path: Path) -> None:
    path = tmp_path / "digits.png"
    truth = _images(5, c=1, h=8, w=8)
    save_grid(path, truth, truth, caption="digits")
    px = _read(path).astype(int)
    assert (px[..., 0] == px[..., 1]).all() and (px[..., 1] == px[..., 2]).all()  # grey stays grey
    assert px.shape[1] >= 5 * MIN_TILE


def test_grid_recon_none_and_failed(tmp_path: Path) -> None:
    truth = _images(3, h=16, w=16)
    path = tmp_path / "none.png"
    save_grid(path, truth, None, caption="attack failed")
    px = _read(path)
    red = (px[..., 0] > 180) & (px[..., 1] < 80) & (px[..., 2] < 80)
    grey = (px == 128).all(axis=-1)
    assert red.sum() > 50 and grey.sum() > 3 * 0.3 * MIN_TILE * MIN_TILE

    recon = truth.clone()
    recon[2] = float("nan")
    ok_path = tmp_path / "nan.png"
    save_grid(ok_path, truth, recon, caption="one diverged, one flagged", failed=[False, True, False])
    px2 = _read(ok_path)
    grey2 = (px2 == 128).all(axis=-1)
    assert 0.5 * grey.sum() < grey2.sum() < grey.sum()  # two failed tiles out of three


def test_grid_upscale_and_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "g.png"
    path.write_bytes(b"old")
    save_grid(path, _images(2, h=8, w=8), None, caption="x", upscale=3)
    assert _read(path).shape[0] < 2 * MIN_TILE  # 24 px tiles as asked
    _only_png(tmp_path, "g.png")


def test_grid_rejects_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "bad.png"
    with pytest.raises(LeakbenchError):
        save_grid(path, _images(2), _images(3), caption="")
    with pytest.raises(LeakbenchError):
        save_grid(path, _images(2, c=2), None, caption="")
    with pytest.raises(LeakbenchError):
        save_grid(path, _images(2), None, caption="", failed=[True])
    with pytest.raises(LeakbenchError):
        save_grid(path, torch.rand(2, 8, 8), None, caption="")
    assert not path.exists()
