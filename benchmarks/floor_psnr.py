"""PSNR of reconstructions that know nothing about the batch: the floor an attack sinks to.

    python benchmarks/floor_psnr.py --dataset NAME [--data-root DIR] --batch-size B --seeds 0 1 2

For the batches the harness draws (same `sample_batch` and seeds as a suite), prints the PSNR median
(numpy's, as in the tables) of (a) a constant mid-grey image (0.5) and (b) the dataset's mean image,
against every image of the batches pooled. An attack whose PSNR is at or below these recovered nothing a prior did not
already give. Reads ground truth only; not an attack.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from leakbench.core.errors import LeakbenchError
from leakbench.datasets import load_dataset
from leakbench.datasets.base import sample_batch
from leakbench.metrics.image import psnr


def floors(dataset, batch_size: int, seeds: list[int]) -> dict[str, float]:
    """Median PSNR over the pooled batch images of a grey image and of the dataset mean image."""
    truth = torch.cat([sample_batch(dataset, batch_size, s).images for s in seeds])
    mean = dataset.images.double().mean(dim=0, keepdim=True).expand_as(truth)
    return {"grey 0.5": float(np.median(psnr(torch.full_like(truth, 0.5), truth).numpy())),
            "dataset mean image": float(np.median(psnr(mean, truth).numpy())), "images": len(truth)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    try:
        result = floors(load_dataset(args.dataset, data_root=args.data_root), args.batch_size, args.seeds)
    except LeakbenchError as exc:
        raise SystemExit(f"floor_psnr: {exc}") from None
    n = result.pop("images")
    print(f"{args.dataset}, b = {args.batch_size}, seeds {args.seeds} ({n} images): " +
          ", ".join(f"{k} {v:.1f} dB" for k, v in result.items()))


if __name__ == "__main__":
    main()
