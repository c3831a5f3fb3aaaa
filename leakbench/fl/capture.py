"""Capture what a Flower client sends back (issue 45, "bring your own Flower app"), and read it back.

`leakbench_capture(out, ...)` is a Flower mod (Flower 1.42's `(msg, context, call_next) -> Message`) that a
user adds to their own ClientApp, outermost (first in `mods=[...]`), so that it sees the reply as the server
receives it:

    app = ClientApp(mods=[leakbench_capture("captures", lr=0.1)])

For every TRAIN message it passes the message on unchanged and, when the reply carries content, stores
what Flower handed it: the weights the client received (the incoming message's ArrayRecord, θ₀) and the
weights it sent back (the reply's ArrayRecord, θ₁), with a small JSON manifest. Optionally, in a
simulation the user controls, the client's batch: the user passes a function of Flower's `Context` that
returns it (`batch=`); the mod cannot, and does not try to, read a user's data loader. Nothing else is read.

One capture is one folder, `OUT/round-R/node-N/` (R: the server round, from the ConfigRecord key
`server-round` Flower's strategies send, else the message's group id; N: Flower's node id):

    capture.json   {"format": "leakbench-flower-capture", "version": 1, "flwr_version", "round", "node_id",
                    "partition_id" (node_config's partition-id, or null), "run_id", "lr" (or null),
                    "local_steps" (or null), "num_examples" (the reply's MetricRecord num-examples, or null),
                    "received_key", "reply_key" (the ArrayRecords' names), "batch" ({"size", "image_shape"} or
                    null), "files" ({file name: SHA-256})}
    received.pt    θ₀: {name: tensor}, the state dict the client received (`torch.save`)
    reply.pt       θ₁: {name: tensor}, the state dict the client sent back
    batch.pt       optional: {"images": (n, C, H, W) float in [0, 1], as the model takes them, "labels": (n,) int64}

A folder is written whole (a temporary folder renamed into place) and never replaces anything: a capture
folder that exists already makes the mod raise, which Flower returns to the server as the client's error.
`load_capture` reads one back (with `torch.load(weights_only=True)`; checksums, names and shapes checked),
raising a ConfigError in one line for anything wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from leakbench.core.errors import ConfigError

FORMAT = "leakbench-flower-capture"
"""The manifest's `format` value."""
VERSION = 1
"""The manifest's `version`: the layout this module writes and reads."""
MANIFEST = "capture.json"
RECEIVED, REPLY, BATCH = "received.pt", "reply.pt", "batch.pt"
ROUND_KEY = "server-round"
"""The ConfigRecord key Flower's strategies (FedAvg and the rest) put the server round in."""
EXAMPLES_KEY = "num-examples"
"""The MetricRecord key Flower's strategies weigh a reply by (the client's example count)."""

Arrays = dict[str, torch.Tensor]
BatchFn = Callable[[Any], "tuple[torch.Tensor, torch.Tensor] | None"]
"""A user's function of Flower's Context giving the client's batch (images, labels), or None."""
Mod = Callable[[Any, Any, Callable[[Any, Any], Any]], Any]
"""Flower's mod type: (message, context, call_next) → reply."""


def leakbench_capture(out: str | os.PathLike[str], *, lr: float | None = None, lr_key: str = "lr",
                      local_steps: int | None = None, batch: BatchFn | None = None) -> Mod:
    """A Flower mod storing each TRAIN round's received and returned weights under `out` (module docstring).

    `lr`: the client's learning rate η, recorded so that (θ₀ − θ₁)/η is the gradient; None reads it from the
    incoming ConfigRecord's `lr_key`, when there (else it is recorded as null and must be given later).
    `local_steps`: how many SGD steps the client took (1: FedSGD), recorded as given (null when not).
    `batch`: a function of the client's Context returning its batch (images in [0, 1], labels), for scoring."""
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"leakbench_capture: lr must be a finite number > 0, got {lr}")
    if local_steps is not None and local_steps < 1:
        raise ConfigError(f"leakbench_capture: local_steps must be ≥ 1, got {local_steps}")
    root = Path(out)

    def capture_mod(msg: Any, context: Any, call_next: Callable[[Any, Any], Any]) -> Any:
        reply = call_next(msg, context)
        if msg.metadata.message_type != "train" or not reply.has_content():
            return reply
        given = batch(context) if batch is not None else None
        save_capture(root, capture_manifest(msg, reply, context, lr, lr_key, local_steps),
                     single_arrays(msg, "received"), single_arrays(reply, "reply"), given)
        return reply

    return capture_mod


def single_arrays(message: Any, which: str) -> tuple[str, Arrays]:
    """The name and tensors of the one ArrayRecord of `message` (a ConfigError when it has none or several)."""
    records = dict(message.content.array_records)
    if len(records) != 1:
        raise ConfigError(f"leakbench_capture: the {which} message holds {len(records)} ArrayRecords, not one")
    (name, record), = records.items()
    return name, {k: v.detach().cpu().clone() for k, v in record.to_torch_state_dict().items()}


def capture_manifest(msg: Any, reply: Any, context: Any, lr: float | None, lr_key: str,
                     local_steps: int | None) -> dict[str, Any]:
    """The manifest fields read from what Flower handed the mod (files and names are added when saved)."""
    import flwr

    config = {k: v for record in msg.content.config_records.values() for k, v in record.items()}
    metrics = {k: v for record in reply.content.metric_records.values() for k, v in record.items()}
    group = str(msg.metadata.group_id)
    server_round = config.get(ROUND_KEY, int(group) if group.isdigit() else None)
    partition = context.node_config.get("partition-id")
    chosen = lr if lr is not None else config.get(lr_key)
    return {"format": FORMAT, "version": VERSION, "flwr_version": str(flwr.__version__),
            "round": None if server_round is None else int(server_round), "node_id": int(context.node_id),
            "partition_id": None if partition is None else int(partition), "run_id": int(msg.metadata.run_id),
            "message_id": str(msg.metadata.message_id),
            "lr": None if chosen is None else float(chosen), "local_steps": local_steps,
            "num_examples": None if EXAMPLES_KEY not in metrics else int(metrics[EXAMPLES_KEY])}


def capture_folder(root: Path, manifest: dict[str, Any]) -> Path:
    """Where a capture goes: `root/round-R/node-N` (`message-ID` in place of the round when it is unknown)."""
    first = f"round-{manifest['round']}" if manifest["round"] is not None else f"message-{manifest['message_id'][:16]}"
    return root / first / f"node-{manifest['node_id']}"


def save_capture(root: Path, manifest: dict[str, Any], received: tuple[str, Arrays], reply: tuple[str, Arrays],
                 batch: tuple[torch.Tensor, torch.Tensor] | None) -> Path:
    """Write one capture folder whole (a temporary folder renamed into place); an existing one is never replaced
    (FileExistsError). Returns its path."""
    target = capture_folder(root, manifest)
    if target.exists():
        raise FileExistsError(f"leakbench_capture: {target} exists already; capture into a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        files = {RECEIVED: _tensor_bytes(received[1]), REPLY: _tensor_bytes(reply[1])}
        shape = None
        if batch is not None:
            images, labels = batch
            files[BATCH] = _tensor_bytes({"images": images.detach().cpu().clone(),
                                          "labels": labels.detach().cpu().to(torch.int64).clone()})
            shape = [int(n) for n in images.shape[1:]]
        full = {**manifest, "received_key": received[0], "reply_key": reply[0],
                "batch": None if batch is None else {"size": int(batch[0].shape[0]), "image_shape": shape},
                "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
        os.rename(tmp, target)  # fails on a non-empty target: a capture is never replaced
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _tensor_bytes(payload: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class Capture:
    """One capture read back: its folder, manifest, the weights received (θ₀) and sent back (θ₁), and the batch
    (images, labels) when the user's mod was given one."""

    folder: Path
    manifest: dict[str, Any]
    received: Arrays
    reply: Arrays
    batch: tuple[torch.Tensor, torch.Tensor] | None


def find_capture(path: Path) -> Path:
    """The capture folder `path` names: a capture folder, its capture.json, or a folder holding exactly one
    capture (at any depth); one ConfigError line otherwise."""
    if path.is_file() and path.name == MANIFEST:
        return path.parent
    if not path.exists():
        raise ConfigError(f"--update {path} does not exist")
    if not path.is_dir():
        raise ConfigError(f"--update {path} is neither a capture folder nor its {MANIFEST}")
    if (path / MANIFEST).is_file():
        return path
    found = sorted(p.parent for p in path.rglob(MANIFEST) if not p.parent.name.startswith("."))
    if len(found) != 1:
        some = f" (e.g. {found[0]})" if found else ""
        raise ConfigError(f"--update {path} holds {len(found)} captures; name one capture folder{some}")
    return found[0]


def load_capture(path: Path) -> Capture:
    """Read a capture (`find_capture`), checking its manifest, checksums and tensors; one ConfigError line for
    anything wrong."""
    folder = find_capture(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{folder / MANIFEST} cannot be read as JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ConfigError(f"{folder / MANIFEST} is not a leakbench Flower capture (format {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise ConfigError(f"{folder / MANIFEST}: capture version {manifest.get('version')!r}; this leakbench reads "
                          f"version {VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not {RECEIVED, REPLY} <= set(files):
        raise ConfigError(f"{folder / MANIFEST} lists no {RECEIVED} and {REPLY}")
    loaded = {name: _load_tensors(folder / name, str(digest)) for name, digest in files.items()
              if name in (RECEIVED, REPLY, BATCH)}
    received, reply = loaded[RECEIVED], loaded[REPLY]
    if set(received) != set(reply) or any(received[k].shape != reply[k].shape for k in received):
        raise ConfigError(f"{folder}: the weights received and sent back differ in names or shapes")
    batch = None
    if BATCH in loaded:
        batch = _batch(loaded[BATCH], folder)
    return Capture(folder, manifest, received, reply, batch)


def _load_tensors(file: Path, digest: str) -> Arrays:
    """{name: tensor} from `file` (safe unpickling: tensors and plain containers only), its SHA-256 checked."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file} cannot be read: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise ConfigError(f"{file} is not the file the capture wrote (its SHA-256 differs from capture.json's)")
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 — torch.load raises many kinds; all mean "not a capture file"
        raise ConfigError(f"{file} cannot be loaded as tensors: {exc}") from None
    if not isinstance(payload, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in payload.items()):
        raise ConfigError(f"{file} does not hold named tensors")
    return dict(payload)


def _batch(payload: Arrays, folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The captured (images, labels), shapes checked."""
    images, labels = payload.get("images"), payload.get("labels")
    if images is None or labels is None or images.dim() != 4 or labels.shape != images.shape[:1]:
        raise ConfigError(f"{folder / BATCH} must hold images (n, C, H, W) and labels (n,)")
    if not images.is_floating_point() or labels.is_floating_point():
        raise ConfigError(f"{folder / BATCH}: images must be floats in [0, 1] and labels integers")
    return images, labels.to(torch.int64)


__all__ = ["BATCH", "FORMAT", "MANIFEST", "RECEIVED", "REPLY", "VERSION", "Capture", "find_capture",
           "leakbench_capture", "load_capture", "save_capture"]
