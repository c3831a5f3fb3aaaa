"""SPEAR's steps as named functions: the selection step, and which knob each route reads."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.select import select_independent


def test_selection_takes_sparsest_first_and_skips_dependent_directions() -> None:
    e = torch.eye(3, dtype=torch.float64)
    directions = torch.stack([e[0], e[0] + e[1], e[1], e[2]])
    zeros = torch.tensor([5, 9, 7, 1])
    # sparsest (index 1), then 2; 0 is in their span; 3 completes the basis
    assert select_independent(directions, zeros, 3, rtol=1e-9).tolist() == [1, 2, 3]
    assert select_independent(directions, zeros, 2, rtol=1e-9).tolist() == [1, 2]
    assert select_independent(directions, zeros, 3, rtol=1e-9, pool=3).tolist() == [1, 2]
