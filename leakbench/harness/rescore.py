"""`leakbench rescore RUN_DIR`: score every finished cell again from its stored reconstruction.

No attack runs: each cell's `reconstruction.npz` and `attack.json` (see `artifacts`) are read back,
the ground truth is re-derived from the cell's spec (dataset, batch size, seed), and the same scoring
code as `leakbench run` (`cell.score_cell`) rewrites the cell's records and summary; then the run's
consolidated tables are rebuilt. With nothing changed, the records come out identical.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from leakbench.cell.spec import spec_from_dict
from leakbench.core.errors import LeakbenchError
from leakbench.harness.cell import with_budget
from leakbench.harness.executors import lpips_scorer
from leakbench.harness.fingerprint import PROVENANCE
from leakbench.harness.manifest import write_cell
from leakbench.harness.scoring import score_cell
from leakbench.harness.victim import victim
from leakbench.plugins import load_client_plugin
from leakbench.records.artifacts import RECONSTRUCTION_FILE, load_attack_output
from leakbench.records.cells import cell_path
from leakbench.records.folders import held_folder
from leakbench.records.labels import LABELS
from leakbench.records.runs import consolidate, finished_cells, read_run_manifest
from leakbench.records.trust import stored_origins


def rescore_cell(cell_dir: Path, *, lpips_weights: str | None = None, data_root: str | None = None) -> None:
    """Re-score one stored cell in place (atomically, like every cell write), with the LPIPS net it
    was scored with."""
    if not (cell_dir / RECONSTRUCTION_FILE).is_file():
        raise LeakbenchError(f"cell {cell_dir.name} was stored before leakbench kept reconstructions; "
                             "rerun it (leakbench run --no-resume) to rescore it")
    manifest = json.loads((cell_dir / "manifest.json").read_text())
    stored = json.loads((cell_dir / "summary.json").read_text())
    net = stored.get("lpips_net") or "alex"
    lpips, lpips_note = lpips_scorer(lpips_weights, net)
    try:
        spec = spec_from_dict(manifest["spec"])
    except (LeakbenchError, KeyError, TypeError) as exc:
        raise LeakbenchError(f"cell {cell_dir.name}: its manifest.json holds no valid spec ({exc})") from None
    if data_root is not None:
        spec = dataclasses.replace(spec, data_root=data_root)
    output = load_attack_output(cell_dir)
    batch, model = victim(spec)
    result = score_cell(spec, output, batch, model, lpips=lpips, lpips_note=lpips_note)
    result.provenance = {k: manifest[k] for k in PROVENANCE if k in manifest}  # what the stored answer came from
    result.summary.update(stored_origins(cell_dir, stored, manifest))  # no attack runs here: whose code ran is kept
    if LABELS in stored:  # and so are the labels and papers known when it ran (`records.labels`)
        result.summary[LABELS] = stored[LABELS]
    write_cell(with_budget(result), cell_dir, selection=manifest.get("grid_selection"))


def rescore_run(run_dir: Path, *, lpips_weights: str | None = None,
                data_root: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Re-score every finished cell of a run folder and rebuild its consolidated tables (LPIPS found
    as `leakbench run` finds it; `data_root` where the run's dataset lies now)."""
    manifest = read_run_manifest(run_dir)  # checked: names, numbers (one line, never a traceback)
    plan = [c["cell_id"] for c in manifest["cells"]]
    torch.set_num_threads(1)  # as every executor scores: the same float rounding, the same bytes
    with held_folder(run_dir, "a run of its suite, or a rescore"):  # not while a sweep writes it
        done = finished_cells(run_dir)
        load_client_plugins(manifest, spec_names(cell_path(run_dir, c) for c in plan if c in done))
        for cid in (c for c in plan if c in done):
            rescore_cell(cell_path(run_dir, cid), lpips_weights=lpips_weights, data_root=data_root)
        return consolidate(run_dir, plan)


def load_client_plugins(manifest: dict[str, Any], used: set[str]) -> None:
    """Import again the client-side plugins (datasets, defences, victims) the run loaded by module name whose
    registered names its cells' specs use (`used`). The run records every plugin its process had loaded,
    those of other suites run there too; only those its cells need must still be importable. A needed plugin
    that is gone is one ConfigError line."""
    for plugin in manifest.get("plugins", []):
        if not isinstance(plugin, dict) or not plugin.get("module"):
            continue
        names = {n for kind in CLIENT_KINDS for n in plugin.get(kind) or () if isinstance(n, str)}
        if names & used:
            load_client_plugin(str(plugin["module"]))


CLIENT_KINDS = ("datasets", "defences", "victims")
"""The registries whose plugins run in the harness (the client's side); attack plugins run in the worker."""


def spec_names(cell_dirs: Iterable[Path]) -> set[str]:
    """Every string in the stored specs of these cells (their dataset, defence and victim names among them);
    a cell without a readable manifest adds none (`rescore_cell` reports it)."""
    found: set[str] = set()
    for cell_dir in cell_dirs:
        try:
            found |= _strings(json.loads((cell_dir / "manifest.json").read_text()).get("spec"))
        except (OSError, ValueError, AttributeError):
            continue
    return found


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(_strings, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    return set()
