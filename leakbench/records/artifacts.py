"""An attack's stored answer for one cell: what scoring starts from, and all that `rescore` needs.

A cell folder keeps

    reconstruction.npz   `images` (float32, NCHW, in [0, 1], the attack's own output order) and/or
                         `features` (float32, (b, n), inputs of an inner layer), and `inverted`
                         (float32, NCHW: features turned back into images with the public model)
    attack.json          status, reason, space, layer, the attack's stats, seconds and hyperparameters
                         (both the harness's: measured, resolved), isolation, time_limit, and for a
                         failed attack that says which kind of failure it is, failure (issue 43:
                         `core.reconstruction.Failure`; absent when None, and in cells stored before)

Ground truth is never stored: scoring re-derives it from the cell's dataset, indices and seed.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakbench.core.reconstruction import Reconstruction

RECONSTRUCTION_FILE = "reconstruction.npz"
ATTACK_FILE = "attack.json"
OLD_ISOLATION = "python-guard only (stored before the sandbox)"
"""The isolation of a cell stored before attack.json recorded it (issue 14's audit-hook guard)."""


@dataclass
class AttackOutput:
    """What the attack step produced: the reconstruction, its wall time and the attack's settings.

    `inverted` holds images inverted from recovered features (None unless feature inversion ran).
    `isolation` is what kept the attack from the batch, set by the harness, never by the attack
    (`leakbench.harness.sandbox`: "landlock+seccomp", "python-guard only (why)", or "not isolated").
    `time_limit` is the seconds the harness gave the attack worker (`leakbench.harness.replies.time_limit`;
    None for an attack run in process, and in attack.json stored before issue 41).
    """

    reconstruction: Reconstruction
    seconds: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    inverted: torch.Tensor | None = None
    isolation: str = ""
    time_limit: float | None = None


def arrays(output: AttackOutput) -> dict[str, np.ndarray]:
    """The tensors of an attack output as float32 arrays (only those present)."""
    recon = output.reconstruction
    named = {"images": recon.images, "features": recon.features, "inverted": output.inverted}
    return {k: v.detach().to("cpu", torch.float32).numpy() for k, v in named.items() if v is not None}


def attack_output_files(output: AttackOutput) -> dict[str, bytes]:
    """reconstruction.npz (deterministic bytes for the same arrays) and attack.json, as bytes by name."""
    meta, npz = encode_attack_output(output)
    return {RECONSTRUCTION_FILE: npz, ATTACK_FILE: json_bytes(meta)}


def json_bytes(payload: dict[str, Any]) -> bytes:
    """A stored JSON file's bytes: sorted keys, indented, non-finite floats as null, a final newline."""
    return (json.dumps(json_safe(payload), indent=2, sort_keys=True) + "\n").encode()


def load_attack_output(folder: Path) -> AttackOutput:
    """Read back the files of `attack_output_files` (raises OSError/ValueError/KeyError when damaged)."""
    return decode_attack_output(json.loads((folder / ATTACK_FILE).read_text()),
                                (folder / RECONSTRUCTION_FILE).read_bytes())


def encode_attack_output(output: AttackOutput) -> tuple[dict[str, Any], bytes]:
    """An attack output as plain data: its JSON metadata and an .npz of its arrays (no pickle). The
    stored artifact and the attack worker's reply are both this."""
    buffer = io.BytesIO()
    # numpy's stub types **kwds as if one could be its allow_pickle flag; these are arrays only
    np.savez(buffer, **arrays(output))  # type: ignore[arg-type]
    recon = output.reconstruction
    meta = {"status": recon.status, "reason": recon.reason, "space": recon.space, "layer": recon.layer,
            "stats": plain_stats(recon.stats), "seconds": output.seconds, "hyperparameters": output.hyperparameters,
            "isolation": output.isolation}
    if output.time_limit is not None:  # set by the harness only: an attack worker's reply never holds it
        meta["time_limit"] = output.time_limit
    if recon.failure is not None:  # absent for an answer: attack.json of answered cells stays as it was
        meta["failure"] = recon.failure
    return json_safe(meta), buffer.getvalue()


def decode_attack_output(meta: dict[str, Any], npz: bytes) -> AttackOutput:
    """What `encode_attack_output` made, read back without unpickling anything (ValueError/KeyError when damaged)."""
    with np.load(io.BytesIO(npz), allow_pickle=False) as data:
        tensors = {k: torch.from_numpy(data[k].copy()) for k in data.files}
    return attack_output(meta, tensors)


def attack_output(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> AttackOutput:
    """An `AttackOutput` from attack.json's metadata and the arrays by name (images, features, inverted)."""
    recon = Reconstruction(status=meta["status"], space=meta["space"], images=tensors.get("images"),
                           features=tensors.get("features"), layer=meta["layer"], reason=meta["reason"],
                           stats=meta["stats"], failure=meta.get("failure"))
    return AttackOutput(recon, float(meta["seconds"]), meta["hyperparameters"], tensors.get("inverted"),
                        meta.get("isolation", OLD_ISOLATION), meta.get("time_limit"))


def plain_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Attack stats as JSON-friendly plain values."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in stats.items()}


def json_safe(value: Any) -> Any:
    """Replace non-finite floats (JSON has none) by None, recursively; +inf PSNR means identical."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
