"""Progress bars inside attacks: off by default, drawn on the given stream when turned on; the line of a
finished cell (a failed one with its reason) and the three lines a run ends with."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from leakbench.progress import attack_progress, cell_line, closing_lines, short_reason, steps


def test_steps_are_silent_by_default() -> None:
    loop = range(3)
    assert steps(loop, total=3, desc="x") is loop


def test_steps_draw_a_bar_on_the_stream() -> None:
    stream = io.StringIO()
    with attack_progress(stream):
        assert list(steps(range(3), total=3, desc="ig Adam steps")) == [0, 1, 2]
    assert "ig Adam steps" in stream.getvalue()
    assert steps(range(3), total=3, desc="x") == range(3)  # off again after the block


@pytest.mark.slow
def test_cell_lines_name_every_axis_that_varies(tmp_path: Path) -> None:
    """Cells that differ only by an axis beyond b/layer/dp (here additive noise) get lines that tell them apart."""
    from leakbench.harness.run import run_sweep

    (tmp_path / "suite.toml").write_text('name = "lines"\ndataset = "embedded"\nattacks = ["spear"]\n'
                                         'batch_sizes = [1]\nnoise = [0.0, 1e-6]\n')
    stream = io.StringIO()
    run_sweep(str(tmp_path / "suite.toml"), out=tmp_path / "res", progress=stream)
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("[")]
    assert len(lines) == 2 and len(set(line.split(":")[0].split("] ")[1] for line in lines)) == 2
    assert "noise=1e-06" in lines[1] and "spear embedded b=1" in lines[0]


def test_a_failed_cell_line_says_why_in_one_short_line() -> None:
    ok = cell_line("spear embedded b=2", {"status": "ok", "exact_fraction": 0.5, "seconds": 1.234, "reason": ""})
    assert ok == "spear embedded b=2: ok, exact 50%, 1.23 s"
    failed = cell_line("spear embedded b=8", {"status": "failed", "exact_fraction": 0.0, "seconds": 4.0,
                                              "reason": "draw budget spent after 300000 draws\nwith 0 of 8 found"})
    assert failed == "spear embedded b=8: failed: draw budget spent after 300000 draws with 0 of 8 found, 4.00 s"
    refused = cell_line("spear b=8", {"status": "failed", "failure": "not-applicable", "exact_fraction": 0.0,
                                      "seconds": 0.4, "reason": "not applicable: the gradient's noise is above"})
    assert refused == "spear b=8: not applicable: the gradient's noise is above, 0.40 s"  # the state said once
    long = short_reason("x " * 200)
    assert len(long) == 90 and long.endswith("…") and "\n" not in long
    assert short_reason(None) == short_reason("  ") == "no reason given"


def test_closing_lines_count_cells_and_say_where_report_and_leaderboard_are(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "rep" / "default.md"
    lines = closing_lines(["ok", "failed", "ok"], report, tmp_path / "res", tmp_path / "rep")
    assert len(lines) == 3 and lines[0].startswith("cells: 2 ok, 1 failed (each one's reason: ")
    assert lines[1] == f"report: {tmp_path / 'rep' / 'default.html'} (Markdown: {report})"
    command = f"leakbench leaderboard --results {tmp_path / 'res'} --reports {tmp_path / 'rep'}"
    assert lines[2] == f"leaderboard: not made yet: `{command}` ranks every run in {tmp_path / 'res'}/ into " \
                       f"{tmp_path / 'rep' / 'leaderboard.html'}"
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "leaderboard.html").write_text("<html></html>")
    again = closing_lines(["ok"], Path("reports/default.md"), Path("results"), tmp_path / "rep")
    assert again[0] == "cells: 1 ok, 0 failed"
    assert again[2].startswith(f"leaderboard: {tmp_path / 'rep' / 'leaderboard.html'} (from an earlier run: ")
    monkeypatch.chdir(tmp_path)  # the default folders, relative: no reports/leaderboard.html here
    assert closing_lines([], Path("reports/x.md"), Path("results"), Path("reports"))[2] == (
        "leaderboard: not made yet: `leakbench leaderboard` ranks every run in results/ into reports/leaderboard.html")
