"""`example-stripes`: 64 synthetic RGB images with stripes, 3×16×16, 4 classes (the stripe direction).

Declared as the entry point `leakbench.datasets: example-stripes` (a loader function: leakbench registers
it under the entry point's name, with the first docstring line as its description), and registered on
import as well, for `--plugin leakbench_example_plugin.data` or a suite's `plugins` without installing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from leakbench.datasets import DATASETS, ImageDataset
from leakbench.errors import DatasetError

SIDE = 16


def load_stripes(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """Synthetic stripes, 3×16×16, 4 classes, 64 images (no files; `data_root` is ignored)."""
    if image_size not in (None, SIDE):
        raise DatasetError(f"example-stripes: images are {SIDE}×{SIDE}; got image size {image_size}")
    gen = torch.Generator().manual_seed(0)
    y, x = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    labels = torch.arange(64) % 4
    images = []
    for label in labels.tolist():
        phase, period = torch.rand(2, generator=gen)
        coord = (x, y, x + y, x - y)[label].float()
        wave = 0.5 + 0.5 * torch.sin(coord * (0.5 + period) + 6.28 * phase)
        colour = torch.rand(3, 1, 1, generator=gen)
        images.append(colour * wave)
    return ImageDataset(name="example-stripes", images=torch.stack(images).float(), labels=labels, num_classes=4)


DATASETS.register("example-stripes", load_stripes, "example plugin: synthetic stripes, 3×16×16, 4 classes, 64 images")
