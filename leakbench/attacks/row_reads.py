"""Reading images out of a first linear layer's gradient, row by row: what the malicious server's attacks share.

A row i of a linear layer on the normalised, flattened image u has the gradient Σ_n δ_{n,i} u_n and its bias
Σ_n δ_{n,i}: when one image alone drives the row, u = ∇W_i / ∇b_i exactly (`trap-weights`, `fishing`; `imprint`
reads the differences of consecutive rows the same way). Several rows may give the same image (`deduplicate`), and
an answer shorter than the batch is padded with blank rows, the mean image, as breaching's `breach_padding` does
(`padded_answer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from leakbench.models.base import ImageVictim


@dataclass(frozen=True)
class Reads:
    """The in-range reads of a layer's rows: `rows` (their indices), `images` (n × d, in [0, 1] up to the margin,
    float64), `strength` (|∇b_i| of each) and `active`, how many rows had ∇b_i ≠ 0 before the range filter."""

    rows: torch.Tensor
    images: torch.Tensor
    strength: torch.Tensor
    active: int


def row_reads(model: ImageVictim, grad_w: torch.Tensor, grad_b: torch.Tensor, margin: float) -> Reads:
    """Every row with ∇b_i ≠ 0 read as an image (∇W_i / ∇b_i in float64, denormalised), keeping those whose every
    pixel lies in [−margin, 1 + margin] (a single image lies in [0, 1] up to rounding; mixtures whose coefficients
    differ in sign usually leave it)."""
    grad_w, grad_b = grad_w.detach().double().flatten(1), grad_b.detach().double()
    active = torch.nonzero(grad_b != 0).flatten()
    images = model.denormalize(grad_w[active] / grad_b[active, None]).flatten(1)
    inside = ((images >= -margin) & (images <= 1 + margin)).all(dim=1)
    return Reads(active[inside], images[inside], grad_b[active[inside]].abs(), len(active))


def padded_answer(model: ImageVictim, images: torch.Tensor, b: int, padding: bool) -> torch.Tensor:
    """`images` (k × d, image space) as an answer of the model's image shape, clamped to [0, 1], float32, padded to
    `b` rows with the blank image (the mean, 0 before denormalising) when `padding`."""
    blank = model.denormalize(images.new_zeros(max(0, b - len(images)) if padding else 0, images.shape[1]))
    answer = torch.cat([images.reshape(-1, *model.input_shape), blank])
    return answer.clamp(0, 1).to(torch.float32)


def deduplicate(images: torch.Tensor, strength: torch.Tensor, tol: float) -> tuple[list[int], list[int]]:
    """Greedy deduplication of candidate `images` (n × d): taken in order of increasing `strength` (|∇b|; ties in
    row order), a candidate within `tol` (largest absolute difference) of a kept one adds to that one's support,
    else it is kept (the first such one when several are). The kept candidates' indices (in that order) and their
    supports. Pairs farther apart than tol·√d in Euclidean distance are never within tol: only the others are
    compared pixel by pixel."""
    kept: list[int] = []
    support: list[int] = []
    if not len(images):
        return kept, support
    near = torch.cdist(images, images) <= tol * math.sqrt(images.shape[1])
    for i in torch.sort(strength, stable=True).indices.tolist():
        close = torch.nonzero(near[i, kept]).flatten().tolist() if kept else []
        match = next((k for k in close if float((images[kept[k]] - images[i]).abs().max()) <= tol), None)
        if match is None:
            kept.append(i)
            support.append(1)
        else:
            support[match] += 1
    return kept, support
