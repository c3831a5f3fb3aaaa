"""Attacks on a captured Flower update (`leakbench.fl.capture`): the victim, the update, the attacks, the scores.

`leakbench attack-update CAPTURE --arch ... --width ... --depth ...` (`leakbench.capture_cli`) reads a capture,
builds the registered victim it names and loads the weights the client received (θ₀) into it, strictly
(every name and shape must fit), and turns the weights it sent back (θ₁) into the gradient an attack is
handed: (θ₀ − θ₁)/η (`leakbench.fl.flower.as_gradients`'s arithmetic). That is the FedSGD gradient when the
client took one plain SGD step of rate η on its batch (ASSUMPTION); the update's kind says so
("flower-capture"), and every record keeps the assumption in words.

Each attack then runs as every cell's attack runs (`harness.isolation.run_isolated`: a fresh sandboxed
worker that receives the `AttackJob` and the `ClientUpdate` and nothing else; the capture's folders, which
hold the batch, and the output folder are hidden from it). When the capture holds the client's batch, the
answer is scored against it as a cell is (`harness.scoring`: Hungarian matching, PSNR, SSIM, LPIPS when a
verified scorer is given); when it does not, nothing is scored and the summary says so (`scored` false).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from leakbench.attacks import Attack
from leakbench.core.errors import ConfigError
from leakbench.datasets.base import Batch
from leakbench.fl.capture import BATCH, Capture
from leakbench.fl.update import ClientUpdate, ThreatModel, client_view
from leakbench.metrics import LpipsScorer
from leakbench.metrics.stats import describe, or_none
from leakbench.models.base import ImageVictim
from leakbench.records.artifacts import AttackOutput, attack_output_files, json_bytes, plain_stats
from leakbench.records.cells import CellFiles

KIND = "flower-capture"
"""The `kind` of an update read from a capture."""
ASSUMPTION = ("FedSGD: the gradient is (θ₀ − θ₁)/η, exact when the client took one plain SGD step of rate η "
              "(no momentum, no weight decay) on the mean loss of its whole batch; after several local steps "
              "it is the sum of their gradients at moving weights (a FedAvg update), which these attacks do "
              "not model")
"""What an update read from a capture assumes, in words (kept in every summary)."""
NOT_SCORED = "not scored: the capture holds no batch (give leakbench_capture a batch= function to score)"
CAPTURE_DATASET = "flower-capture"
"""The `dataset` column of a captured batch."""


@dataclass(frozen=True)
class VictimShape:
    """The registered victim a capture's weights are loaded into, and the data it takes."""

    arch: str
    width: int
    depth: int
    image_shape: tuple[int, int, int]
    num_classes: int


def capture_lr(capture: Capture, lr: float | None) -> float:
    """η: the capture's, or `lr` where the capture has none; refused when both are given and differ, or none."""
    recorded = capture.manifest.get("lr")
    if recorded is not None and lr is not None and float(recorded) != lr:
        raise ConfigError(f"--lr {lr} differs from the capture's learning rate {recorded}; give neither or the same")
    chosen = lr if lr is not None else recorded
    if chosen is None:
        raise ConfigError("the capture records no learning rate: give --lr (the client's η)")
    if not (isinstance(chosen, int | float) and 0 < float(chosen) < float("inf")):
        raise ConfigError(f"the learning rate must be a finite number > 0, got {chosen}")
    return float(chosen)


def default_shape(capture: Capture, image_shape: tuple[int, int, int] | None,
                  num_classes: int | None) -> tuple[tuple[int, int, int], int]:
    """The image shape (given, else the captured batch's) and class count (given, else the length of the last
    1-D tensor of the weights: a classifier's bias; a wrong guess fails the strict load, never silently)."""
    if image_shape is None:
        if capture.batch is None:
            raise ConfigError("the capture holds no batch to read the image shape from: give --image-shape CxHxW")
        c, h, w = capture.batch[0].shape[1:]
        image_shape = (int(c), int(h), int(w))
    if num_classes is None:
        biases = [t for t in capture.received.values() if t.dim() == 1]
        if not biases:
            raise ConfigError("cannot tell the number of classes from the weights: give --num-classes")
        num_classes = int(biases[-1].shape[0])
    return image_shape, num_classes


def capture_victim(capture: Capture, shape: VictimShape) -> ImageVictim:
    """The victim `shape` names with the weights the client received loaded (θ₀), in eval mode; one ConfigError
    line when a name or shape does not fit. A victim whose network sits under `net.` (a victim plugin) also takes
    a capture of the bare network's names."""
    from leakbench.models import build_model

    dtype = next(iter(capture.received.values())).dtype
    if not dtype.is_floating_point:
        raise ConfigError("the captured weights are not floating point")
    model = build_model(shape.arch, shape.image_shape, shape.num_classes, width=shape.width, depth=shape.depth,
                        dtype=dtype)
    state = aligned_names(capture.received, model.state_dict())
    fit_problem = mismatch(state, model.state_dict())
    if fit_problem:
        raise ConfigError(f"the capture's weights do not fit --arch {shape.arch} --width {shape.width} --depth "
                          f"{shape.depth} ({shape.num_classes} classes, images {'x'.join(map(str, shape.image_shape))})"
                          f": {fit_problem}")
    model.load_state_dict(state, strict=True)
    return model.requires_grad_(False).eval()


def aligned_names(arrays: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`arrays` under the model's names: as they are, or with `net.` put before each (a plugin victim's network)."""
    if set(arrays) != set(want) and {f"net.{k}" for k in arrays} == set(want):
        return {f"net.{k}": v for k, v in arrays.items()}
    return arrays


def mismatch(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> str:
    """'' when `got` has exactly the names and shapes of `want`, else the first difference in words."""
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing:
        return f"{len(missing)} of the model's tensors are not in the capture (first: {missing[0]})"
    if extra:
        return f"{len(extra)} captured tensors are not in the model (first: {extra[0]})"
    for name, tensor in want.items():
        if got[name].shape != tensor.shape:
            return f"{name} is {tuple(got[name].shape)} in the capture, {tuple(tensor.shape)} in the model"
    return ""


def captured_update(capture: Capture, model: ImageVictim, lr: float) -> ClientUpdate:
    """The update an attack is handed: the received model, (θ₀ − θ₁)/η for each of its parameters, and the
    example count the client reported as the batch size (None, withheld, when it reported none). No labels."""
    from leakbench.fl.flower import as_gradients

    names = [name for name, _ in model.named_parameters()]
    received = aligned_names(capture.received, model.state_dict())
    reply = aligned_names(capture.reply, model.state_dict())
    gradients = as_gradients(received, reply, names, lr)
    if not all(bool(torch.isfinite(g).all()) for g in gradients.values()):
        raise ConfigError("the captured weights give a gradient that is not finite everywhere")
    examples = capture.manifest.get("num_examples")
    threat = ThreatModel(batch_size_known=examples is not None)
    return ClientUpdate(model=model, gradients=gradients, threat=threat,
                        batch_size=int(examples) if examples is not None else None, kind=KIND)


def check_batch(capture: Capture, shape: VictimShape) -> None:
    """The captured batch must be what the model takes and what the client reported: its image shape, labels
    below the class count, and as many images as the reported example count."""
    if capture.batch is None:
        return
    images, labels = capture.batch
    where = capture.folder / BATCH
    if tuple(images.shape[1:]) != shape.image_shape:
        raise ConfigError(f"{where}: images are {'x'.join(map(str, images.shape[1:]))}, the model takes "
                          f"{'x'.join(map(str, shape.image_shape))}")
    if labels.numel() and not (0 <= int(labels.min()) and int(labels.max()) < shape.num_classes):
        raise ConfigError(f"{where}: labels must lie in 0..{shape.num_classes - 1}")
    examples = capture.manifest.get("num_examples")
    if examples is not None and int(examples) != images.shape[0]:
        raise ConfigError(f"{where} holds {images.shape[0]} images, the client reported {examples} examples")


@dataclass
class CapturedResult:
    """One attack's outcome on a capture: its answer, summary, per-image records (empty when not scored) and,
    when scored, the ground truth and the reconstruction aligned to it (for a grid)."""

    cell_id: str
    output: AttackOutput
    summary: dict[str, Any]
    records: pd.DataFrame
    truth: torch.Tensor | None = None
    aligned: torch.Tensor | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def hidden_paths(capture: Capture, given: Path, out: Path | None) -> list[Path]:
    """What the attack worker may not reach: the path the user named, the capture's run folder
    (`OUT` of `OUT/round-R/node-N`, which holds other clients' batches too), the output folder, and the
    shipped datasets' locations."""
    from leakbench.datasets.loaders import data_locations

    folder = capture.folder.resolve()
    root = folder.parent.parent if folder.parent.name.startswith(("round-", "message-")) else folder
    return [*data_locations(None), given.resolve(), root, *([out.resolve()] if out is not None else [])]


def cell_id_of(capture: Capture, attack: Attack, layer: int, shape: VictimShape, lr: float) -> str:
    """A stable id of one attack on one capture: a hash of the capture's files, the victim, η and the attack."""
    key = {"files": capture.manifest.get("files"), "victim": [shape.arch, shape.width, shape.depth], "lr": lr,
           "attack": attack.name, "layer": layer, "hyperparameters": attack.hyperparameters()}
    return "capture-" + hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_attack(capture: Capture, update: ClientUpdate, attack: Attack, layer: int, shape: VictimShape, lr: float,
               hidden: list[Path], lpips: LpipsScorer | None = None, lpips_note: str = "") -> CapturedResult:
    """Run `attack` on `update` in a fresh sandboxed worker (`run_isolated`), then score it against the captured
    batch when there is one."""
    from leakbench.cell.seeds import attack_seed
    from leakbench.harness.isolation import run_isolated
    from leakbench.harness.job import AttackJob, scoped_ref
    from leakbench.plugins import named_plugins
    from leakbench.progress import enabled as progress_enabled

    cell = cell_id_of(capture, attack, layer, shape, lr)
    params = {k: v for k, v in attack.hyperparameters().items() if k != "layer"}  # the layer is the job's own
    job = AttackJob(attack.name, params, layer, attack_seed(cell), None, attack_ref=scoped_ref(attack.name),
                    plugins=named_plugins(), bars=progress_enabled())
    output = run_isolated(job, update, hidden, attack)
    return score_capture(cell, capture, update, output, attack.name, layer, shape, lr, lpips, lpips_note)


def score_capture(cell: str, capture: Capture, update: ClientUpdate, output: AttackOutput, attack: str, layer: int,
                  shape: VictimShape, lr: float, lpips: LpipsScorer | None, lpips_note: str) -> CapturedResult:
    """The answer scored against the captured batch (as `harness.scoring` scores a cell), or left unscored."""
    from leakbench.harness.scoring import admitted, score

    columns = capture_columns(capture, attack, layer, shape, lr)
    recon = output.reconstruction
    truth = aligned = None
    if capture.batch is None:
        records = pd.DataFrame({key: pd.Series(dtype=object) for key in columns})
        summary = {**columns, "scored": False, "score_note": NOT_SCORED, "n_images": recon.rows()}
    else:
        images, labels = capture.batch
        output = admitted(output, images.shape[0])
        recon = output.reconstruction
        batch = Batch(images=images.to(torch.float32), labels=labels, indices=tuple(range(images.shape[0])),
                      dataset=CAPTURE_DATASET, num_classes=shape.num_classes, public=False)
        records, aligned = score(recon, batch, client_view(update.model, update.threat), lpips)
        for key, value in reversed(list(columns.items())):
            records.insert(0, key, [value] * len(records))
        truth = batch.images
        summary = {**columns, "scored": True, "score_note": "", **metric_summary(records, lpips is not None),
                   "lpips_note": "" if lpips is not None else lpips_note}
    summary.update({"cell_id": cell, "space": recon.space, "status": recon.status, "reason": recon.reason,
                    "failure": recon.failure, "seconds": output.seconds, "isolation": output.isolation,
                    "time_limit": output.time_limit,
                    "hyperparameters": output.hyperparameters, "attack_stats": plain_stats(recon.stats)})
    manifest = {"cell_id": cell, "capture": capture.manifest, "capture_folder": str(capture.folder),
                "summary": summary}
    return CapturedResult(cell, output, summary, records, truth, aligned, manifest)


def capture_columns(capture: Capture, attack: str, layer: int, shape: VictimShape, lr: float) -> dict[str, Any]:
    """What each record of an attack on a capture says about its setting: the capture, the victim, η, the
    assumption, the attack and its layer."""
    meta = capture.manifest
    return {"attack": attack, "layer": layer, "update": KIND,
            "assumption": ASSUMPTION, "arch": shape.arch, "width": shape.width, "depth": shape.depth,
            "num_classes": shape.num_classes, "lr": lr, "round": meta.get("round"), "node_id": meta.get("node_id"),
            "partition_id": meta.get("partition_id"), "num_examples": meta.get("num_examples"),
            "local_steps": meta.get("local_steps"), "flwr_version": meta.get("flwr_version"),
            "batch_size": capture.batch[0].shape[0] if capture.batch is not None else meta.get("num_examples")}


def metric_summary(records: pd.DataFrame, have_lpips: bool) -> dict[str, Any]:
    """Exact fraction, PSNR (mean, median, min), SSIM and LPIPS means over the scored records."""
    def values(name: str) -> list[float]:
        return [float(v) for v in records[name]] if name in records else []

    psnr, ssim, lp = (describe(values(name)) for name in ("psnr", "ssim", "lpips"))
    return {"n_images": len(records), "exact_fraction": float(records["exact"].astype(bool).mean()),
            "psnr_mean": or_none(psnr.mean), "psnr_median": or_none(psnr.median), "psnr_min": or_none(psnr.min),
            "ssim_mean": or_none(ssim.mean), "lpips_mean": or_none(lp.mean) if have_lpips else None}


def result_files(result: CapturedResult) -> CellFiles:
    """The sealed-cell files of one attack on a capture: the answer (reconstruction.npz, attack.json), the
    records (records.parquet; no rows when not scored), summary.json and manifest.json (with the environment)."""
    import io

    from leakbench.harness.environment import environment

    buffer = io.BytesIO()
    result.records.to_parquet(buffer, index=False)
    return CellFiles(result.cell_id, {**attack_output_files(result.output), "records.parquet": buffer.getvalue(),
                                      "summary.json": json_bytes(result.summary),
                                      "manifest.json": json_bytes({**environment(), **result.manifest})})


__all__ = ["ASSUMPTION", "KIND", "NOT_SCORED", "CapturedResult", "VictimShape", "capture_lr", "capture_victim",
           "captured_update", "check_batch", "default_shape", "hidden_paths", "result_files", "run_attack"]
