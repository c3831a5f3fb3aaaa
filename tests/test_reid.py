"""Re-identification (issue 43): each reconstruction's true image ranked among the batch and N distractors of
its split, on batches where the answer is known, and its plumbing through scoring and the tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from leakbench.cell.draw import distractor_indices, draw_distractors
from leakbench.cell.spec import CellSpec
from leakbench.core.reconstruction import Reconstruction
from leakbench.datasets import load_dataset, partition
from leakbench.harness.scoring import score_cell
from leakbench.harness.victim import victim
from leakbench.metrics import LpipsScorer, score_images
from leakbench.metrics.reid import PIXEL_DISTANCE, _lpips_embedding, pairwise_distances, reidentify
from leakbench.records.artifacts import AttackOutput
from leakbench.reporting.aggregate import group_stats, stat_cells
from leakbench.reporting.pivot import triple

B = 8


def _images(n: int, seed: int) -> torch.Tensor:
    """`n` smooth random 3×32×32 images (blurred noise: structure a perceptual distance can tell apart)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=g)
    return torch.nn.functional.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)


@pytest.fixture(scope="module")
def truth() -> torch.Tensor:
    return _images(B, 0)


@pytest.fixture(scope="module")
def distractors() -> torch.Tensor:
    return _images(200, 1)


@pytest.fixture(scope="module")
def plumbing() -> LpipsScorer:
    """A random-trunk scorer: tests the LPIPS path's plumbing only, never reported."""
    return LpipsScorer.random_trunk_for_tests()


@pytest.mark.parametrize("lpips", [False, True])
def test_exact_reconstructions_rank_their_truth_first(truth, distractors, plumbing, lpips) -> None:
    result = reidentify(truth.clone(), truth, distractors, lpips=plumbing if lpips else None)
    assert result.ranks.tolist() == [1.0] * B and result.top1 == 1.0 and result.n == len(distractors)
    assert result.distance == ("lpips-alex" if lpips else PIXEL_DISTANCE)


@pytest.mark.parametrize("lpips", [False, True])
def test_a_distractors_image_does_not_reidentify(truth, distractors, plumbing, lpips) -> None:
    """Reconstruction i is distractor 10 + i's image: that distractor is nearer than the truth."""
    recon = distractors[10:10 + B].clone()
    ranks = reidentify(recon, truth, distractors, lpips=plumbing if lpips else None).ranks
    assert (ranks > 1).all()


@pytest.mark.parametrize("lpips", [False, True])
def test_a_noisy_reconstruction_ranks_its_truth_first_a_permuted_one_does_not(truth, distractors, plumbing,
                                                                             lpips) -> None:
    scorer = plumbing if lpips else None
    noisy = (truth + 0.03 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(2))).clamp(0, 1)
    assert reidentify(noisy, truth, distractors, lpips=scorer).ranks.tolist() == [1.0] * B
    permuted = noisy.roll(1, dims=0)  # row i holds image i − 1's reconstruction: none is its own
    ranks = reidentify(permuted, truth, distractors, lpips=scorer).ranks
    assert (ranks >= 2).all() and reidentify(permuted, truth, distractors, lpips=scorer).top1 == 0.0


def test_a_constant_reconstruction_is_never_reidentified(truth, distractors) -> None:
    """Pessimistic ties: a grey image is as near every standardised image, so it ranks last, not first."""
    grey = torch.full_like(truth, 0.5)
    assert reidentify(grey, truth, distractors).ranks.tolist() == [float(B + len(distractors))] * B
    speckled = grey + 1e-7 * torch.randn(grey.shape, generator=torch.Generator().manual_seed(3))  # float noise
    assert reidentify(speckled, truth, distractors).ranks.tolist() == [float(B + len(distractors))] * B


def test_lpips_from_cached_features_equals_the_scorers_own(truth, distractors, plumbing) -> None:
    d = pairwise_distances(truth, distractors[:B], _lpips_embedding(plumbing), chunk=3)
    assert d.diagonal() == pytest.approx(plumbing.score(truth, distractors[:B]), rel=1e-5, abs=1e-7)


def test_failed_images_are_not_reidentified(truth, distractors) -> None:
    """Unmatched rows (a partial answer's missing samples, a failed cell) have no rank and count as not
    re-identified."""
    partial = score_images(truth[:3].clone(), truth, distractors=distractors)
    assert partial["reid_rank"].iloc[:3].tolist() == [1.0, 1.0, 1.0] and partial["reid_rank"].iloc[3:].isna().all()
    assert float((partial["reid_rank"] == 1).mean()) == 3 / B
    failed = score_images(None, truth, distractors=distractors)
    assert failed["reid_rank"].isna().all()
    assert score_images(truth.clone(), truth)["reid_rank"].isna().all()  # no distractors: not scored


def test_distractors_are_capped_by_the_split_disjoint_and_fixed_per_seed() -> None:
    pool = np.arange(50)
    batch = (3, 7, 11)
    drawn = distractor_indices(pool, batch, seed=5, n=1000)
    assert len(drawn) == 47 and not set(drawn) & set(batch)  # all the split holds besides the batch
    few = distractor_indices(pool, batch, seed=5, n=10)
    assert len(few) == 10 and not set(few) & set(batch)
    assert np.array_equal(few, distractor_indices(pool, batch, seed=5, n=10))
    assert not np.array_equal(few, distractor_indices(pool, batch, seed=6, n=10))
    other = distractor_indices(pool, (3, 8), seed=5, n=10)  # another batch, same seed: the same order
    assert set(few) - {8} <= set(other) | set(batch)


def test_a_cells_distractors_come_from_its_split() -> None:
    dataset = load_dataset("digits")
    at_init = CellSpec(attack="spear", dataset="digits", batch_size=4, width=32, depth=3)
    batch, _ = victim(at_init, with_model=False)
    drawn = draw_distractors(dataset, at_init, batch, 1000)
    assert len(drawn) == 1000 and not set(drawn) & set(batch.indices)
    trained = CellSpec(attack="spear", dataset="digits", batch_size=4, width=32, depth=3, train_epochs=1)
    tbatch, _ = victim(trained, with_model=False)
    attack_part = partition(dataset).attack
    tdrawn = draw_distractors(dataset, trained, tbatch, 1000)
    assert len(tdrawn) == len(attack_part) - 4 and set(tdrawn) <= set(attack_part) - set(tbatch.indices)


def test_a_scored_cell_records_its_reidentification() -> None:
    """Exact reconstructions of a digits cell (1,797 images): every image re-identified among N = 1000."""
    spec = CellSpec(attack="spear", dataset="digits", batch_size=4, width=32, depth=3)
    batch, model = victim(spec)
    exact = AttackOutput(Reconstruction(status="ok", space="image", images=batch.images.flip(0)), 0.0)
    result = score_cell(spec, exact, batch, model)
    assert result.records["reid_rank"].tolist() == [1.0] * 4
    assert (result.summary["reid_top1"], result.summary["reid_n"], result.summary["reid_distance"]) == \
        (1.0, 1000, PIXEL_DISTANCE)
    failed = score_cell(spec, AttackOutput(Reconstruction.failed("nothing"), 0.0), batch, model)
    assert failed.records["reid_rank"].isna().all() and failed.summary["reid_top1"] == 0.0
    assert failed.summary["reid_n"] == 1000

    records = pd.concat([result.records, failed.records])
    cells = pd.DataFrame([{**s, "cell_id": cid, "seconds": 0.0} for cid, s in
                          (("a", result.summary), ("b", failed.summary))])
    records["cell_id"] = ["a"] * 4 + ["b"] * 4
    s = group_stats(records, cells)
    assert s["reid_pct"] == 50.0 and s["reid_n"] == 1000
    assert stat_cells(s)[3] == "50 @1000" and " · reid@1000 50 % · " in triple(s)


def test_groups_without_reidentification_show_none() -> None:
    """Runs stored before issue 43 (no reid columns) read as not scored, never as 0 %."""
    records = pd.DataFrame({"cell_id": ["a"], "exact": [True], "psnr": [math.inf], "status": ["ok"],
                            "matched_recon": [0], "space": ["image"]})
    cells = pd.DataFrame({"cell_id": ["a"], "status": ["ok"], "seconds": [1.0]})
    s = group_stats(records, cells)
    assert math.isnan(s["reid_pct"]) and stat_cells(s)[3] == "–" and "reid" not in triple(s)


RESCORED = """\
name = "reid-rescore"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [2]
layers = [1, 2]
width = 32
depth = 3
grid_images = 1
inversion = { steps = 3 }
[hyperparameters.spear]
max_draws = 20000
"""


@pytest.mark.slow
def test_rescore_scores_reidentification_from_stored_reconstructions(tmp_path_factory, tmp_path, monkeypatch) -> None:
    """A run's image cell and its feature cell with inverted images (layer 2) are re-identified when scored, and
    `leakbench rescore` ranks them again from the stored reconstructions (here among 5 distractors)."""
    import shutil

    from conftest import reference_run

    from leakbench.harness import scoring
    from leakbench.harness.rescore import rescore_run

    run = reference_run(tmp_path_factory, RESCORED, "reid")
    cells = pd.read_parquet(run / "cells.parquet")
    records = pd.read_parquet(run / "records.parquet")
    assert sorted(cells["space"]) == ["feature", "image"] and (cells["reid_n"] == 321 - 2).all()
    assert records["reid_rank"].notna().all() and set(cells["reid_distance"]) <= {PIXEL_DISTANCE, "lpips-alex"}
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    drawn = scoring.draw_distractors
    monkeypatch.setattr(scoring, "draw_distractors", lambda dataset, spec, batch, n: drawn(dataset, spec, batch, 5))
    again, again_cells = rescore_run(copy)
    assert (again_cells["reid_n"] == 5).all() and again["reid_rank"].between(1, 2 + 5).all()
