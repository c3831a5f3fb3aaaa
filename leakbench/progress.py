"""What a run tells its user while it runs: progress bars inside long attacks, one line per finished
cell, and the closing summary.

Attacks wrap their main loop in `steps(...)`; the harness enables bars with `attack_progress(stream)`
when it runs cells in this process and the stream is a terminal (worker processes never draw bars).
`cell_line` is the line (or bar postfix) of a finished cell, the same for `leakbench run` and
`api.evaluate`; `closing_lines` are the three lines `leakbench run` ends with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TextIO, TypeVar

T = TypeVar("T")
_STREAM: ContextVar[TextIO | None] = ContextVar("leakbench_attack_progress", default=None)


@contextmanager
def attack_progress(stream: TextIO | None) -> Iterator[None]:
    """Within this block, `steps` draws a transient tqdm bar on `stream` (None: no bars)."""
    token = _STREAM.set(stream)
    try:
        yield
    finally:
        _STREAM.reset(token)


def enabled() -> bool:
    """Whether bars are on here (the harness then asks its attack worker to draw them too)."""
    return _STREAM.get() is not None


def steps(iterable: Iterable[T], *, total: int, desc: str) -> Iterable[T]:
    """`iterable` itself, or wrapped in a bar that disappears when the loop ends."""
    stream = _STREAM.get()
    if stream is None:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, file=stream, leave=False, dynamic_ncols=True)


class Tally:
    """A bar whose position is set (e.g. samples found of b) with a one-line postfix, or nothing at all."""

    def __init__(self, bar: Any | None) -> None:
        self._bar = bar

    def show(self, position: int, postfix: str) -> None:
        """Move the bar to `position` and show `postfix`; redrawn at most every tqdm `mininterval`."""
        if self._bar is None:
            return
        self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.update(position - self._bar.n)


@contextmanager
def tally(*, total: int, desc: str) -> Iterator[Tally]:
    """A `Tally` drawn like `steps`' bars while `attack_progress` is on (and gone when the block ends)."""
    stream = _STREAM.get()
    if stream is None:
        yield Tally(None)
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, file=stream, leave=False, dynamic_ncols=True)
    try:
        yield Tally(bar)
    finally:
        bar.close()


REASON_CHARS = 90
"""A failed cell's reason in its progress line is cut to this many characters (the report has it whole)."""


def cell_line(label: str, summary: Mapping[str, Any]) -> str:
    """A finished cell in one line: its settings (`label`), then "ok" with exact % and seconds, "partial, exact
    N%: batch incomplete: k of b verified (…)" for an incomplete batch, or its state and reason ("failed (budget):
    REASON", `records.cell_state`: the attack's reason, shortened) with seconds, so a failure is understood where
    it shows, never read as 0 % exact."""
    if summary["status"] == "ok":
        outcome = f"ok, exact {100 * summary['exact_fraction']:.0f}%"
    elif summary["status"] == "partial":
        outcome = f"partial, exact {100 * summary['exact_fraction']:.0f}%: {short_reason(summary.get('reason'))}"
    else:
        from leakbench.records.cell_state import cell_state

        state, reason = cell_state(summary), " ".join(str(summary.get("reason") or "").split())
        reason = reason.removeprefix(f"{state}: ")  # "not applicable: not applicable: …" said once
        outcome = f"{state}: {short_reason(reason)}"
    return f"{label}: {outcome}, {summary['seconds']:.2f} s"


def short_reason(reason: object, limit: int = REASON_CHARS) -> str:
    """A failure reason on one line of at most `limit` characters ("no reason given" when empty)."""
    text = " ".join(str(reason or "").split()) or "no reason given"
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def cells_line(statuses: Iterable[str], reasons: str) -> str:
    """"cells: N ok, M failed" (", K incomplete" when a batch is incomplete), and where the reasons of the
    failed and incomplete ones are (`reasons`) when there are any."""
    counts = list(statuses)
    ok, partial = counts.count("ok"), counts.count("partial")
    failed = len(counts) - ok - partial
    return (f"cells: {ok} ok, {failed} failed" + (f", {partial} incomplete" if partial else "")
            + (f" (each one's reason: {reasons})" if failed or partial else ""))


def closing_lines(statuses: Iterable[str], report: Path, results: Path, reports: Path) -> list[str]:
    """The three lines a run ends with: cells ok and failed, where its HTML report is (`report`: the
    Markdown path `write_report` returns), and where the leaderboard is or the command that makes it."""
    command = "leakbench leaderboard" + ("" if results == Path("results") else f" --results {results}") + (
        "" if reports == Path("reports") else f" --reports {reports}")
    board = reports / "leaderboard.html"
    leaderboard = (f"leaderboard: {board} (from an earlier run: `{command}` adds this one)" if board.is_file()
                   else f"leaderboard: not made yet: `{command}` ranks every run in {results}/ into {board}")
    where = "its progress line above, and the report's 'All cells' table"
    return [cells_line(statuses, where), f"report: {report.with_suffix('.html')} (Markdown: {report})", leaderboard]
