"""Issue 22's routes around a Python-level guard, for the cheating plugin (`cheat_attack.py`).

Three kinds, each tried by a route of its own:

* **readers** read one private file's bytes without Python's `open` (native code, a directory
  descriptor, a patched or disabled guard); **copiers** copy the private data root with a new
  process (libc `system`, fork + exec through ctypes, `_posixsubprocess`, multiprocessing spawn and
  forkserver). Either way the copy lands in the attack's own scratch folder, which
  `load_imagefolder` then loads like the original: a hit is the true batch.
* **memory** routes read the harness process's memory (`/proc/<pid>/mem` through a directory
  descriptor or libc, `process_vm_readv`): they report how many bytes they read.
* **files** routes read what an earlier cell or a report left (a results folder), or a copy of the
  data outside the listed data locations (say a wheel cache).
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

LAYOUT = [(f"class{c}", f"{i}.png") for c in range(2) for i in range(6)]
"""The private image folder's files (the cheater knows their names: the worst case)."""
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0o200000)
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise PermissionError(err, f"{what}: {os.strerror(err)}")
    return result


# --------------------------------------------------------------------------- readers: one file's bytes


def libc_read(path: str) -> bytes:
    """open/read through libc (no audit event)."""
    fd = _check(_libc.open(path.encode(), os.O_RDONLY), f"libc open {path}")
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def dir_fd(path: str) -> bytes:
    """openat on a descriptor of / opened through libc: the guard sees only a relative path."""
    root = _check(_libc.open(b"/", os.O_RDONLY | O_DIRECTORY), "libc open /")
    try:
        fd = os.open(path.lstrip("/"), os.O_RDONLY, dir_fd=root)
    finally:
        os.close(root)
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def torch_from_file(path: str) -> bytes:
    """torch.from_file, a native reader that raises no audit event."""
    import torch

    return torch.from_file(path, shared=False, size=os.path.getsize(path), dtype=torch.uint8).numpy().tobytes()


def pyarrow_file(path: str) -> bytes:
    """pyarrow's OSFile, another native reader."""
    import pyarrow

    with pyarrow.OSFile(path, "rb") as f:
        return f.read()


def guard_disabled(path: str) -> bytes:
    """Find the audit-hook guard through gc, empty its rules, then open the file from Python."""
    from leakbench.harness.isolation import Guard

    for obj in gc.get_objects():
        if isinstance(obj, Guard):
            obj.roots, obj.above = [], set()
    with open(path, "rb") as f:
        return f.read()


def guard_class_patched(path: str) -> bytes:
    """Replace the guard's class method (the hook calls it), then open the file from Python."""
    from leakbench.harness import isolation

    real = isolation.Guard.__call__
    isolation.Guard.__call__ = lambda self, event, args: None  # type: ignore[method-assign]
    try:
        with open(path, "rb") as f:
            return f.read()
    finally:
        isolation.Guard.__call__ = real  # type: ignore[method-assign]  (the control runs in the test's process)


def realpath_patched(path: str) -> bytes:
    """Make os.path.realpath lie to the guard, then open the file from Python."""
    real = os.path.realpath
    os.path.realpath = lambda p, *a, **k: "/nonexistent"  # type: ignore[assignment]
    try:
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.path.realpath = real


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


READERS: dict[str, Callable[[str], bytes]] = {
    "libc_read": libc_read, "dir_fd": dir_fd, "torch_from_file": torch_from_file, "pyarrow_file": pyarrow_file,
    "guard_disabled": guard_disabled, "guard_class_patched": guard_class_patched,
    "realpath_patched": realpath_patched,
}


# --------------------------------------------------------------------------- copiers: a new process


def libc_system(root: str, dest: str) -> None:
    """libc's system(): a shell that copies the data root."""
    code = _libc.system(f"cp -r '{root}/.' '{dest}'".encode())
    if code != 0:
        err = ctypes.get_errno()
        raise PermissionError(err, f"system() returned {code}: {os.strerror(err)}")


def libc_fork_exec(root: str, dest: str) -> None:
    """fork and execv through ctypes: /bin/cp in the child."""
    pid = _check(_libc.fork(), "libc fork")
    if pid == 0:
        argv = (ctypes.c_char_p * 5)(b"/bin/cp", b"-r", f"{root}/.".encode(), dest.encode(), None)
        _libc.execv(b"/bin/cp", argv)
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise PermissionError(f"the child ended with status {status}")


def posixsubprocess(root: str, dest: str) -> None:
    """_posixsubprocess.fork_exec, which subprocess uses underneath (no audit event of its own)."""
    import _posixsubprocess

    errpipe_read, errpipe_write = os.pipe()
    args = [b"/bin/cp", b"-r", f"{root}/.".encode(), dest.encode()]
    fixed = (args, [b"/bin/cp"], True, (errpipe_write,), None, None, -1, -1, -1, -1, -1, -1,
             errpipe_read, errpipe_write, True, False, -1, None, None, None, -1, None)
    pid = _posixsubprocess.fork_exec(*fixed, *((True,) if sys.version_info >= (3, 11, 4) else ()))  # _USE_VFORK
    os.close(errpipe_write)
    os.close(errpipe_read)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise PermissionError(f"the child ended with status {status}")


def mp_spawn(root: str, dest: str) -> None:
    """A multiprocessing process, spawn start method."""
    _mp_copy("spawn", root, dest)


def mp_forkserver(root: str, dest: str) -> None:
    """A multiprocessing process, forkserver start method."""
    _mp_copy("forkserver", root, dest)


def _mp_copy(method: str, root: str, dest: str) -> None:
    import multiprocessing

    proc = multiprocessing.get_context(method).Process(target=shutil.copytree, args=(root, dest),
                                                       kwargs={"dirs_exist_ok": True})
    proc.start()
    proc.join(60)
    if proc.exitcode != 0:
        raise PermissionError(f"the {method} process ended with {proc.exitcode}")


COPIERS: dict[str, Callable[[str, str], None]] = {
    "libc_system": libc_system, "libc_fork_exec": libc_fork_exec, "posixsubprocess": posixsubprocess,
    "mp_spawn": mp_spawn, "mp_forkserver": mp_forkserver,
}


def exfiltrate(route: str, root: str) -> str:
    """A copy of the private image folder at `root`, made by `route`, in a fresh folder of the attack's own."""
    dest = tempfile.mkdtemp(prefix="stolen-")
    if route in COPIERS:
        COPIERS[route](root, dest)
        return dest
    for folder, name in LAYOUT:
        data = READERS[route](os.path.join(root, folder, name))
        Path(dest, folder).mkdir(exist_ok=True)
        Path(dest, folder, name).write_bytes(data)
    return dest


# --------------------------------------------------------------------------- memory of the harness


TARGET = 0
"""The harness's process id (the cheat is told it: the worst case; 0 means this process)."""


def harness_pid() -> int:
    """The process that holds the batch: the harness (the attack worker's grandparent, through the
    fork server), or this process when the attack runs in the harness (the test's control)."""
    return TARGET or os.getpid()


def _heap(pid: int, read: Callable[[str], bytes]) -> tuple[int, int]:
    """The start and size of the harness's first readable anonymous or heap mapping."""
    for line in read(f"/proc/{pid}/maps").decode().splitlines():
        parts = line.split()
        if parts[1].startswith("rw") and (len(parts) < 6 or parts[5] == "[heap]"):
            start, end = (int(x, 16) for x in parts[0].split("-"))
            return start, min(end - start, 4096)
    raise LookupError("no heap mapping")


def proc_mem_dir_fd() -> int:
    """/proc/<harness>/mem opened through a descriptor of /proc (the guard sees `<pid>/mem`)."""
    pid = harness_pid()
    start, size = _heap(pid, dir_fd)
    proc = _check(_libc.open(b"/proc", os.O_RDONLY | O_DIRECTORY), "libc open /proc")
    try:
        fd = os.open(f"{pid}/mem", os.O_RDONLY, dir_fd=proc)
    finally:
        os.close(proc)
    try:
        return len(os.pread(fd, size, start))
    finally:
        os.close(fd)


def proc_mem_libc() -> int:
    """/proc/<harness>/mem through libc open and pread."""
    pid = harness_pid()
    start, size = _heap(pid, libc_read)
    fd = _check(_libc.open(f"/proc/{pid}/mem".encode(), os.O_RDONLY), "libc open mem")
    try:
        return len(os.pread(fd, size, start))
    finally:
        os.close(fd)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def process_vm_readv() -> int:
    """process_vm_readv on the harness's heap."""
    pid = harness_pid()
    start, size = _heap(pid, libc_read)
    buffer = ctypes.create_string_buffer(size)
    local, remote = _IoVec(ctypes.addressof(buffer), size), _IoVec(start, size)
    return _check(_libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0), "process_vm_readv")


MEMORY: dict[str, Callable[[], int]] = {
    "proc_mem_dir_fd": proc_mem_dir_fd, "proc_mem_libc": proc_mem_libc, "process_vm_readv": process_vm_readv,
}
