"""The conv+FC victim: layer numbering, attacks on its first FC layer, and feature inversion."""

from __future__ import annotations

import pytest
import torch

from leakbench.attacks.inversion import InversionConfig, invert_features
from leakbench.cell.spec import CellSpec, cell_id
from leakbench.core.errors import ConfigError
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare
from leakbench.metrics.image import psnr
from leakbench.models import build_conv, build_model


@pytest.mark.parametrize("side,blocks", [(32, 2), (64, 3)])
def test_trunk_pools_to_8x8(side: int, blocks: int) -> None:
    model = build_conv((3, side, side), 5, width=16, depth=3)
    x = torch.rand(2, 3, side, side)
    assert model.layer_inputs(x, 2).shape == (2, 32 * 8 * 8)
    assert sum(isinstance(m, torch.nn.MaxPool2d) for m in model.trunk) == blocks
    assert model(x).shape == (2, 5)


def test_layer_numbering_skips_the_trunk() -> None:
    model = build_conv((3, 32, 32), 5, width=16, depth=4)
    assert model.layer_param_names(2) == ("head.0.weight", "head.0.bias")
    assert model.layer_param_names(4) == ("head.4.weight", "head.4.bias")
    model.check_attackable(3)
    for bad in (1, 4):
        with pytest.raises(ConfigError, match="layer"):
            model.check_attackable(bad)


@pytest.mark.parametrize("call,match", [(lambda: build_conv((3, 30, 30), 5), "8·2"),
                                        (lambda: build_conv((3, 32, 32), 5, depth=2), "depth"),
                                        (lambda: build_model("vgg-x", (3, 32, 32), 5, width=8, depth=3),
                                             "unknown victim architecture")])
def test_bad_victims_are_config_errors(call, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call()


@pytest.mark.slow
def test_spear_recovers_conv_features_and_inversion_scores_images() -> None:
    spec = CellSpec(attack="spear", dataset="embedded", batch_size=2, arch="conv", depth=3, width=64, layer=2,
                    inversion=InversionConfig(steps=30))
    result = run_cell(spec)
    records = result.records
    assert result.summary["status"] == "ok" and result.summary["space"] == "feature"
    assert records["exact"].all() and (records["rel_error"] < 1e-3).all()
    assert records["psnr"].notna().all() and records["ssim"].notna().all() and "image_exact" in records
    assert records["arch"].iloc[0] == "conv" and records["inversion_steps"].iloc[0] == 30


@pytest.mark.slow
def test_inversion_fits_true_features_better_than_its_start_and_is_deterministic() -> None:
    batch, model, update = prepare(CellSpec(attack="cpa", dataset="embedded", batch_size=2, arch="conv", depth=3))
    target = model.layer_inputs(batch.images, 2).detach()

    @torch.no_grad()
    def fit(images: torch.Tensor) -> float:
        return float(((model.layer_inputs(images, 2) - target).norm(dim=1) / target.norm(dim=1)).max())

    images = invert_features(update.model, target, 2, InversionConfig(steps=60), seed=0)
    start = invert_features(update.model, target, 2, InversionConfig(steps=0), seed=0)
    assert fit(images) < 0.5 * fit(start)
    assert psnr(images, batch.images).mean() > psnr(start, batch.images).mean()
    assert torch.equal(images, invert_features(update.model, target, 2, InversionConfig(steps=60), seed=0))


def test_old_cell_ids_are_unchanged_by_the_new_fields() -> None:
    # The id of a plain FC cell as stored before arch/fedavg/inversion existed (main at b596632).
    assert cell_id(CellSpec(attack="spear", dataset="embedded", batch_size=4)) == OLD_ID
    assert cell_id(CellSpec(attack="spear", dataset="embedded", batch_size=4, arch="conv")) != OLD_ID


OLD_ID = "60f5640fe8447480"
