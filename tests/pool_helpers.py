"""A picklable stand-in for a cell, for executor tests: spawned pool workers import this module (stdlib only)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def slow_task(task: Any) -> dict[str, Any]:
    """Mark `task.out` started, sleep `task.spec` seconds, mark it finished."""
    out = Path(task.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "started").touch()
    time.sleep(float(task.spec))
    (out / "finished").touch()
    return {"name": out.name}


def killed_once_task(task: Any) -> dict[str, Any]:
    """As `slow_task`, but a task whose `spec` is negative is SIGKILLed (as by the OOM killer) the first time it
    runs (its worker dies: BrokenProcessPool in the parent), then sleeps |spec| seconds."""
    import os
    import signal

    out = Path(task.out)
    if float(task.spec) < 0 and not (out / "started").exists():
        out.mkdir(parents=True, exist_ok=True)
        (out / "started").touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return slow_task(type(task)(**{**task.__dict__, "spec": abs(float(task.spec))}))


def killed_always_task(task: Any) -> dict[str, Any]:
    """A task whose worker is SIGKILLed every time it runs."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return {}
