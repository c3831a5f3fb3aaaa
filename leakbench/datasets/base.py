"""The dataset contract: images as float tensors in [0, 1], NCHW, with integer labels."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from leakbench.core.errors import ConfigError


@dataclass(frozen=True)
class ImageDataset:
    """A whole (small) split held in memory.

    images: float32 tensor (N, C, H, W) with values in [0, 1].
    labels: int64 tensor (N,).
    public: whether anyone can have these images (a published dataset; every shipped one but `imagefolder`),
    so that a third-party attack could carry them (`records.trust`); a dataset plugin serving images its
    submitters cannot have says False.
    fingerprint: for a dataset read from a user's folder (`imagefolder`), the hash of the files it served
    (`datasets.data_fingerprint`: what its cells' ids hash); '' for every other (their name says their data).
    """

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    public: bool = True
    fingerprint: str = ""

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        c, h, w = self.images.shape[1:]
        return int(c), int(h), int(w)


@dataclass(frozen=True)
class LocalData:
    """The client's local data: the images at `indices` (sorted dataset indices) of `images` / `labels`,
    the whole dataset's tensors (shared, not copied). What a client transform that draws on more than
    the batch reads (MixUp's partners, `fl.mixup`); private like the batch."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class Batch:
    """The client's private batch. Only the harness and the metrics ever see it. `public`: its dataset's.
    `local`: the client's local data the batch was drawn from (`sample_batch` sets it: the whole dataset
    at init, the attack part for a trained victim); None where no one said (then the batch is all the
    client holds)."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: tuple[int, ...]
    dataset: str
    num_classes: int
    public: bool = True
    local: LocalData | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.images.shape[0])


def sample_batch(dataset: ImageDataset, batch_size: int, seed: int, *, pool: np.ndarray | None = None,
                 stream: int = 0) -> Batch:
    """Pick `batch_size` distinct images deterministically from `seed`.

    `pool` (dataset indices) restricts the draw to those images: the same draw is made over the
    pool's positions, and `indices` are dataset indices. Without it the whole dataset is the pool
    (the batches of every cell at init). `stream` k > 0 draws from another random stream of the same
    seed (client k's batch under secure aggregation; 0 is the draw every cell has always made). The
    batch's `local` is the pool (the client's local data).
    """
    size = len(dataset) if pool is None else len(pool)
    where = f"the {size} images of dataset {dataset.name!r}" if pool is None else \
        f"the {size} images of the attack part of dataset {dataset.name!r}"
    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1, got {batch_size}")
    if batch_size > size:
        raise ConfigError(f"batch size {batch_size} exceeds {where}")
    rng = np.random.default_rng([seed, 0xBA7C] if stream == 0 else [seed, 0xBA7C, stream])
    idx = np.sort(rng.choice(size, size=batch_size, replace=False))
    if pool is not None:
        idx = np.sort(np.asarray(pool)[idx])
    index = torch.as_tensor(idx, dtype=torch.long)
    return Batch(
        images=dataset.images[index].clone(),
        labels=dataset.labels[index].clone(),
        indices=tuple(int(i) for i in idx),
        dataset=dataset.name,
        num_classes=dataset.num_classes,
        public=dataset.public,
        local=LocalData(dataset.images, dataset.labels, np.arange(size) if pool is None else np.sort(pool)),
    )


def concat_batches(batches: list[Batch]) -> Batch:
    """One batch holding `batches` one after the other (images, labels and indices in that order)."""
    first = batches[0]
    return Batch(images=torch.cat([b.images for b in batches]), labels=torch.cat([b.labels for b in batches]),
                 indices=tuple(i for b in batches for i in b.indices), dataset=first.dataset,
                 num_classes=first.num_classes, public=first.public)


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """`batch` cut into `parts` consecutive batches of equal size (its size must be a multiple of `parts`)."""
    if parts < 1 or batch.size % parts:
        raise ConfigError(f"a batch of {batch.size} images cannot be cut into {parts} equal parts")
    b = batch.size // parts
    return [Batch(images=batch.images[k * b:(k + 1) * b], labels=batch.labels[k * b:(k + 1) * b],
                  indices=batch.indices[k * b:(k + 1) * b], dataset=batch.dataset, num_classes=batch.num_classes,
                  public=batch.public)
            for k in range(parts)]


PARTITION_SEED = 0x7EA1
"""Seed of the fixed permutation that cuts a dataset into its attack, test and train parts."""
PARTITION_FRACTIONS = (0.1, 0.1)
"""Fractions of the attack part and the test part; the train part is the rest (0.8)."""


@dataclass(frozen=True)
class Partition:
    """Disjoint dataset indices (sorted): `attack` (batches attacked on trained victims), `test`
    (the victim's held-out accuracy) and `train` (what the victim trains on)."""

    attack: np.ndarray
    test: np.ndarray
    train: np.ndarray


def partition(dataset: ImageDataset) -> Partition:
    """The fixed, documented partition of `dataset` for trained victims.

    The loaders hold one split each (TinyImageNet val, MNIST test, CIFAR-10's train JPEGs or its test
    split, embedded patches), so the parts are cut from it: a permutation of the indices drawn from
    PARTITION_SEED and the dataset's size gives the first 10 % to the attack part, the next 10 % to the
    test part and the remaining 80 % to the train part. Depends on nothing but the size: the same for every cell. For
    CIFAR-10's 50,000 training JPEGs: 5,000 attack, 5,000 test (the victims' test accuracy), 40,000 train.
    """
    n = len(dataset)
    order = np.random.default_rng([PARTITION_SEED, n]).permutation(n)
    n_attack, n_test = (int(n * f) for f in PARTITION_FRACTIONS)
    cuts = order[:n_attack], order[n_attack:n_attack + n_test], order[n_attack + n_test:]
    return Partition(*(np.sort(c) for c in cuts))
