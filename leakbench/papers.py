"""`leakbench reproduce NAME`: paper tables and figures, each a shipped suite (leakbench/suites/paper/) or a script.

Suites run like `leakbench run` (records under --out, resumable) and write their report under --reports.
Scripts are the benchmark scripts of a source checkout (benchmarks/*.py, not part of an installed
package), called with `--out REPORTS/NAME` and `--data-root DIR` when one is given (they choose
their own budgets).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leakbench.errors import ConfigError
from leakbench.registry import Registry

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding leakbench/ when it runs from source (with pyproject.toml and benchmarks/ beside it)."""
PAPERS: Registry[Callable[..., list[Path]]] = Registry("paper table")


def _suite(name: str) -> Callable[..., list[Path]]:
    def run(**kwargs: Any) -> list[Path]:
        from leakbench.pipeline import run_suite

        return [run_suite(f"paper/{name}", **kwargs)]

    return run


def _script(name: str, script: str) -> Callable[..., list[Path]]:
    def run(*, reports: Path, data_root: str | None = None, **_: Any) -> list[Path]:
        path = benchmark_script(name, script)
        out = reports / name
        command = [sys.executable, str(path), "--out", str(out)]
        if data_root is not None:
            command += ["--data-root", str(data_root)]
        if subprocess.run(command).returncode != 0:
            raise ConfigError(f"reproduce {name}: {path.name} failed (see its output above)")
        return [out]

    return run


def benchmark_script(name: str, script: str) -> Path:
    """benchmarks/SCRIPT of the source checkout, or a ConfigError saying that entry `name` needs one."""
    path = SOURCE_ROOT / "benchmarks" / script
    if not (path.is_file() and (SOURCE_ROOT / "pyproject.toml").is_file()):
        raise ConfigError(f"reproduce {name}: runs the benchmark script benchmarks/{script}, which only a source "
                          f"checkout of leakbench has (not found at {path}); run it from a clone of the repository")
    return path


SUITES = (
    ("spear-batch-size",
     "SPEAR (NeurIPS 2024) batch-size table: TinyImageNet, FC-6 width 200, b = 1…20 (needs --data-root)"),
    ("spear-layers", "SPEAR layer table: layers 1–5 of FC-6 at b = 16 and 20 (needs --data-root)"),
    ("layers-images",
     "SPEAR layers 1–5 of FC-6, b = 20: feature exact % and image PSNR after inversion (needs --data-root)"),
    ("conv", "conv+FC victim on TinyImageNet: SPEAR/CPA on the first FC layer + inversion vs IG (needs --data-root)"),
    ("conv-embedded", "conv+FC victim on the embedded 32×32 patches: SPEAR/CPA + inversion vs IG"),
    ("dp", "every attack against DP-SGD σ ∈ {0 … 1} with ε (TinyImageNet FC-6, b = 8; needs --data-root)"),
    ("spear-guided-w400", "guided SPEAR vs CPA, b = 25…100, FC-6 width 400 (TinyImageNet; needs --data-root)"),
    ("spear-guided-w2000", "guided SPEAR vs CPA, b = 25…100, FC-6 width 2000 (TinyImageNet; needs --data-root)"),
    ("spear-frontier", "guided SPEAR past b = 100: b = 150, 200, 256, FC-6 width 2000, 900 s per batch "
                       "(TinyImageNet; needs --data-root)"),
    ("spear-dl", "spear-dl (dictionary-learning proposals) vs guided SPEAR, b = 25…200, FC-6 width 2000 "
                 "(TinyImageNet; needs --data-root)"),
    ("spear-noise", "SPEAR under additive gradient noise σ = 0 … 1e-2 × max|g| (TinyImageNet FC-6, b = 8; "
                    "needs --data-root); benchmarks/spear_noise.py prints its table"),
    ("fedavg", "FedAvg table: E ∈ {1, 5}, mini-batch ∈ {b, b/4}, η ∈ {0.1, 0.01} "
               "(TinyImageNet FC-6, b = 20; needs --data-root)"),
)
"""Paper entries that are shipped suites leakbench/suites/paper/NAME.toml and their descriptions."""

for _name, _description in SUITES:
    PAPERS.register(_name, _suite(_name), _description)
PAPERS.register("spear-draws", _script("spear-draws", "spear_draws.py"),
                "SPEAR draws against their expectation and failure rate against the bound (figure), "
                "by benchmarks/spear_draws.py (needs --data-root)")


PAPERS.register("spear-guided", _script("spear-guided", "spear_guided.py"),
                "guided SPEAR frontier with the guide's sign accuracy, and draws against a controlled guide's "
                "quality, by benchmarks/spear_guided.py (needs --data-root)")


def list_papers() -> list[tuple[str, str]]:
    return [(e.name, e.description) for e in PAPERS.entries()]


def reproduce(name: str, **kwargs: Any) -> list[Path]:
    """Run paper entry `name` (a ConfigError naming the known ones if unknown)."""
    return PAPERS.entry(name).factory(**kwargs)
