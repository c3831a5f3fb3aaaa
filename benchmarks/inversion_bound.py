"""Upper bound of feature inversion: invert the TRUE inputs of layer L (what an exact attack would
recover) through the public prefix, and score the images. Not an attack (it reads ground truth);
it tells how much of the image the layer-L features still hold.

    python benchmarks/inversion_bound.py --dataset tinyimagenet --data-root ../shared/data \
        --batch-size 20 --layers 2 3 4 5 [--arch fc --depth 6 --steps 1000 --seed 0]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakbench.attacks.inversion import InversionConfig, invert_features
from leakbench.cell.spec import CellSpec
from leakbench.harness.victim import prepare
from leakbench.metrics.image import psnr, ssim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="embedded")
    parser.add_argument("--data-root")
    parser.add_argument("--arch", default="fc")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--tv", type=float, default=InversionConfig.tv)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = CellSpec(attack="spear", dataset=args.dataset, data_root=args.data_root, arch=args.arch,
                    depth=args.depth, width=args.width, batch_size=args.batch_size, seed=args.seed)
    batch, model, update = prepare(spec)
    print("| layer | features | PSNR median (dB) | SSIM mean | feature fit (max rel.) | seconds |")
    print("|---|---|---|---|---|---|")
    for layer in args.layers:
        start = time.perf_counter()
        target = model.layer_inputs(batch.images, layer).detach()
        images = invert_features(update.model, target, layer, InversionConfig(args.steps, tv=args.tv), seed=args.seed)
        with torch.no_grad():
            fit = ((model.layer_inputs(images, layer) - target).norm(dim=1) / target.norm(dim=1).clamp_min(1e-12)).max()
        print(f"| {layer} | {target.shape[1]} | {psnr(images, batch.images).median():.1f} | "
              f"{ssim(images, batch.images).mean():.3f} | {fit:.3f} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
