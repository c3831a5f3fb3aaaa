"""Reconstruction quality metrics: matching, per-image metrics, LPIPS, score tables."""

from leakbench.metrics.image import PEAK, exact, mse, psnr, ssim, ssim_kernel_size, ssim_sigma
from leakbench.metrics.lpips_metric import (
    ALEXNET_WEIGHTS_FILE,
    WEIGHTS_ENV_VAR,
    LpipsScorer,
    find_alexnet_weights,
    hub_weights_path,
    load_lpips,
    weights_search_locations,
)
from leakbench.metrics.matching import MATCHING, UNMATCHED, apply_matching, match_by_mse, pairwise_mse
from leakbench.metrics.score import FEATURE_COLUMNS, IMAGE_COLUMNS, score_features, score_images

__all__ = [
    "ALEXNET_WEIGHTS_FILE",
    "FEATURE_COLUMNS",
    "IMAGE_COLUMNS",
    "MATCHING",
    "PEAK",
    "UNMATCHED",
    "WEIGHTS_ENV_VAR",
    "LpipsScorer",
    "apply_matching",
    "exact",
    "find_alexnet_weights",
    "hub_weights_path",
    "load_lpips",
    "match_by_mse",
    "mse",
    "pairwise_mse",
    "psnr",
    "score_features",
    "score_images",
    "ssim",
    "ssim_kernel_size",
    "ssim_sigma",
    "weights_search_locations",
]
