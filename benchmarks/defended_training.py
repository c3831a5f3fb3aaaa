"""The price of a defence, measured: a victim trained with each defence level applied to every update.

    PYTHONPATH=. python benchmarks/defended_training.py --data-root ../shared/data/cifar10 --epochs 1

Trains FC-6 width 200 (default) on CIFAR-10's train part (40,000 of the 50,000 training JPEGs at 32 px;
`datasets.partition`) with the default recipe (Adam, lr 1e-3, batches of 64), once per defence level — none,
additive noise at two σ, DP-SGD (σ, C) and the example plugin's quantisation — exactly as the harness trains
a cell's victim (`harness.victim.training_rule`: FedSGD rounds through the cell's update transforms), and
prints seconds per epoch and the test accuracy on the partition's 5,000 test images. Nothing is cached.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from leakbench.cell.spec import CellSpec  # noqa: E402
from leakbench.datasets import load_dataset, partition  # noqa: E402
from leakbench.fl import DPConfig, register_transform  # noqa: E402
from leakbench.fl.transform import TRANSFORMS, DefenceSetting  # noqa: E402
from leakbench.harness.victim import training_rule  # noqa: E402
from leakbench.models import build_model  # noqa: E402
from leakbench.models.training import TrainRecipe, accuracy, train  # noqa: E402


def example_quantise(bits: int) -> DefenceSetting:
    """The example plugin's `example-quantise` defence, registered from its source when not installed."""
    if "example-quantise" not in TRANSFORMS.names():
        sys.path.insert(0, str(REPO / "examples" / "leakbench-example-plugin"))
        register_transform(importlib.import_module("leakbench_example_plugin.defence").Quantise)
    cls = TRANSFORMS.create("example-quantise")
    return DefenceSetting("example-quantise", cls.Config(bits=bits))


def levels(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """Each defence level as CellSpec fields."""
    out: dict[str, dict[str, object]] = {"none": {}}
    for sigma in args.noise:
        out[f"noise σ={sigma:g}"] = {"noise": sigma}
    out[f"DP σ={args.dp_sigma:g} C={args.dp_clip:g}"] = {"dp": DPConfig(sigma=args.dp_sigma, clip=args.dp_clip)}
    out[f"example-quantise bits={args.bits}"] = {"defences": (example_quantise(args.bits),)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data" / "cifar10")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--noise", type=float, nargs="*", default=[1e-3, 1e-2], help="additive noise σ levels")
    parser.add_argument("--dp-sigma", type=float, default=1.0)
    parser.add_argument("--dp-clip", type=float, default=1.0)
    parser.add_argument("--bits", type=int, default=2, help="example-quantise bits")
    parser.add_argument("--only", nargs="*", default=None, help="run only the levels whose label starts so")
    args = parser.parse_args()
    start = time.perf_counter()
    data = load_dataset(args.dataset, data_root=args.data_root)
    parts = partition(data)
    print(f"{args.dataset}: {len(data)} images {data.image_shape} loaded in {time.perf_counter() - start:.1f} s; "
          f"train {len(parts.train)}, test {len(parts.test)}; FC-{args.depth} w{args.width}, {args.epochs} epoch(s), "
          f"threads {torch.get_num_threads()}")
    recipe = TrainRecipe()
    warm = build_model("fc", data.image_shape, data.num_classes, width=args.width, depth=args.depth, seed=0)
    train(warm, data.images, data.labels, torch.as_tensor(parts.train[:1280]), recipe, 1)  # untimed warm-up
    print(f"{'defence':32s} {'s/epoch':>8s} {'train acc %':>11s} {'test acc %':>10s}")
    for label, fields in levels(args).items():
        if args.only and not any(label.startswith(o) for o in args.only):
            continue
        spec = CellSpec(attack="spear", dataset=args.dataset, batch_size=1, width=args.width, depth=args.depth,
                        train_epochs=args.epochs, **fields)  # type: ignore[arg-type]
        model = build_model("fc", data.image_shape, data.num_classes, width=args.width, depth=args.depth, seed=0)
        tic = time.perf_counter()
        train(model, data.images, data.labels, torch.as_tensor(parts.train), recipe, args.epochs,
              rule=training_rule(spec, data))
        seconds = (time.perf_counter() - tic) / max(args.epochs, 1)
        train_acc = accuracy(model, data.images, data.labels, torch.as_tensor(parts.train))
        test_acc = accuracy(model, data.images, data.labels, torch.as_tensor(parts.test))
        print(f"{label:32s} {seconds:8.1f} {100 * train_acc:11.1f} {100 * test_acc:10.1f}", flush=True)


if __name__ == "__main__":
    main()
