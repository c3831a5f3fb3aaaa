"""Whether a stored cell may be reused: it was computed from what this run would compute it from.

A cell id (`cell.cell_id`) hashes the configuration as the suite states it, and stays stable across
releases so that stored runs resume. What it does not cover is stored in each cell's manifest
(`fingerprint.provenance`) and compared before a resumed run reuses the cell (`stale_cells`):

- the resolved hyperparameters (the attack's Config with every default filled in; stored in every
  cell's summary): a default changed in the code gives other values → the cell is recomputed;
- the attack's code (`fingerprint.attack_code`: a hash of the source files of the attack class and its bases,
  the whole sub-package for attacks in one, as SPEAR's): changed → recomputed. Modules the attack
  only imports (shared helpers) are not covered;
- the batch (`fingerprint.batch_fingerprint`: its images rounded to 8 bits, and labels; cells stored before
  fingerprints: the dataset indices): another install serving other images for the same cell (a
  wheel without scikit-image has 2 photos in `embedded` instead of 6) → refused, not recomputed:
  recomputing would silently replace results on one set of images by results on another, and such a
  difference is an install's (a missing package or other data files), which the user should fix;
- a trained victim (`victim_hash`, the victim cache's key: data, model, recipe and the update rule it
  trained under): another one → recomputed (issue 24: a cell with noise, DP or defences now trains its
  victim under them, where it trained plainly before);
- the git revision: a different one is said (`revision_note`), and the cell reused when the above agree.

Cells stored before the attack's code was recorded are reused (their code cannot be compared).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakbench.cell.draw import draw_batch
from leakbench.cell.spec import CellSpec
from leakbench.datasets import Batch, load_dataset
from leakbench.harness.cell import build_attack
from leakbench.harness.fingerprint import attack_code, batch_fingerprint, resolved
from leakbench.harness.victim import victim_key
from leakbench.models.victims import victim_hash
from leakbench.records.cells import cell_path


@dataclass
class Staleness:
    """Stored cells that may not be reused: recompute (id → why) and refuse (id → why); and the git
    revisions of the reusable ones (revision → count)."""

    recompute: dict[str, str] = field(default_factory=dict)
    refuse: dict[str, str] = field(default_factory=dict)
    revisions: Counter[str | None] = field(default_factory=Counter)


def check_stored(stored: dict[str, Any], hyperparameters: str, code: str, batch: Batch,
                 victim: str = "") -> tuple[str, str]:
    """('recompute' or 'refuse' or '', why) for one stored cell manifest against this run's resolved
    hyperparameters (`resolved`), attack code, batch and trained victim's cache hash ("" at init)."""
    fingerprint = stored.get("batch_fingerprint")
    if fingerprint is not None and fingerprint != batch_fingerprint(batch):
        return "refuse", "its batch holds other images than this install's dataset serves"
    if fingerprint is None and stored.get("dataset_indices") != list(batch.indices):
        return "refuse", "its batch is other images of the dataset than this install draws"
    if resolved(stored.get("summary", {}).get("hyperparameters", {})) != hyperparameters:
        return "recompute", "its resolved hyperparameters differ from this version's"
    if stored.get("attack_code") not in (None, code):
        return "recompute", "its attack's code has changed"
    if victim and stored.get("summary", {}).get("victim_hash") not in (None, victim):
        return "recompute", "its victim was trained otherwise (another update rule, recipe or data)"
    return "", ""


def stale_cells(run_dir: Path, specs: dict[str, CellSpec]) -> Staleness:
    """Which of the intact stored cells `specs` (id → spec) may not be reused, and the git revisions of the
    others. Each dataset is loaded once, each distinct attack configuration built once."""
    out = Staleness()
    datasets: dict[tuple[Any, ...], Any] = {}
    attacks: dict[str, tuple[str, str]] = {}
    for cid, spec in specs.items():
        where = (spec.dataset, spec.data_root, spec.image_size)
        if where not in datasets:
            datasets[where] = load_dataset(spec.dataset, data_root=Path(spec.data_root) if spec.data_root else None,
                                           image_size=spec.image_size)
        key = json.dumps([spec.attack, spec.hyperparameters, spec.layer], sort_keys=True, default=str)
        if key not in attacks:
            attack = build_attack(spec)
            attacks[key] = resolved(attack.hyperparameters()), attack_code(type(attack))
        stored = json.loads((cell_path(run_dir, cid) / "manifest.json").read_text())
        trained = victim_hash(victim_key(spec, datasets[where])) if spec.train_epochs else ""
        verdict, why = check_stored(stored, *attacks[key], draw_batch(datasets[where], spec), trained)
        if verdict:
            (out.recompute if verdict == "recompute" else out.refuse)[cid] = why
        else:
            out.revisions[stored.get("git_revision")] += 1
    return out


def revision_note(revisions: Counter[str | None], current: str | None) -> str:
    """'' when every reused cell ran at the current git revision, else a line saying which ran at which."""
    other = {rev: n for rev, n in revisions.items() if rev != current}
    if not other:
        return ""
    listed = ", ".join(f"{n} at {(rev or 'unknown')[:12]}" for rev, n in sorted(other.items(), key=str))
    return (f"{sum(other.values())} reused cells were computed at another git revision ({listed}; now "
            f"{(current or 'unknown')[:12]}); their hyperparameters and attack code are unchanged")
