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
