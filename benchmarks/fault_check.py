"""Try leakbench as a careless user and a flaky machine would, and count what holds.

    PYTHONPATH=. python benchmarks/fault_check.py [--scratch DIR] [--only NAME[,NAME...]] [--jobs N] [--list]

Two kinds of case, each in a folder of its own under the scratch folder:

* **bad input** — one CLI call that must be refused: exit code 2, exactly one stderr line starting
  `leakbench: error:`, nothing on stdout, and the case folder unchanged afterwards (nothing written,
  nothing deleted; every case folder holds a user's file, and some put user files where leakbench
  is told to write).
* **fault** — a run that is interrupted, killed or damaged on disk and then resumed, or a command
  pointed at folders that hold a user's files: recovered when the resumed run's records equal an
  uninterrupted reference run's (timing aside), no cell is stored twice, no temporary folder is
  left, and every user file is intact.

Cases carry the number of the item of issue 12 they reproduce (0: a case that behaved before issue
12 and is kept as a regression case; 22: issue 22's bad inputs and faults, `--only item:22`). Prints a
line per case that misbehaves, then

    bad inputs N, clean N; faults K, recovered K; files outside the output folders 0; user files deleted 0

and exits 1 when any case misbehaves. `tests/test_fault_check.py` runs the issue-12 cases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_FILE = "user-notes.txt"
"""Every case folder holds this file of a user's; it must survive every case unchanged."""
OUTPUT_DIRS = ("out", "results", "reports", "ro")
"""Top-level names in a case folder that cases name as leakbench's output folders."""
CASE_FILES = (USER_FILE, "suite.toml", "a")
"""What a fault case folder holds besides outputs before leakbench runs."""
TIMEOUT_S = 300
"""A guard against a hung command, not a speed target: a resumed 64-cell run took over 120 s at load 5."""

# --------------------------------------------------------------------------- running the CLI


RUN_TAG = "LEAKBENCH_FAULT_RUN"
"""Set in the environment of a run this checker watches: every process of that run, attack workers
included, inherits it. Attack workers leave the run's session (`setsid`), so the session can't find them."""


def run_env(tag: str = "") -> dict[str, str]:
    """The environment of a run: this checkout first on the path, one BLAS thread, and `tag` if given."""
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **({RUN_TAG: tag} if tag else {})}


def cli(args: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`python -m leakbench ARGS` from `cwd` with this checkout first on the path (exit 124 on time-out)."""
    env = run_env()
    try:
        return subprocess.run([sys.executable, "-m", "leakbench", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, exc.stdout or "", f"timed out after {timeout:.0f} s")


def snapshot(folder: Path) -> dict[str, str]:
    """Relative path → content hash of every file below `folder` (folders as 'dir')."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = ("dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file()
                    else "other")
    return out


def refusal_problem(proc: subprocess.CompletedProcess[str]) -> str:
    """'' when `proc` is a clean refusal (exit 2, one `leakbench: error:` line, empty stdout), else why not."""
    lines = proc.stderr.strip().splitlines()
    if "Traceback" in proc.stderr:
        return f"traceback: {lines[-1] if lines else ''}"
    if proc.returncode != 2:
        return f"exit {proc.returncode} (want 2): {' | '.join(lines[-2:])}"
    if len(lines) != 1 or not lines[0].startswith("leakbench: error:"):
        return f"{len(lines)} stderr lines: {' | '.join(lines[:3])}"
    if proc.stdout.strip():
        return f"stdout not empty: {proc.stdout.strip()[:80]}"
    return ""


# --------------------------------------------------------------------------- cases


Setup = Callable[[Path], None]


@dataclass(frozen=True)
class BadInput:
    """A CLI call that must be refused; `{d}` in an argument is the case folder."""

    name: str
    item: int
    args: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    """Files to create in the case folder first (relative path → text)."""
    setup: Setup | None = None
    mention: str = ""
    """Text the error line must contain."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str = ""
    outside: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class Fault:
    """A scenario run by `run(case_folder, reference_run_folder)`."""

    name: str
    item: int
    run: Callable[[Path, Path], Outcome]


SUITE = """\
name = "{name}"
dataset = "embedded"
attacks = {attacks}
batch_sizes = {batch_sizes}
seeds = {seeds}
width = 200
depth = 6
grid_images = 2
{extra}"""


def suite(name: str = "mini", attacks: str = '["spear"]', batch_sizes: str = "[1, 2]", seeds: str = "[0]",
          extra: str = "") -> str:
    return SUITE.format(name=name, attacks=attacks, batch_sizes=batch_sizes, seeds=seeds, extra=extra)


def run_args(suite_file: str = "{d}/suite.toml", *extra: str) -> tuple[str, ...]:
    return ("run", suite_file, "--out", "{d}/results", "--reports", "{d}/reports", *extra)


def attack(*extra: str) -> tuple[str, ...]:
    return ("attack", "--attack", "spear", "--batch-size", "2", "--out", "{d}/out", *extra)


def _immutable(rel: str) -> Setup:
    """A folder that not even root can write into (chattr +i; released again by `release`)."""
    def setup(d: Path) -> None:
        (d / rel).mkdir(parents=True, exist_ok=True)
        subprocess.run(["chattr", "+i", str(d / rel)], check=True)
    return setup


def release(d: Path) -> None:
    """Undo `_immutable` for every folder below `d` so the scratch folder can be removed."""
    for path in [d, *d.rglob("*")]:
        if path.is_dir():
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)


def _big_suite(d: Path) -> None:
    seeds = ", ".join(str(i) for i in range(1000))
    (d / "suite.toml").write_text(suite(attacks='["spear", "cpa", "ig", "dlg"]', batch_sizes="[1, 2, 3, 4, 5, 6, 7, 8]",
                                        seeds=f"[{seeds}]", extra="layers = [1, 2, 3]\n"
                                        'dp = ["none", {sigma = 1e-4, clip = 1.0}, {sigma = 1e-3, clip = 1.0}, '
                                        '{sigma = 1e-2, clip = 1.0}, {sigma = 1e-1, clip = 1.0}]\n'))


def _tiny_annotations(d: Path) -> None:
    """A tiny-imagenet-200 folder whose val annotations name a file outside the data root."""
    from PIL import Image

    root = d / "data" / "tiny-imagenet-200"
    (root / "val" / "images").mkdir(parents=True)
    (root / "wnids.txt").write_text("n01443537\n")
    secret = d / "secret.JPEG"
    Image.new("RGB", (64, 64), (200, 10, 10)).save(secret, format="JPEG")
    lines = ["../../../secret.JPEG\tn01443537\t0\t0\t63\t63"] * 4
    (root / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")


ISSUE_12: list[BadInput] = [
    # 4: duplicate cells
    BadInput("suite_duplicate_attacks", 4, run_args(), {"suite.toml": suite(attacks='["spear", "spear"]')}),
    BadInput("suite_duplicate_batch_sizes", 4, run_args(), {"suite.toml": suite(batch_sizes="[2, 2]")}),
    # 5: nested options of spear-guided
    BadInput("guide_unknown", 5, ("attack", "--attack", "spear-guided", "--batch-size", "2", "--param", "guide=nope",
                                  "--out", "{d}/out")),
    BadInput("guide_options_not_table", 5, ("attack", "--attack", "spear-guided", "--batch-size", "2",
                                            "--param", "guide_options=5", "--out", "{d}/out")),
    BadInput("guide_options_unknown_key", 5, ("attack", "--attack", "spear-guided", "--batch-size", "2",
                                              "--param", 'guide_options={"bogus": 1}', "--out", "{d}/out")),
    BadInput("suite_guide_unknown", 5, run_args(), {"suite.toml": suite(
        attacks='["spear-guided"]', extra='[hyperparameters.spear-guided]\nguide = "nope"\n')}),
    BadInput("suite_guide_options_unknown_key", 5, run_args(), {"suite.toml": suite(
        attacks='["spear-guided"]', extra='[hyperparameters.spear-guided]\nguide_options = { bogus = 1 }\n')}),
    # 6: options that do nothing without the option they qualify
    *[BadInput(f"{flag[2:].replace('-', '_')}_alone", 6, attack(flag, value), mention=flag)
      for flag, value in (("--dp-q", "0.5"), ("--dp-clip", "2"), ("--dp-delta", "1e-6"), ("--dp-steps", "3"),
                          ("--fedavg-lr", "0.5"), ("--fedavg-minibatch", "1"))],
    # 7: sizes, seeds and outputs checked before the first cell
    BadInput("seed_negative", 7, attack("--seed", "-1"), mention="seed"),
    BadInput("seed_over_2_63", 7, attack("--seed", str(2 ** 63 + 5)), mention="seed"),
    BadInput("width_huge", 7, attack("--width", "100000000"), mention="width"),
    BadInput("attack_out_dot", 7, ("attack", "--attack", "spear", "--batch-size", "2", "--out", ".")),
    BadInput("attack_out_readonly", 7, ("attack", "--attack", "spear", "--batch-size", "2", "--out", "{d}/ro/out"),
             setup=_immutable("ro")),
    BadInput("run_out_readonly", 7, ("run", "{d}/suite.toml", "--out", "{d}/ro/results", "--reports", "{d}/reports"),
             {"suite.toml": suite()}, setup=_immutable("ro")),
    BadInput("run_reports_readonly", 7, ("run", "{d}/suite.toml", "--out", "{d}/results", "--reports", "{d}/ro/rep"),
             {"suite.toml": suite()}, setup=_immutable("ro")),
    # 8: suite and option corners
    BadInput("suite_dp_empty", 8, run_args(), {"suite.toml": suite(extra="dp = []\n")}, mention="dp"),
    BadInput("suite_fedavg_empty", 8, run_args(), {"suite.toml": suite(extra="fedavg = []\n")}, mention="fedavg"),
    BadInput("suite_layer_and_layers", 8, run_args(), {"suite.toml": suite(extra="layer = 1\nlayers = [1, 2]\n")},
             mention="layer"),
    BadInput("suite_400k_cells", 8, run_args(), setup=_big_suite),
    BadInput("lpips_weights_garbage", 8, attack("--lpips-weights", "{d}/garbage.pth"),
             {"garbage.pth": "not a torch file\n" * 50}),
    BadInput("run_reports_is_file", 8, ("run", "{d}/suite.toml", "--out", "{d}/results", "--reports", "{d}/rep.txt"),
             {"suite.toml": suite(), "rep.txt": "a user's file\n"}, mention="--reports"),
    BadInput("image_size_1", 8, attack("--image-size", "1"), mention="image"),
    # 10: annotation paths stay inside the data root
    BadInput("tinyimagenet_path_outside_root", 10, ("attack", "--attack", "spear", "--dataset", "tinyimagenet",
                                                    "--data-root", "{d}/data", "--batch-size", "2", "--out", "{d}/out"),
             setup=_tiny_annotations),
]

_BAD_SUITES = {
    "unknown_key": suite(extra='colour = "red"\n'),
    "missing_attacks": "name = \"x\"\ndataset = \"embedded\"\nbatch_sizes = [1]\n",
    "missing_batch_sizes": "name = \"x\"\ndataset = \"embedded\"\nattacks = [\"spear\"]\n",
    "missing_name": "dataset = \"embedded\"\nattacks = [\"spear\"]\nbatch_sizes = [1]\n",
    "width_string": suite().replace("width = 200", 'width = "wide"'),
    "depth_float": suite().replace("depth = 6", "depth = 6.5"),
    "layer_out_of_model": suite(extra="layers = [1, 6]\n"),
    "layer_zero": suite(extra="layers = [0]\n"),
    "dp_negative_sigma": suite(extra='dp = ["none", {sigma = -1.0, clip = 1.0}]\n'),
    "dp_missing_clip": suite(extra='dp = [{sigma = 1.0}]\n'),
    "dp_unknown_key": suite(extra='dp = [{sigma = 1.0, clip = 1.0, colour = 2}]\n'),
    "dp_string": suite(extra='dp = ["lots"]\n'),
    "dp_and_fedavg": suite(extra='dp = ["none"]\nfedavg = ["none"]\n'),
    "fedavg_bad_epochs": suite(extra='fedavg = [{epochs = 0, minibatch = 0, lr = 0.1}]\n'),
    "fedavg_unknown_key": suite(extra='fedavg = [{epochs = 1, minibatch = 0, lr = 0.1, momentum = 0.9}]\n'),
    "bad_name_slash": suite(name="a/b"),
    "bad_name_dotdot": suite(name=".."),
    "unknown_attack": suite(attacks='["nope"]'),
    "empty_attacks": suite(attacks="[]"),
    "attacks_not_strings": suite(attacks="[1, 2]"),
    "batch_sizes_empty": suite(batch_sizes="[]"),
    "batch_sizes_negative": suite(batch_sizes="[-1]"),
    "batch_sizes_zero": suite(batch_sizes="[0]"),
    "batch_over_width": suite(batch_sizes="[300]"),
    "seeds_string": suite(seeds='["a"]'),
    "hyper_unlisted_attack": suite(extra="[hyperparameters.cpa]\nmax_iter = 5\n"),
    "hyper_unknown_param": suite(extra="[hyperparameters.spear]\ncolour = 5\n"),
    "hyper_wrong_type": suite(extra='[hyperparameters.spear]\nmax_draws = "many"\n'),
    "hyper_layer": suite(extra="[hyperparameters.spear]\nlayer = 2\n"),
    "grid_images_zero": suite(extra="grid_images = 0\n").replace("grid_images = 2\n", "", 1),
    "grid_seed_negative": suite(extra="grid_seed = -1\n"),
    "arch_unknown": suite(extra='arch = "transformer"\n'),
    "dataset_and_datasets": suite(extra='datasets = ["digits"]\n'),
    "unknown_dataset": suite().replace('"embedded"', '"nope"'),
    "toml_syntax": "name = \n",
    "inversion_unknown_key": suite(extra="inversion = { steps = 5, colour = 1 }\n"),
    "inversion_not_table": suite(extra="inversion = 5\n"),
    "bool_width": suite().replace("width = 200", "width = true"),
}

_BAD_ATTACK_ARGS: dict[str, tuple[str, ...]] = {
    "no_attack": ("attack", "--batch-size", "2"),
    "no_batch_size": ("attack", "--attack", "spear"),
    "unknown_attack": ("attack", "--attack", "nope", "--batch-size", "2"),
    "unknown_dataset": ("attack", "--attack", "spear", "--dataset", "nope", "--batch-size", "2"),
    "batch_size_text": attack("--batch-size", "two"),
    "batch_size_zero": ("attack", "--attack", "spear", "--batch-size", "0", "--out", "{d}/out"),
    "batch_size_negative": ("attack", "--attack", "spear", "--batch-size", "-3", "--out", "{d}/out"),
    "batch_over_width": ("attack", "--attack", "spear", "--batch-size", "9", "--width", "8", "--out", "{d}/out"),
    "batch_over_input": ("attack", "--attack", "spear", "--dataset", "digits", "--batch-size", "65",
                         "--out", "{d}/out"),
    "width_zero": attack("--width", "0"),
    "width_negative": attack("--width", "-5"),
    "depth_one": attack("--depth", "1"),
    "depth_zero": attack("--depth", "0"),
    "layer_zero": attack("--layer", "0"),
    "layer_past_depth": attack("--layer", "6"),
    "layer_text": attack("--layer", "x"),
    "arch_unknown": attack("--arch", "mlp"),
    "conv_layer_1": attack("--arch", "conv", "--layer", "1"),
    "seed_text": attack("--seed", "abc"),
    "param_no_equals": attack("--param", "max_draws"),
    "param_empty_key": attack("--param", "=3"),
    "param_unknown_key": attack("--param", "colour=3"),
    "param_wrong_type": attack("--param", "max_draws=many"),
    "param_negative_budget": attack("--param", "max_draws=-1"),
    "param_layer_conflict": attack("--param", "layer=2", "--layer", "3"),
    "dp_sigma_negative": attack("--dp-sigma", "-1"),
    "dp_sigma_text": attack("--dp-sigma", "lots"),
    "dp_clip_zero": attack("--dp-sigma", "1", "--dp-clip", "0"),
    "dp_delta_one": attack("--dp-sigma", "1", "--dp-delta", "1"),
    "dp_q_two": attack("--dp-sigma", "1", "--dp-q", "2"),
    "dp_steps_zero": attack("--dp-sigma", "1", "--dp-steps", "0"),
    "dp_with_fedavg": attack("--dp-sigma", "1", "--fedavg-epochs", "1"),
    "fedavg_epochs_zero": attack("--fedavg-epochs", "0"),
    "fedavg_lr_negative": attack("--fedavg-epochs", "1", "--fedavg-lr", "-1"),
    "fedavg_minibatch_negative": attack("--fedavg-epochs", "1", "--fedavg-minibatch", "-1"),
    "invert_steps_negative": attack("--invert-steps", "-1"),
    "image_size_zero": attack("--image-size", "0"),
    "image_size_text": attack("--image-size", "big"),
    "lpips_weights_missing": attack("--lpips-weights", "{d}/none.pth"),
    "lpips_weights_folder": attack("--lpips-weights", "{d}"),
    "data_root_missing": ("attack", "--attack", "spear", "--dataset", "mnist", "--data-root", "{d}/none",
                          "--batch-size", "2", "--out", "{d}/out"),
    "tinyimagenet_no_root": ("attack", "--attack", "spear", "--dataset", "tinyimagenet", "--batch-size", "2",
                             "--out", "{d}/out"),
    "imagefolder_empty": ("attack", "--attack", "spear", "--dataset", "imagefolder", "--data-root", "{d}/imgs",
                          "--batch-size", "1", "--out", "{d}/out"),
    "imagefolder_bad_png": ("attack", "--attack", "spear", "--dataset", "imagefolder", "--data-root", "{d}/bad",
                            "--batch-size", "1", "--out", "{d}/out"),
    "cifar_no_root": ("attack", "--attack", "spear", "--dataset", "cifar10", "--data-root", "{d}/none",
                      "--batch-size", "2", "--out", "{d}/out"),
    "out_is_file": ("attack", "--attack", "spear", "--batch-size", "2", "--out", "{d}/" + USER_FILE),
    "unknown_option": attack("--colour", "red"),
    "cuda_without_cuda": attack("--param", "device=cuda"),
}

_FILES = {"imagefolder_empty": {"imgs/cls/.keep": ""}, "imagefolder_bad_png": {"bad/cls/x.png": "garbage" * 30}}

_OTHER: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "no_command": ((), {}),
    "unknown_command": (("frobnicate",), {}),
    "list_unknown": (("list", "spells"), {}),
    "run_missing_suite": (("run", "{d}/none.toml", "--out", "{d}/results", "--reports", "{d}/reports"), {}),
    "run_unknown_suite_name": (("run", "no-such-suite", "--out", "{d}/results", "--reports", "{d}/reports"), {}),
    "run_jobs_zero": (run_args("{d}/suite.toml", "--jobs", "0"), {"suite.toml": suite()}),
    "run_jobs_text": (run_args("{d}/suite.toml", "--jobs", "two"), {"suite.toml": suite()}),
    "run_executor_unknown": (run_args("{d}/suite.toml", "--executor", "slurm"), {"suite.toml": suite()}),
    "run_address_without_ray": (run_args("{d}/suite.toml", "--address", "x:1"), {"suite.toml": suite()}),
    "run_out_is_file": (("run", "{d}/suite.toml", "--out", "{d}/" + USER_FILE, "--reports", "{d}/reports"),
                        {"suite.toml": suite()}),
    "run_lpips_missing": (run_args("{d}/suite.toml", "--lpips-weights", "{d}/none.pth"), {"suite.toml": suite()}),
    "run_suite_not_utf8": (run_args(), {"suite.toml": "name = \"\udcff\"\n"}),
    "run_data_root_missing": (("run", "{d}/suite.toml", "--data-root", "{d}/none", "--out", "{d}/results",
                               "--reports", "{d}/reports"), {"suite.toml": suite().replace('"embedded"', '"mnist"')}),
    "report_missing_folder": (("report", "{d}/none", "--reports", "{d}/reports"), {}),
    "report_not_a_run": (("report", "{d}", "--reports", "{d}/reports"), {}),
    "report_bad_manifest": (("report", "{d}/run", "--reports", "{d}/reports"), {"run/manifest.json": "{not json"}),
    "report_manifest_no_cells": (("report", "{d}/run", "--reports", "{d}/reports"), {"run/manifest.json": "{}"}),
    "leaderboard_no_runs": (("leaderboard", "--results", "{d}/none", "--reports", "{d}/reports"), {}),
    "reproduce_unknown": (("reproduce", "nope", "--out", "{d}/results", "--reports", "{d}/reports"), {}),
    "reproduce_jobs_zero": (("reproduce", "spear-batch-size", "--jobs", "0", "--out", "{d}/results",
                             "--reports", "{d}/reports"), {}),
    "reproduce_needs_data": (("reproduce", "spear-batch-size", "--data-root", "{d}/none", "--out", "{d}/results",
                              "--reports", "{d}/reports"), {}),
}

REGRESSION: list[BadInput] = [
    *[BadInput(f"suite_{key}", 0, run_args(), {"suite.toml": text}) for key, text in _BAD_SUITES.items()],
    *[BadInput(f"attack_{key}", 0, args, _FILES.get(key, {})) for key, args in _BAD_ATTACK_ARGS.items()],
    *[BadInput(key, 0, args, files) for key, (args, files) in _OTHER.items()],
]

# --------------------------------------------------------------------------- issue 22: bad input


def _param(attack_name: str, *params: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """`attack --attack NAME --param P ...` on the default victim, writing to {d}/out."""
    pairs = [a for p in params for a in ("--param", p)]
    return ("attack", "--attack", attack_name, "--batch-size", "2", *pairs, *extra, "--out", "{d}/out")


def _hyper(attack_name: str, table: str, extra: str = "") -> dict[str, str]:
    """A suite of `attack_name` with `[hyperparameters.NAME]` holding `table`."""
    return {"suite.toml": suite(attacks=f'["{attack_name}"]',
                                extra=f"{extra}[hyperparameters.{attack_name}]\n{table}\n")}


def _foreign_tables(d: Path) -> None:
    """A results folder holding another tool's Parquet tables, named like a run's."""
    import pandas as pd

    (d / "results" / "theirs").mkdir(parents=True)
    for name in ("cells.parquet", "records.parquet"):
        pd.DataFrame({"loss": [0.1, 0.2], "epoch": [1, 2]}).to_parquet(d / "results" / "theirs" / name)


LONG = "x" * 300
"""A 300-character name: longer than file systems allow for one path component."""
PLUGINS = {"plug_exit.py": "import sys\nsys.exit(3)\n", "plug_interrupt.py": "raise KeyboardInterrupt\n",
           "plug_odd_name.py": ("from dataclasses import dataclass\n\n"
                                "from leakbench.attacks import Attack, register_attack\n\n\n"
                                "@dataclass(frozen=True)\nclass Config:\n"
                                "    \"\"\"x: nothing.\"\"\"\n\n    x: int = 0\n\n\n"
                                "@register_attack\nclass Odd(Attack):\n    name = 'odd name/../<b>'\n"
                                "    description = 'odd'\n    Config = Config\n\n"
                                "    def reconstruct(self, update, *, seed):\n        raise NotImplementedError\n")}
"""Plugin modules (in the case folder, the CLI's working directory) that misbehave at import."""

ISSUE_22: list[BadInput] = [  # item 22: issue 22's "Bad input" item (`--only item:22`)
    # every numeric hyperparameter has a declared range: NaN, ±inf, negative, zero, fractions outside [0, 1]
    BadInput("param_nan", 22, _param("spear", "max_seconds=NaN"), mention="max_seconds"),
    BadInput("param_inf", 22, _param("spear", "row_weight_power=Infinity"), mention="row_weight_power"),
    BadInput("param_negative_inf", 22, _param("ig", "step_size=-Infinity"), mention="step_size"),
    BadInput("param_negative_lr", 22, _param("cpa", "lr=-0.001"), mention="lr"),
    BadInput("param_negative_tolerance", 22, _param("cpa", "tol=-1e-4"), mention="tol"),
    BadInput("param_zero_history", 22, _param("dlg", "history_size=0"), mention="history_size"),
    BadInput("param_zero_iterations", 22, _param("ig", "iterations=0"), mention="iterations"),
    BadInput("param_fraction_above_one", 22, _param("spear-dl", "keep=1.5"), mention="keep"),
    BadInput("param_fraction_negative", 22, _param("spear-dl", "keep=-0.1"), mention="keep"),
    BadInput("param_nested_nan", 22, _param("spear-guided", 'guide_options={"tol": NaN}'), mention="tol"),
    BadInput("param_preset_inf", 22, _param("cpa-released", "temperature=Infinity"), mention="temperature"),
    # absurd sizes refused up front
    BadInput("param_iterations_1e12", 22, _param("ig", "iterations=1e12"), mention="iterations"),
    BadInput("param_iterations_10_12", 22, _param("ig", f"iterations={10**12}"), mention="iterations"),
    BadInput("param_cpa_iterations_10_12", 22, _param("cpa-released", f"iterations={10**12}"), mention="iterations"),
    BadInput("param_draws_past_int64", 22, _param("spear", f"max_draws={2**64}"), mention="max_draws"),
    BadInput("param_duplicate_key", 22, _param("spear", "max_draws=1", "max_draws=2"), mention="max_draws"),
    BadInput("suite_hyper_nan", 22, run_args(), _hyper("spear", "max_seconds = nan"), mention="max_seconds"),
    BadInput("suite_hyper_inf", 22, run_args(), _hyper("spear", "row_weight_power = inf"), mention="row_weight_power"),
    BadInput("suite_hyper_negative_lr", 22, run_args(), _hyper("cpa", "lr = -1.0"), mention="lr"),
    BadInput("suite_iterations_10_12", 22, run_args(), _hyper("ig", "iterations = 1_000_000_000_000"),
             mention="iterations"),
    BadInput("suite_fedavg_epochs_1e9", 22, run_args(),
             {"suite.toml": suite(extra="fedavg = [{epochs = 1000000000, minibatch = 0, lr = 0.1}]\n")},
             mention="epochs"),
    BadInput("suite_fedavg_lr_nan", 22, run_args(),
             {"suite.toml": suite(extra="fedavg = [{epochs = 1, minibatch = 0, lr = nan}]\n")}, mention="lr"),
    BadInput("suite_inversion_steps_10_12", 22, run_args(),
             {"suite.toml": suite(extra="layers = [2]\ninversion = { steps = 1_000_000_000_000 }\n")}, mention="steps"),
    BadInput("suite_inversion_lr_negative", 22, run_args(),
             {"suite.toml": suite(extra="layers = [2]\ninversion = { steps = 5, lr = -0.1 }\n")}, mention="lr"),
    BadInput("suite_dp_steps_past_int64", 22, run_args(),
             {"suite.toml": suite(extra="dp = [{sigma = 1.0, clip = 1.0, steps = 9223372036854775807}]\n")},
             mention="steps"),
    BadInput("suite_train_weight_decay_inf", 22, run_args(),
             {"suite.toml": suite(extra="train_epochs = [1]\ntrain = { weight_decay = inf }\n")},
             mention="weight_decay"),
    BadInput("suite_grid_images_1e9", 22, run_args(),
             {"suite.toml": suite().replace("grid_images = 2", "grid_images = 1000000000")}, mention="grid_images"),
    BadInput("suite_grid_seed_1e400", 22, run_args(), {"suite.toml": suite(extra="grid_seed = 1e400\n")},
             mention="grid_seed"),
    BadInput("attack_fedavg_epochs_1e9", 22, attack("--fedavg-epochs", "1000000000"), mention="epochs"),
    BadInput("attack_dp_steps_past_int64", 22, attack("--dp-sigma", "1", "--dp-steps", str(2**64)), mention="steps"),
    BadInput("attack_invert_steps_10_12", 22, attack("--layer", "2", "--invert-steps", str(10**12)), mention="steps"),
    # options that would do nothing
    BadInput("attack_invert_steps_layer_1", 22, attack("--invert-steps", "5"), mention="--invert-steps"),
    BadInput("attack_invert_steps_ig", 22, ("attack", "--attack", "ig", "--batch-size", "2", "--invert-steps", "5",
                                            "--out", "{d}/out"), mention="--invert-steps"),
    BadInput("suite_inversion_layer_1", 22, run_args(), {"suite.toml": suite(extra="inversion = { steps = 5 }\n")},
             mention="inversion"),
    BadInput("suite_noise_scale_without_noise", 22, run_args(), {"suite.toml": suite(extra='noise_scale = "max"\n')},
             mention="noise_scale"),
    # names and paths
    BadInput("attack_out_300_characters", 22, ("attack", "--attack", "spear", "--batch-size", "2", "--out",
                                               "{d}/out/" + LONG), mention="--out"),
    BadInput("run_out_300_characters", 22, ("run", "{d}/suite.toml", "--out", "{d}/results/" + LONG, "--reports",
                                            "{d}/reports"), {"suite.toml": suite()}, mention="--out"),
    BadInput("run_reports_300_characters", 22, ("run", "{d}/suite.toml", "--out", "{d}/results", "--reports",
                                                "{d}/reports/" + LONG), {"suite.toml": suite()}, mention="--reports"),
    BadInput("suite_name_300_characters", 22, run_args(), {"suite.toml": suite(name=LONG)}, mention="name"),
    BadInput("suite_named_leaderboard", 22, run_args(), {"suite.toml": suite(name="leaderboard")}, mention="reserved"),
    BadInput("suite_named_leaderboard_timing", 22, run_args(), {"suite.toml": suite(name="leaderboard-timing")},
             mention="reserved"),
    BadInput("leaderboard_over_user_pages", 22, ("leaderboard", "--results", "{d}/results", "--reports", "{d}/reports"),
             {"reports/leaderboard.md": "# my own leaderboard\n"}, mention="leaderboard.md"),
    BadInput("leaderboard_over_garbage_tables", 22, ("leaderboard", "--results", "{d}/results", "--reports",
                                                     "{d}/reports"),
             {"results/theirs/cells.parquet": "not parquet\n", "results/theirs/records.parquet": "not parquet\n"},
             mention="is not a readable Parquet table"),
    BadInput("leaderboard_over_foreign_tables", 22, ("leaderboard", "--results", "{d}/results", "--reports",
                                                     "{d}/reports"),
             setup=_foreign_tables, mention="not a leakbench table"),
    # plugins that misbehave at import
    BadInput("plugin_system_exit", 22, ("list", "attacks", "--plugin", "plug_exit"), PLUGINS, mention="SystemExit"),
    BadInput("plugin_keyboard_interrupt", 22, ("list", "attacks", "--plugin", "plug_interrupt"), PLUGINS,
             mention="KeyboardInterrupt"),
    BadInput("plugin_odd_attack_name", 22, ("list", "attacks", "--plugin", "plug_odd_name"), PLUGINS,
             mention="not allowed"),
    BadInput("suite_plugin_system_exit", 22, run_args(),
             {**PLUGINS, "suite.toml": 'plugins = ["plug_exit"]\n' + suite()},
             mention="SystemExit"),
]


def check_bad_input(case: BadInput, root: Path) -> Outcome:
    """Run one bad input in a fresh folder below `root` and judge it."""
    d = root / case.name
    d.mkdir(parents=True)
    (d / USER_FILE).write_text("a user's notes; leakbench must never touch this\n")
    for rel, text in case.files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text, errors="surrogateescape")
    if case.setup is not None:
        case.setup(d)
    before = snapshot(d)
    try:
        proc = cli([a.replace("{d}", str(d)) for a in case.args], cwd=d)
    finally:
        release(d)
    after = snapshot(d)
    problem = refusal_problem(proc)
    if not problem and case.mention and case.mention not in proc.stderr:
        problem = f"error line does not mention {case.mention!r}: {proc.stderr.strip()}"
    added = sorted(set(after) - set(before))
    deleted = sorted(k for k in before if k not in after or after[k] != before[k])
    if added:
        problem = problem or f"wrote {added[:3]}"
    if deleted:
        problem = problem or f"deleted or changed {deleted[:3]}"
    return Outcome(not problem, problem, outside=len(outside_outputs(added)), deleted=len(deleted))


def outside_outputs(paths: list[str]) -> list[str]:
    """The relative paths that lie outside every output folder of a case."""
    return [p for p in paths if Path(p).parts[0] not in OUTPUT_DIRS]


# --------------------------------------------------------------------------- faults

FAULT_SUITE = suite(name="faults", attacks='["spear", "cpa"]', batch_sizes="[1, 2]", seeds="[0, 1]")
SLOW_SUITE = suite(name="slow", attacks='["spear"]', batch_sizes="[1, 2, 3, 4, 5, 6, 7, 8]", seeds="[0, 1]",
                   extra='[hyperparameters.spear]\nmax_draws = 300000\n')
"""16 cells (about a second each past b = 1): the signal scenarios with --jobs 2 interrupt it after 3 to 5 cells,
so a run that ignored the signal would store about 10 more (it may store at most 2), and a run that ends before
the signal fails its case (nothing tested). It had 8 seeds (64 cells) until issue 44: 4 times the cost, and the
test suite made its reference twice."""


def reference_run(root: Path) -> Path:
    """An uninterrupted run of FAULT_SUITE; returns its run folder."""
    d = root / "_reference"
    d.mkdir(parents=True)
    (d / "suite.toml").write_text(FAULT_SUITE)
    proc = cli([a.replace("{d}", str(d)) for a in run_args()], cwd=d)
    if proc.returncode != 0:
        raise SystemExit(f"fault_check: the reference run failed: {proc.stderr.strip()[-500:]}")
    return d / "results" / "faults"


def _fresh(d: Path, reference: Path | None = None) -> None:
    """A case folder with the suite, a user's file and (optionally) a copy of the finished reference run."""
    d.mkdir(parents=True)
    (d / USER_FILE).write_text("a user's notes\n")
    (d / "suite.toml").write_text(FAULT_SUITE)
    if reference is not None:
        shutil.copytree(reference.parent.parent, d, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("suite.toml", USER_FILE))


def _judge_resume(d: Path, reference: Path, proc: subprocess.CompletedProcess[str], user_files: list[Path]) -> Outcome:
    """The rerun recovered: exit 0, no traceback, records equal the reference, no duplicate or temp left."""
    sys.path.insert(0, str(REPO))
    import pandas as pd

    from leakbench.records.runs import records_difference

    deleted = sum(1 for p in user_files if not p.is_file())
    run = d / "results" / reference.name
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        shown = proc.stderr[proc.stderr.index("Traceback"):] if "Traceback" in proc.stderr else proc.stderr
        return Outcome(False, f"rerun exit {proc.returncode}: {shown.strip()[-1500:]}", deleted=deleted)
    cells = pd.read_parquet(run / "cells.parquet")
    if len(cells) != cells["cell_id"].nunique():
        return Outcome(False, f"{len(cells) - cells['cell_id'].nunique()} duplicate cell rows", deleted=deleted)
    leftovers = [p.name for p in (run / "cells").iterdir() if p.name.startswith(".")]
    if leftovers:
        return Outcome(False, f"temporary folders left: {leftovers}", deleted=deleted)
    difference = records_difference(run, reference)
    if difference:
        return Outcome(False, f"records differ from the uninterrupted run: {difference}", deleted=deleted)
    damaged = [str(p.relative_to(run)) for cell in (run / "cells").iterdir() for p in cell.iterdir()
               if not _readable(p)]
    if damaged:
        return Outcome(False, f"damaged files left in place: {damaged[:3]}", deleted=deleted)
    return Outcome(deleted == 0, "" if not deleted else f"{deleted} user files deleted", deleted=deleted)


def _readable(path: Path) -> bool:
    """A cell file that parses as what its name says (JSON, Parquet, PNG)."""
    import numpy as np
    import pandas as pd
    from PIL import Image

    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".parquet":
            pd.read_parquet(path)
        elif path.suffix == ".png":
            with Image.open(path) as image:
                image.load()
        elif path.suffix == ".npz":
            with np.load(path) as data:
                [data[k] for k in data.files]
    except Exception:  # noqa: BLE001 — any failure to parse is damage
        return False
    return True


def _damage(action: Callable[[Path, list[Path]], None]) -> Callable[[Path, Path], Outcome]:
    """A finished run, one cell damaged by `action(cell_folder, all_cell_folders)`, then resumed."""
    def scenario(d: Path, reference: Path) -> Outcome:
        _fresh(d, reference)
        cells = sorted(p for p in (d / "results" / reference.name / "cells").iterdir())
        action(cells[0], cells)
        proc = cli([a.replace("{d}", str(d)) for a in run_args()], cwd=d)
        return _judge_resume(d, reference, proc, [d / USER_FILE])
    return scenario


def _truncate_file(name: str) -> Callable[[Path, list[Path]], None]:
    def truncate(cell: Path, _: list[Path]) -> None:
        data = (cell / name).read_bytes()
        (cell / name).write_bytes(data[: len(data) // 2])
    return truncate


_truncate = _truncate_file("records.parquet")


def _remove(name: str) -> Callable[[Path, list[Path]], None]:
    return lambda cell, _: (cell / name).unlink()


def _garble(name: str) -> Callable[[Path, list[Path]], None]:
    return lambda cell, _: (cell / name).write_text("{ this is not what leakbench wrote")


def _swap(cell: Path, cells: list[Path]) -> None:
    """Another cell's files copied over this one's."""
    for path in cells[1].iterdir():
        shutil.copy2(path, cell / path.name)


def _stale_temp(cell: Path, _: list[Path]) -> None:
    """A temporary folder as a killed run leaves it (a copy of a cell, and leakbench's marker)."""
    sys.path.insert(0, str(REPO))
    from leakbench.records.folders import TEMP_MARKER

    tmp = cell.parent / f".{cell.name}.tmp-abc123"
    shutil.copytree(cell, tmp)
    (tmp / TEMP_MARKER).write_text("")


def _damaged_consolidated(cell: Path, _: list[Path]) -> None:
    run = cell.parent.parent
    (run / "records.parquet").write_bytes(b"PAR1 truncated")


def _signal_and_resume(sig: int, jobs: int, suite_text: str, after: int) -> Callable[[Path, Path], Outcome]:
    """Interrupt a run once `after` cells are stored; resumed, it must equal an uninterrupted run.

    With `jobs` > 1 the interrupted run must also stop at once: no more than `jobs` cells may be
    stored after the signal (those already running), and it must exit within 20 s. SIGINT, SIGTERM
    and SIGHUP go to the run's process only (Ctrl-C in a script, `kill PID`, a scheduler); SIGKILL to
    its whole process group. Once it has exited, none of its processes (pool workers, attack workers,
    the resource tracker) may be left.
    """
    def scenario(d: Path, reference: Path) -> Outcome:
        _fresh(d)
        (d / "suite.toml").write_text(suite_text)
        name = "faults" if suite_text is FAULT_SUITE else "slow"
        ref = reference if name == "faults" else _slow_reference(d.parent)
        cells_dir = d / "results" / name / "cells"
        args = [a.replace("{d}", str(d)) for a in run_args("{d}/suite.toml", "--jobs", str(jobs))]
        tag = f"{d}:{time.monotonic_ns()}"
        first = subprocess.Popen([sys.executable, "-m", "leakbench", *args], cwd=d, env=run_env(tag),
                                 start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=_default_sigint)
        def count() -> int:
            return len([p for p in cells_dir.iterdir() if not p.name.startswith(".")]) if cells_dir.is_dir() else 0

        while first.poll() is None and count() < after:
            time.sleep(0.05)
        at_signal, start = count(), time.monotonic()
        if first.poll() is not None:
            return Outcome(False, f"the run ended (exit {first.returncode}) before {after} cells were stored: "
                                  f"nothing was interrupted")
        os.killpg(first.pid, sig) if sig == signal.SIGKILL else os.kill(first.pid, sig)
        try:
            first.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        stopped_s, after_signal = time.monotonic() - start, count() - at_signal
        left = _left_behind(tag) if sig != signal.SIGKILL else []
        if jobs > 1 and (after_signal > jobs or stopped_s > 20):
            return Outcome(False, f"kept running after {signal.Signals(sig).name}: {after_signal} more cells "
                                  f"stored, exit after {stopped_s:.1f} s")
        if left:
            return Outcome(False, f"{len(left)} processes left after {signal.Signals(sig).name}: {left[:5]}")
        err = first.stderr.read() if first.stderr else ""
        if "Traceback" in err:
            trace = err[err.index("Traceback"):].strip()
            return Outcome(False, f"traceback after {signal.Signals(sig).name}: {trace[-2000:]}")
        proc = cli(args, cwd=d)
        return _judge_resume(d, ref, proc, [d / USER_FILE])
    return scenario


def _killed_attack_worker(d: Path, reference: Path) -> Outcome:
    """The OOM killer ends an attack worker mid-cell (SIGKILL to one worker, not to the run): the cell
    is retried with a fresh worker, the run finishes by itself, and its records equal the reference."""
    _fresh(d)
    args = [a.replace("{d}", str(d)) for a in run_args("{d}/suite.toml")]
    tag = f"{d}:{time.monotonic_ns()}"
    run = subprocess.Popen([sys.executable, "-m", "leakbench", *args], cwd=d, env=run_env(tag), start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = None
    while run.poll() is None and killed is None:
        workers = [pid for pid, _ in _run_processes(tag) if _is_attack_worker(pid)]
        if workers:
            os.kill(workers[0], signal.SIGKILL)
            killed = workers[0]
        time.sleep(0.02)
    try:
        err = run.communicate(timeout=600)[1]
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        return Outcome(False, "the run did not finish after its attack worker was killed")
    if killed is None:
        return Outcome(False, "no attack worker was seen running")
    return _judge_resume(d, reference, subprocess.CompletedProcess(args, run.returncode, "", err), [d / USER_FILE])


def _is_attack_worker(pid: int) -> bool:
    """Whether `pid` is an attack worker: a child of the fork server (both run `fork_server`)."""
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return all(b"fork_server" in Path(f"/proc/{p}/cmdline").read_bytes() for p in (pid, parent))
    except (OSError, ValueError, IndexError):
        return False


def _left_behind(tag: str, grace_s: float = 5.0) -> list[str]:
    """Names of the processes of the run tagged `tag` (the interrupted one) still alive after `grace_s`
    seconds; they are then killed, so that no later case meets them."""
    deadline = time.monotonic() + grace_s
    while True:
        left = _run_processes(tag)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [name for _, name in left]


def _run_processes(tag: str) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes whose environment carries `RUN_TAG`=`tag`, from /proc."""
    mark, found = f"{RUN_TAG}={tag}".encode(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text, environ = stat.read_text(), (stat.parent / "environ").read_bytes()
        except OSError:
            continue
        name, state = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()[0]
        if mark in environ.split(b"\0") and state != "Z":
            found.append((int(stat.parent.name), name))
    return found


def _default_sigint() -> None:
    """In the interrupted run's process: Ctrl-C back to Python's default. A checker started in the
    background by a non-interactive shell (`cmd &`, as CI scripts do) has SIGINT ignored, and an ignored
    signal is inherited across exec, so the run would never see the interrupt this scenario sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _slow_reference(root: Path) -> Path:
    """An uninterrupted run of SLOW_SUITE (made once per scratch folder)."""
    d = root / "_reference_slow"
    run = d / "results" / "slow"
    if not (run / "cells.parquet").is_file():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (d / "suite.toml").write_text(SLOW_SUITE)
        proc = cli([a.replace("{d}", str(d)) for a in run_args()], cwd=d, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"fault_check: the slow reference run failed: {proc.stderr.strip()[-500:]}")
    return run


def _user_files_in_outputs(command: str) -> Callable[[Path, Path], Outcome]:
    """User files inside the folders leakbench writes to must survive (`attack --out`, `run`, `report`)."""
    def scenario(d: Path, reference: Path) -> Outcome:
        _fresh(d, reference if command == "report" else None)
        if command == "attack":
            keep = [d / "out" / "thesis.tex", d / "out" / "sub" / "data.csv"]
            args = ["attack", "--attack", "spear", "--batch-size", "2", "--out", f"{d}/out"]
        else:
            keep = [d / "reports" / "faults" / "my-figure.png", d / "reports" / "faults" / "grids" / "notes.txt"]
            args = (["report", f"{d}/results/faults", "--reports", f"{d}/reports"] if command == "report"
                    else [a.replace("{d}", str(d)) for a in run_args()])
        for path in keep:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("a user's file\n")
        before = {p: p.read_bytes() for p in keep}
        proc = cli(args, cwd=d)
        deleted = sum(1 for p in keep if not p.is_file() or p.read_bytes() != before[p])
        deleted += 0 if (d / USER_FILE).is_file() else 1
        if "Traceback" in proc.stderr:
            return Outcome(False, f"traceback: {proc.stderr.strip().splitlines()[-1]}", deleted=deleted)
        if proc.returncode == 2 and refusal_problem(proc):
            return Outcome(False, refusal_problem(proc), deleted=deleted)
        if proc.returncode not in (0, 2):
            return Outcome(False, f"exit {proc.returncode}", deleted=deleted)
        return Outcome(deleted == 0, f"{deleted} user files deleted or changed" if deleted else "", deleted=deleted)
    return scenario


def _report_name_escapes(d: Path, reference: Path) -> Outcome:
    """`report` on a run folder whose manifest names the suite './../../x/victim': refused, nothing written
    (today it writes a/x/victim.md beside a user's folder a/x/victim/, and replaces that folder)."""
    _fresh(d, reference)
    manifest = d / "results" / "faults" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "suite": "./../../x/victim"}))
    keep = d / "a" / "x" / "victim" / "thesis.tex"
    keep.parent.mkdir(parents=True)
    keep.write_text("a user's file\n")
    before = snapshot(d)
    proc = cli(["report", f"{d}/results/faults", "--reports", f"{d}/a/b/reports"], cwd=d)
    after = snapshot(d)
    added = sorted(set(after) - set(before))
    deleted = sorted(k for k in before if after.get(k) != before[k])
    problem = (refusal_problem(proc) or (f"wrote {added[:3]}" if added else "")
               or (f"deleted {deleted[:3]}" if deleted else ""))
    return Outcome(not problem, problem, outside=len(outside_outputs(added)), deleted=len(deleted))


def _report_of_damaged(d: Path, reference: Path) -> Outcome:
    """`report` on a run folder with a damaged cell: no traceback; the damaged cell is not reported as data."""
    _fresh(d, reference)
    cell = sorted((d / "results" / "faults" / "cells").iterdir())[0]
    _truncate(cell, [])
    proc = cli(["report", f"{d}/results/faults", "--reports", f"{d}/reports"], cwd=d)
    if "Traceback" in proc.stderr or proc.returncode not in (0, 2):
        return Outcome(False, f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    if proc.returncode == 2 and refusal_problem(proc):
        return Outcome(False, refusal_problem(proc))
    return Outcome(True)


# --------------------------------------------------------------------------- issue 22, faults


def _refused_untouched(d: Path, args: list[str]) -> Outcome:
    """`args` must be refused cleanly (one line, exit 2) and leave the case folder as it was (Python's
    bytecode caches of a plugin aside)."""
    before = {k: v for k, v in snapshot(d).items() if "__pycache__" not in k}
    proc = cli(args, cwd=d)
    after = {k: v for k, v in snapshot(d).items() if "__pycache__" not in k}
    added = sorted(set(after) - set(before))
    deleted = sorted(k for k in before if after.get(k) != before[k])
    problem = (refusal_problem(proc) or (f"wrote {added[:3]}" if added else "")
               or (f"deleted {deleted[:3]}" if deleted else ""))
    return Outcome(not problem, problem, outside=len(outside_outputs(added)), deleted=len(deleted))


def _same_name_suites(d: Path, reference: Path) -> Outcome:
    """Another suite named like a finished run's, into the same --out: refused, the stored run untouched
    (it used to run, rewrite the manifest, and leave the first suite's cells in no table)."""
    _fresh(d, reference)
    (d / "a").mkdir()
    (d / "a" / "other.toml").write_text(suite(name="faults", attacks='["spear"]', batch_sizes="[3]"))
    return _refused_untouched(d, [a.replace("{d}", str(d)) for a in run_args("{d}/a/other.toml")])


def _grid_selection_out_of_range(d: Path, reference: Path) -> Outcome:
    """`report` on a manifest whose grid selection names image 7 of a batch of 2: refused, nothing written."""
    _fresh(d, reference)
    manifest = d / "results" / "faults" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["cells"][-1]["grid_selection"] = [0, 7]
    manifest.write_text(json.dumps(data))
    return _refused_untouched(d, ["report", f"{d}/results/faults", "--reports", f"{d}/reports"])


def _users_temp_named_folder(linked: bool) -> Callable[[Path, Path], Outcome]:
    """A user's folder named like leakbench's temporary folders (`cells/.CELL.tmp-x`) in a finished run,
    its cells/ folder a link when `linked`: the resumed run leaves it alone (it used to delete it)."""
    def scenario(d: Path, reference: Path) -> Outcome:
        _fresh(d, reference)
        run = d / "results" / "faults"
        if linked:
            (run / "cells").rename(d / "results" / "elsewhere")
            (run / "cells").symlink_to(d / "results" / "elsewhere")
        cell = sorted((run / "cells").iterdir())[0]
        keep = [run / "cells" / f".{cell.name}.tmp-x" / "notes.txt", run / "cells" / ".x.tmp-y" / "records.parquet"]
        for path in keep:
            path.parent.mkdir()
            path.write_text("a user's file\n")
        proc = cli([a.replace("{d}", str(d)) for a in run_args()], cwd=d)
        return _judge_kept(proc, run, reference, [*keep, d / USER_FILE])
    return scenario


def _judge_kept(proc: subprocess.CompletedProcess[str], run: Path, reference: Path, keep: list[Path]) -> Outcome:
    """The command succeeded, every file in `keep` is intact, and `run` holds the reference's records."""
    sys.path.insert(0, str(REPO))
    from leakbench.records.runs import records_difference

    deleted = sum(1 for p in keep if not p.is_file())
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        return Outcome(False, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}", deleted=deleted)
    difference = records_difference(run, reference)
    if difference:
        return Outcome(False, f"records differ from the uninterrupted run: {difference}", deleted=deleted)
    return Outcome(deleted == 0, f"{deleted} user files deleted" if deleted else "", deleted=deleted)


def _killed_report(d: Path, reference: Path) -> Outcome:
    """`report` killed (SIGKILL) while it builds its staging folder; the next `report` must leave no staging
    folder behind (one used to stay for good) and write the report."""
    _fresh(d, reference)
    args = ["report", f"{d}/results/faults", "--reports", f"{d}/reports"]
    env = run_env()
    first = subprocess.Popen([sys.executable, "-m", "leakbench", *args], cwd=d, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    def staging() -> list[str]:
        return [p.name for p in (d / "reports").glob(".faults.*")] if (d / "reports").is_dir() else []

    while first.poll() is None and not staging():
        time.sleep(0.01)
    first.kill()
    first.wait()
    if not staging():
        return Outcome(False, "the report finished before it could be killed (no staging folder to recover from)")
    proc = cli(args, cwd=d)
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        return Outcome(False, f"report after the killed one: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    left = staging()
    return Outcome(not left and (d / "reports" / "faults.md").is_file(),
                   f"staging folders left: {left}" if left else "")


PLUGIN_ATTACK = """\
from leakbench.attacks import register_attack
from leakbench.attacks.spear import SpearAttack


@register_attack
class Mine(SpearAttack):
    name = "mine"
    description = "a user's SPEAR, whose code changes between two runs"
"""
PLUGIN_DATASET = """\
import numpy as np
import torch

from leakbench.datasets import DATASETS
from leakbench.datasets.base import ImageDataset

SEED = {seed}


def load(*, data_root=None, image_size=None):
    images = np.random.default_rng(SEED).random((40, 3, 16, 16), dtype=np.float32)
    return ImageDataset("noise", torch.from_numpy(images), torch.arange(40) % 4, 4)


DATASETS.register("noise", load, "random images; another install's differ (another SEED)")
"""


def _sweep(d: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`run` of the case's suite, and the run manifest's last sweep (cells run now, skipped)."""
    proc = cli([a.replace("{d}", str(d)) for a in run_args()], cwd=d)
    manifests = list((d / "results").glob("*/manifest.json"))
    return proc, json.loads(manifests[0].read_text()).get("last_sweep", {}) if manifests else {}


def _code_change(d: Path, reference: Path) -> Outcome:
    """A finished run of a plugin attack, resumed after the attack's code changed: its cells are recomputed
    and that is said (they used to be reused silently, under the new revision); resumed again: reused."""
    _fresh(d)
    (d / "a").mkdir()
    (d / "a" / "mine.py").write_text(PLUGIN_ATTACK)
    (d / "suite.toml").write_text(suite(name="mine", attacks='["mine"]', extra='plugins = ["a.mine"]\n'))
    runs = [_sweep(d)]
    (d / "a" / "mine.py").write_text(PLUGIN_ATTACK.replace("whose code changes", "whose code changed"))
    runs += [_sweep(d), _sweep(d)]
    for proc, _ in runs:
        if proc.returncode != 0 or "Traceback" in proc.stderr:
            return Outcome(False, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    said = [line for line in runs[1][0].stderr.splitlines() if "computed by other code" in line]
    counts = [sweep.get("cells_run") for _, sweep in runs]
    if counts != [2, 2, 0] or len(said) != 1:
        return Outcome(False, f"cells run per sweep {counts} (want [2, 2, 0]); {len(said)} lines say the code changed")
    return Outcome(True)


def _other_images(d: Path, reference: Path) -> Outcome:
    """A finished run resumed where its dataset serves other images for the same cell ids (another install:
    a plugin dataset with another seed here; a wheel without scikit-image in `embedded`): refused in one
    line, the run folder untouched (the cells used to be reused, PSNRs of other images under the same ids)."""
    _fresh(d)
    (d / "a").mkdir()
    (d / "a" / "noise.py").write_text(PLUGIN_DATASET.format(seed=0))
    (d / "suite.toml").write_text(suite(name="noise").replace('"embedded"', '"noise"')
                                  + 'dataset_plugins = ["a.noise"]\n')
    proc, _ = _sweep(d)
    if proc.returncode != 0:
        return Outcome(False, f"first run: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    (d / "a" / "noise.py").write_text(PLUGIN_DATASET.format(seed=1))
    shutil.rmtree(d / "a" / "__pycache__", ignore_errors=True)
    return _refused_untouched(d, [a.replace("{d}", str(d)) for a in run_args()])


DISK_LEFT = {"run": 300_000, "attack": 20_000, "report": 60_000}
"""Bytes left free on the small file system each command writes to: `run` stores a few cells first."""


def _disk_full(command: str) -> Callable[[Path, Path], Outcome]:
    """`command` (run, attack --out, report) writing to a 2 MB tmpfs that a user's file nearly fills: one
    `leakbench: error:` line (after `run`'s progress lines), exit 2, no traceback, nothing half-written
    (no temporary file or folder; every stored cell intact), the user's file untouched; `run`, once the
    user's file is gone, resumes to the uninterrupted run's records. Skipped where mount is not allowed."""
    def scenario(d: Path, reference: Path) -> Outcome:
        _fresh(d, reference if command == "report" else None)
        mount = d / {"run": "results", "attack": "out", "report": "reports"}[command]
        mount.mkdir(exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
        if mounted.returncode:
            return Outcome(True, "skipped: cannot mount a tmpfs here")
        try:
            filler = mount / "user-filler.bin"
            stat = os.statvfs(mount)
            filler.write_bytes(b"u" * (stat.f_bavail * stat.f_frsize - DISK_LEFT[command]))
            digest = hashlib.sha256(filler.read_bytes()).hexdigest()
            args = {"run": [a.replace("{d}", str(d)) for a in run_args()],
                    "attack": ["attack", "--attack", "spear", "--batch-size", "2", "--out", f"{d}/out/cell"],
                    "report": ["report", f"{d}/results/faults", "--reports", f"{d}/reports"]}[command]
            proc = cli(args, cwd=d)
            deleted = 0 if filler.is_file() and hashlib.sha256(filler.read_bytes()).hexdigest() == digest else 1
            problem = _disk_full_problem(proc, mount, filler)
            if problem or command != "run":
                return Outcome(not problem and not deleted, problem or ("the user's file changed" if deleted else ""),
                               deleted=deleted)
            filler.unlink()
            return _judge_resume(d, reference, cli(args, cwd=d), [d / USER_FILE])
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)
    return scenario


def _disk_full_problem(proc: subprocess.CompletedProcess[str], mount: Path, filler: Path) -> str:
    """'' when a command that ran out of space said so in one error line and left nothing half-written."""
    sys.path.insert(0, str(REPO))
    from leakbench.records.seal import damage

    lines = proc.stderr.strip().splitlines()
    if "Traceback" in proc.stderr:
        return f"traceback: {lines[-1] if lines else ''}"
    if proc.returncode != 2 or not lines or not lines[-1].startswith("leakbench: error:") or "space" not in lines[-1]:
        return f"exit {proc.returncode} (want 2 and an error line on space): {' | '.join(lines[-2:])}"
    errors = [line for line in lines if line.startswith("leakbench:")]
    if len(errors) != 1:
        return f"{len(errors)} leakbench lines: {errors[:3]}"
    hidden = [str(p.relative_to(mount)) for p in mount.rglob(".*")]
    if hidden:
        return f"temporary files left: {hidden[:3]}"
    cells = mount / "faults" / "cells"
    damaged = [p.name for p in cells.iterdir() if damage(p, p.name)] if cells.is_dir() else []
    if damaged:
        return f"damaged cells left: {damaged[:3]}"
    if mount.name != "results" and sorted(mount.iterdir()) != [filler]:
        return f"wrote {sorted(p.name for p in mount.iterdir() if p != filler)[:3]}"
    return ""


FAULTS: list[Fault] = [
    Fault("report_manifest_name_escapes", 2, _report_name_escapes),
    Fault("user_files_in_attack_out", 1, _user_files_in_outputs("attack")),
    Fault("user_files_in_run_reports", 1, _user_files_in_outputs("run")),
    Fault("user_files_in_report_reports", 1, _user_files_in_outputs("report")),
    Fault("cell_records_truncated", 3, _damage(_truncate)),
    Fault("cell_records_missing", 3, _damage(_remove("records.parquet"))),
    Fault("cell_summary_invalid", 3, _damage(_garble("summary.json"))),
    Fault("cell_manifest_missing", 3, _damage(_remove("manifest.json"))),
    Fault("cell_manifest_invalid", 3, _damage(_garble("manifest.json"))),
    Fault("cell_files_of_another_cell", 3, _damage(_swap)),
    Fault("cell_reconstruction_truncated", 3, _damage(_truncate_file("reconstruction.npz"))),
    Fault("report_of_damaged_cell", 3, _report_of_damaged),
    Fault("interrupt_jobs_2", 9, _signal_and_resume(signal.SIGINT, 2, SLOW_SUITE, after=3)),
    Fault("cell_summary_missing", 0, _damage(_remove("summary.json"))),
    Fault("stale_temporary_folder", 0, _damage(_stale_temp)),
    Fault("consolidated_records_damaged", 0, _damage(_damaged_consolidated)),
    Fault("interrupt_serial", 0, _signal_and_resume(signal.SIGINT, 1, FAULT_SUITE, after=2)),
    Fault("kill_serial", 0, _signal_and_resume(signal.SIGKILL, 1, FAULT_SUITE, after=3)),
    Fault("kill_jobs_2", 0, _signal_and_resume(signal.SIGKILL, 2, SLOW_SUITE, after=5)),
    # issue 22, faults
    Fault("sigterm_jobs_2", 22, _signal_and_resume(signal.SIGTERM, 2, SLOW_SUITE, after=3)),
    Fault("sighup_serial", 22, _signal_and_resume(signal.SIGHUP, 1, FAULT_SUITE, after=2)),
    Fault("same_name_suites", 22, _same_name_suites),
    Fault("users_temp_named_folder", 22, _users_temp_named_folder(linked=False)),
    Fault("users_temp_named_folder_linked_cells", 22, _users_temp_named_folder(linked=True)),
    Fault("report_killed_staging", 22, _killed_report),
    Fault("grid_selection_out_of_range", 22, _grid_selection_out_of_range),
    Fault("disk_full_run", 22, _disk_full("run")),
    Fault("disk_full_attack_out", 22, _disk_full("attack")),
    Fault("disk_full_report", 22, _disk_full("report")),
    Fault("resume_after_code_change", 22, _code_change),
    Fault("resume_on_other_images", 22, _other_images),
    Fault("killed_attack_worker", 22, _killed_attack_worker),
]

# --------------------------------------------------------------------------- main


def selected(only: str | None) -> tuple[list[BadInput], list[Fault]]:
    """The cases named in `only` (comma-separated names or 'item:N' / 'issue12'), else all."""
    bad, faults = [*ISSUE_12, *ISSUE_22, *REGRESSION], FAULTS
    if not only:
        return bad, faults
    keys = set(only.split(","))

    def keep(case: BadInput | Fault) -> bool:
        return case.name in keys or f"item:{case.item}" in keys or ("issue12" in keys and 0 < case.item <= 12)
    return [c for c in bad if keep(c)], [f for f in faults if keep(f)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, help="scratch folder (default: a new temporary folder, removed after)")
    parser.add_argument("--only",
                        help="comma-separated case names, item:N (item:22: issue 22's bad inputs), or issue12")
    parser.add_argument("--jobs", type=int, default=4, help="bad-input cases run side by side (default 4)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    args = parser.parse_args(argv)
    bad, faults = selected(args.only)
    if args.list:
        for case in [*bad, *faults]:
            print(f"{'bad input' if isinstance(case, BadInput) else 'fault':9s} item {case.item:2d}  {case.name}")
        return 0
    root = args.scratch or Path(tempfile.mkdtemp(prefix="leakbench-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        return report(bad, faults, root, args.jobs)
    finally:
        if args.scratch is None:
            release(root)
            shutil.rmtree(root, ignore_errors=True)


def run_fault(fault: Fault, d: Path, reference: Path) -> Outcome:
    """Run a fault scenario in folder `d`; files it leaves outside the output folders count against it."""
    outcome = fault.run(d, reference)
    stray = [p for p in outside_outputs(list(snapshot(d))) if Path(p).parts[0] not in CASE_FILES]
    if stray:
        return Outcome(False, outcome.detail or f"wrote outside the output folders: {stray[:3]}",
                       outside=len(stray), deleted=outcome.deleted)
    return outcome


def report(bad: list[BadInput], faults: list[Fault], root: Path, jobs: int) -> int:
    """Run the cases, print every misbehaving one and the totals; 1 if any misbehaved."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        bad_out = list(pool.map(lambda c: check_bad_input(c, root / "bad"), bad))
    reference = reference_run(root) if faults else None
    fault_out = [run_fault(f, root / "faults" / f.name, reference) for f in faults]
    for case, outcome in [*zip(bad, bad_out, strict=True), *zip(faults, fault_out, strict=True)]:
        if not outcome.ok:
            print(f"FAIL {case.name} (item {case.item}): {outcome.detail}", flush=True)
        elif outcome.detail.startswith("skipped"):
            print(f"SKIP {case.name} (item {case.item}): {outcome.detail}", flush=True)
    outcomes = [*bad_out, *fault_out]
    print(f"bad inputs {len(bad)}, clean {sum(o.ok for o in bad_out)}; faults {len(faults)}, "
          f"recovered {sum(o.ok for o in fault_out)}; files outside the output folders "
          f"{sum(o.outside for o in outcomes)}; user files deleted {sum(o.deleted for o in outcomes)}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
