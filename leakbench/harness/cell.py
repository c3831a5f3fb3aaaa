"""One cell of a benchmark: data → victim → client update → attack → matched per-image metrics."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from leakbench.attacks import Attack, Reconstruction
from leakbench.attacks.inversion import InversionConfig
from leakbench.datasets import Batch, ImageDataset, load_dataset, partition, sample_batch
from leakbench.datasets.loaders import data_locations
from leakbench.errors import ConfigError, LeakbenchError
from leakbench.harness.artifacts import AttackOutput, json_safe, plain_stats
from leakbench.harness.fingerprint import provenance
from leakbench.harness.isolation import IN_PROCESS, run_isolated, workers
from leakbench.harness.job import AttackJob, attack_cell, attack_seed, configure_attack, resolve_class, scoped_ref
from leakbench.fl import ClientUpdate, DPConfig, FedAvgConfig, dp_update, fedavg_update, fedsgd_update
from leakbench.fl.dp import ACCOUNTANT
from leakbench.fl.noise import add_noise, check_noise
from leakbench.fl.update import ThreatModel
from leakbench.metrics import MATCHING, LpipsScorer, apply_matching, match_by_mse, score_features, score_images
from leakbench.metrics.image import exact, mse, psnr, ssim
from leakbench.metrics.matching import UNMATCHED
from leakbench.metrics.stats import describe, or_none
from leakbench.models import build_model
from leakbench.models.training import TrainRecipe, check_epochs
from leakbench.models.victims import AT_INIT, VictimInfo, trained_victim
from leakbench.plugins import named_plugins
from leakbench.progress import enabled as progress_enabled


@dataclass(frozen=True)
class CellSpec:
    """Everything that defines one attack run; `seed` drives the batch, the init and the client's noise
    (DP, FedAvg shuffling); the attack's seed is derived from the cell id (`harness.job.attack_seed`).

    `dp` None is plain FedSGD; a DPConfig makes the client run one DP-SGD step instead; a
    `fedavg` config makes it run local epochs and share the weight difference (not with DP).
    `arch` is the victim ("fc" or "conv"); `inversion` (steps > 0) turns recovered features of an
    inner layer back into images, scored next to the feature metrics. `train_epochs` > 0 trains the
    victim first (`recipe`, the default TrainRecipe when not given) on the dataset's train part and
    attacks a batch of its attack part (`datasets.partition`); 0 is the victim at init.
    `labels_known` / `batch_size_known` are the threat model (`ThreatModel`: what the update carries
    besides the gradients). `noise` σ > 0 adds Gaussian noise to the shared gradients (`fl.noise`;
    `noise_scale` "absolute" or "max"), drawn from `seed`; not with DP.
    """

    attack: str
    dataset: str
    batch_size: int
    seed: int = 0
    width: int = 200
    depth: int = 6
    layer: int = 1
    data_root: str | None = None
    image_size: int | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    dp: DPConfig | None = None
    arch: str = "fc"
    fedavg: FedAvgConfig | None = None
    inversion: InversionConfig | None = None
    train_epochs: int = 0
    recipe: TrainRecipe | None = None
    labels_known: bool = False
    batch_size_known: bool = True
    noise: float = 0.0
    noise_scale: str = "absolute"

    def __post_init__(self) -> None:
        check_epochs(self.train_epochs, "train_epochs")
        check_noise(self.noise, self.noise_scale)
        object.__setattr__(self, "noise", float(self.noise))  # 1 and 1.0 are one cell
        if not self.noise:
            object.__setattr__(self, "noise_scale", "absolute")  # σ = 0 is the plain update, whatever its scale
        if self.noise and self.dp is not None:
            raise ConfigError("a cell adds plain noise or runs DP-SGD (which adds its own), not both")
        if self.train_epochs and self.recipe is None:
            object.__setattr__(self, "recipe", TrainRecipe())  # the id names the recipe it was trained with
        if not self.train_epochs and self.recipe is not None:
            raise ConfigError("a training recipe needs train_epochs ≥ 1 (a victim at init is not trained)")

    @property
    def threat(self) -> ThreatModel:
        """What the attacker is given besides the update and the model."""
        return ThreatModel(batch_size_known=self.batch_size_known, labels_known=self.labels_known)


NEW_FIELD_DEFAULTS = {"arch": "fc", "fedavg": None, "inversion": None, "train_epochs": 0, "recipe": None,
                      "labels_known": False, "batch_size_known": True, "noise": 0.0, "noise_scale": "absolute"}
"""Fields added after the first stored runs: left out of ids and manifests at these defaults."""


@dataclass
class CellResult:
    """The outcome of a cell: the attack's stored output, a summary row, per-image records and what a
    grid needs (the ground truth and the reconstruction aligned to it; neither is stored)."""

    spec: CellSpec
    summary: dict[str, Any]
    records: pd.DataFrame
    truth: torch.Tensor
    aligned: torch.Tensor | None
    output: AttackOutput
    provenance: dict[str, Any] = field(default_factory=dict)
    """The attack's code and the batch's fingerprint (`fingerprint.provenance`), for the cell manifest."""

    @property
    def reconstruction(self) -> Reconstruction:
        return self.output.reconstruction


def load_batch(spec: CellSpec) -> Batch:
    """The cell's private batch, re-derived from its dataset, image size, batch size and seed."""
    return victim(spec, with_model=False)[0]


def victim(spec: CellSpec, *, with_model: bool = True) -> tuple[Batch, torch.nn.Module | None]:
    """The cell's private batch and its victim (both re-derived from the spec).

    At init (`train_epochs` 0) the batch is drawn from the whole dataset, as it always was. A trained
    victim is loaded from the victim cache or trained on the dataset's train part, and its batch is
    drawn from the attack part, which no training ever sees. The model carries its `victim_info`.
    """
    root = Path(spec.data_root) if spec.data_root else None
    dataset = load_dataset(spec.dataset, data_root=root, image_size=spec.image_size)
    parts = partition(dataset) if spec.train_epochs else None
    batch = draw_batch(dataset, spec)
    if not with_model:
        return batch, None
    model = build_model(spec.arch, dataset.image_shape, dataset.num_classes, width=spec.width, depth=spec.depth,
                        seed=spec.seed)
    info = AT_INIT
    if parts is not None:
        assert spec.recipe is not None
        info = trained_victim(model, victim_key(spec, dataset), dataset.images, dataset.labels,
                              (torch.as_tensor(parts.train), torch.as_tensor(parts.test)), spec.recipe,
                              spec.train_epochs)
    model.victim_info = info
    return batch, model


def draw_batch(dataset: ImageDataset, spec: CellSpec) -> Batch:
    """The cell's batch from its loaded dataset: the whole dataset at init, the attack part for a trained victim."""
    return sample_batch(dataset, spec.batch_size, spec.seed, pool=partition(dataset).attack if spec.train_epochs else None)


def victim_key(spec: CellSpec, dataset: ImageDataset) -> dict[str, Any]:
    """What makes a trained victim's weights (the victim cache's key): data, partition, model, init seed,
    recipe, epochs — never the batch, the attack or where the data lies."""
    from leakbench.datasets.base import PARTITION_FRACTIONS, PARTITION_SEED

    return {"dataset": spec.dataset, "dataset_size": len(dataset), "image_shape": list(dataset.image_shape),
            "partition": [PARTITION_SEED, *PARTITION_FRACTIONS], "arch": spec.arch, "width": spec.width,
            "depth": spec.depth, "init_seed": spec.seed, "recipe": asdict(spec.recipe) if spec.recipe else None,
            "epochs": spec.train_epochs}


def victim_columns(model: torch.nn.Module) -> dict[str, Any]:
    """The victim's accuracies as record columns (NaN at init) and its cache hash ("" at init)."""
    info: VictimInfo = getattr(model, "victim_info", AT_INIT)
    return {"train_accuracy": info.train_accuracy, "test_accuracy": info.test_accuracy,
            "victim_hash": info.victim_hash}


def prepare(spec: CellSpec) -> tuple[Batch, torch.nn.Module, ClientUpdate]:
    """Load the batch, build the victim and compute the client's update (no attack yet): FedSGD, DP-SGD
    or FedAvg under the cell's threat model, then its additive noise (if any)."""
    if spec.dp is not None and spec.fedavg is not None:
        raise ConfigError("a cell runs either DP-SGD or FedAvg, not both")
    batch, model = victim(spec)
    if spec.dp is not None:
        update = dp_update(model, batch, spec.dp, seed=spec.seed, threat=spec.threat)
    elif spec.fedavg is not None:
        update = fedavg_update(model, batch, spec.fedavg, seed=spec.seed, threat=spec.threat)
    else:
        update = fedsgd_update(model, batch, spec.threat)
    return batch, model, add_noise(update, spec.noise, spec.seed, spec.noise_scale)


def build_attack(spec: CellSpec) -> Attack:
    """The cell's configured attack (checks its hyperparameters; the attacked layer is the cell's)."""
    job = attack_job(spec)
    return configure_attack(job.attack, job.hyperparameters, job.layer, resolve_class(job))


def attack_job(spec: CellSpec) -> AttackJob:
    """What the attack worker is handed for this cell: no dataset, data root or batch seed; the
    attack's seed is derived from the cell id."""
    return AttackJob(spec.attack, dict(spec.hyperparameters), spec.layer, attack_seed(cell_id(spec)), spec.inversion,
                     attack_ref=scoped_ref(spec.attack), plugins=named_plugins(), bars=progress_enabled())


def run_cell(spec: CellSpec, *, lpips: LpipsScorer | None = None, lpips_note: str = "",
             isolate: bool = True, hidden: tuple[Path, ...] = ()) -> CellResult:
    """Run one cell end to end. Bad input raises a LeakbenchError before the attack starts.

    The attack runs in a fresh sandboxed attack worker (`leakbench.harness.isolation`), which gets
    the update and nothing else and cannot reach the data locations nor `hidden` (output folders);
    `isolate=False` runs it here instead (for debugging an attack only; recorded as not isolated).
    `lpips` must be a verified scorer (from `load_lpips`): LPIPS is never reported from a network
    that did not reproduce the published values. Without one, `lpips_note` says why LPIPS is missing.
    """
    if lpips is not None and not lpips.verified:
        raise LeakbenchError(f"refusing to report LPIPS from an unverified network ({lpips.trunk_source})")
    if isolate:
        workers().prestart()  # the worker starts up while the update is computed
    batch, model, update = prepare(spec)
    job = attack_job(spec)
    if isolate:
        output = run_isolated(job, update, [*data_locations(Path(spec.data_root) if spec.data_root else None), *hidden])
    else:
        output = attack_cell(job, update)
        output.isolation = IN_PROCESS
    result = score_cell(spec, output, batch, model, lpips=lpips, lpips_note=lpips_note)
    result.provenance = provenance(resolve_class(job), batch)
    return result


def score_cell(spec: CellSpec, output: AttackOutput, batch: Batch, model: torch.nn.Module, *,
               lpips: LpipsScorer | None = None, lpips_note: str = "") -> CellResult:
    """The scoring step: a pure function of the attack's output and the re-derived ground truth."""
    recon = output.reconstruction
    records, aligned = score(recon, batch, model, lpips)
    if spec.inversion is not None and spec.inversion.steps and recon.space == "feature":
        aligned = add_inversion(records, output.inverted, batch, lpips)
    records.insert(0, "dataset_index", list(batch.indices))
    for key, value in reversed(list(cell_columns(spec).items())):
        records.insert(0, key, value)
    for key, value in victim_columns(model).items():
        records[key] = value
    records["lpips_net"] = lpips.net if lpips is not None else ""
    records["isolation"] = output.isolation
    summary = summarize(spec, recon, records, output.seconds, lpips is not None, lpips_note)
    summary.update(lpips_columns(lpips))
    summary["hyperparameters"] = output.hyperparameters
    summary["isolation"] = output.isolation
    summary.update(victim_columns(model))
    return CellResult(spec, summary, records, batch.images, aligned, output)


def score(recon: Reconstruction, batch: Batch, model: torch.nn.Module, lpips: LpipsScorer | None
          ) -> tuple[pd.DataFrame, torch.Tensor | None]:
    """Per-image metrics in the reconstruction's space, and the reconstruction aligned to truth."""
    if recon.space == "image":
        images = recon.images if recon.status == "ok" else None
        records = score_images(images, batch.images, lpips=lpips)
    else:
        truth = model.layer_inputs(batch.images.to(next(model.parameters()).dtype), recon.layer or 1)
        images = None
        records = score_features(recon.features if recon.status == "ok" else None, truth.detach())
    aligned = None
    if images is not None:
        aligned = apply_matching(images, match_by_mse(images, batch.images))
    records.insert(0, "space", recon.space)
    records["status"] = recon.status
    return records, aligned


def add_inversion(records: pd.DataFrame, images: torch.Tensor | None, batch: Batch, lpips: LpipsScorer | None
                  ) -> torch.Tensor | None:
    """Add image metrics of the inverted images (`images`, from recovered features) to `records`.

    Each ground-truth row keeps the reconstruction the feature matching gave it; the image metrics
    (mse, psnr, ssim, lpips, image_exact) are of that reconstruction's inverted image. `exact` stays
    the feature-space exactness. Returns the inverted images aligned to the truth (None if none).
    """
    nan = np.full(len(records), np.nan)
    records["mse"], records["psnr"], records["ssim"], records["lpips"] = nan, nan.copy(), nan.copy(), nan.copy()
    records["image_exact"] = False
    if images is None:
        return None
    perm = records["matched_recon"].to_numpy()
    rows = np.flatnonzero(perm != UNMATCHED)
    rr, tt = images[torch.as_tensor(perm[rows])], batch.images[torch.as_tensor(rows)].to(torch.float32)
    records.loc[rows, "mse"] = mse(rr, tt).numpy()
    records.loc[rows, "psnr"] = psnr(rr, tt).numpy()
    records.loc[rows, "ssim"] = ssim(rr, tt).numpy()
    records.loc[rows, "image_exact"] = exact(rr, tt).numpy()
    if lpips is not None:
        records.loc[rows, "lpips"] = lpips.score(rr, tt).numpy()
    aligned = torch.full_like(batch.images, 0.5, dtype=torch.float32)
    aligned[torch.as_tensor(rows)] = rr
    return aligned


def cell_columns(spec: CellSpec) -> dict[str, Any]:
    """The axes of a cell as record columns (numbers as numbers; no DP: σ, C, q, δ NaN, ε ∞)."""
    return {"cell_id": cell_id(spec), "attack": spec.attack, "dataset": spec.dataset, "arch": spec.arch,
            "batch_size": spec.batch_size, "width": spec.width, "depth": spec.depth, "layer": spec.layer,
            "seed": spec.seed, **dp_columns(spec.dp), **fedavg_columns(spec.fedavg),
            "inversion_steps": spec.inversion.steps if spec.inversion else 0, **train_columns(spec),
            **threat_columns(spec)}


def threat_columns(spec: CellSpec) -> dict[str, Any]:
    """The threat model (what the attacker knew) and the additive noise on the update (σ 0: none)."""
    return {"threat": spec.threat.label(), "labels_known": spec.labels_known,
            "batch_size_known": spec.batch_size_known, "noise_sigma": float(spec.noise),
            "noise_scale": spec.noise_scale}


def train_columns(spec: CellSpec) -> dict[str, Any]:
    """The victim's training axis: epochs (0 = at init) and the recipe's optimiser, lr and batch size."""
    r = spec.recipe
    return {"train_epochs": spec.train_epochs, "train_optimizer": r.optimizer if r else "",
            "train_lr": float(r.lr) if r else math.nan, "train_batch": r.batch_size if r else 0}


def lpips_columns(lpips: LpipsScorer | None) -> dict[str, Any]:
    """Which LPIPS network scored the cell: net, where its weights came from, whether it was verified."""
    if lpips is None:
        return {"lpips_net": "", "lpips_source": "", "lpips_verified": False}
    return {"lpips_net": lpips.net, "lpips_source": lpips.source, "lpips_verified": lpips.verified}


def fedavg_columns(fedavg: FedAvgConfig | None) -> dict[str, Any]:
    """E, mini-batch size (0 = whole batch), η of a FedAvg client, and a label ('fedsgd' without)."""
    if fedavg is None:
        return {"client": "fedsgd", "fedavg_epochs": 0, "fedavg_minibatch": 0, "fedavg_lr": math.nan}
    return {"client": fedavg.label(), "fedavg_epochs": fedavg.epochs, "fedavg_minibatch": fedavg.minibatch,
            "fedavg_lr": float(fedavg.lr)}


def dp_columns(dp: DPConfig | None) -> dict[str, Any]:
    """σ, C, δ, q, steps, ε and the accountant of a DP setting, and a readable label."""
    if dp is None:
        nan = math.nan
        return {"dp": "none", "dp_sigma": nan, "dp_clip": nan, "dp_delta": nan, "dp_q": nan, "dp_steps": 0,
                "dp_epsilon": math.inf, "dp_accountant": "none"}
    return {"dp": dp.label(), "dp_sigma": dp.sigma, "dp_clip": dp.clip, "dp_delta": dp.delta, "dp_q": dp.q,
            "dp_steps": dp.steps, "dp_epsilon": dp.epsilon(), "dp_accountant": ACCOUNTANT}


def cell_settings(spec: CellSpec, *, hyperparameters: bool = False) -> list[str]:
    """The cell's settings as short words ("b=16", "dp=σ=0.01 C=1", "train_epochs=5", ...): the plan's and the
    progress lines' description of a cell; the hyperparameters (as compact JSON) only when asked for."""
    settings = [spec.attack, spec.dataset, f"b={spec.batch_size}", f"{spec.arch}-{spec.depth} w={spec.width}",
                f"layer={spec.layer}", f"dp={spec.dp.label() if spec.dp else 'none'}",
                f"client={spec.fedavg.label() if spec.fedavg else 'FedSGD'}", f"seed={spec.seed}"]
    if spec.image_size is not None:
        settings.append(f"image_size={spec.image_size}")
    if spec.inversion is not None:
        settings.append(f"inversion_steps={spec.inversion.steps}")
    if spec.train_epochs:
        settings.append(f"train_epochs={spec.train_epochs}")
    if spec.threat != ThreatModel():
        settings.append(f"threat={spec.threat.label().replace(' ', '_').replace(',', '')}")
    if spec.noise:
        settings.append(f"noise={spec.noise:g}" + ("×max" if spec.noise_scale == "max" else ""))
    if hyperparameters and spec.hyperparameters:
        settings.append(json.dumps(spec.hyperparameters, sort_keys=True, separators=(",", ":")))
    return settings


def cell_id(spec: CellSpec) -> str:
    """A hash of the cell's full configuration (everything but `data_root`, which is only a location)."""
    config = {k: v for k, v in spec_dict(spec).items() if k != "data_root"}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def batch_id(spec: CellSpec) -> str:
    """A hash of what chooses the batch (dataset, image size, batch size, seed): the same for every attack,
    layer, DP level and client on that batch, so their grids can show the same images side by side."""
    config = {"dataset": spec.dataset, "image_size": spec.image_size, "batch_size": spec.batch_size, "seed": spec.seed}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def summarize(spec: CellSpec, recon: Reconstruction, records: pd.DataFrame, seconds: float,
              have_lpips: bool, lpips_note: str) -> dict[str, Any]:
    """The one-object summary printed by `leakbench attack --json`."""
    psnr, ssim, lp = (describe(_values(records, name)) for name in ("psnr", "ssim", "lpips"))
    out: dict[str, Any] = dict(cell_columns(spec))
    out.update({
        "space": recon.space,
        "n_images": int(len(records)),
        "exact_fraction": float(records["exact"].astype(bool).mean()),
        "psnr_mean": or_none(psnr.mean), "psnr_median": or_none(psnr.median), "psnr_min": or_none(psnr.min),
        "psnr_inf": psnr.n_inf, "ssim_mean": or_none(ssim.mean),
        "lpips_mean": or_none(lp.mean) if have_lpips else None,
        "lpips_note": "" if have_lpips else lpips_note,
        "seconds": seconds, "status": recon.status, "reason": recon.reason,
        "matching": MATCHING, "attack_stats": plain_stats(recon.stats),
    })
    if recon.space == "feature":
        out["feature_rel_error_max"] = or_none(describe(_values(records, "rel_error")).max)
    return out


def _values(records: pd.DataFrame, name: str) -> np.ndarray:
    """A metric column as floats (empty when the records have no such column)."""
    return records[name].to_numpy(dtype=float) if name in records else np.array([], dtype=float)


def spec_from_dict(data: dict[str, Any]) -> CellSpec:
    """The spec `spec_dict` wrote (as stored in a cell's manifest)."""
    configs = {"dp": DPConfig, "fedavg": FedAvgConfig, "inversion": InversionConfig, "recipe": TrainRecipe}
    return CellSpec(**{k: (configs[k](**v) if k in configs and v is not None else v) for k, v in data.items()})


def spec_dict(spec: CellSpec) -> dict[str, Any]:
    """The spec as plain data; fields added later are left out at their defaults, so old ids stay valid."""
    return {k: v for k, v in asdict(spec).items() if k not in NEW_FIELD_DEFAULTS or v != NEW_FIELD_DEFAULTS[k]}
