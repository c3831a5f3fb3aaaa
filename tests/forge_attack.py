"""An attack that forges its worker's reply (issue 41): it writes to the worker's reply pipe itself,
then ends the worker, as a hostile plugin could. `route` picks the forgery:

    deep     a JSON header nested 200,000 deep (the harness once died of RecursionError)
    huge     an .npz whose images.npy header claims 33.5 TiB (once a MemoryError traceback)
    bomb     an .npz whose images.npy is deflated: `rows` rows of zeros from a few kilobytes (a zip bomb)
    config   {"kind": "config"}: once a ConfigError that stopped the whole suite
    error    {"kind": "error"}: once a LeakbenchError that stopped the whole suite
    unknown  {"kind": "weird"}
    extra    a well-formed reply with one key more
    seconds  a well-formed reply after `sleep` seconds claiming `seconds` seconds and forged hyperparameters
    sleep    no reply: it sleeps (for ever, as far as a test goes)
    stall    the header of a well-formed reply, then nothing (the harness waits for the arrays)
    sandbox  the message of a worker whose sandbox failed (which stops the run when it comes first)

`tests/test_replies.py` runs it, registered for the test only (`leakbench.api.scoped_attack`), and
`benchmarks/bad_replies.py` measures the harness's memory while it refuses each reply.
"""

from __future__ import annotations

import gc
import io
import json
import os
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from leakbench.attacks import Attack, Reconstruction
from leakbench.fl.update import ClientUpdate
from leakbench.records.artifacts import AttackOutput, encode_attack_output

ROUTES = ("deep", "huge", "bomb", "config", "error", "unknown", "extra", "seconds", "sleep", "stall", "sandbox")
TIB = 1 << 40


@dataclass(frozen=True)
class ForgeConfig:
    """route: which reply to forge (see the module docstring). rows: the zip bomb's rows.
    seconds: the time a forged reply claims. sleep: seconds to wait before forging.
    max_seconds: the attack's declared budget (the harness's time limit derives from it)."""

    route: str = "deep"
    rows: int = 4096
    seconds: float = 0.0
    sleep: float = 0.0
    max_seconds: float = 2.0


class ForgeAttack(Attack):
    name = "forge"
    description = "forges its worker's reply (test plugin)"
    Config = ForgeConfig

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        cfg = self.config
        time.sleep(cfg.sleep)
        if cfg.route == "sleep":
            time.sleep(3600)
        send = reply_pipe()
        for message in forged(cfg, update):
            send.send_bytes(message)
        if cfg.route == "stall":
            time.sleep(3600)
        os._exit(0)


def reply_pipe() -> Connection:
    """The worker's reply pipe: the writable Connection among the callers' locals (else anywhere)."""
    frame = sys._getframe()
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, Connection) and value.writable and not value.closed:
                return value
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, Connection) and obj.writable and not obj.closed:
            return obj
    raise RuntimeError("no reply pipe found")


def forged(cfg: ForgeConfig, update: ClientUpdate) -> list[bytes]:
    """The messages of the forged reply: its JSON header, then (for "ok" replies) its .npz."""
    meta, npz = honest(update)
    ok = json.dumps({"kind": "ok", "meta": meta}).encode()
    shape = tuple(update.model.input_shape)
    if cfg.route == "deep":
        return [b'{"kind": "ok", "meta": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"]
    if cfg.route == "huge":
        rows = int(33.5 * TIB) // (4 * int(np.prod(shape)))
        return [ok, npz_of("images.npy", npy_header((rows, *shape)) + b"\0" * 64)]
    if cfg.route == "bomb":
        return [ok, bomb((cfg.rows, *shape))]
    if cfg.route in ("config", "error"):
        return [json.dumps({"kind": cfg.route, "message": f"forged {cfg.route} reply"}).encode()]
    if cfg.route == "unknown":
        return [json.dumps({"kind": "weird"}).encode()]
    if cfg.route == "extra":
        return [json.dumps({"kind": "ok", "meta": meta, "x": 1}).encode(), npz]
    if cfg.route == "seconds":
        meta = {**meta, "seconds": cfg.seconds, "hyperparameters": {"forged": True}}
        return [json.dumps({"kind": "ok", "meta": meta}).encode(), npz]
    if cfg.route == "stall":
        return [ok]
    if cfg.route == "sandbox":
        from leakbench.harness.isolation import SANDBOX_FAILED

        return [f"{SANDBOX_FAILED}forged".encode()]
    raise ValueError(f"unknown route {cfg.route!r}")


def honest(update: ClientUpdate) -> tuple[dict[str, Any], bytes]:
    """A well-formed reply: the batch's shape of grey images."""
    images = torch.full((update.batch_size or 1, *update.model.input_shape), 0.5)
    return encode_attack_output(AttackOutput(Reconstruction("ok", "image", images=images), 0.1, {}))


def npy_header(shape: tuple[int, ...]) -> bytes:
    """The .npy header of a float32 array of `shape` (no data)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def npz_of(name: str, data: bytes) -> bytes:
    """An .npz of one stored member."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def bomb(shape: tuple[int, ...], fill: int = 0) -> bytes:
    """An .npz whose images.npy (float32 `shape`, every byte `fill`) is deflated: a few kilobytes per
    megabyte it claims. Written in chunks, so it never holds the array (zipfile's own streaming writer)."""
    buffer = io.BytesIO()
    size = int(np.prod(shape)) * 4
    chunk = bytes([fill]) * (1 << 20)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=zlib.Z_BEST_COMPRESSION) as archive:
        info = zipfile.ZipInfo("images.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=False) as member:
            member.write(npy_header(shape))
            for start in range(0, size, len(chunk)):
                member.write(chunk[:min(len(chunk), size - start)])
    return buffer.getvalue()
