"""A scored cell as the files of its folder: its manifest (the environment it ran in, its spec, seeds and
timing) beside the attack's answer and its scoring, handed to the record store (`records.cells`) to write.

The runner builds them here, above the store: the manifest records the run's environment (loaded plugins,
the sandbox's isolation level: `harness.environment`), which the store never imports.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leakbench.cell.seeds import attack_seed
from leakbench.cell.spec import spec_dict
from leakbench.harness.environment import environment
from leakbench.harness.scoring import CellResult
from leakbench.records.artifacts import attack_output_files, json_bytes
from leakbench.records.cells import CellFiles, write_cell_files


def manifest(result: CellResult, selection: list[int] | None = None) -> dict[str, Any]:
    """Versions, seeds, settings, timing, machine and grid selection for one cell."""
    seed = result.spec.seed
    return {
        **environment(),
        "cell_id": result.summary["cell_id"],
        "spec": spec_dict(result.spec),
        "seeds": {"batch": seed, "model_init": seed, "attack": attack_seed(result.summary["cell_id"]),
                  **({"dp_noise": seed} if result.spec.dp else {}),
                  **({"train_shuffle": result.spec.recipe.seed} if result.spec.recipe else {})},
        "dataset_indices": [int(i) for i in result.records["dataset_index"]],
        "grid_selection": selection,
        "summary": result.summary,
        **result.provenance,  # attack_code, batch_fingerprint: checked before the cell is reused (harness.reuse)
    }


def cell_files(result: CellResult, selection: list[int] | None = None) -> CellFiles:
    """The cell's stored answer (reconstruction.npz, attack.json) and its scoring (records.parquet,
    summary.json, manifest.json with the grid's pre-drawn batch positions `selection`)."""
    records = io.BytesIO()
    result.records.to_parquet(records, index=False)
    return CellFiles(result.summary["cell_id"], {
        **attack_output_files(result.output), "records.parquet": records.getvalue(),
        "summary.json": json_bytes(result.summary), "manifest.json": json_bytes(manifest(result, selection))})


def write_cell(result: CellResult, out: Path, selection: list[int] | None = None,
               extra: Callable[[Path], None] | None = None) -> None:
    """Write the cell's files (`cell_files`) into `out`, all or nothing (`write_cell_files`)."""
    write_cell_files(cell_files(result, selection), out, extra)
