"""What LPIPS costs: loading + verifying each network once, then seconds per image and per cell.

    python benchmarks/lpips_cost.py [--nets alex vgg] [--sizes 32 64] [--batch-sizes 1 2 4 8] [--repeats 5]

One torch thread (as every cell runs), CPU. "Per cell" is one `LpipsScorer.score` call on a cell's b
matched images (what a cell of batch size b pays); "per image" is that divided by b. The one-off
cost (build the network, read the weights, hash the file, check the published values) is paid once
per process — once per `leakbench run` (serial) or once per worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leakbench.metrics import lpips_metric
from leakbench.metrics.lpips_metric import load_lpips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", default=["alex", "vgg"], choices=lpips_metric.NETS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per setting (median reported)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU")
    print("net   one-off load+verify s   size  b   s/cell    s/image")
    for net in args.nets:
        lpips_metric._VERIFIED.clear()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scorer, note = load_lpips(net=net)
        once = time.perf_counter() - start
        if scorer is None:
            print(f"{net:5s} not available: {note}")
            continue
        for size in args.sizes:
            for b in args.batch_sizes:
                g = torch.Generator().manual_seed(size * 100 + b)
                x, y = torch.rand(b, 3, size, size, generator=g), torch.rand(b, 3, size, size, generator=g)
                scorer.score(x, y)  # warm-up
                times = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    scorer.score(x, y)
                    times.append(time.perf_counter() - t)
                cell = statistics.median(times)
                print(f"{net:5s} {once:22.2f}   {size:4d} {b:2d}   {cell:8.4f}  {cell / b:8.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
