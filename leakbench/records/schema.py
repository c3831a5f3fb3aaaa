"""The record columns, declared once.

records.parquet holds one row per image per cell: the cell's axes (constant within a cell), then
the per-image columns. cells.parquet holds one row per cell: the axes (in `AXIS_COLUMNS` order, then
any other axis the cell's records carry), the `SUMMARY_COLUMNS` of summary.json, then
`CELL_EXTRA_COLUMNS`. A new axis (e.g. a defence's settings) needs no edit here: every record
column that is not per-image is an axis; a new metric is declared where it is computed (`metrics.score`).
"""

from __future__ import annotations

from collections.abc import Iterable

from leakbench.records.trust import TRUST_COLUMNS

AXIS_COLUMNS = ("cell_id", "attack", "dataset", "batch_size", "width", "depth", "layer", "seed", "dp",
                "dp_sigma", "dp_clip", "dp_delta", "dp_q", "dp_steps", "dp_epsilon", "dp_accountant", "arch",
                "client", "fedavg_epochs", "fedavg_minibatch", "fedavg_lr", "inversion_steps", "train_epochs",
                "train_optimizer", "train_lr", "train_batch", "train_accuracy", "test_accuracy", "victim_hash",
                "threat", "labels_known", "batch_size_known", "noise_sigma", "noise_scale", "train_epsilon",
                "noise_snr")
"""The known axes, in cells.parquet order (which must not change: stored tables stay byte-identical). The last
two only some cells have: `train_epsilon` (a victim trained with DP-SGD) and `noise_snr` (a cell with noise)."""

def per_image_columns() -> tuple[str, ...]:
    """Record columns that describe one image (or the cell's outcome, repeated per image): never axes. The
    metrics are those `leakbench.metrics.score` declares, so a new metric is added there only (imported
    here when called: the attack worker's sandbox imports this module and must not start threads)."""
    from leakbench.metrics.score import FEATURE_COLUMNS, IMAGE_COLUMNS

    return ("dataset_index", "space", *dict.fromkeys((*IMAGE_COLUMNS, *FEATURE_COLUMNS)), "image_exact", "status",
            "lpips_net", "isolation")

SUMMARY_COLUMNS = ("space", "status", "reason", "seconds", "n_images", "exact_fraction", "psnr_mean",
                   "psnr_median", "psnr_min", "psnr_inf", "ssim_mean", "lpips_mean", "lpips_note", "lpips_net",
                   "lpips_source", "lpips_verified", "matching", "isolation", *TRUST_COLUMNS, "failure", "reid_top1",
                   "reid_n", "reid_distance")
"""The keys of summary.json that become cells.parquet columns, in order (`TRUST_COLUMNS`: `records.trust`;
cells stored without them get them from their manifest when read, `records.runs.read_run`). `failure`: a failed
cell's failure kind (`core.reconstruction.Failure`, issue 43), None for an answer; cells stored without it read
as unknown (None), and get their leakage state when read (`records.cell_state.with_states`). The last three:
re-identification (`harness.scoring.reid_columns`), None for cells stored before issue 43."""

FULL = "landlock+seccomp"
"""The `isolation` of a cell whose attack ran in the operating-system sandbox (`harness.sandbox`)."""
GUARD_ONLY = "python-guard only"
"""The level where the kernel (or the install) cannot sandbox: the audit-hook guard alone."""

CELL_EXTRA_COLUMNS = ("failures", "attack_stats", "hyperparameters")
"""The last cells.parquet columns: images without a reconstruction, and the attack's stats and hyperparameters
as JSON."""

TIMING_COLUMNS = ("seconds", "attack_stats")
"""Per-cell columns that hold wall-clock measurements: the only ones two runs may differ in."""


def axis_columns(columns: Iterable[str]) -> list[str]:
    """The axes among a cell's record columns: the known ones in `AXIS_COLUMNS` order, then every other
    column that is neither per-image nor a summary column, in record order."""
    present = list(columns)
    known = [c for c in AXIS_COLUMNS if c in present]
    skip = {*AXIS_COLUMNS, *per_image_columns(), *SUMMARY_COLUMNS, *CELL_EXTRA_COLUMNS}
    return known + [c for c in present if c not in skip]
