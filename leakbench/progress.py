"""Progress bars inside long attacks: off unless the caller turns them on for a stream (a terminal).

Attacks wrap their main loop in `steps(...)`; the harness enables bars with `attack_progress(stream)`
when it runs cells in this process and the stream is a terminal (worker processes never draw bars).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO, TypeVar

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
