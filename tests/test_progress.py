"""Progress bars inside attacks: off by default, drawn on the given stream when turned on."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from leakbench.progress import attack_progress, steps


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
