"""Partial batches (issue 26): an incomplete SPEAR batch returns the samples it verified one by one (status
partial); the harness scores them as recovered images, counts the rest as failures, refuses a partial answer
that could inflate its score, and the report and the leaderboard show the batch as incomplete (k/b verified)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from spear_helpers import layer_problem

from leakbench.attacks import Reconstruction
from leakbench.attacks.spear.attack import verified_samples
from leakbench.attacks.spear.samples import SampleState
from leakbench.datasets import Batch
from leakbench.harness.isolation import _check_meta
from leakbench.harness.rescore import rescore_run
from leakbench.harness.run import run_sweep
from leakbench.harness.scoring import admitted, cell_reason, score
from leakbench.metrics import UNMATCHED
from leakbench.metrics.score import recovered
from leakbench.progress import cells_line
from leakbench.records.artifacts import AttackOutput
from leakbench.records.truth import load_truth
from leakbench.reporting.aggregate import group_stats, stat_cells
from leakbench.reporting.leaderboard import INCOMPLETE, board_table, write_leaderboard
from leakbench.reporting.report import write_report

# --------------------------------------------------------------------------- the attack: verified samples only


def test_verified_samples_are_the_rows_that_pass_their_own_next_layer_check() -> None:
    """Of a search state holding three true samples, one scaled 1 % off, one of the wrong sign and a mixture
    of two, only the three true ones come back, as their layer inputs x_i = c_i R."""
    problem, X = layer_problem(6, 64)
    C = X @ problem.R.T  # the true rows c_i (R has orthonormal rows)
    wrong = torch.stack([1.01 * C[3], -C[4], (C[0] + C[5]) / 2])
    state = SampleState(samples=torch.cat([C[:3], wrong]))
    got = verified_samples(problem, state, residual_tol=1e-4)
    assert got is not None and got.shape == (3, X.shape[1])
    torch.testing.assert_close(got, X[:3], rtol=0, atol=1e-6)


def test_verified_samples_include_the_outliers_set_aside() -> None:
    """A fit set aside as an outlier among the found samples (`acceptance.set_aside`) passed the same per-sample
    check: it comes back too, unless it is a near-copy of a found sample or fails the check."""
    problem, X = layer_problem(6, 64)
    C = X @ problem.R.T
    state = SampleState(samples=C[:2].clone(), outliers=torch.stack([C[3], 1.001 * C[0], -C[4]]))
    got = verified_samples(problem, state, residual_tol=1e-4)
    assert got is not None and got.shape == (3, X.shape[1])
    torch.testing.assert_close(got, X[[0, 1, 3]], rtol=0, atol=1e-6)


def test_verified_samples_never_make_a_whole_batch_and_need_the_next_layer() -> None:
    """At most b − 1 rows (a partial answer is never a batch); none without samples or on the paper route
    (no next-layer fit, P_next None: columns of Q, scaled by the whole batch only)."""
    problem, X = layer_problem(6, 64)
    C = X @ problem.R.T
    got = verified_samples(problem, SampleState(samples=C), residual_tol=1e-4)
    assert got is not None and got.shape[0] == 5
    assert verified_samples(problem, SampleState(samples=C[:0]), residual_tol=1e-4) is None
    assert verified_samples(problem, SampleState(samples=2 * C[:2]), residual_tol=1e-4) is None
    paper = dataclasses.replace(problem, P_next=None, V_next=None)
    assert verified_samples(paper, SampleState(samples=C[:3]), residual_tol=1e-4) is None


# --------------------------------------------------------------------------- the harness: scoring a partial answer


def _truth(b: int = 4) -> Batch:
    images = torch.rand(b, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    return Batch(images=images, labels=torch.zeros(b, dtype=torch.long), indices=tuple(range(b)), dataset="t",
                 num_classes=2)


def _scored(recon: Reconstruction, batch: Batch) -> tuple[Reconstruction, pd.DataFrame]:
    kept = admitted(AttackOutput(recon, 1.0), batch.size).reconstruction
    records, _ = score(kept, batch, None, None)  # type: ignore[arg-type]  # image space: the model is not read
    return kept, records


def test_a_partial_answer_scores_its_images_and_leaves_the_rest_not_recovered() -> None:
    batch = _truth()
    recon = Reconstruction.partial("draw budget spent", images=batch.images[[2, 0]].clone())
    kept, records = _scored(recon, batch)
    assert kept.status == "partial" and (records["status"] == "partial").all()
    assert records["exact"].tolist() == [True, False, True, False]
    assert records["matched_recon"].tolist() == [1, UNMATCHED, 0, UNMATCHED]
    assert recovered(records).tolist() == [True, False, True, False]
    assert records["psnr"].isna().tolist() == [False, True, False, True]
    assert cell_reason(kept, 4) == "batch incomplete: 2 of 4 verified (draw budget spent)"


def test_a_partial_answer_cannot_count_an_image_twice() -> None:
    """The same exact image returned twice, beside an unverified guess: one exact image, never two (each
    ground-truth image takes one reconstruction and each reconstruction one image)."""
    batch = _truth()
    recon = Reconstruction.partial("", images=torch.stack([batch.images[1], batch.images[1], torch.rand(3, 8, 8)]))
    _, records = _scored(recon, batch)
    assert int(records["exact"].sum()) == 1 and int(recovered(records).sum()) == 3


@pytest.mark.parametrize("rows", [0, 4, 5])
def test_a_partial_answer_of_none_or_of_the_whole_batch_is_refused(rows: int) -> None:
    """A partial answer holds 1 to b − 1 samples: one as large as the batch (or larger) would pass unverified
    images off as an incomplete batch's; it is scored as a failed cell saying why, with no image."""
    batch = _truth()
    images = torch.cat([batch.images, batch.images])[:rows] if rows else None
    kept, records = _scored(Reconstruction.partial("x", images=images), batch)
    assert kept.status == "failed" and kept.images is None
    assert kept.reason == ("error: a partial answer holds 1 to 3 verified samples of the batch of 4; "
                           f"this one held {rows}")
    assert not records["exact"].any() and not recovered(records).any()


def test_complete_and_failed_answers_are_scored_as_before() -> None:
    """Answers stored before partial batches existed (status ok or failed; no new field) pass unchanged."""
    batch = _truth()
    for recon in (Reconstruction("ok", "image", images=batch.images.flip(0)), Reconstruction.failed("budget")):
        output = AttackOutput(recon, 1.0)
        assert admitted(output, 4) is output
        assert cell_reason(recon, 4) == recon.reason
    assert recovered(_scored(Reconstruction("ok", "image", images=batch.images), batch)[1]).all()


def test_the_attack_worker_may_answer_partial() -> None:
    meta = {"status": "partial", "reason": "", "space": "image", "stats": {}, "seconds": 1.0,
            "hyperparameters": {}, "layer": 1, "isolation": ""}
    _check_meta(meta, 1)
    with pytest.raises(ValueError, match="status"):
        _check_meta({**meta, "status": "complete"}, 1)


# --------------------------------------------------------------------------- reports: image level and batch level


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three cells of b = 4: complete (4 exact), incomplete (3 verified, 3 exact), failed."""
    statuses, matched = ["ok", "partial", "failed"], [[0, 1, 2, 3], [0, 1, -1, 2], [-1] * 4]
    records = pd.DataFrame([{"cell_id": f"c{i}", "status": s, "matched_recon": m, "exact": m >= 0,
                             "psnr": np.inf if m >= 0 else np.nan, "space": "image"}
                            for i, (s, ms) in enumerate(zip(statuses, matched, strict=True)) for m in ms])
    cells = pd.DataFrame({"cell_id": ["c0", "c1", "c2"], "status": statuses, "seconds": [1.0] * 3,
                          "reason": ["", "batch incomplete: 3 of 4 verified (budget)", "budget"],
                          "attack": ["a", "a", "a"], "batch_size": [4] * 3, "dp": ["none"] * 3, "space": ["image"] * 3,
                          "suite": ["s"] * 3, "isolation": ["landlock+seccomp"] * 3, "inversion_steps": [0] * 3})
    return records, cells


def test_group_stats_count_an_incomplete_batch_apart_from_failed_ones() -> None:
    records, cells = _frames()
    s = group_stats(records, cells)
    assert (s["n"], s["failures"], s["failed_cells"], s["incomplete"]) == (12, 5, 1, [(3, 4)])
    assert s["exact_pct"] == pytest.approx(100 * 7 / 12)
    assert stat_cells(s)[1] == "5 (1 of 3 cells; incomplete: 1 (3/4 verified))"
    assert cells_line(cells["status"], "there") == "cells: 1 ok, 1 failed, 1 incomplete (each one's reason: there)"


def test_a_leaderboard_table_with_an_incomplete_batch_shows_it() -> None:
    records, cells = _frames()
    board = board_table(records, cells, ("t", "FC-6 w200", 1, "none"))
    labels = [c.label for c in board.columns]
    assert labels[-3:] == ["n", "failures", INCOMPLETE]
    row = {label: entry.text for label, entry in zip(labels, board.rows[0], strict=True)}
    assert [row[c] for c in ("exact % b=4", "n", "failures", INCOMPLETE)] == ["58", "12", "5", "1 (3/4 verified)"]
    assert "3 cells (1 failed, 1 incomplete)" in board.notes[0]
    complete = board_table(records[records["cell_id"] == "c0"], cells[:1], ("t", "FC-6 w200", 1, "none"))
    assert INCOMPLETE not in [c.label for c in complete.columns]  # tables without one are as before


# --------------------------------------------------------------------------- end to end


SUITE = """name = "partial-tiny"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [16]
seeds = [0]
grid_images = 16

[hyperparameters.spear]
max_draws = 100000
"""


@pytest.mark.slow
def test_an_incomplete_spear_batch_is_scored_reported_and_rescored(tmp_path: Path) -> None:
    """SPEAR with a small draw budget finds some but not all of b = 16 (FC-6 width 200 at init): the cell is
    partial, its k verified images are pixel-exact against the ground truth the attack never saw, the other
    16 − k are not recovered; rescoring gives the same records; report and leaderboard say 'k/16 verified'."""
    (tmp_path / "suite.toml").write_text(SUITE)
    sweep = run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res")
    [cell] = sweep.cells.to_dict("records")
    match = re.fullmatch(r"batch incomplete: (\d+) of 16 verified \(draw budget spent after 100000 draws with "
                         r"(\d+) of 16 samples found\)", cell["reason"])
    assert cell["status"] == "partial" and match, cell["reason"]
    k = int(match[1])
    assert 0 < k == int(match[2]) < 16
    records = sweep.records
    assert int(recovered(records).sum()) == k and cell["failures"] == 16 - k
    assert records.loc[recovered(records), "exact"].all() and not records.loc[~recovered(records), "exact"].any()
    assert cell["exact_fraction"] == k / 16
    truth = load_truth(sweep.run_dir, cell["cell_id"])
    assert truth.output.reconstruction.images is not None and truth.output.reconstruction.images.shape[0] == k
    aligned = truth.aligned()
    assert aligned is not None
    got = torch.isfinite(aligned).flatten(1).all(1)
    assert int(got.sum()) == k
    assert torch.equal((aligned[got] * 255).round(), (truth.truth[got] * 255).round())  # pixel-perfect

    before = pd.read_parquet(sweep.run_dir / "records.parquet")
    rescore_run(sweep.run_dir)
    pd.testing.assert_frame_equal(pd.read_parquet(sweep.run_dir / "records.parquet"), before)

    report = write_report(sweep.run_dir, tmp_path / "rep").read_text()
    assert f"batch incomplete: {k} of 16 verified" in report and f"incomplete: 1 ({k}/16 verified)" in report
    write_leaderboard(tmp_path / "res", tmp_path / "rep")
    board = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert INCOMPLETE in board and f"1 ({k}/16 verified)" in board and "1 cells (0 failed, 1 incomplete)" in board
