"""Stop signals: SIGTERM and SIGHUP take the path of Ctrl-C.

A run stopped by `kill PID`, a scheduler's time limit or a closed terminal must clean up as after
Ctrl-C: the executor ends its workers (pool workers, attack workers, Ray tasks), the temporary
folders of cells cut short are removed, finished cells stay stored, and the same command resumes.
Python's default for SIGTERM and SIGHUP ends the process at once and skips all of that, leaving the
workers running (they keep storing cells and hold the caller's pipes open).
`stop_signals_as_interrupt()` turns them into `Terminated`, a KeyboardInterrupt, for the code it wraps.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM or SIGHUP) raised as an interrupt; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    """The handler: later stop signals are ignored while the first one's clean-up runs (SIGKILL still ends it)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is _raise_terminated:
            signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


@contextmanager
def stop_signals_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` in the main thread; the previous handlers
    are restored after it. A signal that is ignored (`nohup`) stays ignored; outside the main thread,
    and inside an enclosing block, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current in (signal.SIG_IGN, _raise_terminated):
            continue
        previous[sig] = current
        signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
