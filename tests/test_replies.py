"""Issue 41: the attack worker's reply is untrusted bytes, read within hard limits before anything is
parsed or allocated, and within a time limit the harness enforces. Each forged reply (`forge_attack.py`)
is a failed cell with its reason — never a traceback, never a stop of the suite — and `seconds` and the
hyperparameters are the harness's, not the attack's word."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import attack_plugin_source
from forge_attack import ForgeAttack, bomb, npy_header, npz_of  # tests/ is on the path: the worker imports it too

from leakbench.api import scoped_attack
from leakbench.cell.spec import CellSpec
from leakbench.harness import replies
from leakbench.harness.cell import run_cell
from leakbench.harness.isolation import workers
from leakbench.harness.replies import ArrayBounds, ReplyRefused, json_depth, read_arrays, read_header

BOUNDS = ArrayBounds((3, 4, 4), 48)


# --------------------------------------------------------------------------- the limits, without a worker


@pytest.mark.parametrize("text, depth", [(b"{}", 1), (b"[1, [2, {}]]", 3), (b'{"a": "[[[{{{"}', 1),
                                         (b'["\\"[[", [[]]]', 3), (b"3", 0)])
def test_json_depth_counts_brackets_outside_strings(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


@pytest.mark.parametrize("data, request_, why", [
    (b'{"kind": "ok", "meta": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "cell", "nested 200,001 deep"),
    (b'{"kind": "config", "message": "x"}', "cell", None),
    (b'{"kind": "describe", "found": {}}', "cell", "kind 'describe' to a cell request"),
    (b'{"kind": "weird"}', "cell", "kind 'weird'"),
    (b'{"kind": "ok", "meta": {}, "x": 1}', "cell", "keys ['kind', 'meta', 'x']"),
    (b'{"kind": "error", "message": 3}', "cell", "message is a int"),
    (b'[{"kind": "ok"}]', "cell", "a JSON list"),
    (b'{"kind": "ok", "meta": 1' + b"0" * 5000 + b"}", "cell", "not JSON"),
    (b'{"kind": "ok", "meta": {}}', "describe", "kind 'ok' to a describe request"),
])
def test_a_header_outside_the_limits_is_refused_before_it_is_parsed(data: bytes, request_: str,
                                                                     why: str | None) -> None:
    if why is None:
        assert read_header(data, request_)["kind"] == "config"
        return
    with pytest.raises(ReplyRefused, match=why.replace("[", r"\[").replace("(", r"\(")):
        read_header(data, request_)


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


@pytest.mark.parametrize("npz, why", [
    (npz_of("images.npy", npy_header((int(33.5 * (1 << 40)) // 192, 3, 4, 4)) + b"\0" * 64), "at most 65,536 rows"),
    (bomb((64, 3, 4, 4)), "compressed"),
    (npz_of("images.npy", npy_header((2, 3, 4, 4)) + b"\0" * 8), "but it holds"),
    (npz_of("images.npy", npy_header((2, 3, 4, 4)) + b"\0" * 400), "but it holds"),
    (_npz(features=np.zeros((2, 49), np.float32)), "widest layer takes 48"),
    (_npz(images=np.zeros((2, 3, 4, 4), np.float64)), "float32 only"),
    (_npz(images=np.zeros((2, 3, 4, 4), ">f4")), "float32 only"),
    (_npz(labels=np.zeros(2, np.float32)), "members"),
    (_npz(images=np.zeros((2, 3, 4, 4), np.float32)) + b"x", "end record"),
    (b"", "end record"),
])
def test_arrays_outside_the_limits_are_refused_before_they_are_allocated(npz: bytes, why: str) -> None:
    with pytest.raises(ReplyRefused, match=why):
        read_arrays(npz, BOUNDS)


def test_well_formed_arrays_are_read() -> None:
    images = np.random.default_rng(0).random((2, 3, 4, 4), dtype=np.float32)
    arrays = read_arrays(_npz(images=images, features=np.ones((2, 48), np.float32)), BOUNDS)
    assert np.array_equal(arrays["images"], images) and arrays["features"].shape == (2, 48)
    assert read_arrays(_npz(), BOUNDS) == {}
    features = np.arange(96, dtype=np.float32).reshape(48, 2).T  # Fortran-ordered, as SPEAR's features are
    read = read_arrays(_npz(features=features), BOUNDS)["features"]
    assert np.array_equal(read, features) and read.flags.writeable and read.flags.c_contiguous


def test_the_time_limit_follows_the_declared_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import make_dataclass

    monkeypatch.delenv(replies.TIME_LIMIT_ENV, raising=False)
    timed, untimed = make_dataclass("T", [("max_seconds", float)])(900.0), make_dataclass("U", [("x", int)])(1)
    assert replies.time_limit(timed) == 1800.0 and replies.time_limit(timed, 10) == 1800.0 + 6 * 3600
    monkeypatch.setenv(replies.TIME_LIMIT_ENV, "60")
    assert replies.time_limit(untimed) == 60.0 and replies.time_limit(make_dataclass("S", [("max_seconds", float)])(
        2.0)) == 2.0 + replies.TIME_MARGIN
    monkeypatch.setenv(replies.TIME_LIMIT_ENV, "soon")
    with pytest.raises(Exception, match="LEAKBENCH_TIME_LIMIT='soon'"):
        replies.time_limit(untimed)


# --------------------------------------------------------------------------- forged replies, end to end


SMALL: dict[str, Any] = {"dataset": "embedded", "batch_size": 2, "width": 16, "depth": 3}


@pytest.fixture
def forge(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The forging attack registered for one test; its time limit 2 s + 1 s (max_seconds 2, margin 1)."""
    monkeypatch.setattr(replies, "TIME_MARGIN", 1.0)
    with scoped_attack(ForgeAttack):
        yield


def _summary(route: str, **params: Any) -> dict[str, Any]:
    """The forging cell's summary, from a thread the test waits 120 s for (the harness once waited for ever)."""
    box: dict[str, Any] = {}
    workers().prestart()  # here: the fork server dies with the thread that started it (PR_SET_PDEATHSIG)

    def cell() -> None:
        try:
            box["summary"] = run_cell(CellSpec(attack="forge", hyperparameters={"route": route, **params},
                                               **SMALL)).summary
        except BaseException as exc:  # noqa: BLE001 — shown by the assertion below
            box["error"] = exc

    thread = threading.Thread(target=cell, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the harness still waits for the attack worker after 120 s"
    assert "error" not in box, f"the harness raised {type(box['error']).__name__}: {box['error']}"
    return box["summary"]


@pytest.mark.slow
@pytest.mark.parametrize("route, why", [
    ("deep", "the header is nested 200,001 deep (at most 32)"),
    ("huge", "32, 32): at most 65,536 rows"),
    ("bomb", "images.npy is compressed"),
    ("config", "error: attack worker: forged config reply"),
    ("error", "error: attack worker: forged error reply"),
    ("unknown", "a reply of kind 'weird' to a cell request"),
    ("extra", "keys ['kind', 'meta', 'x']"),
    ("sandbox", "the attack's reply was refused"),  # believed only as the worker's first message
])
def test_a_forged_reply_is_a_failed_cell_with_its_reason(forge: None, route: str, why: str) -> None:
    s = _summary(route)
    assert s["status"] == "failed" and why in s["reason"], s["reason"]
    assert s["failure"] == "error"  # a refused or failing reply: an error, never budget or verification


@pytest.mark.slow
@pytest.mark.parametrize("route", ["sleep", "stall"])
def test_an_attack_that_never_answers_fails_for_time_at_its_limit(forge: None, route: str) -> None:
    s = _summary(route)
    assert s["status"] == "failed" and s["reason"].startswith("time: no answer within the time limit of 4 s"), \
        s["reason"]
    assert s["time_limit"] == 4.0 and s["seconds"] >= 4.0
    assert s["failure"] == "budget"  # a worker killed at its time limit ran out of budget (issue 43)


@pytest.mark.slow
@pytest.mark.parametrize("claimed", [0.0, 1e9])
def test_seconds_and_hyperparameters_are_the_harness_s(forge: None, claimed: float) -> None:
    s = _summary("seconds", seconds=claimed, sleep=0.5)
    assert s["status"] == "ok", s["reason"]
    assert 0.5 <= s["seconds"] < 1e6, s["seconds"]  # measured: at least the attack's sleep; never its claim
    assert s["hyperparameters"] == {"route": "seconds", "rows": 4096, "seconds": claimed, "sleep": 0.5,
                                    "max_seconds": 2.0}


SUITE = """\
name = "forged"
dataset = "embedded"
attacks = ["forge", "spear"]
batch_sizes = [2]
width = 200
depth = 3
grid_images = 1

[hyperparameters.forge]
route = "{route}"
"""


@pytest.mark.slow
@pytest.mark.parametrize("route", ["config", "deep", "huge"])
def test_a_forged_reply_before_a_real_attack_never_stops_the_suite(forge: None, tmp_path: Path, route: str) -> None:
    from leakbench.harness.run import run_sweep
    from leakbench.harness.suite import load_suite

    path = tmp_path / "suite.toml"
    path.write_text(SUITE.format(route=route))
    suite = load_suite(path)
    assert [c.attack for c in suite.cells] == ["forge", "spear"]  # the forgery runs first
    sweep = run_sweep(suite, out=tmp_path / "out")
    cells = sweep.cells.set_index("attack")
    assert sweep.ran == 2 and cells.loc["forge", "status"] == "failed", cells.loc["forge", "reason"]
    assert cells.loc["spear", "status"] == "ok" and cells.loc["spear", "exact_fraction"] == 1.0


LIAR = attack_plugin_source("Liar", "liar", "lies about its code (test plugin)", prelude=(
    "import leakbench.harness.fingerprint as fingerprint\n"
    "fingerprint.attack_code = lambda cls: '0' * 16  # in the worker, where the description's hash is computed\n"))


@pytest.mark.slow
def test_a_plugin_attacks_code_hash_is_computed_by_the_harness(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from conftest import cli_env

    (tmp_path / "liar_plugin.py").write_text(LIAR)
    probe = ("from leakbench.plugins import load_plugin; load_plugin('liar_plugin'); "
             "from leakbench.attacks import attack_class; from leakbench.harness import fingerprint; "
             "import sys; print(fingerprint.attack_code(attack_class('liar')), fingerprint.plugin_code('liar_plugin'), "
             "'liar_plugin' in sys.modules)")
    env = {**cli_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), cli_env()["PYTHONPATH"]])}
    env.pop("LEAKBENCH_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    described, computed, imported = out.stdout.split()
    assert described == computed != "0" * 16 and imported == "False"  # hashed here, never imported here


def test_a_typo_in_the_settings_is_the_users_error_found_by_the_harness(forge: None,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's own mistake is still one ConfigError (one line, exit 2), found before any worker is
    asked; whatever a worker says is a cell's outcome only."""
    from leakbench.core.errors import ConfigError
    from leakbench.harness import cell as cell_module

    def no_worker(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the attack worker was asked to check the settings")

    monkeypatch.setattr(cell_module, "run_isolated", no_worker)
    monkeypatch.setattr(cell_module, "workers", lambda: type("W", (), {"prestart": lambda self: None})())
    with pytest.raises(ConfigError, match="unknown hyperparameter 'rout'"):
        run_cell(CellSpec(attack="forge", hyperparameters={"rout": "deep"}, **SMALL))
    with pytest.raises(ConfigError, match="max_seconds"):
        run_cell(CellSpec(attack="forge", hyperparameters={"max_seconds": "soon"}, **SMALL))
