"""What an attack may estimate from the update when the threat model withholds it."""

from __future__ import annotations

import torch

from leakbench.fl.update import ClientUpdate

RANK_TOL = 1e-4
"""Singular values below RANK_TOL × the largest count as zero (float32 gradients: rounding ≈ 1e-7)."""


def estimate_batch_size(update: ClientUpdate, layer: int = 1, rtol: float = RANK_TOL) -> int:
    """The numerical rank of linear layer `layer`'s weight gradient, Σ_i δ_i x_iᵀ: the batch size b
    when b < the layer's width and input size and the samples are independent (a lower bound otherwise)."""
    weight, _ = update.model.layer_param_names(layer)
    S = torch.linalg.svdvals(update.gradients[weight].to(torch.float64))
    return int((S > rtol * S[0]).sum()) if S.numel() and S[0] > 0 else 0
