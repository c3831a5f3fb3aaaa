"""Uncherry-picked grids: which images of a cell's batch a grid shows, fixed before any attack runs.

The choice depends only on the grid seed and the batch (`batch_id`: dataset, image size, batch size,
seed) — never on the attack or a reconstruction — so every attack on the same batch shows the same
images, and it is stored in the run manifest when the sweep is planned.
"""

from __future__ import annotations

import numpy as np


def grid_selection(batch_key: str, batch_size: int, count: int, seed: int) -> list[int]:
    """`count` distinct batch positions (all of them when the batch is smaller), drawn from `seed`.

    The positions index the batch as sampled (`dataset_index` order), sorted ascending.
    """
    rng = np.random.default_rng([seed, int(batch_key[:15], 16)])
    k = min(count, batch_size)
    return sorted(int(i) for i in rng.choice(batch_size, size=k, replace=False))
