"""Progress bars inside attacks: off by default, drawn on the given stream when turned on."""

from __future__ import annotations

import io

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
