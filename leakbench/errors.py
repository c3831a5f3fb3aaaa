"""The documented import path of leakbench's errors for plugins (`from leakbench.core.errors import DatasetError`,
docs/add-a-dataset.md): the errors live in the base layer, `leakbench.core.errors`."""

from __future__ import annotations

from leakbench.core.errors import ConfigError, DatasetError, DefenceError, LeakbenchError, LeakbenchWarning

__all__ = ["ConfigError", "DatasetError", "DefenceError", "LeakbenchError", "LeakbenchWarning"]
