"""Score a reconstructed batch against its ground truth: one table row per item.

Reconstructions are first paired with ground-truth items by
:func:`leakbench.metrics.matching.match_exact_first` (as many exact pairs as possible, then
the least total MSE), unless a matching is given (e.g.
the one found on the recovered features of images inverted from them). A missing
reconstruction (the attack failed and produced nothing, or produced fewer items
than the batch: a partial answer holds only its verified samples) gives NaN
metrics, ``matched_recon == -1`` and ``exact == False``.

This module is the one scoring path: cells, feature inversion, ``leakbench attack
--out``, rescore and reports all score with :func:`score_images` /
:func:`score_features` and align with :func:`aligned_to_truth`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from leakbench.core.errors import LeakbenchError
from leakbench.core.reconstruction import ANSWERED
from leakbench.metrics.image import exact, mse, psnr, ssim
from leakbench.metrics.lpips_metric import LpipsScorer
from leakbench.metrics.matching import UNMATCHED, apply_matching, match_exact_first
from leakbench.metrics.reid import reidentify

IMAGE_COLUMNS = ("image", "matched_recon", "mse", "psnr", "ssim", "lpips", "exact", "reid_rank")
"""Columns of :func:`score_images` (``reid_rank``: :mod:`leakbench.metrics.reid`)."""

FEATURE_COLUMNS = ("image", "matched_recon", "rel_error", "max_abs_error", "exact")
"""Columns of :func:`score_features`."""


def _frame(columns: tuple[str, ...], b: int, perm: np.ndarray, values: dict[str, np.ndarray]) -> pd.DataFrame:
    data: dict[str, np.ndarray] = {
        "image": np.arange(b, dtype=np.int64),
        "matched_recon": perm.astype(np.int64),
    }
    for name in columns[2:]:
        if name == "exact":
            data[name] = values.get(name, np.zeros(b, dtype=bool)).astype(bool)
        else:
            data[name] = values.get(name, np.full(b, np.nan)).astype(np.float64)
    return pd.DataFrame(data, columns=list(columns))


def _scatter(perm: np.ndarray, matched: Tensor, fill: float | bool) -> np.ndarray:
    """Place per-pair values at the ground-truth rows that got a reconstruction."""
    arr = matched.detach().cpu().numpy()
    out = np.full(len(perm), fill, dtype=arr.dtype if arr.dtype == bool else np.float64)
    out[perm != UNMATCHED] = arr
    return out


def check_matching(perm: np.ndarray, b: int, m: int) -> np.ndarray:
    """A given matching as int64, refused unless it pairs each of ``b`` truth rows with a distinct one of
    ``m`` reconstructions or with ``UNMATCHED``."""
    perm = np.asarray(perm)
    if perm.shape != (b,) or (perm.size and not np.issubdtype(perm.dtype, np.integer)):
        raise LeakbenchError(f"a matching must hold one integer per ground-truth item ({b}), got {perm.dtype} "
                             f"shaped {perm.shape}")
    perm = perm.astype(np.int64)
    used = perm[perm != UNMATCHED]
    if ((used < 0) | (used >= m)).any() or len(np.unique(used)) != len(used):
        raise LeakbenchError(f"matching {perm.tolist()} does not pair truth rows with distinct ones of "
                             f"{m} reconstructions")
    return perm


EXACT_IMAGE_MSE = (1.0 / 255.0) ** 2 * (1.0 + 1e-9)
"""No 8-bit exact image pair has a larger MSE: every pixel of both rounds to the same level, so the two differ by at
most one level (1/255; the factor covers the pairwise formula's rounding)."""


def _match_images(r: Tensor, t: Tensor) -> np.ndarray:
    """The exact-first matching of clamped images `r` to truth `t` (`metrics.image.exact` decides exact)."""
    def is_exact(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return exact(r[torch.as_tensor(j)], t[torch.as_tensor(i)]).numpy()
    return match_exact_first(r, t, is_exact, np.full(t.shape[0], EXACT_IMAGE_MSE))


def _feature_scale(t: Tensor) -> Tensor:
    """Each feature item's scale for exactness: max(1, max |t|) (1 for an item of no features)."""
    return t.abs().amax(dim=1).clamp_min(1.0) if t.shape[1] else torch.ones(t.shape[0], dtype=torch.float64)


def _match_features(r: Tensor, t: Tensor, atol: float) -> np.ndarray:
    """The exact-first matching of features `r` to truth `t`: exact is a largest error within `atol` of the
    item's scale (max(1, max |t|)), so an exact pair's MSE is within the square of that."""
    scale = _feature_scale(t)

    def is_exact(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        rows = torch.as_tensor(i)
        return ((r[torch.as_tensor(j)] - t[rows]).abs().amax(dim=1) <= atol * scale[rows]).numpy()
    return match_exact_first(r, t, is_exact, ((atol * scale) ** 2 * (1.0 + 1e-9)).numpy())


def _image_values(r: Tensor, t: Tensor, perm: np.ndarray, lpips: LpipsScorer | None) -> dict[str, np.ndarray]:
    """The image metrics of the pairs of ``perm``, scattered to ground-truth rows."""
    rows = perm != UNMATCHED
    if not rows.any():
        return {}
    rr = r[torch.as_tensor(perm[rows])]
    tt = t[torch.as_tensor(np.flatnonzero(rows))]
    values = {
        "mse": _scatter(perm, mse(rr, tt), np.nan),
        "psnr": _scatter(perm, psnr(rr, tt), np.nan),
        "ssim": _scatter(perm, ssim(rr, tt), np.nan),
        "exact": _scatter(perm, exact(rr, tt), False),
    }
    if lpips is not None:
        values["lpips"] = _scatter(perm, lpips.score(rr, tt), np.nan)
    return values


def score_images(recon: Tensor | None, truth: Tensor, *, lpips: LpipsScorer | None = None,
                 perm: np.ndarray | None = None, distractors: Tensor | None = None) -> pd.DataFrame:
    """Per-image metrics of a reconstructed image batch.

    Args:
        recon: reconstructions ``(m, C, H, W)`` in [0, 1], any order, or ``None``
            when the attack produced nothing.
        truth: ground truth ``(b, C, H, W)`` in [0, 1].
        lpips: a real LPIPS scorer, or ``None`` to leave the column NaN.
        perm: a matching to score instead of the exact-first one: for each
            ground-truth row the index of its reconstruction, ``UNMATCHED`` for
            none (e.g. the feature matching, for images inverted from features).
        distractors: other images of the truth's split, disjoint from it, to rank each reconstruction's
            true image among (:func:`leakbench.metrics.reid.reidentify`, by LPIPS when ``lpips`` is
            given), or ``None`` to leave ``reid_rank`` NaN.

    Returns:
        One row per ground-truth image with columns ``image``, ``matched_recon``,
        ``mse``, ``psnr``, ``ssim``, ``lpips``, ``exact`` (see
        :mod:`leakbench.metrics.image`; all on images clamped to [0, 1]) and ``reid_rank``.
        Matching is done on the clamped images too.
    """
    if truth.dim() != 4:
        raise LeakbenchError(f"expected ground-truth images shaped (b, C, H, W), got {tuple(truth.shape)}")
    b = truth.shape[0]
    if recon is None:
        return _frame(IMAGE_COLUMNS, b, np.full(b, UNMATCHED, dtype=np.int64), {})
    if recon.dim() != 4 or tuple(recon.shape[1:]) != tuple(truth.shape[1:]):
        raise LeakbenchError(
            f"reconstruction shape {tuple(recon.shape)} does not fit ground truth {tuple(truth.shape)}"
        )
    r = recon.detach().cpu().clamp(0.0, 1.0)
    t = truth.detach().cpu()
    perm = _match_images(r, t) if perm is None else check_matching(perm, b, r.shape[0])
    values = _image_values(r, t, perm, lpips)
    if distractors is not None:
        values["reid_rank"] = reidentify(aligned_to_truth(r, perm), t, distractors, lpips=lpips).ranks
    return _frame(IMAGE_COLUMNS, b, perm, values)


def stored_matching(records: pd.DataFrame) -> np.ndarray:
    """The matching kept in a cell's records (``matched_recon``), in ground-truth order (``image``)."""
    return records.sort_values("image")["matched_recon"].to_numpy(dtype=np.int64)


def recovered(records: pd.DataFrame) -> pd.Series:
    """Per record (one ground-truth item of a cell): whether the cell's answer gave it a reconstruction —
    the cell answered (status ok, or partial: the samples its attack verified) and the matching paired one
    with this item. A failed cell's items, and those a partial answer left unmatched, are not recovered."""
    got = records["status"].isin(ANSWERED)
    if "matched_recon" in records:
        got &= records["matched_recon"] != UNMATCHED
    return got


def aligned_to_truth(recon: Tensor | None, perm: np.ndarray) -> Tensor | None:
    """The reconstruction aligned to the ground truth by a matching (row ``i`` pairs with truth row ``i``;
    NaN where unmatched, drawn as failed), as float32; None when there is no reconstruction."""
    return None if recon is None else apply_matching(recon, perm).to(torch.float32)


def score_features(recon_feats: Tensor | None, truth_feats: Tensor, *, atol: float = 1e-4) -> pd.DataFrame:
    """Per-item metrics of reconstructed feature vectors (e.g. a layer's inputs).

    Args:
        recon_feats: reconstructions ``(m, n)``, any order, or ``None``.
        truth_feats: ground truth ``(b, n)``.
        atol: absolute tolerance for ``exact``, relative to the item's scale.

    Returns:
        One row per ground-truth item with columns ``image``, ``matched_recon``,
        ``rel_error`` (``||r - t|| / ||t||``; 0 when both are zero, inf when
        only ``t`` is), ``max_abs_error`` and ``exact``
        (``max_abs_error <= atol * max(1, max|t|)``).
    """
    if truth_feats.dim() != 2:
        raise LeakbenchError(f"expected features shaped (b, n), got {tuple(truth_feats.shape)}")
    b = truth_feats.shape[0]
    if recon_feats is None:
        return _frame(FEATURE_COLUMNS, b, np.full(b, UNMATCHED, dtype=np.int64), {})
    if recon_feats.dim() != 2 or recon_feats.shape[1] != truth_feats.shape[1]:
        raise LeakbenchError(
            f"feature reconstruction shape {tuple(recon_feats.shape)} does not fit "
            f"ground truth {tuple(truth_feats.shape)}"
        )
    r = recon_feats.detach().to("cpu", torch.float64)
    t = truth_feats.detach().to("cpu", torch.float64)
    perm = _match_features(r, t, atol)
    rows = perm != UNMATCHED
    rr = r[torch.as_tensor(perm[rows])]
    tt = t[torch.as_tensor(np.flatnonzero(rows))]
    diff = rr - tt
    err = torch.linalg.vector_norm(diff, dim=1)
    norm = torch.linalg.vector_norm(tt, dim=1)
    rel = torch.where(norm > 0, err / norm.clamp_min(torch.finfo(torch.float64).tiny), err * float("inf"))
    rel = torch.where(err == 0, torch.zeros_like(rel), rel)  # 0/0 -> 0
    max_abs = diff.abs().amax(dim=1) if diff.shape[1] else torch.zeros(diff.shape[0], dtype=torch.float64)
    # amax ignores nothing: NaN propagates, so a NaN item is never exact.
    scale = _feature_scale(tt)
    is_exact = max_abs <= atol * scale
    values = {
        "rel_error": _scatter(perm, rel, np.nan),
        "max_abs_error": _scatter(perm, max_abs, np.nan),
        "exact": _scatter(perm, is_exact, False),
    }
    return _frame(FEATURE_COLUMNS, b, perm, values)


__all__ = ["FEATURE_COLUMNS", "IMAGE_COLUMNS", "aligned_to_truth", "check_matching", "score_features", "score_images",
           "stored_matching"]
