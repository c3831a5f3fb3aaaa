"""What scoring a large aggregated batch costs in memory and time: `score_images` on N images.

    python benchmarks/scoring_memory.py [--n 800] [--size 64] [--distractors 1000]

Secure aggregation over K clients scores all K·b images of a cell at once (issue 46: K = 100, b = 8 on TinyImageNet,
800 images of 64 px). The answer is the truth plus Gaussian noise (σ = 0.05) with a tenth of its rows exact, in a
shuffled order; the distractors are other random images. One torch thread, CPU. Per stage — matching
(exact-first), the per-image metrics (MSE, PSNR, SSIM, exact), LPIPS (alex, with verified weights only: skipped
without them) and re-identification — it prints the seconds and the peak resident memory above the start (sampled
every 10 ms). Before SSIM ran in chunks (`metrics.image.SSIM_CHUNK`), the metrics stage alone peaked at 17 GB for
800 images of 64 px.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leakbench.metrics import load_lpips
from leakbench.metrics.reid import reidentify
from leakbench.metrics.score import _image_values, _match_images, aligned_to_truth


def resident_gb() -> float:
    """This process's resident memory now, in GB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e9


def measured(run: Callable[[], object]) -> tuple[float, float]:
    """Seconds and peak resident GB above the start of one call of `run`."""
    start, peak, done = resident_gb(), [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], resident_gb())
    watcher = threading.Thread(target=sample)
    watcher.start()
    began = time.perf_counter()
    run()
    seconds = time.perf_counter() - began
    done.set()
    watcher.join()
    return seconds, max(peak[0], resident_gb()) - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--distractors", type=int, default=1000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(args.n, 3, args.size, args.size, generator=g)
    recon = (truth + 0.05 * torch.randn(truth.shape, generator=g)).clamp(0, 1)
    recon[: args.n // 10] = truth[: args.n // 10]
    recon = recon[torch.randperm(args.n, generator=g)]
    gallery = torch.rand(args.distractors, 3, args.size, args.size, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lpips, _ = load_lpips(net="alex")
    print(f"torch {torch.__version__}, 1 thread, CPU; {args.n} images of {args.size} px, {args.distractors} "
          f"distractors; LPIPS {'alex (verified weights)' if lpips else 'not available: skipped'}")
    perm = _match_images(recon, truth)
    stages: dict[str, Callable[[], object]] = {
        "matching (exact-first)": lambda: _match_images(recon, truth),
        "mse, psnr, ssim, exact": lambda: _image_values(recon, truth, perm, None),
    }
    if lpips is not None:
        stages["lpips"] = lambda: lpips.score(recon[torch.as_tensor(perm)], truth)
    stages["re-identification"] = lambda: reidentify(aligned_to_truth(recon, perm), truth, gallery, lpips=lpips)
    print("stage                       seconds   peak above start (GB)")
    for name, run in stages.items():
        seconds, peak = measured(run)
        print(f"{name:26s} {seconds:8.2f}   {peak:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
