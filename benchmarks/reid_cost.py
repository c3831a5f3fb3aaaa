"""What re-identification costs: seconds to score one b = 16 CIFAR-10 cell with N = 1000 distractors.

    python benchmarks/reid_cost.py [--data-root ../shared/data/cifar10] [--b 16] [--n 1000] [--repeats 3]

One torch thread (as every cell is scored), CPU. The cell's reconstruction is its truth plus Gaussian noise
(σ = 0.05), so every image has one to rank. Per distance (standardised pixel L2, LPIPS alex, LPIPS vgg when
their verified weights are found) it prints the median seconds of `score_cell` with N distractors and with
none (the difference is what re-identification adds: drawing the distractors from the loaded split and
ranking), and of `reidentify` alone. Without the CIFAR-10 folder it uses the shipped `embedded` photos
(321 images: N is capped at what the split holds besides the batch, and says so).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leakbench.cell.spec import CellSpec
from leakbench.core.reconstruction import Reconstruction
from leakbench.harness.scoring import cell_distractors, score_cell
from leakbench.harness.victim import victim
from leakbench.metrics import LpipsScorer, load_lpips
from leakbench.metrics.reid import PIXEL_DISTANCE, distance_name, reidentify
from leakbench.records.artifacts import AttackOutput

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls (after one warm-up call)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--b", type=int, default=16)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.data_root.is_dir():
        spec = CellSpec(attack="spear", dataset="cifar10", data_root=str(args.data_root), batch_size=args.b)
    else:
        spec = CellSpec(attack="spear", dataset="embedded", batch_size=args.b)
    batch, model = victim(spec)  # loads (and caches) the split, as a cell does before it is scored
    noisy = (batch.images + 0.05 * torch.randn(batch.images.shape, generator=torch.Generator().manual_seed(0)))
    output = AttackOutput(Reconstruction(status="ok", space="image", images=noisy.clamp(0, 1)), 0.0)
    gallery = cell_distractors(spec, batch, args.n)
    print(f"torch {torch.__version__}, 1 thread, CPU; {spec.dataset} ({spec.data_root or 'shipped'}), "
          f"b = {args.b}, N = {len(gallery)} distractors (asked {args.n})")
    print("distance                 score_cell N s   score_cell N=0 s   reid adds s   reidentify s   reid@N")
    scorers: list[LpipsScorer | None] = [None]
    for net in ("alex", "vgg"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scorer, note = load_lpips(net=net)
        if scorer is None:
            print(f"lpips-{net}: not available ({note.split(';')[0]})")
        else:
            scorers.append(scorer)
    aligned = output.reconstruction.images
    assert aligned is not None
    for scorer in scorers:
        with_n = median_seconds(partial(score_cell, spec, output, batch, model, lpips=scorer, n_distractors=args.n),
                                args.repeats)
        without = median_seconds(partial(score_cell, spec, output, batch, model, lpips=scorer, n_distractors=0),
                                 args.repeats)
        alone = median_seconds(partial(reidentify, aligned, batch.images, gallery, lpips=scorer), args.repeats)
        top1 = reidentify(aligned, batch.images, gallery, lpips=scorer).top1
        name = PIXEL_DISTANCE if scorer is None else distance_name(scorer)
        print(f"{name:24s} {with_n:14.2f}   {without:16.2f}   {with_n - without:11.2f}   {alone:12.2f}   "
              f"{100 * top1:5.0f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
