"""Per-image quality metrics between reconstructions and ground truth.

All functions take two tensors of the same shape ``(b, C, H, W)`` holding
images in the canonical space (floats in [0, 1]); ``recon[i]`` is compared with
``truth[i]``, so match first (:mod:`leakbench.metrics.matching`).

Both inputs are clamped to [0, 1] before MSE, PSNR and SSIM: an attack is
scored on the image it would display, not on out-of-range values. NaN stays
NaN through the clamp, so a diverged reconstruction scores NaN (and never
counts as exact). Results are CPU float64 tensors of shape ``(b,)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from leakbench.core.errors import LeakbenchError

PEAK = 1.0
"""Peak signal value used by PSNR (images live in [0, 1])."""

SSIM_KERNEL_SIZE = 11
"""Standard SSIM Gaussian window (Wang et al. 2004), used when images allow it."""

SSIM_SIGMA = 1.5
"""Standard deviation of the standard 11-pixel SSIM window."""


def _pair(recon: Tensor, truth: Tensor, *, images: bool) -> tuple[Tensor, Tensor]:
    """Check shapes; return both clamped to [0, 1] as CPU float64."""
    if tuple(recon.shape) != tuple(truth.shape):
        raise LeakbenchError(
            f"reconstruction shape {tuple(recon.shape)} differs from ground truth {tuple(truth.shape)}"
        )
    if images and recon.dim() != 4:
        raise LeakbenchError(f"expected images shaped (b, C, H, W), got {tuple(recon.shape)}")
    if recon.dim() < 1:
        raise LeakbenchError("expected a batch of items, got a scalar")
    r = recon.detach().to(device="cpu", dtype=torch.float64).clamp(0.0, 1.0)
    t = truth.detach().to(device="cpu", dtype=torch.float64).clamp(0.0, 1.0)
    return r, t


def mse(recon: Tensor, truth: Tensor) -> Tensor:
    """Per-image mean squared error after clamping both inputs to [0, 1]."""
    r, t = _pair(recon, truth, images=False)
    return (r - t).pow(2).reshape(r.shape[0], -1).mean(dim=1)


def psnr(recon: Tensor, truth: Tensor) -> Tensor:
    """Per-image PSNR in dB with peak 1: ``10 log10(1 / MSE)``.

    Identical images give ``+inf``; inputs are clamped to [0, 1] first.
    """
    m = mse(recon, truth)
    return 10.0 * torch.log10(PEAK**2 / m)


def ssim_kernel_size(h: int, w: int) -> int:
    """Side of the Gaussian SSIM window used for ``h x w`` images.

    The standard 11 when both sides are at least 11, otherwise the largest odd
    number not above ``min(h, w)`` (e.g. 7 for 8x8 digits).
    """
    if h < 1 or w < 1:
        raise LeakbenchError(f"image size must be positive, got {h}x{w}")
    k = min(SSIM_KERNEL_SIZE, h, w)
    return k if k % 2 == 1 else k - 1


def ssim_sigma(kernel_size: int) -> float:
    """Gaussian sigma used with a window of side ``kernel_size``.

    1.5 for the standard 11-pixel window, scaled down in proportion for smaller
    windows. torchmetrics sizes its Gaussian window from sigma
    (``2 * int(3.5 * sigma + 0.5) + 1``) and ignores ``kernel_size`` for Gaussian
    windows, so shrinking the window means shrinking sigma; this choice gives
    exactly ``kernel_size`` back for every odd size from 1 to 11.
    """
    return SSIM_SIGMA * kernel_size / SSIM_KERNEL_SIZE


SSIM_CHUNK = 64
"""Images per torchmetrics call: its working memory grows faster than the batch (800 TinyImageNet images at once
peaked at 17 GB, secure aggregation over K = 100 clients); each image's SSIM is its own, the same bits in chunks."""


def ssim(recon: Tensor, truth: Tensor) -> Tensor:
    """Per-image SSIM (torchmetrics, ``data_range=1``, Gaussian window).

    Images smaller than 11 pixels on a side use the window from
    :func:`ssim_kernel_size` with sigma from :func:`ssim_sigma`. Inputs are
    clamped to [0, 1]; SSIM of a multi-channel image is the mean over channels.
    """
    r, t = _pair(recon, truth, images=True)
    if r.shape[0] == 0:
        return torch.empty(0, dtype=torch.float64)
    k = ssim_kernel_size(r.shape[-2], r.shape[-1])
    sigma = ssim_sigma(k)
    if 2 * int(3.5 * sigma + 0.5) + 1 != k:  # guards the torchmetrics window rule above
        raise AssertionError(f"SSIM window mismatch for kernel {k}")
    from torchmetrics.functional.image import structural_similarity_index_measure  # slow import: lazy

    parts = []
    for start in range(0, r.shape[0], SSIM_CHUNK):
        out = structural_similarity_index_measure(
            r[start:start + SSIM_CHUNK], t[start:start + SSIM_CHUNK], gaussian_kernel=True, sigma=sigma,
            kernel_size=k, data_range=1.0, reduction="none"
        )
        assert isinstance(out, torch.Tensor)  # a tuple only with return_full_image / return_contrast_sensitivity
        parts.append(out.reshape(-1))
    return torch.cat(parts)


def exact(recon: Tensor, truth: Tensor) -> Tensor:
    """Per-image exact recovery at 8-bit precision.

    True iff ``round(255 * clamp(recon, 0, 1)) == round(255 * truth)`` in every
    pixel, i.e. the reconstruction saved as an 8-bit image equals the original.
    NaN pixels are never equal.
    """
    if tuple(recon.shape) != tuple(truth.shape):
        raise LeakbenchError(
            f"reconstruction shape {tuple(recon.shape)} differs from ground truth {tuple(truth.shape)}"
        )
    r = torch.round(255.0 * recon.detach().to("cpu", torch.float64).clamp(0.0, 1.0))
    t = torch.round(255.0 * truth.detach().to("cpu", torch.float64))
    return (r == t).reshape(r.shape[0], -1).all(dim=1)


__all__ = [
    "PEAK",
    "exact",
    "mse",
    "psnr",
    "ssim",
    "ssim_kernel_size",
    "ssim_sigma",
]

