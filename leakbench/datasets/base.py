"""The dataset contract: images as float tensors in [0, 1], NCHW, with integer labels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from leakbench.errors import ConfigError


@dataclass(frozen=True)
class ImageDataset:
    """A whole (small) split held in memory.

    images: float32 tensor (N, C, H, W) with values in [0, 1].
    labels: int64 tensor (N,).
    """

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        c, h, w = self.images.shape[1:]
        return int(c), int(h), int(w)


@dataclass(frozen=True)
class Batch:
    """The client's private batch. Only the harness and the metrics ever see it."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: tuple[int, ...]
    dataset: str
    num_classes: int

    @property
    def size(self) -> int:
        return int(self.images.shape[0])


def sample_batch(dataset: ImageDataset, batch_size: int, seed: int) -> Batch:
    """Pick `batch_size` distinct images deterministically from `seed`."""
    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1, got {batch_size}")
    if batch_size > len(dataset):
        raise ConfigError(
            f"batch size {batch_size} exceeds the {len(dataset)} images of dataset {dataset.name!r}"
        )
    rng = np.random.default_rng([seed, 0xBA7C])
    idx = np.sort(rng.choice(len(dataset), size=batch_size, replace=False))
    index = torch.as_tensor(idx, dtype=torch.long)
    return Batch(
        images=dataset.images[index].clone(),
        labels=dataset.labels[index].clone(),
        indices=tuple(int(i) for i in idx),
        dataset=dataset.name,
        num_classes=dataset.num_classes,
    )
