"""Leakage states of a cell (issue 43): every failed answer carries its failure kind (verification, budget,
not-applicable, error) through the attack worker's reply and the stored records; each cell has one state; a
failed cell is never shown or sorted as 0 % or 0 dB, and a partial leak says "k of n"."""

from __future__ import annotations

import ast
import io
import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import leakbench
from leakbench.api import scoped_attack
from leakbench.attacks import Attack, Reconstruction, create_attack
from leakbench.attacks.spear import attack as spear_attack
from leakbench.attacks.spear.search import ColumnState
from leakbench.attacks.spear.solve import Solution
from leakbench.cell.spec import CellSpec
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import fedsgd_update
from leakbench.harness.cell import run_cell
from leakbench.harness.isolation import check_reply
from leakbench.harness.scoring import admitted
from leakbench.models import build_fc
from leakbench.progress import cell_line
from leakbench.records.artifacts import ATTACK_FILE, AttackOutput, attack_output_files, load_attack_output
from leakbench.records.cell_state import STATES, cell_state, leaked_images, state_text, with_states
from leakbench.records.runs import read_run
from leakbench.records.schema import SUMMARY_COLUMNS
from leakbench.reporting.aggregate import group_stats, stat_cells
from leakbench.reporting.compare import tile_text
from leakbench.reporting.pivot import headline, rank_key, triple

GOLDEN = Path(__file__).resolve().parent / "golden"
ZERO = ("0 %", "0 dB", "0.0 dB")
"""What a failed cell must never read as."""


# --------------------------------------------------------------------------- one state per cell


def _cell(cid: str, status: str, failure: str | None = None, exact: float = 0.0, n: int = 4) -> dict:
    return {"cell_id": cid, "attack": "spear", "batch_size": n, "status": status, "failure": failure,
            "reason": "" if status == "ok" else "why", "n_images": n, "exact_fraction": exact, "seconds": 1.0,
            "space": "image"}


def _records(cid: str, psnr: list[float], exact: list[bool], status: str = "ok") -> pd.DataFrame:
    return pd.DataFrame({"cell_id": cid, "image": range(len(psnr)), "psnr": psnr, "exact": exact, "space": "image",
                         "status": "failed" if all(math.isnan(p) for p in psnr) else status,
                         "ssim": np.nan, "lpips": np.nan, "matched_recon": [i if not math.isnan(p) else -1
                                                                            for i, p in enumerate(psnr)]})


@pytest.mark.parametrize("failure, state", [("budget", "failed (budget)"), ("verification", "failed (verification)"),
                                            ("error", "failed (error)"), ("not-applicable", "not applicable"),
                                            (None, "failed")])
def test_a_failed_cell_has_its_failure_state_and_never_reads_as_zero(failure: str | None, state: str) -> None:
    cells = pd.DataFrame([_cell("a", "failed", failure)])
    records = _records("a", [math.nan] * 4, [False] * 4)
    assert cell_state(cells.iloc[0]) == state and state_text(cells.iloc[0]) == state
    s = group_stats(records, cells)
    assert s["states"] == {state: 1}
    for text in (headline(s), triple(s)):
        assert text == state and not any(z in text for z in ZERO), text
    assert stat_cells(s)[2] == state  # exact %: the state, never 0
    # sorted after an attack that answered and recovered nothing, never tied with it as 0 % / 0 dB
    nothing = group_stats(_records("b", [8.0] * 4, [False] * 4), pd.DataFrame([_cell("b", "ok")]))
    assert rank_key([s]) > rank_key([nothing]) and rank_key([s])[0] == 1


def test_answered_cells_are_exact_re_identified_k_of_n_or_not_recovered() -> None:
    cells = pd.DataFrame([_cell("e", "ok", exact=1.0), _cell("p", "partial", exact=0.25),
                          _cell("r", "ok"), _cell("n", "ok")])
    records = pd.concat([_records("e", [math.inf] * 4, [True] * 4),
                         _records("p", [math.inf] + [math.nan] * 3, [True, False, False, False], "partial"),
                         _records("r", [31.0, 12.0, 26.0, 9.0], [False] * 4),  # two at ≥ 25 dB: recognisable
                         _records("n", [11.0, 12.0, 10.0, 9.0], [False] * 4)], ignore_index=True)
    stated = with_states(cells, records)
    assert list(stated["state"]) == ["exact", "re-identified", "re-identified", "not recovered"]
    assert list(stated["leaked"]) == [4, 1, 2, 0]
    assert [state_text(row) for _, row in stated.iterrows()] == [
        "exact", "re-identified (1 of 4)", "re-identified (2 of 4)", "not recovered"]
    partial = group_stats(records[records["cell_id"] == "p"], stated[stated["cell_id"] == "p"])
    assert "1 of 4 re-identified" in headline(partial) and "1 of 4 re-identified" in triple(partial)


def test_a_recorded_re_identification_rank_decides_over_the_psnr_fallback() -> None:
    records = _records("r", [31.0, 12.0, 26.0, 9.0], [False] * 4).assign(reid_rank=[1, 1, 7, np.nan])
    assert list(leaked_images(records)) == [True, True, False, False]  # NaN rank: the PSNR fallback (9 dB: no)
    assert cell_state({**_cell("x", "ok"), "reid_top1": 0.5}) == "re-identified"  # a row alone: its reid_top1


def test_a_group_with_a_failed_seed_says_so_beside_its_numbers() -> None:
    cells = pd.DataFrame([_cell("a", "ok", exact=1.0), _cell("b", "failed", "budget")])
    records = pd.concat([_records("a", [math.inf] * 4, [True] * 4), _records("b", [math.nan] * 4, [False] * 4)])
    s = group_stats(records, cells)
    assert s["states"] == {"exact": 1, "failed (budget)": 1}
    assert headline(s).endswith("· 1 failed (budget)") and "1 failed (budget)" in triple(s)


def test_states_are_listed_in_one_order() -> None:
    assert STATES[:3] == ("exact", "re-identified", "not recovered") and len(set(STATES)) == len(STATES)


# --------------------------------------------------------------------------- displays


def test_progress_line_and_tiles_show_the_failure_state() -> None:
    line = cell_line("spear b=8", {**_cell("a", "failed", "budget"), "reason": "draw budget spent after 9 draws"})
    assert line.startswith("spear b=8: failed (budget): draw budget spent") and "0%" not in line
    assert tile_text(pd.Series({"status": "failed", "psnr": math.nan}), "failed (budget)") == "failed (budget)"


def test_the_attack_command_prints_a_failed_cells_state_not_zero_percent() -> None:
    from leakbench.cli import human_summary

    s = {**_cell("a", "failed", "budget"), "dataset": "embedded", "depth": 3, "width": 16, "layer": 1, "dp": "none",
         "client": "fedsgd", "seed": 0, "reason": "time budget spent", "matching": "hungarian-mse", "lpips_note": "",
         "psnr_mean": None, "psnr_median": None, "psnr_min": None, "ssim_mean": None, "lpips_mean": None}
    text = human_summary(s)
    assert "): failed (budget) — time budget spent" in text and "leakage unknown (failed (budget))" in text
    assert "exact 0%" not in text


# --------------------------------------------------------------------------- kinds through reply and storage


def _reply(**meta: object) -> tuple[dict, bytes]:
    buffer = io.BytesIO()
    np.savez(buffer)
    base = {"status": "failed", "reason": "x", "space": "image", "layer": None, "stats": {}, "seconds": 0.1,
            "hyperparameters": {}, "isolation": ""}
    return {**base, **meta}, buffer.getvalue()


class _Update:
    class model:  # the attributes the reply check reads
        input_shape = (3, 4, 4)

        @staticmethod
        def parameters() -> Iterator[torch.Tensor]:
            return iter([torch.zeros(8, 48)])


def test_the_reply_check_keeps_a_failure_kind_and_refuses_a_forged_one() -> None:
    for kind in ("verification", "budget", "not-applicable", "error"):
        out = check_reply(*_reply(failure=kind), _Update(), 1)
        assert out.reconstruction.status == "failed" and out.reconstruction.failure == kind
        assert "refused" not in out.reconstruction.reason
    for meta in ({"failure": "lucky"}, {"failure": 3}, {"failure": "budget", "status": "ok"}):
        out = check_reply(*_reply(**meta), _Update(), 1)
        assert "reply was refused" in out.reconstruction.reason and out.reconstruction.failure == "error"
    assert check_reply(*_reply(), _Update(), 1).reconstruction.failure is None  # a failure of no kind: unknown


def test_a_failure_kind_is_stored_and_read_back_and_old_attack_json_reads_as_unknown(tmp_path: Path) -> None:
    output = AttackOutput(Reconstruction.failed("ran out", failure="budget"), 1.0)
    for name, data in attack_output_files(output).items():
        (tmp_path / name).write_bytes(data)
    assert load_attack_output(tmp_path).reconstruction.failure == "budget"
    meta = json.loads((tmp_path / ATTACK_FILE).read_text())
    del meta["failure"]  # attack.json as stored before issue 43
    (tmp_path / ATTACK_FILE).write_text(json.dumps(meta))
    assert load_attack_output(tmp_path).reconstruction.failure is None
    answered = attack_output_files(AttackOutput(Reconstruction("ok", "image", images=torch.zeros(1, 3, 4, 4)), 1.0))
    assert "failure" not in json.loads(answered[ATTACK_FILE])  # answered cells' attack.json unchanged


def test_failure_follows_the_trust_columns() -> None:
    """Added after every column stored before issue 43 (only the re-identification columns follow it)."""
    assert SUMMARY_COLUMNS[-4:] == ("failure", "reid_top1", "reid_n", "reid_distance")
    assert SUMMARY_COLUMNS[:3] == ("space", "status", "reason")


def test_cells_stored_without_the_column_read_back_with_states(tmp_path: Path) -> None:
    run = tmp_path / "axes-dp"
    shutil.copytree(GOLDEN / "axes-dp", run)  # cells.parquet and records.parquet stored before issue 43
    assert "failure" not in pd.read_parquet(run / "cells.parquet")
    cells = read_run(run).cells
    assert cells["failure"].isna().all() and set(cells["state"]) <= set(STATES)
    failed = cells["status"] == "failed"
    assert failed.any() and (cells.loc[failed, "state"] == "failed").all()  # no kind stored: unknown
    assert (cells.loc[~failed, "state"] != "failed").all()


@dataclass(frozen=True)
class KindConfig:
    """No settings."""


class KindAttack(Attack):
    name, description, Config = "test-kind", "fails verifying its answer (test)", KindConfig

    def reconstruct(self, update, *, seed):
        return Reconstruction.failed("checked and rejected", failure="verification", stats={"draws": 3})


@pytest.mark.slow
def test_a_failure_kind_survives_the_sandboxed_worker_and_the_cell_records(tmp_path: Path) -> None:
    with scoped_attack(KindAttack):
        s = run_cell(CellSpec(attack="test-kind", dataset="embedded", batch_size=2, width=16, depth=3)).summary
    assert s["status"] == "failed" and s["failure"] == "verification" and s["reason"] == "checked and rejected"
    assert cell_state(s) == "failed (verification)"


# --------------------------------------------------------------------------- every failure path has a kind


def test_every_failed_reconstruction_in_the_package_names_its_kind() -> None:
    """Each `Reconstruction.failed(...)` call in leakbench (attacks, harness) passes `failure=`."""
    root = Path(leakbench.__file__).parent
    calls = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "failed" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "Reconstruction":
                calls.append((path.relative_to(root), node.lineno, {k.arg for k in node.keywords}))
    assert len(calls) >= 9
    assert [c for c in calls if "failure" not in c[2]] == []


def _spear_update(b: int = 4, width: int = 64):
    ds = load_dataset("embedded")
    model = build_fc(ds.image_shape, ds.num_classes, width=width, depth=3, seed=0)
    return fedsgd_update(model, sample_batch(ds, b, seed=0))


def test_spear_tells_budget_from_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    update = _spear_update()
    budget = ColumnState(draws=7, columns=torch.zeros(1, 4))
    monkeypatch.setattr(spear_attack, "search_columns", lambda *a: (budget, None))
    recon = create_attack("spear-paper", max_draws=1).reconstruct(update, seed=0)
    assert recon.status == "failed" and recon.failure == "budget" and "budget spent" in recon.reason
    assert "failure" not in recon.stats  # the kind is the reconstruction's, not one of the attack's counters
    wrong = Solution(torch.zeros(4, 4), violations=3, scale_ok=True)
    monkeypatch.setattr(spear_attack, "search_columns", lambda *a: (ColumnState(columns=torch.zeros(4, 4)), wrong))
    recon = create_attack("spear-paper", max_draws=1).reconstruct(update, seed=0)
    assert recon.failure == "verification" and recon.reason.startswith("verification failed (3 ReLU violations")


def test_spear_stop_kinds() -> None:
    from leakbench.attacks.spear.state import SearchState, stop_failure

    assert stop_failure(SearchState()) == "budget"
    assert stop_failure(SearchState(unverifiable="too weak")) == "verification"
    assert stop_failure(SearchState(undrawable="only 0 of 32 neurons stand above the noise")) == "not-applicable"


def test_cpa_rejects_non_finite_inputs_as_verification_and_harness_refusals_are_errors() -> None:
    update = _spear_update(b=2, width=16)
    cpa = create_attack("cpa")
    recon = cpa._answer(update.model, np.full((2, 3 * 32 * 32), np.nan), {}, 0.0)
    assert recon.failure == "verification" and "not finite" in recon.reason
    partial = AttackOutput(Reconstruction.partial("x", images=torch.zeros(2, 3, 4, 4)), 1.0)
    assert admitted(partial, 2).reconstruction.failure == "error"
