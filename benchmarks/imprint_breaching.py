"""Robbing the Fed's imprint attack, leakbench's (`leakbench.attacks.imprint`) beside breaching's
(JonasGeiping/breaching 8bd99d52: `ImprintBlock`, `ImprintAttacker`), on the same victim and the same images.

    git -C /work/.mirror/JonasGeiping+breaching/repo archive HEAD breaching | tar -x -C /work/scratch/breaching-src
    PYTHONPATH=. python benchmarks/imprint_breaching.py [--quick] [--breaching DIR] [--data-root DIR]

For bins k ∈ {128, 512}, K·b ∈ {8, 80, 800} images (K clients of b = 8 CIFAR-10 images under secure aggregation:
the server sees the gradient of the mean loss over all K·b) and seeds 0–2: the cell's public victim (FC-6 of width
200 at init) and batch as leakbench draws them (`harness.victim`). leakbench: `Imprint.modify` (the cell's attack
seed), `modified_victim`, the cell's client update (the mean of the K clients' FedSGD gradients), `reconstruct`.
breaching: its `ImprintBlock(k, connection="linear", gain=1, linfunc="fourier", mode=32)` (the global generator
seeded with the seed) composed with the same victim's layers on the normalised images ((x − 0.5) / 0.5), the
gradient of the mean cross-entropy in one pass, then its `ImprintAttacker.reconstruct` (`breach_reduction="weight"`,
`breach_padding=True`), back from the normalised space. Breaching's modules are imported from DIR (its package
`__init__` files, which need hydra, are skipped). Both are scored alike: Hungarian matching by MSE, then
`metrics.image.exact` (every pixel equal at 8 bits). Also printed: the largest |difference| between the two
blocks' parameters (linear2's bias differs by its random init) and the seconds of each, the server's part (block
and attack) apart from the client's update (leakbench: K FedSGD updates; breaching: one gradient).

Where the counts differ (by one image), the cause is a grayscale image: the fourier mode-32 query of a 3×32×32
image is exactly 0 when its channels are equal (the channels' cosines are 120° apart), which is the middle edge
(the Laplace median), so float32 rounding of the query (the two blocks' first layers differ by ≤ 2.6e-7: breaching
computes the cosines in float32) decides on which side of that edge the image lands, alone or with others.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from leakbench.attacks.imprint import Imprint, ImprintConfig
from leakbench.cell.seeds import attack_seed
from leakbench.cell.spec import CellSpec, cell_id, transforms
from leakbench.datasets import Batch
from leakbench.fl import Client, client_update
from leakbench.fl.secagg import SecAggConfig
from leakbench.fl.transform import DefenceSetting
from leakbench.harness.victim import victim
from leakbench.metrics.image import exact
from leakbench.metrics.matching import apply_matching, match_by_mse
from leakbench.models.fc import FCNet
from leakbench.server.model import modified_victim

REPO = Path(__file__).resolve().parents[1]
B = 8
SHAPE = (3, 32, 32)
PARAMS = (("block.0.weight", "linear0.weight"), ("block.0.bias", "linear0.bias"),
          ("block.2.weight", "linear2.weight"), ("block.2.bias", "linear2.bias"))


def load_breaching(src: Path) -> tuple[Any, Any]:
    """breaching's ImprintBlock and ImprintAttacker from its source folder `src`, its packages as empty stand-ins."""
    for name in ("breaching", "breaching.attacks", "breaching.attacks.auxiliaries", "breaching.cases",
                 "breaching.cases.models", "breaching.cases.malicious_modifications"):
        package = types.ModuleType(name)
        package.__path__ = [str(src.joinpath(*name.split(".")))]
        sys.modules[name] = package
    imprint = importlib.import_module("breaching.cases.malicious_modifications.imprint")
    analytic = importlib.import_module("breaching.attacks.analytic_attack")
    return imprint.ImprintBlock, analytic.ImprintAttacker


def exact_count(recon: torch.Tensor, truth: torch.Tensor) -> int:
    """Images of `truth` recovered exactly at 8 bits after Hungarian matching by MSE (as leakbench scores)."""
    return int(exact(apply_matching(recon, match_by_mse(recon, truth)), truth).sum())


def run_leakbench(spec: CellSpec, batch: Batch, model: FCNet) \
        -> tuple[torch.Tensor, dict[str, torch.Tensor], float, float]:
    """leakbench's reconstruction (images), the block it sent, the seconds of the server's part (modify, build,
    reconstruct) and of the client's update (the cell's K FedSGD updates and their mean)."""
    start = time.perf_counter()
    attack = Imprint(ImprintConfig(bins=spec.hyperparameters["bins"]))
    seed = attack_seed(cell_id(spec))
    server = attack.modify(model, seed=seed)
    received = modified_victim(model, server)
    built = time.perf_counter()
    update = client_update(transforms(spec), Client(received, batch, spec.seed, spec.threat))
    updated = time.perf_counter()
    result = attack.reconstruct(update, seed=seed)
    assert result.images is not None, result
    return result.images, server.values, built - start + time.perf_counter() - updated, updated - built


def run_breaching(block_cls: Any, attacker_cls: Any, bins: int, seed: int, batch: Batch,
                  model: FCNet) -> tuple[torch.Tensor, nn.Module, float, float]:
    """breaching's reconstruction (images), its block, the seconds of the server's part (block, attack) and of the
    gradient (one pass over all K·b images)."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    block = block_cls(SHAPE, bins, connection="linear", gain=1.0, linfunc="fourier", mode=32)
    net = nn.Sequential(block, nn.Flatten(), copy.deepcopy(model.body))
    built = time.perf_counter()
    normalised = (batch.images - model.mean) / model.std
    gradients = torch.autograd.grad(F.cross_entropy(net(normalised), batch.labels), list(net.parameters()))
    updated = time.perf_counter()
    cfg = SimpleNamespace(impl=SimpleNamespace(dtype="float", mixed_precision=False, JIT=None), label_strategy=None,
                          normalize_gradients=False, sort_by_bias=False, breach_reduction="weight",
                          breach_padding=True)
    metadata = SimpleNamespace(shape=SHAPE, mean=[model.mean] * 3, std=[model.std] * 3, modality="vision")
    payload = [{"parameters": [p.detach() for p in net.parameters()], "buffers": None, "metadata": metadata}]
    shared = [{"gradients": list(gradients), "buffers": None,
               "metadata": {"num_data_points": batch.size, "labels": None}}]
    secrets = {"ImprintBlock": {"weight_idx": 0, "bias_idx": 1, "shape": SHAPE, "structure": block.structure}}
    data = attacker_cls(net, nn.CrossEntropyLoss(), cfg).reconstruct(payload, shared, secrets)[0]["data"]
    return data * model.std + model.mean, block, built - start + time.perf_counter() - updated, updated - built


def row(bins: int, kb: int, seed: int, data_root: Path, breaching: tuple[Any, Any]) -> str:
    """One table row: both attacks on the cell of `bins`, K·b = `kb` images and `seed`."""
    secagg = (DefenceSetting("secagg", SecAggConfig(clients=kb // B)),) if kb > B else ()
    spec = CellSpec(attack="imprint", dataset="cifar10", batch_size=B, seed=seed, data_root=str(data_root),
                    hyperparameters={"bins": bins}, defences=secagg)
    batch, model = victim(spec)
    assert isinstance(model, FCNet) and batch.size == kb
    ours, values, *ours_s = run_leakbench(spec, batch, model)
    theirs, block, *theirs_s = run_breaching(*breaching, bins, seed, batch, model)
    state = block.state_dict()
    diffs = [float((values[a] - state[b]).abs().max()) for a, b in PARAMS]
    counts = [exact_count(ours, batch.images), exact_count(theirs, batch.images)]
    cells = [f"{n} ({n / kb:.3f})" for n in counts]
    seconds = [f"{a:.2f} / {u:.1f}" for a, u in (ours_s, theirs_s)]
    return (f"| {bins} | {kb} | {seed} | {cells[0]} | {cells[1]} | {seconds[0]} | {seconds[1]} | "
            + " | ".join(f"{d:.1e}" for d in diffs) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--breaching", type=Path, default=Path("/work/scratch/breaching-src"))
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data" / "cifar10")
    parser.add_argument("--quick", action="store_true", help="bins 128, K·b 8, seed 0 only")
    args = parser.parse_args()
    breaching = load_breaching(args.breaching.resolve())
    print("| bins | K·b | seed | exact leakbench | exact breaching | s leakbench (server / update) | "
          "s breaching (server / update) | "
          "max abs Δ linear0.W | linear0.b | linear2.W | linear2.b |")
    print("|---" * 11 + "|")
    for bins in (128,) if args.quick else (128, 512):
        for kb in (8,) if args.quick else (8, 80, 800):
            for seed in (0,) if args.quick else (0, 1, 2):
                print(row(bins, kb, seed, args.data_root, breaching), flush=True)


if __name__ == "__main__":
    main()
