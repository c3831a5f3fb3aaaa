"""A cell's client: its private batch and victim model, re-derived from the spec, and the update it shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal, overload

import torch

from leakbench.cell.draw import draw_batch
from leakbench.cell.spec import CellSpec, cell_id, cell_settings, transforms
from leakbench.core.errors import DefenceError
from leakbench.datasets import Batch, ImageDataset, load_dataset, partition
from leakbench.fl import Client, ClientUpdate, client_update
from leakbench.fl.dp import DPSGD, epsilon
from leakbench.fl.fedavg import FedAvg
from leakbench.fl.secagg import SecAgg
from leakbench.fl.transform import FedSGD, FedSGD64
from leakbench.models import ImageVictim, build_model
from leakbench.models.base import VictimInfo
from leakbench.models.training import UpdateRule, steps_per_epoch
from leakbench.models.victims import AT_INIT, trained_victim


def load_batch(spec: CellSpec) -> Batch:
    """The cell's private batch, re-derived from its dataset, image size, batch size and seed."""
    return victim(spec, with_model=False)[0]


@overload
def victim(spec: CellSpec, *, with_model: Literal[True] = ...) -> tuple[Batch, ImageVictim]: ...
@overload
def victim(spec: CellSpec, *, with_model: Literal[False]) -> tuple[Batch, None]: ...
@overload
def victim(spec: CellSpec, *, with_model: bool) -> tuple[Batch, ImageVictim | None]: ...


def victim(spec: CellSpec, *, with_model: bool = True) -> tuple[Batch, ImageVictim | None]:
    """The cell's private batch and its victim (both re-derived from the spec).

    At init (`train_epochs` 0) the batch is drawn from the whole dataset, as it always was. A trained
    victim is loaded from the victim cache or trained on the dataset's train part, and its batch is
    drawn from the attack part, which no training ever sees; every training step's update goes through the
    cell's DP, noise and defences (`training_rule`). The model carries its `victim_info`.
    Defences that change the victim (`UpdateTransform.victim`: PRECODE) change it first.
    """
    root = Path(spec.data_root) if spec.data_root else None
    dataset = load_dataset(spec.dataset, data_root=root, image_size=spec.image_size,
                           fingerprint=spec.data_fingerprint)  # the files the cell was planned on
    parts = partition(dataset) if spec.train_epochs else None
    batch = draw_batch(dataset, spec)
    if not with_model:
        return batch, None
    model = build_model(spec.arch, dataset.image_shape, dataset.num_classes, width=spec.width, depth=spec.depth,
                        seed=spec.seed)
    for transform in transforms(spec):  # defences that change the victim (PRECODE), before it trains
        model = transform.victim(model, spec.seed)
    info = AT_INIT
    if parts is not None:
        assert spec.recipe is not None
        info = trained_victim(model, victim_key(spec, dataset), dataset.images, dataset.labels,
                              (torch.as_tensor(parts.train), torch.as_tensor(parts.test)), spec.recipe,
                              spec.train_epochs, rule=training_rule(spec, dataset))
        info = replace(info, train_epsilon=train_epsilon(spec, len(parts.train)))
    model.victim_info = info
    return batch, model.eval()  # at rest in eval mode; the client's update and the scoring set their own mode


def victim_key(spec: CellSpec, dataset: ImageDataset) -> dict[str, Any]:
    """What makes a trained victim's weights (the victim cache's key): data, partition, model, init seed,
    recipe, epochs, the defences that change the model and a folder's data fingerprint (each only when
    there is one, so the keys of earlier victims stay) — never the batch, the attack or where the data lies."""
    from leakbench.datasets.base import PARTITION_FRACTIONS, PARTITION_SEED

    rule = training_rule(spec, dataset)
    changing = [{"name": t.name, **asdict(t.config)} for t in transforms(spec) if t.changes_victim]
    return {**({"victim_defences": changing} if changing else {}),
            **({"data_fingerprint": spec.data_fingerprint} if spec.data_fingerprint else {}),
            "dataset": spec.dataset, "dataset_size": len(dataset), "image_shape": list(dataset.image_shape),
            "partition": [PARTITION_SEED, *PARTITION_FRACTIONS], "arch": spec.arch, "width": spec.width,
            "depth": spec.depth, "init_seed": spec.seed, "recipe": asdict(spec.recipe) if spec.recipe else None,
            "epochs": spec.train_epochs, **({"update": rule.key()} if rule.defended() else {})}


def training_rule(spec: CellSpec, dataset: ImageDataset) -> UpdateRule:
    """How each step of the cell's victim training makes its update: FedSGD rounds through the cell's client
    (DP-SGD, MixUp), noise and defences — the victim a defended federation would have trained. FedAvg and
    secure aggregation are the attacked round's protocol, not a change to what is learnt (the mean of K
    clients' FedSGD updates is the FedSGD update of their union): their victims train by FedSGD. Plain FedSGD for a cell
    without any (the victim trained as before, under the same cache key). Defences that change the victim
    (PRECODE) act through the model it trains (its own loss term), not through the rule. The float64 client
    (`fedsgd-f64`) is the attacked round's arithmetic: its victims train by plain FedSGD too."""
    cell = [t for t in transforms(spec) if not t.changes_victim]
    client = FedSGD(FedSGD.Config()) if isinstance(cell[0], (FedAvg, SecAgg, FedSGD64)) else cell[0]
    return UpdateRule((client, *cell[1:]), spec.dataset, dataset.num_classes, spec.threat)


def train_epsilon(spec: CellSpec, train_size: int) -> float | None:
    """ε of the cell's victim training when it ran DP-SGD (the cell's dp level on every step, `training_rule`):
    Opacus's RDP accountant (`fl.dp.epsilon`) at the level's noise multiplier (the CPA convention's σ·b with b
    the recipe's batch), sampling rate q = batch / `train_size` and T = epochs × ⌈train_size / batch⌉ steps, at
    the level's δ. The loop shuffles once per epoch and takes consecutive mini-batches where the accountant
    assumes Poisson sampling at rate q: the usual approximation of DP-SGD implementations (Abadi et al. 2016).
    None for a victim at init or trained without DP-SGD."""
    if not spec.train_epochs or spec.recipe is None:
        return None
    client = transforms(spec)[0]
    if not isinstance(client, DPSGD):
        return None
    dp, batch = client.config, spec.recipe.batch_size
    return epsilon(dp.noise_multiplier(batch), min(1.0, batch / train_size),
                   spec.train_epochs * steps_per_epoch(train_size, batch), dp.delta)


def victim_columns(model: ImageVictim) -> dict[str, Any]:
    """The victim's accuracies as record columns (NaN at init) and its cache hash ("" at init); for a victim
    trained with DP-SGD also `train_epsilon`, its training's ε (`train_epsilon`; ∞ at σ = 0), a column only
    such cells have, so records of every other cell stay as they were."""
    info: VictimInfo = getattr(model, "victim_info", AT_INIT)
    eps = {"train_epsilon": info.train_epsilon} if info.train_epsilon is not None else {}
    return {"train_accuracy": info.train_accuracy, "test_accuracy": info.test_accuracy,
            "victim_hash": info.victim_hash, **eps}


def noise_columns(spec: CellSpec, batch: Batch, model: ImageVictim) -> dict[str, Any]:
    """For a cell with noise (`spec.noise`, the noise before its defences): `noise_snr`, the per-tensor SNR of
    that noise on the cell's own update (`fl.noise.noise_snr`: RMS of the client's update before the noise
    over the noise std) as JSON text {parameter: SNR} in the update's order — recomputed here from the
    client transform alone (deterministic: the update the noise was added to), on a copy of `model`. Nothing
    for a cell without noise, so records of other cells stay as they were."""
    if not spec.noise:
        return {}
    import copy
    import json

    from leakbench.fl.noise import noise_snr

    client = transforms(spec)[0]
    clean = client_update([client], Client(copy.deepcopy(model), batch, spec.seed, spec.threat))
    return {"noise_snr": json.dumps(noise_snr(clean.gradients, spec.noise, spec.noise_scale))}


def prepare(spec: CellSpec, send: Callable[[ImageVictim], ImageVictim] | None = None) \
        -> tuple[Batch, ImageVictim, ClientUpdate]:
    """Load the batch, build the victim and compute the client's update (no attack yet): the cell's
    update transforms (`spec.transforms`: FedSGD, DP-SGD or FedAvg, then noise and defences) under
    its threat model. `send` (a malicious server's, `harness.server.send`) makes the model the client receives
    from the public victim: the client trains that one; the victim returned is the public one."""
    try:
        batch, model = victim(spec)  # a trained victim's training runs its transforms too
        received = send(model) if send is not None else model
        return batch, model, client_update(transforms(spec), Client(received, batch, spec.seed, spec.threat))
    except DefenceError as exc:
        raise DefenceError(f"cell {cell_id(spec)} ({' '.join(cell_settings(spec))}): {exc}; the run stops here: "
                           "its finished cells are kept, and the same command resumes once the transform or "
                           "that level of the suite is fixed") from None
