"""`leakbench run`: plan a suite's cells, run the unfinished ones, consolidate the records, report.

Planning happens before anything runs: every cell is checked (names, data, sizes, hyperparameters),
gets its configuration hash and its grid's batch positions (drawn from the suite's grid seed), and
all of it goes into the run manifest. With `resume` (the default) cells whose folder is intact
are skipped, so an interrupted sweep continues where it stopped and never duplicates a cell; a
damaged cell folder is reported (one warning line) and recomputed, and so is a cell computed by
other attack code or hyperparameters (`harness.reuse`). The final manifest counts the cells per git
revision they were computed at (`cell_revisions`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from leakbench.cell.selection import grid_selection
from leakbench.cell.spec import CellSpec, batch_id, cell_id, cell_settings, spec_dict, truth_size
from leakbench.core.errors import ConfigError, LeakbenchWarning
from leakbench.harness.cell import build_attack
from leakbench.harness.environment import environment, git_revision
from leakbench.harness.executors import Task, connection, execute, missing_lpips_note
from leakbench.harness.reuse import revision_note, stale_cells
from leakbench.harness.sandbox import warn_unless_sandboxed
from leakbench.harness.suite import Suite, find_suite, load_suite
from leakbench.metrics.lpips_metric import check_net
from leakbench.progress import cell_line
from leakbench.records.atomic import write_json_atomic
from leakbench.records.cells import cell_path
from leakbench.records.folders import held_folder
from leakbench.records.runs import check_cell_folders, consolidate, finished_cells, remove_partial_cells, survey


@dataclass
class Sweep:
    """What a sweep did: where its records are, how many cells ran now and how many were already done."""

    run_dir: Path
    suite: Suite
    ran: int
    skipped: int
    seconds: float
    records: pd.DataFrame
    cells: pd.DataFrame


def check_cells(cells: list[CellSpec]) -> None:
    """Raise on the first cell that cannot run (names, data, sizes, hyperparameters), before any runs.

    Cheap: whether a cell can run depends on its data and victim only through the shapes of the
    update and what its threat model withholds, not on its seed, DP level, noise or client. So each
    distinct (dataset, data root, image size, truth size, victim) gets one FedSGD update of seed 0 per
    threat model, built once and dropped when its cells are checked, each dataset is loaded once, and
    each distinct attack configuration is checked once per threat model on it (an attack needing the
    labels under a threat model that withholds them is refused here, before anything runs).
    Trained victims are checked at init (same shapes), their batch drawn from the attack part.
    """
    from leakbench.datasets import load_dataset, partition, sample_batch
    from leakbench.fl import fedsgd_update
    from leakbench.models import build_model

    groups: dict[tuple[Any, ...], list[CellSpec]] = {}
    for spec in cells:
        key = (spec.dataset, spec.data_root, spec.image_size, truth_size(spec), spec.arch, spec.width, spec.depth,
               spec.train_epochs > 0)
        groups.setdefault(key, []).append(spec)
    datasets: dict[tuple[Any, ...], Any] = {}
    for (name, root, size, b, arch, width, depth, trained), specs in groups.items():
        if (name, root, size) not in datasets:
            datasets[name, root, size] = load_dataset(name, data_root=Path(root) if root else None, image_size=size)
        dataset = datasets[name, root, size]
        batch = sample_batch(dataset, b, 0, pool=partition(dataset).attack if trained else None)
        model = build_model(arch, dataset.image_shape, dataset.num_classes, width=width, depth=depth, seed=0)
        updates = {threat: fedsgd_update(model, batch, threat) for threat in {spec.threat for spec in specs}}
        seen: set[str] = set()
        for spec in specs:
            if spec.fedavg is not None:
                spec.fedavg.size(spec.batch_size)  # a mini-batch larger than the batch
            attack_key = json.dumps([spec.attack, spec.hyperparameters, spec.layer, spec.labels_known,
                                     spec.batch_size_known, spec.defence_known], sort_keys=True, default=str)
            if attack_key not in seen:
                seen.add(attack_key)
                build_attack(spec).check_update(updates[spec.threat])


def plan(suite: Suite, run_dir: Path, lpips_weights: str | None = None, lpips_net: str = "alex") -> list[Task]:
    """One task per cell, in suite order, with its folder and its pre-drawn grid selection (per batch, so
    every attack on a batch shows the same images)."""
    tasks = []
    for spec in suite.cells:
        cid = cell_id(spec)
        pick = grid_selection(batch_id(spec), truth_size(spec), suite.grid_images, suite.grid_seed)
        tasks.append(Task(spec=spec, out=cell_path(run_dir, cid), selection=tuple(pick),
                          grid_seed=suite.grid_seed, lpips_weights=lpips_weights, lpips_net=lpips_net))
    return tasks


def run_manifest(suite: Suite, tasks: list[Task], extra: dict[str, Any]) -> dict[str, Any]:
    """The run's manifest: suite, environment, seeds, every cell with its grid selection."""
    cells = [{"cell_id": t.out.name, "batch_id": batch_id(t.spec), "grid_selection": list(t.selection),
              **truth_entry(t.spec), **{k: v for k, v in spec_dict(t.spec).items() if k != "data_root"}}
             for t in tasks]
    return {"suite": suite.name, "suite_text": suite.text, **environment(),
            "seeds": sorted({t.spec.seed for t in tasks}), "grid_seed": suite.grid_seed,
            "grid_images": suite.grid_images, "layerless_attacks": list(suite.layerless),
            "cells": cells, **extra}


def truth_entry(spec: CellSpec) -> dict[str, int]:
    """`truth_size` for a cell's manifest entry when it differs from its batch size (a cell of several
    clients), so a run folder's grid selections are checked without loading its transforms; none otherwise."""
    size = truth_size(spec)
    return {} if size == spec.batch_size else {"truth_size": size}


def run_sweep(name: str | Suite | None, *, data_root: str | None = None, out: Path = Path("results"),
              executor: str = "serial", jobs: int = 1, address: str | None = None, resume: bool = True,
              lpips_weights: str | None = None, lpips_net: str = "alex", progress: TextIO | None = None,
              before_run: Callable[[Suite], None] | None = None) -> Sweep:
    """Run every unfinished cell of a suite (a name, a file, or a parsed `Suite`) into `out/SUITE/` and
    consolidate its records.

    Before anything runs: the cells are checked, the run folder is held for this sweep (another command
    writing it meanwhile: refused, `records.folders.held_folder`), the folders it will replace (planned
    cell folders) are checked for files leakbench did not write, and `before_run(suite)` runs (the
    pipeline checks the report folder there).
    `lpips_net` (alex or vgg) scores the cells that run now; it is not part of a cell's id, so
    resumed cells keep the LPIPS they were stored with (each cell records its `lpips_net`).
    """
    suite = name if isinstance(name, Suite) else load_suite(find_suite(name), data_root=data_root)
    check_cells(suite.cells)
    run_dir = out / suite.name
    check_net(lpips_net)
    tasks = plan(suite, run_dir, lpips_weights, lpips_net)
    ids = [t.out.name for t in tasks]
    with held_folder(run_dir, f"a run of a suite named '{suite.name}', or a rescore"):  # one sweep per folder
        check_cell_folders(run_dir, ids)
        check_same_suite(run_dir, suite.name, ids)
        if before_run is not None:
            before_run(suite)
        done, revisions = reusable_cells(run_dir, tasks) if resume else (set(), Counter())
        remove_partial_cells(run_dir)
        todo = [t for t in tasks if t.out.name not in done]
        lpips_note = missing_lpips_note(lpips_weights, lpips_net) if todo else ""
        if lpips_note:  # never silent: the cells record the same note (summary.json, cells.parquet)
            warnings.warn(LeakbenchWarning(lpips_note), stacklevel=2)
        with connection(executor, jobs, address):  # before the manifest: an unreachable Ray cluster writes nothing
            write_json_atomic(run_dir / "manifest.json", run_manifest(suite, tasks, {"executor": executor, "jobs": jobs,
                                                                                  "lpips_net": lpips_net}))
            if todo:
                warn_unless_sandboxed()
            start = time.perf_counter()
            try:
                _run_with_progress(todo, len(tasks), executor=executor, jobs=jobs, address=address, progress=progress)
            finally:
                remove_partial_cells(run_dir)  # what workers stopped mid-write left (the executor has stopped them)
            seconds = time.perf_counter() - start
        records, cells = consolidate(run_dir, ids)
        revisions[git_revision()] += len(todo)
        write_json_atomic(run_dir / "manifest.json", run_manifest(suite, tasks, {
            "executor": executor, "jobs": jobs, "lpips_net": lpips_net,
            "last_sweep": {"cells_run": len(todo), "cells_skipped": len(tasks) - len(todo),
                           "seconds": round(seconds, 3), "lpips_note": lpips_note},
            "cell_revisions": {(rev or "unknown"): n for rev, n in revisions.items() if n}}))
        return Sweep(run_dir, suite, len(todo), len(tasks) - len(todo), seconds, records, cells)


def reusable_cells(run_dir: Path, tasks: list[Task]) -> tuple[set[str], Counter[str | None]]:
    """The stored cells a resumed sweep skips, and their git revisions (revision → count).

    A damaged cell is recomputed (one warning line each). An intact one is checked against what this
    run would compute it from (`harness.reuse`): other resolved hyperparameters or attack code →
    recomputed (one warning line); other images in its batch → ConfigError before anything runs; another
    git revision → said in one warning line and reused.
    """
    states = survey(run_dir, [t.out.name for t in tasks])
    for cid, reason in states.damaged.items():
        warnings.warn(LeakbenchWarning(f"cell {cid} in {run_dir} is damaged ({reason}); recomputing it"), stacklevel=3)
    specs = {t.out.name: t.spec for t in tasks if t.out.name in set(states.intact)}
    stale = stale_cells(run_dir, specs)
    if stale.refuse:
        cid, why = next(iter(stale.refuse.items()))
        raise ConfigError(f"{len(stale.refuse)} stored cells in {run_dir} cannot be resumed: cell {cid}: {why} "
                          f"(dataset {specs[cid].dataset}: is a package or data file missing?); "
                          "choose another --out, or rerun them all with --no-resume")
    if stale.recompute:
        cid, why = next(iter(stale.recompute.items()))
        warnings.warn(LeakbenchWarning(f"{len(stale.recompute)} stored cells in {run_dir} were computed by other "
                                       f"code (cell {cid}: {why}); recomputing them"), stacklevel=3)
    note = revision_note(stale.revisions, git_revision())
    if note:
        warnings.warn(LeakbenchWarning(f"{run_dir}: {note}"), stacklevel=3)
    return set(specs) - set(stale.recompute), stale.revisions


def check_same_suite(run_dir: Path, name: str, cell_ids: list[str]) -> None:
    """Refuse (one line) a run folder holding finished cells that this suite does not plan.

    A run folder is one suite's: its manifest lists the planned cells, and every table is built from
    them. Another suite of the same name run into the same `--out` (or an earlier version of this one
    that planned other cells) would leave those cells in no table while both runs report success.
    Growing a suite (more seeds, another attack) keeps every stored cell planned and is allowed.
    """
    others = finished_cells(run_dir, set(cell_ids))
    if others:
        raise ConfigError(f"{run_dir} holds {len(others)} finished cells that suite '{name}' does not plan "
                          "(another suite of the same name, or an earlier version of this one); they would be "
                          "in no table: choose another --out or another suite name")


def _run_with_progress(todo: list[Task], total: int, *, executor: str, jobs: int, address: str | None,
                       progress: TextIO | None) -> None:
    """Execute with a progress bar over cells, or a line per finished cell when the stream is not a terminal
    (`progress.cell_line`, a failed cell's reason included); on a terminal a failed cell's line is written
    above the bar, whose postfix has no room for the reason."""
    from tqdm import tqdm

    stream = progress if progress is not None else sys.stderr
    tty = progress is not None and stream.isatty()
    bar = tqdm(total=total, initial=total - len(todo), desc="cells", unit="cell", file=stream,
               disable=not tty, dynamic_ncols=True)
    count = iter(range(total - len(todo) + 1, total + 1))

    labels = {cell_id(t.spec): " ".join(cell_settings(t.spec)) for t in todo}

    def on_done(s: dict[str, Any]) -> None:
        line = cell_line(labels.get(s["cell_id"], s["attack"]), s)
        numbered = f"[{next(count)}/{total}] {line}"
        bar.update(1)
        bar.set_postfix_str(line[:70])
        if progress is not None and not tty:
            print(numbered, file=stream, flush=True)
        elif tty and s["status"] != "ok":
            tqdm.write(numbered, file=stream)

    running: dict[str, Any] = {}

    def on_start(task: Task) -> None:
        running.update(name=labels[cell_id(task.spec)], start=time.monotonic())

    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(bar, running, stop), daemon=True)
    if tty:
        ticker.start()
    try:
        execute(todo, on_done, executor=executor, jobs=jobs, address=address, attack_bars=stream if tty else None,
                on_start=on_start)
    finally:
        stop.set()
        bar.close()


def _tick(bar: Any, running: dict[str, Any], stop: threading.Event) -> None:
    """Once a second, show which cell runs and for how long (serial runs on a terminal)."""
    while not stop.wait(1.0):
        if running:
            bar.set_postfix_str(f"running {running['name']}: {time.monotonic() - running['start']:.0f} s")
