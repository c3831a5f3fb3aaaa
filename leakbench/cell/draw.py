"""The cell's private batch drawn from its loaded dataset: one client's, or K disjoint clients' batches.

Scoring, the reuse check and the ground truth that reports re-derive (`records.truth`) all draw it here.
"""

from __future__ import annotations

import numpy as np

from leakbench.cell.spec import CellSpec, client_count
from leakbench.core.errors import ConfigError
from leakbench.datasets import Batch, ImageDataset, partition, sample_batch
from leakbench.datasets.base import concat_batches


def draw_batch(dataset: ImageDataset, spec: CellSpec) -> Batch:
    """The cell's batch (`truth_size(spec)` images) from its loaded dataset: the whole dataset at init, the
    attack part for a trained victim; K batches of b for a cell of K clients (`draw_client_batches`)."""
    return draw_client_batches(dataset, spec.batch_size, spec.seed, client_count(spec), trained=spec.train_epochs > 0)


def draw_client_batches(dataset: ImageDataset, batch_size: int, seed: int, clients: int = 1, *,
                        trained: bool = False) -> Batch:
    """`clients` disjoint batches of `batch_size` images, one after the other, drawn from `seed`.

    Client 0's is exactly the batch a cell of one client draws (`sample_batch` from `seed`); client
    k > 0 draws from stream k of the seed among the images no earlier client holds. The pool is the
    whole dataset, or its attack part for a `trained` victim.
    """
    pool = partition(dataset).attack if trained else None
    first = sample_batch(dataset, batch_size, seed, pool=pool)
    if clients == 1:
        return first
    everything = np.arange(len(dataset)) if pool is None else np.asarray(pool)
    if clients * batch_size > len(everything):
        where = " in its attack part" if trained else ""
        raise ConfigError(f"{clients} clients of {batch_size} images need {clients * batch_size} distinct images; "
                          f"dataset {dataset.name!r} offers {len(everything)}{where}")
    batches = [first]
    for k in range(1, clients):
        taken = np.fromiter((i for b in batches for i in b.indices), dtype=np.int64)
        batches.append(sample_batch(dataset, batch_size, seed, pool=np.setdiff1d(everything, taken), stream=k))
    return concat_batches(batches)


DISTRACTOR_STREAM = 0xD157
"""Random stream of a seed that orders a split for drawing re-identification distractors (`metrics.reid`)."""


def distractor_indices(pool: np.ndarray, exclude: tuple[int, ...], seed: int, n: int) -> np.ndarray:
    """Up to `n` dataset indices from `pool`, none in `exclude` (the batch), sorted: the first ones of a
    permutation of `pool` drawn from `seed` alone, so the order is fixed per (split, seed) whatever the batch."""
    order = np.asarray(pool)[np.random.default_rng([seed, DISTRACTOR_STREAM]).permutation(len(pool))]
    return np.sort(order[~np.isin(order, np.asarray(exclude, dtype=np.int64))][:max(n, 0)])


def draw_distractors(dataset: ImageDataset, spec: CellSpec, batch: Batch, n: int) -> np.ndarray:
    """The cell's re-identification distractors: `n` (or all its split holds besides the batch) dataset indices
    from the split its batch was drawn from (the whole dataset at init, the attack part for a trained victim),
    disjoint from the batch (every client's), fixed per (dataset, seed). Scoring draws them after the attack:
    the attack never sees them."""
    pool = partition(dataset).attack if spec.train_epochs > 0 else np.arange(len(dataset))
    return distractor_indices(pool, batch.indices, spec.seed, n)
