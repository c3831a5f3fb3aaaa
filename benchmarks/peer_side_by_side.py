"""Side by side with the LT-code peeling paper's released code (issue 44): same CIFAR-10 images, same victims.

    PYTHONPATH=. python benchmarks/peer_side_by_side.py --data-root ../shared/data/cifar10 \
        --peer-code ~/Gradient-Inversion-via-LT-Codes --batch-sizes 64,128,256 --seeds 0-2 \
        --attacks peeling,spear,spear-guided --max-seconds 900 --out reports/peer-side-by-side.csv

For every victim × b × seed, one CIFAR-10 batch and one victim, both drawn by leakbench from the seed (the
cell's batch and init, `harness.victim.prepare`), and one client update; then

- leakbench's attacks (`--attacks`, each one cell through the harness: sandboxed worker, scored by the
  harness against the batch);
- the peer's released code (`--peer-code`: the folder holding its `peeling_attack.py`, called `trapweights.py`
  in its earlier commits; Shariati & Alambardar Meybodi, arXiv:2609.09659) on the same update: its `TrapModel`
  holds leakbench's victim weights (first layer transposed to its F × N layout, the classifier as its
  `downstream`), its `IterativeSubtractionAttack.run`
  gets leakbench's first-layer gradients (float64, transposed), and its samples are scored by the same
  harness function (`metrics.score_images`). TensorFlow is optional: when it cannot be imported, one line says
  so and only leakbench's side runs (never install it into leakbench's venv: a scratch venv that sees it
  through a .pth file, `pip install tensorflow-cpu`, runs this script). On FC-2 the peer sees normalised
  inputs, as its own code would on that victim. Its module imports `tensorflow_datasets` and Hugging Face
  `datasets` for its loaders only; when they are missing, empty stand-ins are put in their place.

Victims (`--victims`): `lt-mlp-f64` (the paper's: `--arch lt-mlp`, raw pixels, float64 client `fedsgd-f64`),
`lt-mlp-f32` (the same, float32 client), `fc2` (leakbench's FC-2: `--arch fc --depth 2`, its init and
normalisation, float32 client); width `--width` (1000, the paper's).

Per row: recovered % (answer rows the harness matches 8-bit exactly to a batch image, over b), false accepts
(answer rows it matches to no batch image exactly: a certified vector that is not a batch image, or one
image answered twice), seconds (the peer: its `run` alone, after its model is built; leakbench: the harness's
round trip to the attack worker), and for leakbench's attacks the ratio of their seconds to the peer's on the
same batch. Then the means per victim, b and attack. Sizes this machine can afford: b ≤ 64 (seconds each for
peeling; spear and spear-guided spend their budget where they fail).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranges import parse_range

from leakbench.cell.spec import CellSpec
from leakbench.fl.transform import DefenceSetting, EmptyConfig
from leakbench.harness.cell import run_cell
from leakbench.harness.victim import prepare
from leakbench.metrics import score_images

SPEAR_FAMILY = ("spear", "spear-guided", "spear-dl", "spear-paper")
PEER_MODULES = ("peeling_attack", "trapweights")
"""The released code's module, by its names over its history (the same TrapModel and IterativeSubtractionAttack)."""


@dataclass(frozen=True)
class Victim:
    """One victim of the table: the architecture and depth, and whether the client computes in float64."""

    arch: str
    depth: int
    float64: bool


VICTIMS = {"lt-mlp-f64": Victim("lt-mlp", 2, True), "lt-mlp-f32": Victim("lt-mlp", 2, False),
           "fc2": Victim("fc", 2, False)}


AS_RELEASED = "peeling-as-released"
"""`--attacks` name of leakbench's `peeling` without the paper's data-range filter (`range_filter = false`), as the
released code runs: the twin of the peer's row, false accepts included."""


def spec_for(victim: Victim, attack: str, b: int, seed: int, args: argparse.Namespace) -> CellSpec:
    """The cell of `attack` on `victim`: CIFAR-10 batch `b` drawn from `seed`, its init from `seed`, layer 1."""
    budget: dict[str, Any] = {"max_seconds": args.max_seconds} \
        if attack in ("peeling", AS_RELEASED) or attack in SPEAR_FAMILY else {}
    if attack == AS_RELEASED:
        attack, budget = "peeling", {**budget, "range_filter": False}
    client = (DefenceSetting("fedsgd-f64", EmptyConfig()),) if victim.float64 else ()
    return CellSpec(attack=attack, dataset=args.dataset, batch_size=b, seed=seed, width=args.width,
                    depth=victim.depth, layer=1, arch=victim.arch, data_root=args.data_root,
                    hyperparameters=budget, defences=client)


def leakbench_row(spec: CellSpec) -> dict[str, Any]:
    """One leakbench cell through the harness: recovered %, false accepts, seconds, status."""
    result = run_cell(spec)
    s, b = result.summary, spec.batch_size
    exact = int(result.records["exact"].astype(bool).sum())
    rows = result.reconstruction.rows()
    return {"recovered_pct": 100.0 * exact / b, "exact": exact, "answer_rows": rows,
            "false_accepts": max(rows - exact, 0), "seconds": float(s["seconds"]), "status": s["status"],
            "reason": str(s["reason"])[:240]}


def load_peer(folder: str | None) -> Any:
    """The peer's module (`PEER_MODULES`) from `folder`, or None (one line on stderr: why) when TensorFlow is not
    importable or no folder was given."""
    if folder is None:
        print("peer: no --peer-code given; running leakbench's side only", file=sys.stderr)
        return None
    if importlib.util.find_spec("tensorflow") is None:
        print("peer: TensorFlow is not importable here; running leakbench's side only", file=sys.stderr)
        return None
    for name in ("tensorflow_datasets", "datasets"):  # the peer's data loaders only, never called here
        if importlib.util.find_spec(name) is None:
            stand_in = types.ModuleType(name)
            stand_in.load_dataset = None  # type: ignore[attr-defined]
            sys.modules[name] = stand_in
    # TensorFlow's native libraries loaded before Triton's make Triton's import segfault (TF 2.21, torch 2.14:
    # torch imports Triton lazily, through torch._dynamo, in the middle of a cell); loading it first is safe.
    importlib.import_module("torch._dynamo")
    sys.path.insert(0, folder)
    name = next(m for m in PEER_MODULES if (Path(folder) / f"{m}.py").is_file())
    peer = importlib.import_module(name)
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        peer.ATTACK_DEVICE = "/CPU:0"
    return peer


def peer_row(peer: Any, spec: CellSpec) -> dict[str, Any]:
    """The peer's attack on the cell's victim and update, scored like leakbench's answers."""
    import tensorflow as tf

    batch, model, update = prepare(spec)
    first, classifier = model.linear_layers()
    w_name, b_name = model.layer_param_names(1)
    W2 = tf.constant(classifier.weight.detach().double().T.numpy(), peer.DTYPE)
    b2 = tf.constant(classifier.bias.detach().double().numpy(), peer.DTYPE)
    trap = peer.TrapModel(first.weight.detach().double().T.numpy(), first.bias.detach().double().numpy(),
                          lambda a: a @ W2 + b2, int(classifier.weight.shape[0]))
    gw = update.gradients[w_name].detach().double().T.numpy().copy()
    gb = update.gradients[b_name].detach().double().numpy().copy()
    start = time.perf_counter()
    out = peer.IterativeSubtractionAttack(trap, spec.batch_size).run(gw, gb)
    seconds = time.perf_counter() - start
    samples = out["samples"]
    exact = 0
    if samples:
        inputs = torch.from_numpy(np.stack([s["x"] for s in samples]))
        images = model.denormalize(inputs.to(torch.float32)).clamp(0.0, 1.0)
        exact = int(score_images(images, batch.images)["exact"].sum())
    b = spec.batch_size
    return {"recovered_pct": 100.0 * exact / b, "exact": exact, "answer_rows": len(samples),
            "false_accepts": max(len(samples) - exact, 0), "seconds": seconds,
            "status": "ok" if len(samples) >= b else ("partial" if samples else "failed"), "reason": ""}


def table(args: argparse.Namespace, peer: Any) -> pd.DataFrame:
    rows = []
    for key in args.victims:
        victim = VICTIMS[key]
        for b in args.batch_sizes:
            for seed in args.seeds:
                found: dict[str, dict[str, Any]] = {}
                if peer is not None:
                    found["peer (released code)"] = peer_row(peer, spec_for(victim, "peeling", b, seed, args))
                for attack in args.attacks:
                    found[attack] = leakbench_row(spec_for(victim, attack, b, seed, args))
                peer_seconds = found.get("peer (released code)", {}).get("seconds", np.nan)
                for name, row in found.items():
                    row = {"victim": key, "batch_size": b, "seed": seed, "attack": name, **row,
                           "seconds_ratio_to_peer": row["seconds"] / peer_seconds if name in args.attacks else np.nan}
                    rows.append(row)
                    print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                          flush=True)
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per victim, b and attack."""
    return (frame.groupby(["victim", "batch_size", "attack"], sort=False)
            [["recovered_pct", "false_accepts", "seconds", "seconds_ratio_to_peer"]].mean().round(3).reset_index())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True, help="folder of the CIFAR-10 files")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--peer-code", help="folder holding the peer's peeling_attack.py or trapweights.py (optional)")
    parser.add_argument("--victims", default="lt-mlp-f64,fc2", help=f"comma list of {', '.join(VICTIMS)}")
    parser.add_argument("--batch-sizes", default="64,128,256")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--attacks", default="peeling,spear,spear-guided", help="leakbench attacks (comma list; "
                        f"{AS_RELEASED}: peeling without the paper's data-range filter, as the released code)")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="budget of peeling and the SPEAR family")
    parser.add_argument("--out", help="CSV of every row (optional)")
    args = parser.parse_args(argv)
    try:
        args.victims = args.victims.split(",")
        args.batch_sizes, args.seeds = parse_range(args.batch_sizes), parse_range(args.seeds)
        args.attacks = [a for a in args.attacks.split(",") if a]
    except ValueError as exc:
        parser.exit(2, f"peer_side_by_side: bad list ({exc})\n")
    unknown = [v for v in args.victims if v not in VICTIMS]
    if unknown:
        parser.exit(2, f"peer_side_by_side: unknown victim {unknown[0]!r} (known: {', '.join(VICTIMS)})\n")
    if not Path(args.data_root).is_dir():
        parser.exit(2, f"peer_side_by_side: --data-root {args.data_root} is not a folder\n")
    if args.peer_code is not None and not any((Path(args.peer_code) / f"{m}.py").is_file() for m in PEER_MODULES):
        parser.exit(2, f"peer_side_by_side: no {' or '.join(m + '.py' for m in PEER_MODULES)} in --peer-code "
                       f"{args.peer_code}\n")
    if any(b < 1 for b in args.batch_sizes) or args.width < 1 or not args.max_seconds > 0:
        parser.exit(2, "peer_side_by_side: batch sizes, width and --max-seconds must be positive\n")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    frame = table(args, load_peer(args.peer_code))
    print(summary(frame).to_string(index=False))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
