"""The model, the data and the client's training step of the example app.

The model is leakbench's registered `fc` victim (an MLP: normalise → Linear → ReLU → … → Linear), so that
`leakbench attack-update --arch fc --width WIDTH --depth DEPTH` rebuilds it; a network of your own goes through
a victim plugin (docs/reference/victims.md). The data are leakbench's `embedded` images (32×32 RGB patches of
photos shipped inside scikit-learn and scikit-image, six classes): offline, no download.
"""

from __future__ import annotations

import torch
from torch import nn

from leakbench.datasets import load_dataset
from leakbench.models import build_model

WIDTH, DEPTH = 100, 3
"""The MLP's hidden width and depth (what `leakbench attack-update` is told with --width and --depth)."""
IMAGE_SHAPE, NUM_CLASSES = (3, 32, 32), 6
BATCH_SIZE = 4
"""Each client's local data: one batch of this many images (a FedSGD client: one step on its whole batch)."""
LR = 0.1
"""The clients' learning rate η, sent by the server in the train ConfigRecord under "lr"."""


def make_model(seed: int = 0) -> nn.Module:
    """The global model at round 0 (its init drawn from `seed`)."""
    return build_model("fc", IMAGE_SHAPE, NUM_CLASSES, width=WIDTH, depth=DEPTH, seed=seed)


def client_batch(partition_id: int, batch_size: int = BATCH_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Client `partition_id`'s private batch: images in [0, 1] (N, 3, 32, 32) and labels, disjoint across clients
    (consecutive slices of one fixed shuffle of the embedded images)."""
    data = load_dataset("embedded")
    order = torch.randperm(len(data.images), generator=torch.Generator().manual_seed(0))
    take = order[partition_id * batch_size:(partition_id + 1) * batch_size]
    return data.images[take].clone(), data.labels[take].clone()


def train_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, lr: float) -> None:
    """One full-batch SGD step on the mean cross-entropy (FedSGD), in place."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
