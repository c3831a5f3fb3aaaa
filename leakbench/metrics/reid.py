"""Re-identification: a threshold-free leakage measure.

Each reconstructed image is ranked against a gallery of the batch's ground truth plus N distractors, other
images of the same dataset split that the attack never saw (`cell.draw.draw_distractors`): its rank is the
place of its own true image when the gallery is sorted by distance to the reconstruction (1 = its true image
is the nearest). Top-1 re-identification (``reid@N``) is the fraction of a batch's images ranked 1: an
attacker holding the reconstruction and the gallery would pick the right person's image. Unlike "exact" it
needs no threshold, and unlike PSNR it says whether the image is recognisable among others of its kind.

Ranks are pessimistic: a gallery image exactly as near as the true one (within `TIE_TOLERANCE`) counts as
nearer, so a blank or constant reconstruction, equally near every standardised image, is never ranked 1.

Distance (recorded with every cell as ``reid_distance``):

- ``lpips-alex`` / ``lpips-vgg``: LPIPS v0.1 with the verified pretrained trunk (`lpips_metric.load_lpips`;
  the harness never passes an unverified scorer). Every gallery image goes through the network once per
  cell, in chunks; distances come from the cached normalised features
  (`LpipsScorer.layer_features`), not from one forward pass per pair.
- ``pixel-l2-standardised`` (`PIXEL_DISTANCE`), without verified LPIPS weights: the mean squared difference
  of the two images each standardised to zero mean and unit variance over its pixels (= 2 (1 − ρ), ρ the
  pixels' Pearson correlation), blind to the global brightness and contrast shifts that optimisation
  attacks' reconstructions often carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from leakbench.core.errors import LeakbenchError
from leakbench.metrics.lpips_metric import LpipsScorer

DEFAULT_DISTRACTORS = 1000
"""N, the distractors drawn per cell (fewer when the split holds fewer images besides the batch)."""

PIXEL_DISTANCE = "pixel-l2-standardised"
"""The distance's name when no verified LPIPS scorer is given."""

TIE_TOLERANCE = 1e-9
"""Gallery images at most this much farther than the true image count as nearer (pessimistic ties)."""

CONSTANT_STD = 1e-4
"""A pixel standard deviation up to this (far under one 8-bit step) is a constant image: it is not standardised,
so float noise on a blank reconstruction is not blown up into a pattern."""

CHUNK = 256
"""Gallery images embedded at a time (bounds memory: VGG features of a 32×32 image are 123k floats)."""

Embedding = list[tuple[Tensor, Tensor, float]]
"""Per layer: features ``f`` (n, D) float64, weighted features ``w·f`` (n, D), and the layer's scale; the
distance of images i and j is the sum over layers of scale · Σ w (f_i − f_j)²."""


@dataclass(frozen=True)
class Reidentification:
    """Per ground-truth image the rank of its true image among the gallery (float; NaN where it has no
    reconstruction), the number of distractors ``n`` besides the batch, and the distance's name."""

    ranks: np.ndarray
    n: int
    distance: str

    @property
    def top1(self) -> float:
        """Fraction of the batch's images ranked 1 (an image without a reconstruction is not re-identified)."""
        return float(np.mean(self.ranks == 1)) if len(self.ranks) else float("nan")


def distance_name(lpips: LpipsScorer | None) -> str:
    """The distance re-identification uses with this scorer: ``lpips-<net>``, else `PIXEL_DISTANCE`."""
    return PIXEL_DISTANCE if lpips is None else f"lpips-{lpips.net}"


def _pixel_embedding(images: Tensor) -> Embedding:
    """Each image flattened and standardised (zero mean, unit variance; a constant image, its pixels' spread
    at most `CONSTANT_STD`, gives zeros)."""
    x = images.detach().to("cpu", torch.float64).clamp(0.0, 1.0).flatten(1)
    z = x - x.mean(dim=1, keepdim=True)
    std = z.pow(2).mean(dim=1, keepdim=True).sqrt()
    z = torch.where(std > CONSTANT_STD, z / std.clamp_min(CONSTANT_STD), torch.zeros_like(z))
    return [(z, z, 1.0 / max(z.shape[1], 1))]


def _lpips_embedding(scorer: LpipsScorer) -> Callable[[Tensor], Embedding]:
    """The LPIPS layers' normalised features, weighted by each layer's linear head, averaged over (H, W)."""
    def embed(images: Tensor) -> Embedding:
        out: Embedding = []
        for f, w in scorer.layer_features(images):
            n, _, h, width = f.shape
            f64 = f.to(torch.float64)
            wf = f64 * w.to(torch.float64).reshape(1, -1, 1, 1)
            out.append((f64.reshape(n, -1), wf.reshape(n, -1), 1.0 / (h * width)))
        return out
    return embed


def _self_terms(e: Embedding) -> Tensor:
    return sum((scale * (f * wf).sum(dim=1) for f, wf, scale in e), torch.zeros(e[0][0].shape[0], dtype=torch.float64))


def pairwise_distances(queries: Tensor, gallery: Tensor, embed: Callable[[Tensor], Embedding], *,
                       chunk: int = CHUNK) -> Tensor:
    """Distances (m, g) of every query to every gallery image; each image is embedded once."""
    q = embed(queries)
    q_self = _self_terms(q)
    blocks = []
    for start in range(0, gallery.shape[0], chunk):
        g = embed(gallery[start:start + chunk])
        d = q_self[:, None] + _self_terms(g)[None, :]
        for (_, qwf, scale), (gf, _, _) in zip(q, g, strict=True):
            d -= 2.0 * scale * (qwf @ gf.T)
        blocks.append(d)
    return torch.cat(blocks, dim=1) if blocks else torch.empty(queries.shape[0], 0, dtype=torch.float64)


def reidentify(aligned: Tensor | None, truth: Tensor, distractors: Tensor, *,
               lpips: LpipsScorer | None = None) -> Reidentification:
    """Rank each reconstruction's true image among the batch's ground truth and the distractors.

    Args:
        aligned: reconstructions aligned to the truth (row i pairs with ``truth[i]``; a row holding any
            non-finite value has no reconstruction, as `score.aligned_to_truth` marks unmatched rows), in
            [0, 1] (clamped), or None when the attack produced nothing.
        truth: the batch's ground truth ``(b, C, H, W)`` in [0, 1].
        distractors: ``(N, C, H, W)`` other images of the batch's split, disjoint from it.
        lpips: a verified LPIPS scorer (the distance is LPIPS), or None (`PIXEL_DISTANCE`).

    Returns:
        Per truth row its rank in 1..b + N (NaN without a reconstruction), N and the distance's name.
    """
    b, n = truth.shape[0], distractors.shape[0]
    ranks = np.full(b, np.nan)
    if aligned is None:
        return Reidentification(ranks, n, distance_name(lpips))
    if tuple(aligned.shape) != tuple(truth.shape) or tuple(distractors.shape[1:]) != tuple(truth.shape[1:]):
        raise LeakbenchError(f"re-identification needs reconstructions shaped as the truth {tuple(truth.shape)} and "
                             f"distractors of its image shape; got {tuple(aligned.shape)} and "
                             f"{tuple(distractors.shape)}")
    rows = torch.isfinite(aligned.detach().cpu()).flatten(1).all(dim=1)
    if rows.any():
        ranks[rows.numpy()] = _ranks(aligned.detach().cpu()[rows], torch.nonzero(rows).reshape(-1), truth,
                                     distractors, _pixel_embedding if lpips is None else _lpips_embedding(lpips))
    return Reidentification(ranks, n, distance_name(lpips))


def _ranks(queries: Tensor, own: Tensor, truth: Tensor, distractors: Tensor,
           embed: Callable[[Tensor], Embedding]) -> np.ndarray:
    """The rank of gallery image ``own[i]`` (a truth row) for query i, the gallery being truth then distractors."""
    gallery = torch.cat([truth.detach().cpu().float(), distractors.detach().cpu().float()])
    d = pairwise_distances(queries.float().clamp(0.0, 1.0), gallery, embed)
    mine = d[torch.arange(len(own)), own]
    return (d <= mine[:, None] + TIE_TOLERANCE).sum(dim=1).numpy().astype(np.float64)


__all__ = ["DEFAULT_DISTRACTORS", "PIXEL_DISTANCE", "TIE_TOLERANCE", "Reidentification", "distance_name",
           "pairwise_distances", "reidentify"]
