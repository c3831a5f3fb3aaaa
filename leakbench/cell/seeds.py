"""The seed rules of a cell that are not the spec's own seed: the attack's seed, derived from the cell id.

The spec's `seed` draws the batch and initialises the model (`cell.spec`); the attack never gets it.
"""

from __future__ import annotations

import hashlib


def attack_seed(cell_id: str) -> int:
    """The attack's seed for a cell: 31 bits of sha256(cell id + ":attack"); never the batch's seed
    (a seed equal to the batch seed would let an attack re-draw the batch)."""
    return int(hashlib.sha256(f"{cell_id}:attack".encode()).hexdigest()[:8], 16) & 0x7FFFFFFF
