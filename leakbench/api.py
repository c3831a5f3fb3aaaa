"""leakbench's Python API: run a suite, evaluate an attack class on a suite's settings, read records.

    from leakbench import api
    records = api.evaluate(MyAttack, "default")          # MyAttack: an `leakbench.attacks.Attack` subclass
    records.groupby("batch_size")["psnr"].median()

`evaluate` runs without registering the class for anything else in the process: the name is
registered for the duration of the call, and the isolated attack worker imports the class from its
module (or from the script that defines it; guard the script's own work with
`if __name__ == "__main__":`). Records are the same tables `leakbench run` stores
(`docs/api.md` lists their columns).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from leakbench.attacks import ATTACKS, Attack
from leakbench.cell.spec import cell_id
from leakbench.core.errors import ConfigError
from leakbench.core.settings import build_config
from leakbench.harness.job import REFS_ENV, class_ref
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import Suite, find_suite, load_suite
from leakbench.pipeline import run_suite
from leakbench.progress import cells_line
from leakbench.records.folders import folder_name
from leakbench.records.runs import read_table

__all__ = ["evaluate", "load_cells", "load_records", "run", "scoped_attack", "suite_for"]


def run(suite: str | Path = "default", *, out: Path | str = "results", reports: Path | str = "reports",
        data_root: str | None = None, executor: str = "serial", jobs: int = 1, resume: bool = True,
        progress: TextIO | bool = True) -> Path:
    """Run a suite (a shipped name such as "default" or "paper/dp", or a file) and write its report;
    returns the run folder (`out/SUITE`), whose records `load_records` reads. `progress` as in `evaluate`."""
    report = run_suite(str(suite), data_root=data_root, out=Path(out), reports=Path(reports), executor=executor,
                       jobs=jobs, resume=resume, progress=progress_stream(progress))
    return Path(out) / report.stem


def evaluate(attack: type[Attack], suite: str | Path = "default", *, hyperparameters: dict[str, Any] | None = None,
             out: Path | str = "results", data_root: str | None = None, executor: str = "serial", jobs: int = 1,
             resume: bool = True, progress: TextIO | bool = True) -> pd.DataFrame:
    """Run `attack` on every setting of `suite` (its datasets, victims, batch sizes, layers if the
    attack's Config has a `layer`, DP levels, clients and seeds) and return the per-image records.

    Stored like any run, in `out/SUITE--NAME/` (resumable; `leakbench report` and `leaderboard` read it).
    `progress`: True (default) writes `leakbench run`'s progress on stderr — a line per finished cell
    (a failed one with its reason), or a bar on a terminal — then a line counting the cells ok and
    failed; a stream writes them there; False writes nothing.
    """
    stream = progress_stream(progress)
    with scoped_attack(attack):
        plan = suite_for(attack, suite, hyperparameters or {}, data_root=data_root)
        sweep = run_sweep(plan, out=Path(out), executor=executor, jobs=jobs, resume=resume, progress=stream)
    if stream is not None:
        print(cells_line(sweep.cells["status"], f"its progress line above, and the records in {sweep.run_dir}"),
              file=stream, flush=True)
    return sweep.records


def progress_stream(progress: TextIO | bool) -> TextIO | None:
    """Where `run` and `evaluate` write progress: stderr (as it is at call time) for True, nowhere for False."""
    if progress is True:
        return sys.stderr
    return None if progress is False else progress


def suite_for(attack: type[Attack], suite: str | Path, hyperparameters: dict[str, Any], *,
              data_root: str | None = None) -> Suite:
    """`suite`'s settings with `attack` as the only attack (its name must be registered, as inside
    `evaluate`): one cell per distinct setting, in the suite's order."""
    base = load_suite(find_suite(str(suite)), data_root=data_root)
    build_config(attack.Config, hyperparameters)  # unknown or mistyped hyperparameters: one line, before any run
    has_layer = attack.layered
    sources = [s for s in base.cells if (s.attack in base.layerless) != has_layer] or base.cells
    cells: dict[str, Any] = {}
    for spec in sources:
        new = replace(spec, attack=attack.name, hyperparameters=dict(hyperparameters),
                      layer=spec.layer if has_layer else 1, inversion=spec.inversion if has_layer else None)
        cells.setdefault(cell_id(new), new)
    name = folder_name(f"{base.name.replace('/', '-')}--{attack.name}", "the evaluation's run name")
    return replace(base, name=name, cells=list(cells.values()), layerless=() if has_layer else (attack.name,))


def load_records(run_dir: Path | str) -> pd.DataFrame:
    """A run's per-image records (one row per ground-truth image and cell) as a DataFrame."""
    return read_table(Path(run_dir), "records.parquet")


def load_cells(run_dir: Path | str) -> pd.DataFrame:
    """A run's per-cell summaries (one row per cell) as a DataFrame."""
    return read_table(Path(run_dir), "cells.parquet")


@contextmanager
def scoped_attack(attack: type[Attack]) -> Iterator[None]:
    """`attack` registered under its name within the block, and findable by the attack worker and
    by pool workers (through the environment); a registered attack is used as it is."""
    if not (isinstance(attack, type) and issubclass(attack, Attack)):
        raise ConfigError(f"evaluate needs an Attack subclass, got {attack!r}")
    if attack.name in ATTACKS.names():
        if ATTACKS.create(attack.name) is not attack:
            raise ConfigError(f"attack {attack.name!r} is already registered (a shipped attack or a plugin): rename it")
        yield
        return
    refs = json.loads(os.environ.get(REFS_ENV) or "{}")
    old = os.environ.get(REFS_ENV)
    os.environ[REFS_ENV] = json.dumps({**refs, attack.name: list(class_ref(attack))})
    try:
        with ATTACKS.scoped(attack.name, lambda: attack, attack.description):
            yield
    finally:
        if old is None:
            os.environ.pop(REFS_ENV, None)
        else:
            os.environ[REFS_ENV] = old
