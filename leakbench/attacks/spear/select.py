"""SPEAR's selection step: k columns out of the filtered candidates, greedily.

Sparsest first (most zero rows), each kept only if it is linearly independent of those already kept
(the paper's greedy selection, first stage; its second stage is not implemented — on the paper route
leakbench's per-candidate LP check, `candidates.pattern_margin`, leaves few candidates to choose from).
"""

from __future__ import annotations

import torch


def select_independent(directions: torch.Tensor, zero_counts: torch.Tensor, k: int, *, rtol: float,
                       pool: int | None = None) -> torch.Tensor:
    """Indices (at most k, in the order chosen) of rows of `directions` (j, b) picked greedily.

    Rows are taken by decreasing `zero_counts` (j,), among the `pool` sparsest if given; a row is kept
    when it raises the rank of those kept (`torch.linalg.matrix_rank` with relative tolerance `rtol`).
    """
    order = torch.argsort(zero_counts, descending=True)
    if pool is not None:
        order = order[:pool]
    chosen: list[int] = []
    for i in order.tolist():
        if len(chosen) >= k:
            break
        if not chosen or int(torch.linalg.matrix_rank(directions[[*chosen, i]], rtol=rtol)) > len(chosen):
            chosen.append(i)
    return torch.as_tensor(chosen, dtype=torch.long, device=directions.device)
