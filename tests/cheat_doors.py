"""Issue 41's doors out of the attack worker, for the plugin attack `doors` (`tests/test_sandbox_doors.py`).

Each route tries one door through libc (no audit event, so the kernel alone answers) and reports, in
its stats, the errno of every try (0: it worked): the terminal (TIOCSTI / TIOCLINUX on fds 0–2 with
and without high bits in the command, /dev/tty), /proc of the fork server and of the harness, other
processes' resource limits, priorities and CPUs, System V IPC and POSIX message queues, a death
signal cleared, or a file beside a plugin module. The attack answers with uniform noise.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from leakbench.attacks import Attack, Reconstruction
from leakbench.fl.update import ClientUpdate

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS = {"ioctl": 16, "shmget": 29, "shmat": 30, "msgget": 68, "semget": 64, "prctl": 157, "setpriority": 141,
       "sched_setaffinity": 203, "ioprio_set": 251, "mq_open": 240, "prlimit64": 302}
"""x86-64 system call numbers (the tests run there): called by number, so no C library wrapper
truncates or checks an argument first."""
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
HIGH_BITS = {"": 0, "+2^32": 1 << 32, "+ffffffff00000000": 0xFFFFFFFF << 32}
"""What is added to an ioctl command: the kernel reads its low 32 bits alone."""
IOCTLS = {"TIOCSTI": TIOCSTI, "TIOCLINUX": TIOCLINUX}
RLIMIT_FSIZE, RLIMIT_AS = 1, 9
IPC_CREAT = 0o1000
PR_SET_PDEATHSIG = 1


def syscall(name: str, *args: int | ctypes.c_void_p | None) -> int:
    """errno of the system call `name` (0 when it succeeded); integer arguments go as 64-bit values."""
    wide = [ctypes.c_long(a) if isinstance(a, int) and a < 1 << 63 else ctypes.c_ulong(a) if isinstance(a, int)
            else a for a in args]
    return 0 if _libc.syscall(SYS[name], *wide) >= 0 else ctypes.get_errno()


def libc_read(path: str) -> tuple[int, bytes]:
    """(errno, bytes) of reading `path` through libc open (no audit event: only the kernel decides)."""
    fd = _libc.open(path.encode(), os.O_RDONLY)
    if fd < 0:
        return ctypes.get_errno(), b""
    try:
        return 0, os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _ppid() -> int:
    return os.getppid()


def tty(target: str) -> dict[str, int]:
    """TIOCSTI (pushing `target`'s characters, a line for the user's shell) and TIOCLINUX on fds 0,
    1, 2, each with and without high bits; /dev/tty opened (then the same on it); how many of this
    process's descriptors are terminals. Also writes a line with escape sequences on stderr."""
    out: dict[str, int] = {}
    text = (target or "echo leakbench-doors-typed").encode() + b"\n"
    sys.stderr.write("doors: progress \x1b[2J\x1b]0;title\x07\x9b0m done\r\n")
    sys.stderr.flush()
    fds = {"0": 0, "1": 1, "2": 2}
    fd = _libc.open(b"/dev/tty", os.O_RDWR)
    out["open /dev/tty"] = 0 if fd >= 0 else ctypes.get_errno()
    if fd >= 0:
        fds["/dev/tty"] = fd
    for where, fd_number in fds.items():
        for name, command in IOCTLS.items():
            for suffix, high in HIGH_BITS.items():
                errors = set()
                for byte in text if name == "TIOCSTI" else b"\x02":  # TIOCLINUX 2: set selection
                    c = ctypes.c_char(bytes([byte]))
                    errors.add(syscall("ioctl", fd_number, command | high, ctypes.addressof(c)))
                out[f"{name}{suffix} on {where}"] = max(errors)
    out["terminals"] = sum(os.isatty(n) for n in range(1024))
    return out


def proc(target: str) -> dict[str, int]:
    """Read /proc/<fork server>/status, /proc/<harness>/status (`target`) and this process's own."""
    return {"fork server": libc_read(f"/proc/{_ppid()}/status")[0],
            "harness": libc_read(f"/proc/{int(target)}/status")[0],
            "own": libc_read("/proc/self/status")[0]}


class _Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]


def _prlimit(pid: int, resource: int) -> dict[str, int]:
    """Read a process's limit, then set it to the value read (harmless where it works)."""
    old = _Rlimit(2**64 - 1, 2**64 - 1)
    read = syscall("prlimit64", pid, resource, None, ctypes.addressof(old))
    return {"read": read, "set": syscall("prlimit64", pid, resource, ctypes.addressof(old), None)}


def prlimit(target: str) -> dict[str, int]:
    """prlimit64 on the fork server (RLIMIT_AS) and on the harness (`target`, RLIMIT_FSIZE)."""
    server, harness = _prlimit(_ppid(), RLIMIT_AS), _prlimit(int(target), RLIMIT_FSIZE)
    return {**{f"fork server {k}": v for k, v in server.items()}, **{f"harness {k}": v for k, v in harness.items()}}


def others(target: str) -> dict[str, int]:
    """setpriority, sched_setaffinity and ioprio_set on the harness (`target`), each set to what it
    is (or refused); the death signal changed, also with high bits in prctl's option."""
    harness = int(target)
    mask = ctypes.c_uint64(2**64 - 1)
    prio = os.getpriority(os.PRIO_PROCESS, harness)
    return {"setpriority": syscall("setpriority", os.PRIO_PROCESS, harness, prio),
            "setpriority group": syscall("setpriority", os.PRIO_PGRP, 0, prio),
            "sched_setaffinity": syscall("sched_setaffinity", harness, 8, ctypes.addressof(mask)),
            "ioprio_set": syscall("ioprio_set", 1, harness, 0),
            "PR_SET_PDEATHSIG": syscall("prctl", PR_SET_PDEATHSIG, 9),
            "PR_SET_PDEATHSIG+2^32": syscall("prctl", PR_SET_PDEATHSIG | 1 << 32, 9)}


def ipc(target: str) -> dict[str, int]:
    """Look up a System V shared memory segment, message queue and semaphore set and a POSIX message
    queue by a key or name no one uses (`target`): the kernel says ENOENT where the call is allowed,
    and nothing is created (no segment outlives the test)."""
    key = int(target)
    name = f"leakbench-doors-{key}".encode()
    return {"shmget": syscall("shmget", key, 4096, 0), "msgget": syscall("msgget", key, 0),
            "semget": syscall("semget", key, 1, 0),
            "mq_open": syscall("mq_open", ctypes.cast(name, ctypes.c_void_p), os.O_RDWR, 0, None)}


def _segment(key: int, create: bool) -> tuple[int, int]:
    """(errno, address) of the System V segment `key` attached (created if `create`)."""
    _libc.shmget.restype = ctypes.c_int
    _libc.shmat.restype = ctypes.c_void_p
    shmid = _libc.shmget(key, 4096, (IPC_CREAT | 0o600) if create else 0)
    if shmid < 0:
        return ctypes.get_errno(), 0
    address = _libc.shmat(shmid, None, 0)
    return (ctypes.get_errno(), 0) if address in (None, ctypes.c_void_p(-1).value) else (0, address)


SHM_TEXT = b"leakbench-doors: the answer of an earlier cell"


def shm_write(target: str) -> dict[str, int]:
    """Leave SHM_TEXT in the System V segment of key `target` (for a later cell)."""
    err, address = _segment(int(target), create=True)
    if not err:
        ctypes.memmove(address, SHM_TEXT, len(SHM_TEXT))
    return {"shmget": err}


def shm_read(target: str) -> dict[str, int]:
    """Whether the segment of key `target` holds SHM_TEXT (left by an earlier cell)."""
    err, address = _segment(int(target), create=False)
    return {"shmget": err, "relayed": int(not err and ctypes.string_at(address, len(SHM_TEXT)) == SHM_TEXT)}


LINGER_NAME = b"doors-linger"
"""The `linger` worker's name (/proc/<pid>/comm): the tests find it by it."""


def linger(target: str) -> dict[str, int]:
    """Clear the death signal, then never answer: a worker that would outlive a killed harness."""
    syscall("prctl", PR_SET_PDEATHSIG, 0)
    _libc.prctl(15, LINGER_NAME, 0, 0, 0)  # PR_SET_NAME: now the tests may kill the harness
    while True:
        time.sleep(0.5)


def beside(target: str) -> dict[str, int]:
    """Read the file `target` (a file a plugin folder's symbolic link leads to)."""
    return {"read": libc_read(target)[0]}


ROUTES: dict[str, Callable[[str], dict[str, int]]] = {
    "tty": tty, "proc": proc, "prlimit": prlimit, "others": others, "ipc": ipc, "shm_write": shm_write,
    "shm_read": shm_read, "linger": linger, "beside": beside}


@dataclass(frozen=True)
class DoorsConfig:
    """route: one of ROUTES; target: what it needs (a pid, a key, a path, the text to type)."""

    route: str = "tty"
    target: str = ""


class DoorsAttack(Attack):
    name = "doors"
    description = "tries the sandbox's doors of issue 41 (test plugin)"
    Config = DoorsConfig

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        stats: dict[str, int] = ROUTES[self.config.route](self.config.target)
        b = update.batch_size or 1
        noise = torch.rand((b, *update.model.input_shape), generator=torch.Generator().manual_seed(seed))
        return Reconstruction("ok", "image", images=noise, stats={"route": self.config.route, **stats})
