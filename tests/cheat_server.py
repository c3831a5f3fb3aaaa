"""A malicious server's attack that cheats in its *modification*: `modify` tries to read the client's private data
root (hyperparameter `data_root`) instead of working from the model alone. When the read succeeds it plants a
marker in the model it sends (the first layer's biases all MARKER, and the bytes it read as its weight's first
entries); `reconstruct` reports whether the model carries it. `tests/test_malicious.py` runs it, registered for the
test only: in the sandboxed worker the read is refused and the cell fails saying so; in process it succeeds."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from leakbench.attacks import Reconstruction
from leakbench.attacks.malicious import MaliciousAttack
from leakbench.fl.update import ClientUpdate
from leakbench.models.base import ImageVictim
from leakbench.server import ServerModel

MARKER = 7.0


@dataclass(frozen=True)
class CheatServerConfig:
    data_root: str = ""
    native: bool = False
    """Read the file through libc's open/read (native code, past any Python audit hook) instead of Python's."""


def native_read(path: Path) -> bytes:
    """The file's first 4 KiB through libc, or a PermissionError with the errno libc gave."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(str(path).encode(), os.O_RDONLY)
    if fd < 0:
        raise PermissionError(f"native open refused (errno {ctypes.get_errno()})")
    buffer = ctypes.create_string_buffer(4096)
    n = libc.read(fd, buffer, 4096)
    libc.close(fd)
    return buffer.raw[:max(n, 0)]


class CheatServer(MaliciousAttack[CheatServerConfig]):
    name = "cheat-server"
    description = "a malicious server whose modification reads the client's data root"
    Config = CheatServerConfig

    def modify(self, model: ImageVictim, *, seed: int) -> ServerModel:
        path = Path(self.config.data_root, "a", "0.png")
        data = native_read(path) if self.config.native else path.read_bytes()  # refused in the sandbox: the cell fails
        weight, bias = model.layer_param_names(1)
        params = dict(model.named_parameters())
        stolen = params[weight].detach().clone().flatten()
        stolen[: min(len(data), len(stolen))] = torch.tensor(list(data[: len(stolen)]), dtype=torch.float32)
        return ServerModel(0, {f"base.{bias}": torch.full_like(params[bias], MARKER),
                               f"base.{weight}": stolen.reshape(params[weight].shape)})

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        _, bias = update.model.layer_param_names(1)
        planted = bool((dict(update.model.named_parameters())[bias] == MARKER).all())
        return Reconstruction.failed(f"marker planted: {planted} (pid {os.getpid()})", failure="not-applicable",
                                     stats={"planted": planted})
