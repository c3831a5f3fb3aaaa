"""Utility with error bars: an undefended victim trained once per seed, its accuracy after each epoch.

    PYTHONPATH=. python benchmarks/victim_seeds.py --data-root ../shared/data/cifar10 --arch fc --epochs 3

Trains the victim (default FC-6 width 200) on CIFAR-10's train part (40,000 images, `datasets.partition`)
with the default recipe (Adam, lr 1e-3, batches of 64), once per seed — the init and the training seed both
the seed, as a suite's `train = { seed = "cell" }` trains each cell seed's victim — exactly as the harness
trains an undefended victim (`models.training.train`), and prints, after each epoch, the train- and
test-part accuracy (5,000 test images), then the mean ± sample sd over the seeds per epoch. Nothing is cached.
`--dp-sigma σ` trains with DP-SGD (σ, C = `--dp-clip`) and prints the training's ε (`fl.dp.epsilon`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from leakbench.cell.spec import CellSpec  # noqa: E402
from leakbench.datasets import load_dataset, partition  # noqa: E402
from leakbench.fl import DPConfig  # noqa: E402
from leakbench.harness.victim import train_epsilon, training_rule  # noqa: E402
from leakbench.models import build_model  # noqa: E402
from leakbench.models.training import TrainRecipe, accuracy, train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data" / "cifar10")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--arch", default="fc")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--depth", type=int, default=None, help="default: the architecture's (6 fc, 3 conv/resnet)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dp-sigma", type=float, default=None, help="train with DP-SGD at this σ")
    parser.add_argument("--dp-clip", type=float, default=1.0)
    parser.add_argument("--train-limit", type=int, default=None, help="N random train-part images (timing)")
    args = parser.parse_args()
    from leakbench.models import default_depth

    depth = args.depth or default_depth(args.arch)
    data = load_dataset(args.dataset, data_root=args.data_root)
    parts = partition(data)
    train_part = torch.as_tensor(parts.train)
    if args.train_limit:  # a random subset (the train part is sorted, and folders list the images class by class)
        train_part = train_part[torch.randperm(len(train_part), generator=torch.Generator().manual_seed(0))]
        train_part = train_part[:args.train_limit]
    test_part = torch.as_tensor(parts.test)
    dp = DPConfig(sigma=args.dp_sigma, clip=args.dp_clip) if args.dp_sigma is not None else None
    print(f"{args.dataset}: train {len(train_part)}, test {len(test_part)}; {args.arch}-{depth} w{args.width}; "
          f"threads {torch.get_num_threads()}" + (f"; DP-SGD σ={dp.sigma:g} C={dp.clip:g}" if dp else ""), flush=True)
    per_epoch: dict[int, list[float]] = {}
    for seed in args.seeds:
        recipe = TrainRecipe(seed=seed)
        spec = CellSpec(attack="spear", dataset=args.dataset, batch_size=1, width=args.width, depth=depth,
                        arch=args.arch, seed=seed, train_epochs=args.epochs, recipe=recipe, dp=dp)
        model = build_model(args.arch, data.image_shape, data.num_classes, width=args.width, depth=depth, seed=seed)
        tic = time.perf_counter()

        def report(epoch: int, trained: nn.Module, seed: int = seed, tic: float = tic, spec: CellSpec = spec) -> None:
            seconds = (time.perf_counter() - tic) / epoch
            train_acc = accuracy(trained, data.images, data.labels, train_part)
            test_acc = accuracy(trained, data.images, data.labels, test_part)
            per_epoch.setdefault(epoch, []).append(100 * test_acc)
            eps = train_epsilon(replace(spec, train_epochs=epoch), len(train_part))
            print(f"seed {seed} epoch {epoch}: {seconds:.1f} s/epoch, train acc {100 * train_acc:.1f} %, "
                  f"test acc {100 * test_acc:.1f} %" + (f", training ε {eps:.3g}" if dp else ""), flush=True)

        train(model, data.images, data.labels, train_part, recipe, args.epochs, rule=training_rule(spec, data),
              on_epoch=report)
    for epoch, accs in sorted(per_epoch.items()):
        sd = statistics.stdev(accs) if len(accs) > 1 else float("nan")
        print(f"epoch {epoch}: test acc {statistics.mean(accs):.1f} ± {sd:.1f} % (mean ± sd over seeds "
              f"{', '.join(map(str, args.seeds))}: {', '.join(f'{a:.1f}' for a in accs)})")


if __name__ == "__main__":
    main()
