"""Time to "not applicable" for the SPEAR family under a defence, and the undefended control (issue 44, fail fast).

    PYTHONPATH=. python benchmarks/spear_applicability.py --data-root ../shared/data/cifar10 \
        --cells 200x4,400x8 --seeds 0-2 --attacks spear,spear-paper,spear-guided,spear-dl --max-seconds 120

For each victim (CIFAR-10 FC-6 width × b, at init unless --train-epochs, layer 1), seed and attack, it builds the
client's update under each condition — undefended, `prune` p = 0.2, `uniform-quantise` 8 bits, `noise` σ = 1e-4
(absolute) — and times `create_attack(attack, max_seconds=...).reconstruct(update, seed=seed)` alone (the victim
and the update are built first, untimed). One line per run: the verdict ("not applicable" when the pre-search check
of `attacks.spear.applicability` refused, else the answer's status and failure kind), seconds, the samples the
answer holds, how many of them are ≥ 40 dB from a true image (read here, never by the attack), the noise estimate
and the neurons above the zero test's floor against the b − 1 a draw needs. The undefended control must answer
(ok) and never be refused; a defended cell is refused only where its structure cannot be seen, so a mild defence
(small b) is left to the search and shows what SPEAR still recovers. Then the median seconds per (condition,
verdict). Runs are sequential and single-process: run it on an idle machine for timings.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from leakbench.attacks import create_attack
from leakbench.cell.spec import CellSpec
from leakbench.fl.transform import DefenceSetting, transform_class
from leakbench.harness.victim import prepare

CONDITIONS: dict[str, tuple[float, tuple[DefenceSetting, ...]]] = {
    "none": (0.0, ()),
    "prune 0.2": (0.0, (DefenceSetting("prune", transform_class("prune").Config(fraction=0.2)),)),
    "quantise 8-bit": (0.0, (DefenceSetting("uniform-quantise", transform_class("uniform-quantise").Config(bits=8)),)),
    "noise 1e-4": (1e-4, ()),
}
"""The conditions of the issue's table: (absolute noise σ, defences)."""
EXACT_DB = 40.0
"""PSNR from which an answered image counts as recovered in the printed count."""


def parse_seeds(text: str) -> list[int]:
    """"0-2" or "0,2" → [0, 1, 2] / [0, 2]."""
    if "-" in text and "," not in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(v) for v in text.split(",")]


def parse_cells(text: str) -> list[tuple[int, int]]:
    """"200x4,400x8" → [(200, 4), (400, 8)] (width × b)."""
    return [(int(w), int(b)) for w, _, b in (c.partition("x") for c in text.split(","))]


def psnrs(images: torch.Tensor | None, truth: torch.Tensor) -> list[float]:
    """Per answered image, its PSNR (dB) against the nearest true image."""
    if images is None:
        return []
    mse = ((images[:, None] - truth[None]) ** 2).flatten(2).mean(2)
    return [float(v) for v in (10 * torch.log10(1 / mse.clamp_min(1e-20))).amax(1)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-root", required=True, help="folder holding CIFAR-10 (train/<class>/*.jpg or the batches)")
    p.add_argument("--cells", default="200x4,400x8", help="width×b pairs, e.g. 200x4,400x8")
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--attacks", default="spear,spear-paper,spear-guided,spear-dl")
    p.add_argument("--conditions", default=",".join(CONDITIONS), help=f"a subset of: {', '.join(CONDITIONS)}")
    p.add_argument("--max-seconds", type=float, default=120.0, help="each attack's time cap (max_seconds)")
    p.add_argument("--train-epochs", type=int, default=0, help="attack a trained victim (default: at init)")
    args = p.parse_args()
    conditions = [c.strip() for c in args.conditions.split(",")]
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    print("condition       width   b seed attack        verdict                    seconds answered ≥40dB "
          "noise     above/need")
    for width, b in parse_cells(args.cells):
        for seed in parse_seeds(args.seeds):
            for condition in conditions:
                noise, defences = CONDITIONS[condition]
                spec = CellSpec(attack="spear", dataset="cifar10", batch_size=b, seed=seed, width=width, depth=6,
                                layer=1, data_root=args.data_root, noise=noise, defences=defences,
                                train_epochs=args.train_epochs)
                batch, _, update = prepare(spec)
                for attack in args.attacks.split(","):
                    start = time.perf_counter()
                    result = create_attack(attack, max_seconds=args.max_seconds).reconstruct(update, seed=seed)
                    seconds = time.perf_counter() - start
                    verdict = ("not applicable" if result.stats.get("mode") == "not applicable" else
                               f"{result.status}" + (f" ({result.failure})" if result.failure else ""))
                    scores = psnrs(result.images, batch.images)
                    above = (f"{result.stats['rows_above_floor']}/{result.stats['rows_needed']}"
                             if "rows_above_floor" in result.stats else "-")
                    print(f"{condition:15s} {width:5d} {b:3d} {seed:4d} {attack:13s} {verdict:26s} {seconds:7.1f} "
                          f"{len(scores):8d} {sum(s >= EXACT_DB for s in scores):5d} "
                          f"{result.stats.get('noise_estimate', float('nan')):.2e} {above}", flush=True)
                    times[(condition, verdict)].append(seconds)
    print("\nmedian seconds per (condition, verdict):")
    for (condition, verdict), values in sorted(times.items()):
        print(f"  {condition:15s} {verdict:26s} {statistics.median(values):7.1f} s over {len(values)} runs")


if __name__ == "__main__":
    main()
