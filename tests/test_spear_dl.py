"""spear-dl (dictionary-learning proposals for SPEAR's deflated search) and spear-paper (SPEAR as published)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear.dl import expected_zero_fraction, msp_directions, trim_schedule, trimmed_directions
from leakbench.cell.spec import CellSpec
from leakbench.core.errors import ConfigError
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import fedsgd_update
from leakbench.harness.cell import run_cell
from leakbench.models import build_fc
from leakbench.progress import attack_progress


def _exact(spec: CellSpec) -> dict:
    s = run_cell(spec).summary
    assert s["status"] == "ok", s["reason"]
    assert s["exact_fraction"] == 1.0
    return s["attack_stats"]


@pytest.mark.slow
def test_spear_dl_exact_on_tinyimagenet_b20_and_proposals_do_the_work(tinyimagenet_root: Path) -> None:
    stats = _exact(CellSpec(attack="spear-dl", dataset="tinyimagenet", batch_size=20, seed=0, width=200,
                            data_root=str(tinyimagenet_root), hyperparameters={"max_seconds": 120.0}))
    assert stats["mode"] == "deflation+next-layer"
    assert stats["dl_found"] >= 10, stats  # most samples came from the proposals, not from random draws


@pytest.mark.slow
def test_spear_dl_exact_on_embedded_b12() -> None:
    _exact(CellSpec(attack="spear-dl", dataset="embedded", batch_size=12, seed=0, width=200,
                    hyperparameters={"max_seconds": 60.0}))


@pytest.mark.slow
def test_spear_dl_recovers_the_distinct_images_of_a_batch_with_a_repeated_image() -> None:
    """Two identical inputs: the gradients have rank b−1 (factors.visible_rank), so the attack searches 9 samples:
    the batch is incomplete, and each of the 9 images it returns is one of the 9 distinct inputs, to 8 bits."""
    ds = load_dataset("embedded")
    batch = sample_batch(ds, 10, seed=0)
    batch = dataclasses.replace(batch, images=torch.cat([batch.images[:9], batch.images[:1]]),
                                labels=torch.cat([batch.labels[:9], batch.labels[:1]]))
    model = build_fc(ds.image_shape, ds.num_classes, width=200, depth=6, seed=0)
    rec = create_attack("spear-dl", max_seconds=5.0).reconstruct(fedsgd_update(model, batch), seed=0)
    assert rec.status == "partial" and "1 of 10 samples" in rec.reason
    assert rec.images is not None and rec.images.shape[0] == 9
    truth = batch.images[:9]
    off = (rec.images[:, None] - truth[None]).abs().flatten(2).amax(-1)  # (recovered, true)
    assert bool((off.amin(dim=1) < 0.5 / 255).all()) and off.argmin(dim=1).unique().numel() == 9


@pytest.mark.slow
def test_spear_dl_out_of_budget_is_failed_not_exact() -> None:
    spec = CellSpec(attack="spear-dl", dataset="embedded", batch_size=16, seed=0, width=200,
                    hyperparameters={"max_draws": 64})
    result = run_cell(spec)
    s = result.summary
    assert s["status"] == "failed" and "budget" in s["reason"], s["reason"]
    assert s["exact_fraction"] == 0.0 and result.reconstruction.images is None
    assert s["attack_stats"]["samples_found"] < 16


@pytest.mark.slow
def test_spear_paper_exact_at_small_b_and_recorded() -> None:
    stats = _exact(CellSpec(attack="spear-paper", dataset="embedded", batch_size=6, seed=0, width=200,
                            hyperparameters={"max_seconds": 60.0}))
    assert stats["mode"] == "sampling"


@pytest.mark.slow
def test_deflated_search_is_recorded() -> None:
    stats = _exact(CellSpec(attack="spear", dataset="embedded", batch_size=4, seed=0))
    assert stats["mode"] == "deflation+next-layer" and stats["turns_zero_draws"] + stats["turns_two_sided"] >= 1


@pytest.mark.parametrize("attack, params, match", [
    ("spear", {"route": "paper"}, "unknown hyperparameter.*route"),
    ("spear-paper", {"residual_tol": 1e-3}, "unknown hyperparameter.*residual_tol"),
    ("spear-dl", {"last_column": False}, "unknown hyperparameter.*last_column"),
    ("spear-dl", {"init": "msp", "starts": 4}, "init=msp ignores starts"),
    ("spear-dl", {"init": "msp-only", "keep": 0.8}, "ignores keep"),
    ("spear-dl", {"keep": 0.4}, "keep"),
])
def test_knob_a_route_ignores_raises(attack: str, params: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        create_attack(attack, **params)


def test_spear_paper_takes_its_own_knobs() -> None:
    create_attack("spear-paper", lp_check=True, last_column=True, second_stage=False)


@pytest.mark.slow
def test_search_bar_shows_samples_draws_and_budget() -> None:
    """In this process (the attack worker draws its bars on its own stderr, a terminal in real runs)."""
    stream = io.StringIO()
    with attack_progress(stream):
        s = run_cell(CellSpec(attack="spear", dataset="embedded", batch_size=4, seed=0), isolate=False).summary
    assert s["exact_fraction"] == 1.0
    text = stream.getvalue()
    assert "spear samples found" in text and "draws" in text and "budget left" in text


def test_trimmed_least_squares_finds_a_planted_sparse_direction() -> None:
    """Rows of L = S Q⁻¹ with S half zeros per column: the trim lands on columns of Q (exactly)."""
    gen = torch.Generator().manual_seed(0)
    m, b = 400, 10
    S = torch.randn(m, b, generator=gen, dtype=torch.float64) * (torch.rand(m, b, generator=gen) < 0.5)
    Q = torch.randn(b, b, generator=gen, dtype=torch.float64)
    L = S @ torch.linalg.inv(Q)
    Ln = L / L.norm(dim=1, keepdim=True)
    y = trimmed_directions(Ln, torch.randn(16, b, generator=gen, dtype=torch.float64),
                           trim_schedule(m, 0.9, 0.7 * expected_zero_fraction(b), 30, 15))
    Qn = Q / Q.norm(dim=0)
    best = (y @ Qn).abs().max(dim=1).values
    assert int((best > 1 - 1e-9).sum()) >= 1


def test_msp_returns_orthonormal_whitened_rows() -> None:
    gen = torch.Generator().manual_seed(0)
    Ln = torch.randn(300, 8, generator=gen, dtype=torch.float64)
    y = msp_directions(Ln, gen, iterations=5)
    assert y.shape == (8, 8) and torch.allclose(y.norm(dim=1), torch.ones(8, dtype=torch.float64))
    assert torch.linalg.matrix_rank(y) == 8
