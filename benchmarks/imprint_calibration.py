"""Where the imprint block's linear query falls on public images: the μ and σ a malicious server sets its bins by.

    PYTHONPATH=. python benchmarks/imprint_calibration.py --dataset tinyimagenet --data-root ../shared/data \
        [--victim-dataset cifar10] [--images 5000] [--linfunc fourier --mode 32]

Robbing the Fed (Fowl et al., ICLR 2022) places the bins at quantiles of the query's distribution, which the server
knows from public data; breaching assumes the standard one (μ 0, σ 1). This prints the mean and standard deviation
of the query (`attacks.imprint.linear_query`) over `--images` images of a public dataset, normalised as the victim
of `--victim-dataset` normalises its input (the victim's public constants): what `query_mean` / `query_std` of
the `imprint` attack should be set to, and which public data gave them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from leakbench.attacks.imprint import ImprintConfig, linear_query
from leakbench.datasets import load_dataset
from leakbench.models import build_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--victim-dataset", default="cifar10")
    parser.add_argument("--victim-root", default=None, help="data root of the victim's dataset (default: --data-root)")
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--linfunc", default="fourier")
    parser.add_argument("--mode", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args(argv)
    public = load_dataset(args.dataset, data_root=Path(args.data_root), image_size=args.image_size)
    victim_data = load_dataset(args.victim_dataset, data_root=Path(args.victim_root or args.data_root))
    model = build_model("fc", victim_data.image_shape, victim_data.num_classes, width=8, depth=2, seed=0)
    cfg = ImprintConfig(linfunc=args.linfunc, mode=args.mode)
    pick = torch.randperm(len(public), generator=torch.Generator().manual_seed(0))[:args.images]
    inputs = model.normalize(public.images[pick]).to(torch.float64)
    query = inputs @ linear_query(cfg, inputs.shape[1], torch.Generator().manual_seed(0))
    print(f"public data: {args.dataset} ({len(pick)} images, {args.image_size} px); victim normalisation of "
          f"{args.victim_dataset}: mean {model.mean}, std {model.std}; query {args.linfunc} mode {args.mode}")
    print(f"query_mean = {float(query.mean()):.6g}\nquery_std = {float(query.std()):.6g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
