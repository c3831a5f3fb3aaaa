"""Uncherry-picked grids: which images of a cell's batch a grid shows, fixed before any attack runs.

The choice depends only on the grid seed and the batch (`batch_id`: dataset, image size, batch size,
seed) — never on the attack or a reconstruction — so every attack on the same batch shows the same
images, and it is stored in the run manifest when the sweep is planned.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def grid_selection(batch_key: str, batch_size: int, count: int, seed: int) -> list[int]:
    """`count` distinct batch positions (all of them when the batch is smaller), drawn from `seed`.

    The positions index the batch as sampled (`dataset_index` order), sorted ascending.
    """
    rng = np.random.default_rng([seed, int(batch_key[:15], 16)])
    k = min(count, batch_size)
    return sorted(int(i) for i in rng.choice(batch_size, size=k, replace=False))


def check_selection(value: Any, batch_size: int, what: str) -> list[int]:
    """A stored grid selection (of `what`) when it is distinct positions of a batch of `batch_size`, else ValueError."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ValueError(f"{what}: grid_selection {value!r} is not a list of batch positions")
    if len(set(value)) != len(value) or not all(0 <= i < batch_size for i in value):
        raise ValueError(f"{what}: grid_selection {value} is not distinct positions of its batch of {batch_size}")
    return value
