"""Plugins (issue 14): the example plugin installed with `pip --target` is found through its entry points
and runs through `leakbench run`; the manifest records its version; clashes and bad plugins are one line.

The example is copied and installed once per module (about 5 s); each check is a subprocess, since
entry points and registries are per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, REPO_ROOT, attack_plugin_source

from leakbench.harness.sandbox import FULL, level

# Every test here runs cells, sweeps, the CLI or attack workers (seconds each): `make test` only.
pytestmark = pytest.mark.slow

EXAMPLE = REPO_ROOT / "examples" / "leakbench-example-plugin"
CLASH = attack_plugin_source("Clash", "cpa", "takes a shipped attack's name")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed (dist-info with entry points) into a folder of its own."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(EXAMPLE, root / "src", ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(root / "site"), str(src)], cwd=root, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "site"


def _leakbench(cwd: Path, *args: str, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(str(p) for p in (*path, REPO_ROOT))}
    env.pop("LEAKBENCH_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "leakbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)


def _one_line_error(proc: subprocess.CompletedProcess[str], *mentions: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("leakbench: error:"), proc.stderr[-3000:]
    assert all(m in lines[0] for m in mentions), lines[0]


def test_entry_points_register_the_plugin(site: Path, tmp_path: Path) -> None:
    attacks = _leakbench(tmp_path, "list", "attacks", "--params", path=(site,))
    assert attacks.returncode == 0, attacks.stderr
    assert "mean-image" in attacks.stdout and "    shrink (float, default 0.0): blend" in attacks.stdout
    datasets = _leakbench(tmp_path, "list", "datasets", path=(site,))
    assert "example-stripes" in datasets.stdout, datasets.stderr


def test_installed_plugin_runs_a_suite_and_is_recorded(site: Path, tmp_path: Path) -> None:
    suite = shutil.copy(EXAMPLE / "mean-image.toml", tmp_path / "mean-image.toml")
    proc = _leakbench(tmp_path, "run", str(suite), "--out", "res", "--reports", "rep", path=(site,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "res" / "example-mean-image"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {p["module"]: (p["distribution"], p["version"]) for p in manifest["plugins"]} == {
        "leakbench_example_plugin.attack": ("leakbench-example-plugin", "0.1.0"),
        "leakbench_example_plugin.data": ("leakbench-example-plugin", "0.1.0")}
    cell = next(c for c in manifest["cells"] if c["attack"] == "mean-image" and c["batch_size"] == 1)
    summary = json.loads((run_dir / "cells" / cell["cell_id"] / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["exact_fraction"] == 1.0  # one image: the mean is the image
    assert (tmp_path / "rep" / "example-mean-image.md").is_file()
    board = _leakbench(tmp_path, "leaderboard", "--results", "res", "--reports", "rep", path=(site,))
    assert board.returncode == 0, board.stderr[-3000:]
    tables = (tmp_path / "rep" / "leaderboard.md").read_text().split("\n## ")
    embedded = [t for t in tables if t.startswith("Attacks per threat model: embedded")]
    assert embedded, tables[:2]
    rows = [line for line in embedded[0].splitlines() if line.startswith("|")]
    assert any("mean-image" in r for r in rows) and any("cpa" in r for r in rows), embedded[0]


def test_plugin_option_without_installing(tmp_path: Path) -> None:
    proc = _leakbench(tmp_path, "attack", "--plugin", "leakbench_example_plugin.attack", "--attack", "mean-image",
                      "--batch-size", "1", "--json", path=(EXAMPLE,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["exact_fraction"] == 1.0


def test_name_clash_with_a_shipped_attack_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "clash_plugin.py").write_text(CLASH)
    _one_line_error(_leakbench(tmp_path, "list", "attacks", "--plugin", "clash_plugin", path=(tmp_path,)),
                    "plugin 'clash_plugin'", "attack 'cpa' is already registered")


def test_config_must_be_a_dataclass(tmp_path: Path) -> None:
    plain = CLASH.replace("@dataclass(frozen=True)\n", "").replace('"cpa"', '"plain"')
    (tmp_path / "plain_config.py").write_text(plain)
    _one_line_error(_leakbench(tmp_path, "list", "attacks", "--plugin", "plain_config", path=(tmp_path,)),
                    "plugin 'plain_config'", "Config must be a dataclass")


@pytest.mark.parametrize("plugins, mention", [('"x"', "key 'plugins'"),
                                              ('["no_such_module_xyz"]', "no_such_module_xyz"),
                                              ('["not a module"]', "not a module path")])
def test_bad_suite_plugins_are_one_line(tmp_path: Path, plugins: str, mention: str) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "s"\nplugins = {plugins}\ndataset = "embedded"\nattacks = ["cpa"]\nbatch_sizes = [1]\n')
    proc = _leakbench(tmp_path, "run", str(suite), "--out", "res", "--reports", "rep")
    _one_line_error(proc, mention)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


STASH = '''\
import os

try:  # import-time code: in the harness process it could reach (and stash) the batch
    with open(os.environ["STASH_MARK"], "w") as f:
        f.write(str(os.getpid()))
except OSError:
    pass
''' + CLASH.replace('"cpa"', '"stash"')


@pytest.mark.skipif(level()[0] != FULL, reason="the proof needs the sandbox (it stops the worker's write)")
def test_a_plugins_import_time_code_never_runs_in_the_harness(tmp_path: Path) -> None:
    (tmp_path / "stash_plugin.py").write_text(STASH)
    mark = tmp_path / "mark"
    env_path = (tmp_path,)
    os.environ["STASH_MARK"] = str(mark)
    try:
        proc = _leakbench(tmp_path, "list", "attacks", "--params", "--plugin", "stash_plugin", path=env_path)
        assert proc.returncode == 0 and "stash" in proc.stdout and "x (int, default 0): nothing." in proc.stdout, \
            proc.stderr[-3000:]
        assert not mark.exists()  # imported only in the sandboxed worker, which cannot write there
        # control: imported in an ordinary process, the same code runs
        subprocess.run([sys.executable, "-c", "import stash_plugin"], cwd=tmp_path, check=True, timeout=CLI_TIMEOUT_S,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])})
        assert mark.exists()
    finally:
        del os.environ["STASH_MARK"]


def test_an_installed_defence_comes_in_through_its_entry_point(site: Path, tmp_path: Path) -> None:
    """The example's defence is found through the `leakbench.defences` entry point (no suite key) and its
    cells carry its column and label."""
    listed = _leakbench(tmp_path, "list", "defences", path=(site,))
    assert "example-quantise" in listed.stdout, listed.stderr
    (tmp_path / "suite.toml").write_text(
        'name = "quantised"\ndataset = "embedded"\nattacks = ["spear"]\nbatch_sizes = [1]\nwidth = 32\ndepth = 3\n'
        'defences = ["none", { name = "example-quantise", bits = 4 }]\n')
    proc = _leakbench(tmp_path, "run", "suite.toml", "--out", "res", "--reports", "rep", path=(site,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pandas as pd

    cells = pd.read_parquet(tmp_path / "res" / "quantised" / "cells.parquet")
    assert sorted(cells["defence"].fillna("none")) == ["example-quantise bits=4", "none"]
    assert sorted(cells["example_quantise_bits"].fillna(0)) == [0, 4]
    assert "· defence: example-quantise bits=4\n" in _board(site, tmp_path)


def _board(site: Path, folder: Path) -> str:
    """The leaderboard (markdown) of every run under `folder`/res, made with the example installed."""
    proc = _leakbench(folder, "leaderboard", "--results", "res", "--reports", "board", path=(site,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (folder / "board" / "leaderboard.md").read_text()


def test_an_installed_victim_is_attacked_through_leakbench_run(site: Path, tmp_path: Path) -> None:
    """The example's torchvision ResNet-18 (entry point group `leakbench.victims`) is built by the harness,
    travels pickled to the sandboxed attack worker, is attacked by IG and reaches the records."""
    suite = shutil.copy(EXAMPLE / "resnet18-ig.toml", tmp_path / "resnet18-ig.toml")
    proc = _leakbench(tmp_path, "run", str(suite), "--out", "res", "--reports", "rep", path=(site,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pandas as pd

    run_dir = tmp_path / "res" / "example-resnet18"
    records = pd.read_parquet(run_dir / "records.parquet")
    assert list(records["arch"]) == ["resnet18"] and list(records["status"]) == ["ok"]
    assert records["psnr"].notna().all()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert any(p.get("victims") == ["resnet18"] for p in manifest["plugins"]), manifest["plugins"]
    assert "resnet18" in _board(site, tmp_path)
    bad = tmp_path / "bad.toml"
    text = suite.read_text().replace('attacks = ["ig"]', 'attacks = ["spear"]')
    bad.write_text(text.replace("[hyperparameters.ig]\niterations = 20\n", ""))
    _one_line_error(_leakbench(tmp_path, "run", str(bad), "--out", "res2", "--reports", "rep2", path=(site,)),
                    "not a linear layer followed by ReLU")


def test_the_trust_model_reaches_the_records_the_leaderboard_and_the_report(site: Path, tmp_path: Path) -> None:
    """The example's attack (a plugin's) and defence (a plugin's) beside SPEAR, on public images (embedded) and
    on the evaluator's own (an imagefolder): the records say whose code each cell ran and whether its images are
    public; the leaderboard marks mean-image verified on the folder only, and its cells behind the plugin's
    defence are in no ranking, neither the leaderboard's nor the report's, only in the 'Not ranked' lists."""
    import numpy as np
    from PIL import Image

    for label, value in (("dark", 40), ("light", 200)):
        (tmp_path / "mine" / label).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((32, 32, 3), value + 10 * i, np.uint8)).save(tmp_path / "mine" / label / f"{i}.png")
    (tmp_path / "suite.toml").write_text(
        'name = "trust"\ndatasets = ["embedded", "imagefolder"]\ndata_root = "mine"\n'
        'attacks = ["mean-image", "spear"]\nbatch_sizes = [1]\nwidth = 32\ndepth = 3\n'
        'defences = ["none", { name = "example-quantise", bits = 4 }]\n')
    proc = _leakbench(tmp_path, "run", "suite.toml", "--out", "res", "--reports", "rep", path=(site,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pandas as pd

    cells = pd.read_parquet(tmp_path / "res" / "trust" / "cells.parquet")
    found = {(c.attack, c.dataset, c.defence if isinstance(c.defence, str) else "none"):
             (c.attack_origin, c.defence_origin, c.images) for c in cells.itertuples()}
    quantise = "example-quantise bits=4"
    assert found == {(a, d, q): ("plugin" if a == "mean-image" else "shipped", "plugin" if q != "none" else "shipped",
                                 "private" if d == "imagefolder" else "public")
                     for a in ("mean-image", "spear") for d in ("embedded", "imagefolder") for q in ("none", quantise)}
    board = _board(site, tmp_path)
    tables = {part.split("\n", 1)[0]: part for part in board.split("\n## ")}
    folder = f"imagefolder ({cells['data_fingerprint'].dropna().iloc[0][:8]})"  # its label: datasets.md#data-identity
    undefended = {d: tables[f"Attacks per threat model: {d} · FC-3 w32 · layer 1 · defence: none"]
                  for d in ("embedded", folder)}
    assert "| plugin: unverified (public images: the attack could embed them) |" in undefended["embedded"]
    assert "| plugin: verified (private images) |" in undefended[folder]
    for dataset in ("embedded", folder):
        defended = tables[f"Attacks per threat model: {dataset} · FC-3 w32 · layer 1 · defence: {quantise}"]
        assert "spear" in defended and "mean-image" not in defended
    unranked = next(t for title, t in tables.items() if title.startswith("Not ranked"))
    assert unranked.count(f"| {quantise} | mean-image |") == 2
    report = (tmp_path / "rep" / "trust.md").read_text()
    headline = report[report.index("## Headline"):report.index("## Not ranked")]
    assert f"| {folder} | {quantise} | spear |" in headline  # mean-image, 100 % exact there, is not named
    unranked = report[report.index("## Not ranked: a third-party defence with a third-party attack"):]
    assert unranked.count(f"| {quantise} | mean-image |") == 2
    per_setting = report[report.index("## Per-setting tables"):report.index("## Comparison grids")]
    defended = [t for t in per_setting.split("\n### ")[1:] if quantise in t.split("\n", 1)[0]]
    assert len(defended) == 2 and all("spear" in t and "mean-image" not in t for t in defended)
