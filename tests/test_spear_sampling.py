"""SPEAR's draws: kernels of drawn rows, and draws inside kernels of dimension ≥ 2 (sampling.split_kernels)."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.sampling import draw_directions, draw_rows, kernel_directions, split_kernels


def _sparse_factor(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit rows of L = D Qᵀ for b = 4 samples whose columns are those of a random rotation Q: row r of D has a
    non-zero entry for each sample active at neuron r. 30 rows are active only for samples 3, 4 (inactive for
    1 and 2), 20 for sample 1 alone, 20 for sample 2 alone, 30 for all four. Returns L and Q."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    blocks = []
    for active, n in (([2, 3], 30), ([0], 20), ([1], 20), ([0, 1, 2, 3], 30)):
        rows = torch.zeros(n, 4, dtype=torch.float64)
        rows[:, active] = torch.randn(n, len(active), generator=gen, dtype=torch.float64)
        blocks.append(rows)
    L = torch.cat(blocks) @ Q.T  # L Q = D: column j of Q vanishes on the rows where sample j is inactive
    return L / L.norm(dim=1, keepdim=True), Q


def test_draw_directions_is_draw_rows_then_kernel_directions() -> None:
    L, _ = _sparse_factor()
    q = draw_directions(L, 4, 50, torch.Generator().manual_seed(1))
    idx = draw_rows(L.shape[0], 4, 50, torch.Generator().manual_seed(1))
    q2, _ = kernel_directions(L, idx)
    assert torch.equal(q.isnan(), q2.isnan()) and torch.equal(q.nan_to_num(), q2.nan_to_num())
    assert ((L[idx] * q[:, None, :]).sum(-1).abs()[torch.isfinite(q).all(1)] < 1e-10).all()


def test_rank_deficient_draw_is_split_into_a_sample_column() -> None:
    """Three rows inactive for samples 1 and 2 leave the kernel span(e_1, e_2): SPEAR's direction is a mixture
    of the two (a miss); one more row inside that kernel isolates e_1 or e_2."""
    L, Q = _sparse_factor()
    idx = torch.tensor([[0, 1, 2]])  # all three active only for samples 3 and 4
    q, deficient = kernel_directions(L, idx)
    assert bool(deficient[0])
    if bool(torch.isfinite(q[0]).all()):
        assert float((q[0] @ Q).abs().max()) < 1 - 1e-6  # SPEAR's own direction: no column
    tol = torch.full((L.shape[0],), 1e-9, dtype=L.dtype)
    split = split_kernels(L, idx, tol, torch.Generator().manual_seed(0), tries=8)
    columns = Q.T[:2]
    hit = (split @ columns.T).abs().amax(dim=1) > 1 - 1e-9
    assert bool(hit.any())  # the tries that drew a row active for sample 1 or 2 alone isolate the other
    assert float((split @ Q[:, 2:]).abs().max()) < 1e-9  # every try stays inside span(q_1, q_2)
    full_rank = torch.tensor([[0, 1, 30]])  # rows active for {3,4}, {3,4} and {1}: the kernel is column 2 alone
    q, deficient = kernel_directions(L, full_rank)
    assert not bool(deficient[0]) and abs(float(q[0] @ Q[:, 1])) > 1 - 1e-9


def test_one_sample_left_draws_no_row() -> None:
    """b' = 1 (one sample left in the deflated space): a draw has no row, its direction is ±1 and nothing is
    split (the pivot test must not reduce over an empty axis)."""
    L = torch.ones(5, 1, dtype=torch.float64)
    q, deficient = kernel_directions(L, torch.zeros(3, 0, dtype=torch.long))
    assert q.shape == (3, 1) and bool((q.abs() == 1).all()) and not bool(deficient.any())
