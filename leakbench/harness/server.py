"""The server's half of a malicious-server cell: the model modification, run in a sandboxed worker of its own.

`send(spec's attack, public model)`: the worker gets the `AttackJob` (the attack's name, settings and seed) and the
public victim — never the batch, which is drawn in the harness, nor a data location, which its sandbox hides as
the attack worker's does — runs the attack's `modify` and answers with plain data: a JSON header
{"kind": "modified", "block": k} and an .npz of parameter values. The harness reads the header, builds the
structure itself (`server.ModifiedVictim` with k units), reads only members named after its parameters, each of
exactly its shape (`replies.read_values`), and loads them (`server.modified_victim`). A modification that fails,
runs out of time or answers outside these limits is the cell's failure (`ServerRefused`), never the run's.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakbench.core.errors import LeakbenchError
from leakbench.harness.job import AttackJob, configure_attack, resolve_class
from leakbench.models.base import ImageVictim
from leakbench.server.model import MAX_BLOCK, ModifiedVictim, ServerModel, modified_victim


class ServerRefused(LeakbenchError):
    """The server's modification gave no model the client could train; the message says why (the cell's reason)."""


def modify_cell(job: AttackJob, model: ImageVictim) -> ServerModel:
    """In the worker (or in process, `isolate=False`): the job's attack's modification of `model`."""
    attack = configure_attack(job.attack, job.hyperparameters, job.layer, resolve_class(job))
    modify = getattr(attack, "modify", None)
    if modify is None:
        raise LeakbenchError(f"attack {job.attack!r} is an honest server's: it modifies no model")
    server = modify(model, seed=job.seed)
    if not isinstance(server, ServerModel):
        raise LeakbenchError(f"{job.attack}.modify returned a {type(server).__name__}, not a ServerModel")
    return server


def encode_server_model(server: ServerModel) -> tuple[str, bytes]:
    """The worker's answer: the header ({"kind": "modified", "block": k}) and the values as an .npz of float32."""
    buffer = io.BytesIO()
    arrays = {name: np.ascontiguousarray(value.detach().cpu().numpy(), dtype=np.float32)
              for name, value in server.values.items()}
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return json.dumps({"kind": "modified", "block": server.block}), buffer.getvalue()


def read_server_model(header: dict[str, Any], npz: bytes, base: ImageVictim) -> ServerModel:
    """The worker's answer read back within limits: values only of the parameters the victim behind the header's
    block has, each of its shape (`replies.read_values`; ReplyRefused otherwise)."""
    from leakbench.harness.replies import read_values

    shapes = parameter_shapes(base, checked_block(header))
    return ServerModel(header["block"], {name: torch.from_numpy(array)
                                         for name, array in read_values(npz, shapes).items()})


def checked_block(header: dict[str, Any]) -> int:
    """The header's block width: an integer in 0 … MAX_BLOCK (ReplyRefused otherwise)."""
    from leakbench.harness.replies import ReplyRefused

    block = header.get("block")
    if type(block) is not int or not 0 <= block <= MAX_BLOCK:
        raise ReplyRefused(f"an imprint block of {str(block)[:40]} units (0 to {MAX_BLOCK:,})")
    return block


def parameter_shapes(base: ImageVictim, block: int) -> dict[str, tuple[int, ...]]:
    """The parameters of `base` behind a block of `block` units, by name, with their shapes (nothing allocated)."""
    d = math.prod(base.input_shape)
    shapes = {f"base.{name}": tuple(p.shape) for name, p in base.named_parameters()}
    if block:
        shapes = {"block.0.weight": (block, d), "block.0.bias": (block,), "block.2.weight": (d, block),
                  "block.2.bias": (d,), **shapes}
    return shapes


def value_bytes(header: dict[str, Any], base: ImageVictim) -> int:
    """The most bytes the values of a reply with `header` may hold for `base`: every parameter behind its block."""
    from leakbench.harness.replies import MAX_NPY_HEADER, ZIP_OVERHEAD

    shapes = parameter_shapes(base, checked_block(header)).values()
    return 22 + sum(ZIP_OVERHEAD + MAX_NPY_HEADER + 4 * math.prod(shape) for shape in shapes)


def send(job: AttackJob, attack: Any, model: ImageVictim, hidden: list[Path], *, isolate: bool) -> ModifiedVictim:
    """The model the malicious server sends in place of `model`: the attack's modification, run in a fresh sandboxed
    worker that hides `hidden` (in process with `isolate=False`), checked and built here. ServerRefused when the
    modification failed, ran out of time (the attack's own time limit) or answered outside the limits."""
    from leakbench.core.errors import ConfigError
    from leakbench.harness.isolation import WorkerDied, workers
    from leakbench.harness.replies import OutOfTime, ReplyRefused, time_limit

    try:
        if isolate:
            server = workers().take().modify(job, model, hidden, time_limit(attack.config))
        else:
            server = modify_cell(job, model)
        return modified_victim(model, server)
    except (ReplyRefused, OutOfTime, WorkerDied, ConfigError, LeakbenchError) as exc:
        raise ServerRefused(f"the server's model modification failed ({type(exc).__name__}: {exc})") from None
