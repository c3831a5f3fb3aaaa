"""Issue 12, items 5–8 and 10: bad input is refused up front — one `leakbench: error:` line on stderr,
exit 2, empty stdout, nothing written (the scratch folder's file list is unchanged) — and user strings
or annotation files cannot turn into Markdown markup or reads outside the data root.

CLI cases run the real command line in subprocesses, all started at once (module fixture `results`);
the rest call the library directly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import run_cli
from PIL import Image

from leakbench.core.errors import ConfigError, DatasetError

SUITE = """\
name = "bad"
dataset = "embedded"
attacks = ["{attack}"]
batch_sizes = [1]
"""

INF_MANIFEST = ('{"suite": "bad", "grid_seed": 1e400, "grid_images": 2, '
                '"cells": [{"cell_id": "0123456789abcdef", "batch_size": 2, "grid_selection": [0, 1]}]}')
"""A run manifest whose grid seed parses as ∞ (issue 41: `report` and `rescore` gave an OverflowError traceback)."""
GUIDED = SUITE.format(attack="spear-guided") + "[hyperparameters.spear-guided]\n"
BIG_SEED = 2**63


@dataclass
class Case:
    args: list[str]
    mention: str  # what the one error line must contain
    files: dict[str, str | bytes] = field(default_factory=dict)  # scratch files made before the run
    immutable: str | None = None  # a scratch folder made immutable (chattr +i) before the run


def _attack(*args: str, mention: str, **kw) -> Case:
    return Case(["attack", "--batch-size", "2", *args], mention, **kw)


def _suite(text: str, mention: str, *extra: str, **kw) -> Case:
    files = {"suite.toml": text, **kw.pop("files", {})}
    return Case(["run", "suite.toml", "--out", "results", "--reports", "reports", *extra], mention, files=files, **kw)


def _tiny(annotation: str) -> dict[str, str | bytes]:
    """A tiny-imagenet-200 folder whose one annotation names `annotation`, and a real image outside it."""
    return {"data/tiny-imagenet-200/wnids.txt": "n01\n",
            "data/tiny-imagenet-200/val/val_annotations.txt": f"{annotation}\tn01\t0\t0\t8\t8\n",
            "data/tiny-imagenet-200/val/images/.keep": "", "secret.png": _png()}


def _png() -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


CASES: dict[str, Case] = {
    # item 5: spear-guided's nested options, CLI and suite
    "guide_nope": _attack("--attack", "spear-guided", "--param", "guide=nope", mention="nope"),
    "guide_options_5": _attack("--attack", "spear-guided", "--param", "guide_options=5", mention="guide_options"),
    "guide_options_bogus": _attack("--attack", "spear-guided", "--param", 'guide_options={"bogus": 1}',
                                   mention="bogus"),
    "suite_guide_nope": _suite(GUIDED + 'guide = "nope"\n', "nope"),
    "suite_guide_options_5": _suite(GUIDED + "guide_options = 5\n", "guide_options"),
    "suite_guide_options_bogus": _suite(GUIDED + "guide_options = {bogus = 1}\n", "bogus"),
    # item 6: DP / FedAvg sub-options without the option that enables them
    **{f"without_sigma_{flag}": _attack("--attack", "spear", f"--dp-{flag}", value, mention=f"--dp-{flag}")
       for flag, value in (("q", "0.5"), ("clip", "2"), ("delta", "1e-6"), ("steps", "3"))},
    **{f"without_epochs_{flag}": _attack("--attack", "spear", f"--fedavg-{flag}", value, mention=f"--fedavg-{flag}")
       for flag, value in (("lr", "0.5"), ("minibatch", "1"))},
    # item 7: bounds, the current folder, unwritable outputs
    "seed_negative": _attack("--attack", "spear", "--seed", "-1", mention="--seed"),
    "seed_2_63": _attack("--attack", "spear", "--seed", str(BIG_SEED), mention="--seed"),
    "seed_huge": _attack("--attack", "spear", "--seed", str(10**20), mention="--seed"),
    "width_huge": _attack("--attack", "spear", "--width", "100000000", mention="--width"),
    "depth_huge": _attack("--attack", "spear", "--depth", "65", mention="--depth"),
    "out_dot": _attack("--attack", "spear", "--out", ".", mention="--out", files={"precious.txt": "keep me\n"}),
    "out_under_a_file": _attack("--attack", "spear", "--out", "afile/out", mention="--out", files={"afile": "x\n"}),
    "out_read_only": _attack("--attack", "spear", "--out", "ro/out", mention="not writable",
                             files={"ro/.keep": ""}, immutable="ro"),
    "run_reports_read_only": _suite(SUITE.format(attack="spear"), "--reports", "--reports", "ro/reports",
                                    files={"ro/.keep": ""}, immutable="ro"),
    "run_out_under_a_file": _suite(SUITE.format(attack="spear"), "--out", "--out", "afile/results",
                                   files={"afile": "x\n"}),
    "run_reports_in_proc": _suite(SUITE.format(attack="spear"), "--reports", "--reports", "/proc/leakbench-no"),
    "suite_seed_2_63": _suite(SUITE.format(attack="spear") + f"seeds = [0, {BIG_SEED}]\n", "seeds[1]"),
    "suite_grid_seed_2_63": _suite(SUITE.format(attack="spear") + f"grid_seed = {BIG_SEED}\n", "grid_seed"),
    "suite_width_huge": _suite(SUITE.format(attack="spear") + "width = 100000000\n", "width"),
    "suite_depth_huge": _suite(SUITE.format(attack="spear") + "depth = 65\n", "depth"),
    # item 8: empty axes, layer with layers, huge suites, garbage weights, option names, tiny images
    "suite_dp_empty": _suite(SUITE.format(attack="spear") + "dp = []\n", "'dp'"),
    "suite_fedavg_empty": _suite(SUITE.format(attack="spear") + "fedavg = []\n", "'fedavg'"),
    "suite_layer_and_layers": _suite(SUITE.format(attack="spear") + "layer = 1\nlayers = [1, 2]\n", "'layers'"),
    "suite_400k_cells": _suite(SUITE.format(attack="spear").replace("[1]", "[1, 2, 3, 4]")
                               + f"seeds = {list(range(100_000))}\n", "400,000"),
    "lpips_garbage_attack": _attack("--attack", "spear", "--lpips-weights", "garbage.pth", mention="garbage.pth",
                                    files={"garbage.pth": bytes(range(256)) * 4}),
    "lpips_garbage_run": _suite(SUITE.format(attack="spear"), "garbage.pth", "--lpips-weights", "garbage.pth",
                                files={"garbage.pth": bytes(range(256)) * 4}),
    "run_reports_is_a_file": _suite(SUITE.format(attack="spear"), "--reports", "--reports", "afile",
                                    files={"afile": "x\n"}),
    "image_size_1": _attack("--attack", "spear", "--image-size", "1", mention="image size"),
    "image_size_4": _attack("--attack", "spear", "--batch-size", "1", "--image-size", "4", mention="image size"),
    "suite_image_size_1": _suite(SUITE.format(attack="spear") + "image_size = 1\n", "image size"),
    # item 10: annotation paths confined to the data root
    # issue 41, leftovers: a stored manifest's 1e400 (read as ∞) and a noise σ past float32
    "manifest_grid_seed_inf_report": Case(["report", "results/bad", "--reports", "reports"], "grid_seed",
                                          files={"results/bad/manifest.json": INF_MANIFEST}),
    "manifest_grid_seed_inf_rescore": Case(["rescore", "results/bad", "--reports", "reports"], "grid_seed",
                                           files={"results/bad/manifest.json": INF_MANIFEST}),
    "suite_noise_1e300": _suite(SUITE.format(attack="spear") + "noise = [1e300]\n", "noise[0]"),
    "tiny_dotdot": _attack("--attack", "spear", "--batch-size", "1", "--dataset", "tinyimagenet", "--data-root",
                           "data", mention="../../../../secret.png", files=_tiny("../../../../secret.png")),
}

ITEM = {"5": [k for k in CASES if "guide" in k],
        "6": [k for k in CASES if k.startswith("without_")],
        "7": ["seed_negative", "seed_2_63", "seed_huge", "width_huge", "depth_huge", "out_dot", "out_under_a_file",
              "out_read_only", "run_reports_read_only", "run_out_under_a_file", "run_reports_in_proc",
              "suite_seed_2_63", "suite_grid_seed_2_63", "suite_width_huge", "suite_depth_huge"],
        "8": ["suite_dp_empty", "suite_fedavg_empty", "suite_layer_and_layers", "suite_400k_cells",
              "lpips_garbage_attack", "lpips_garbage_run", "run_reports_is_a_file", "image_size_1", "image_size_4",
              "suite_image_size_1"],
        "10": ["tiny_dotdot"],
        "41": ["manifest_grid_seed_inf_report", "manifest_grid_seed_inf_rescore", "suite_noise_1e300"]}
assert sorted(c for cases in ITEM.values() for c in cases) == sorted(CASES)


def _run_all(jobs: dict[str, tuple[list[str], Path]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Like conftest's `run_cli_many`, but a run that hangs past the timeout is recorded as such for
    its own test instead of failing every test of the module."""
    from concurrent.futures import ThreadPoolExecutor

    def one(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        try:
            return run_cli(args, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, -9, "", f"timed out after {exc.timeout} s")

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(one, args, cwd) for key, (args, cwd) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _chattr(flag: str, path: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("bad_inputs")
    prepared, immutable, skipped = {}, [], {}
    for key, case in CASES.items():
        cwd = root / key
        cwd.mkdir()
        for name, content in case.files.items():
            path = cwd / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
        if case.immutable is not None:
            if not _chattr("+i", cwd / case.immutable):
                skipped[key] = "chattr +i is not available here"
                continue
            immutable.append(cwd / case.immutable)
        if key == "run_reports_in_proc" and not Path("/proc").is_dir():
            skipped[key] = "no /proc"
            continue
        prepared[key] = (case.args, cwd)
    before = {key: _tree(cwd) for key, (_, cwd) in prepared.items()}
    start = time.perf_counter()
    try:
        done = _run_all(prepared)
    finally:
        for path in immutable:
            _chattr("-i", path)
    wall = time.perf_counter() - start
    yield {key: (prepared[key][1], before[key], proc) for key, proc in done.items()}, skipped, wall
    shutil.rmtree(root, ignore_errors=True)


def _assert_refused(results, key: str) -> str:
    done, skipped, _ = results
    if key in skipped:
        pytest.skip(skipped[key])
    cwd, before, proc = done[key]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:], proc.stdout[-1000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("leakbench: error:"), lines[0]
    assert CASES[key].mention in lines[0], lines[0]
    assert proc.stdout == ""
    assert _tree(cwd) == before  # nothing written, nothing deleted
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["5"])
def test_item5_spear_guided_nested_options_refused(results, key: str) -> None:
    _assert_refused(results, key)


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["6"])
def test_item6_sub_options_without_their_main_option_refused(results, key: str) -> None:
    line = _assert_refused(results, key)
    assert ("--dp-sigma" if "sigma" in key else "--fedavg-epochs") in line


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["7"])
def test_item7_bounds_and_unwritable_outputs_refused(results, key: str) -> None:
    _assert_refused(results, key)


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["8"])
def test_item8_suite_and_option_errors_refused(results, key: str) -> None:
    _assert_refused(results, key)


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["10"])
def test_item10_annotation_path_outside_data_root_refused(results, key: str) -> None:
    _assert_refused(results, key)


@pytest.mark.slow
@pytest.mark.parametrize("key", ITEM["41"])
def test_issue41_manifest_numbers_and_noise_bounds_refused(results, key: str) -> None:
    _assert_refused(results, key)


@pytest.mark.slow
def test_item8_reports_file_names_the_right_option(results) -> None:
    line = _assert_refused(results, "run_reports_is_a_file")
    assert "--out" not in line


# --------------------------------------------------------------------------- in-process


def test_item8_huge_suite_refused_quickly(tmp_path: Path) -> None:
    from leakbench.harness.suite import load_suite

    path = tmp_path / "huge.toml"
    path.write_text(SUITE.format(attack="spear").replace("[1]", "[1, 2, 3, 4]") + f"seeds = {list(range(100_000))}\n")
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="400,000 cells"):
        load_suite(path)
    assert time.perf_counter() - start < 5.0


def test_item8_check_cells_builds_one_update_per_data_and_victim(tmp_path: Path, monkeypatch) -> None:
    """Seeds and DP levels do not change whether a cell can run: 800 cells, 2 batch sizes → 2 updates."""
    import leakbench.fl as fl
    from leakbench.harness.run import check_cells
    from leakbench.harness.suite import load_suite

    path = tmp_path / "wide.toml"
    path.write_text(SUITE.format(attack="spear").replace("[1]", "[1, 2]") + f"seeds = {list(range(200))}\n"
                    + 'dp = ["none", {sigma = 0.1, clip = 1.0}]\n')
    cells = load_suite(path).cells
    assert len(cells) == 800
    calls = []
    real = fl.fedsgd_update
    monkeypatch.setattr(fl, "fedsgd_update", lambda *a, **k: calls.append(1) or real(*a, **k))
    start = time.perf_counter()
    check_cells(cells)
    assert len(calls) == 2
    assert time.perf_counter() - start < 30.0


def test_item7_parameter_count_bounded_before_allocation(monkeypatch) -> None:
    import leakbench.models.base as base
    from leakbench.models import build_model

    monkeypatch.setattr(base, "MAX_PARAMETERS", 10_000)
    with pytest.raises(ConfigError, match="parameters"):
        build_model("fc", (3, 32, 32), 10, width=64, depth=3)
    with pytest.raises(ConfigError, match="parameters"):
        build_model("conv", (3, 32, 32), 10, width=64, depth=3)
    assert build_model("fc", (1, 8, 8), 10, width=8, depth=3) is not None


@pytest.mark.parametrize("hp,message", [({"guide": "nope"}, "nope"), ({"guide_options": 5}, "guide_options"),
                                        ({"guide_options": {"bogus": 1}}, "bogus"),
                                        ({"guide_options": {"max_iterations": "many"}}, "max_iterations"),
                                        ({"guide_options": {"layer": 2}}, "layer")])
def test_item5_guided_config_checks_nested_options(hp: dict, message: str) -> None:
    from leakbench.attacks import create_attack

    with pytest.raises(ConfigError, match=message):
        create_attack("spear-guided", **hp)


def test_item5_guided_config_accepts_good_options() -> None:
    from leakbench.attacks import create_attack

    attack = create_attack("spear-guided", guide="dlg", guide_options={"iterations": 1})
    assert attack.config.guide_options == {"iterations": 1}


@pytest.mark.parametrize("name", ["../../../../secret.png", "ABSOLUTE", "link.png", "sub/../../../../../secret.png"])
def test_item10_tinyimagenet_annotation_paths_confined(tmp_path: Path, name: str) -> None:
    """Each name reaches tmp_path/secret.png, a readable image outside the data root tmp_path/data."""
    from leakbench.datasets import load_dataset

    name = str(tmp_path / "secret.png") if name == "ABSOLUTE" else name
    for rel, content in _tiny(name).items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    (tmp_path / "data" / "tiny-imagenet-200" / "val" / "images" / "link.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(DatasetError, match=r"outside|not a file inside"):
        load_dataset("tinyimagenet", data_root=tmp_path / "data", image_size=8)


def test_item10_tinyimagenet_inside_paths_still_load(tmp_path: Path) -> None:
    from leakbench.datasets import load_dataset

    for rel, content in _tiny("sub/val_0.png").items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    (tmp_path / "data" / "tiny-imagenet-200" / "val" / "images" / "sub").mkdir()
    (tmp_path / "data" / "tiny-imagenet-200" / "val" / "images" / "sub" / "val_0.png").write_bytes(_png())
    assert len(load_dataset("tinyimagenet", data_root=tmp_path / "data", image_size=16)) == 1


HOSTILE = "evil | <script>alert(1)</script> *bold* _it_ `code` [link](http://x) ~~s~~ &amp;\n# heading"


def test_item10_markdown_escapes_user_strings() -> None:
    from leakbench.reporting.render import Images, Table, markdown

    text = markdown(f"suite {HOSTILE}", [HOSTILE, "- not a list", "1. not a list"],
                    [Table(HOSTILE, ["attack", "status"], [["spear", f"failed: {HOSTILE}"]], [HOSTILE]),
                     Images("grids", [("s/grids/a b.png", HOSTILE)])])
    for line in text.splitlines():  # no markup character left unescaped (image lines: in the caption only)
        assert not re.search(r"(?<!\\)[<>*_`\[\]~&]", line.split("](")[0][2:] if line.startswith("![") else line), line
    assert "\\<script\\>" in text and "\\*bold\\*" in text and "\\[link\\]" in text
    lines = text.splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert headings == [line for line in lines if line.startswith(("# ", "## "))]
    row = next(line for line in lines if line.startswith("| spear"))
    assert row.replace("\\|", "").count("|") == 3  # two columns: the reason's '|' stays inside its cell
    assert "\\- not a list" in lines and "1\\. not a list" in lines
    assert "s/grids/a%20b.png" in text
