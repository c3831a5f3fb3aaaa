"""Pair reconstructions with ground-truth items: exact pairs first, then minimum total mean squared error.

Attacks that recover a whole batch return the items in an arbitrary order, so every metric first pairs each
ground-truth item with one reconstruction. The pairing (rule `MATCHING`) holds as many exact pairs as any
pairing can (exact as the caller's test says: 8-bit equal images, features within tolerance), and among those
the least summed per-item MSE (Hungarian algorithm on the pairwise MSE matrix). Where the plain least-MSE pairing
already holds that many exact pairs (nearly always: an exact pair costs almost nothing) it is the answer
unchanged; an answer with more rows than the batch (breaching's padding, rows mixing several images) can make the
plain pairing give an exact row to a near image and its own image a blank one (issue 46: imprint, K = 100). It
works on any trailing shape: images ``(b, C, H, W)`` or flat feature vectors ``(b, n)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching
from torch import Tensor

from leakbench.core.errors import LeakbenchError

MATCHING = "exact-first-hungarian-mse"
"""Name of the matching rule, recorded with every cell (`match_exact_first`). Cells scored before issue 46's second
session carry "hungarian-mse": the least total MSE alone (`match_by_mse`)."""

RULES = {
    MATCHING: "each ground-truth image paired with one reconstruction: as many exact pairs as any pairing holds, "
              "then the least total MSE (Hungarian method)",
    "hungarian-mse": "each ground-truth image paired with one reconstruction by the least total MSE alone "
                     "(Hungarian method; scored before issue 46's exact-first rule)",
}
"""What each recorded matching rule means, in words (reports, leaderboard)."""


def matching_words(rules: list[str]) -> str:
    """One sentence naming the matching rule(s) that scored the given cells (one label per cell)."""
    counts = {rule: rules.count(rule) for rule in sorted(set(rules))}
    if len(counts) <= 1:
        rule = next(iter(counts), MATCHING)
        return f"Matching: {rule} ({RULES.get(rule, 'a rule this version does not know')})."
    each = "; ".join(f"{rule} for {n} ({RULES.get(rule, 'unknown rule')})" for rule, n in counts.items())
    return f"Matching: the cells were scored under {len(counts)} rules: {each}; `leakbench rescore RUN` scores them " \
           "alike."


def matching_line(cells: pd.DataFrame) -> str:
    """`matching_words` for the cells of a run or page (their `matching` column; none: today's rule)."""
    return matching_words(cells["matching"].dropna().astype(str).tolist() if "matching" in cells else [])


ExactTest = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Whether truth rows ``i[k]`` and reconstruction rows ``j[k]`` are exact pairs, for index arrays ``i``, ``j``."""

UNMATCHED = -1
"""Entry of a matching for a ground-truth item that got no reconstruction."""


def _flat64(x: Tensor, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise LeakbenchError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise LeakbenchError(f"{what} must have a batch dimension, got a scalar")
    return x.detach().to(device="cpu", dtype=torch.float64).reshape(x.shape[0], -1)


def pairwise_mse(recon: Tensor, truth: Tensor) -> np.ndarray:
    """Mean squared error between every ground-truth item and every reconstruction.

    Args:
        recon: reconstructions, shape ``(m, ...)``.
        truth: ground truth, shape ``(b, ...)`` with the same trailing shape.

    Returns:
        float64 array ``cost`` of shape ``(b, m)`` with
        ``cost[i, j] = mean((recon[j] - truth[i]) ** 2)``. Entries involving a
        non-finite value (NaN or inf anywhere in the item) are ``inf``.
    """
    if tuple(recon.shape[1:]) != tuple(truth.shape[1:]):
        raise LeakbenchError(
            f"cannot match reconstructions of shape {tuple(recon.shape)} "
            f"with ground truth of shape {tuple(truth.shape)}"
        )
    r = _flat64(recon, "recon")
    t = _flat64(truth, "truth")
    d = max(t.shape[1], 1)
    r_ok = torch.isfinite(r).all(dim=1)
    t_ok = torch.isfinite(t).all(dim=1)
    r = torch.where(r_ok[:, None], r, torch.zeros_like(r))
    t = torch.where(t_ok[:, None], t, torch.zeros_like(t))
    # ||t - r||^2 = ||t||^2 + ||r||^2 - 2 t.r, without a (b, m, d) intermediate.
    sq = (t * t).sum(1)[:, None] + (r * r).sum(1)[None, :] - 2.0 * (t @ r.T)
    cost = (sq.clamp_min(0.0) / d).numpy()
    bad = ~(t_ok.numpy()[:, None] & r_ok.numpy()[None, :]) | ~np.isfinite(cost)
    cost[bad] = np.inf
    return cost


def match_by_mse(recon: Tensor, truth: Tensor) -> np.ndarray:
    """Pair each ground-truth item with one reconstruction, minimising total MSE.

    Args:
        recon: reconstructions, shape ``(m, ...)``; usually ``m == b``.
        truth: ground truth, shape ``(b, ...)`` with the same trailing shape.

    Returns:
        ``perm``, an int64 array of length ``b`` such that ``recon[perm[i]]`` is
        the reconstruction paired with ``truth[i]``. With ``m == b`` it is a
        permutation. Extra reconstructions (``m > b``) are left unused. With
        fewer reconstructions (``m < b``) the ground-truth items left over get
        ``UNMATCHED`` (-1) -- do not index with it; use :func:`apply_matching`.

    Non-finite reconstructions (a diverged attack) never make the assignment
    fail: any pair involving a NaN/inf costs more than every finite pairing put
    together, so such items are paired last, with whatever remains.
    """
    return _assign(pairwise_mse(recon, truth))


EXACT_BLOCK = 256
"""Candidate pairs tested for exactness at a time."""


def match_exact_first(recon: Tensor, truth: Tensor, is_exact: ExactTest, within: np.ndarray) -> np.ndarray:
    """Pair each ground-truth item with one reconstruction: as many exact pairs as possible, then the least total MSE.

    Args:
        recon: reconstructions, shape ``(m, ...)``.
        truth: ground truth, shape ``(b, ...)`` with the same trailing shape.
        is_exact: the exactness test of given pairs (`ExactTest`).
        within: per truth row (shape ``(b,)``), an MSE no exact pair exceeds: only pairs within it are tested.

    Returns:
        ``perm`` as :func:`match_by_mse` returns it. It is `match_by_mse`'s own whenever that already holds the
        most exact pairs a pairing can hold (a maximum bipartite matching of the exact pairs); otherwise the
        pairing of least total MSE among those holding that many.
    """
    cost = pairwise_mse(recon, truth)
    perm = _assign(cost)
    rows, cols = np.nonzero(cost <= np.asarray(within, dtype=np.float64)[:, None])
    keep = np.zeros(len(rows), dtype=bool)
    for start in range(0, len(rows), EXACT_BLOCK):  # bounded memory when many pairs are near (blank images)
        keep[start:start + EXACT_BLOCK] = is_exact(rows[start:start + EXACT_BLOCK], cols[start:start + EXACT_BLOCK])
    rows, cols = rows[keep], cols[keep]
    if not len(rows):
        return perm
    exact = np.zeros(cost.shape, dtype=bool)
    exact[rows, cols] = True
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=cost.shape)
    most = int((maximum_bipartite_matching(graph, perm_type="column") >= 0).sum())
    held = int(sum(exact[i, j] for i, j in enumerate(perm) if j != UNMATCHED))
    if held == most:
        return perm
    finite = np.isfinite(cost)
    penalty = ((float(cost[finite].max()) if finite.any() else 0.0) + 1.0) * (min(cost.shape) + 1)
    return _assign(np.where(exact, cost, cost + penalty))  # one more exact pair outweighs any MSE


def _assign(cost: np.ndarray) -> np.ndarray:
    """The least-total-cost pairing of `cost`'s rows (truth) with its columns (reconstructions), as `perm`;
    non-finite entries cost more than every finite pairing put together."""
    b, m = cost.shape
    perm = np.full(b, UNMATCHED, dtype=np.int64)
    if b == 0 or m == 0:
        return perm
    finite = np.isfinite(cost)
    k = min(b, m)
    top = float(cost[finite].max()) if finite.any() else 0.0
    big = min((top + 1.0) * (k + 1), np.finfo(np.float64).max / (4 * (k + 1)))
    cost = np.where(finite, cost, big)
    rows, cols = linear_sum_assignment(cost)
    perm[rows] = cols
    return perm


def apply_matching(recon: Tensor, perm: np.ndarray) -> Tensor:
    """Reorder reconstructions so that row ``i`` is the one paired with ``truth[i]``.

    Rows whose ``perm`` entry is ``UNMATCHED`` are filled with NaN (the grid
    writer and the metrics treat non-finite items as failed).

    Args:
        recon: reconstructions, shape ``(m, ...)``.
        perm: output of :func:`match_exact_first` or :func:`match_by_mse`, length ``b``.

    Returns:
        Floating tensor of shape ``(b, ...)`` on ``recon``'s device.
    """
    perm = np.asarray(perm, dtype=np.int64)
    dtype = recon.dtype if recon.is_floating_point() else torch.float32
    out = torch.full((len(perm), *recon.shape[1:]), float("nan"), dtype=dtype, device=recon.device)
    valid = perm != UNMATCHED
    if valid.any():
        idx = torch.as_tensor(perm[valid], device=recon.device)
        out[torch.as_tensor(np.flatnonzero(valid), device=recon.device)] = recon[idx].to(dtype)
    return out
