"""Documented bounds on user-given sizes and seeds, and the check that an output folder can be written.

Used by the command line and by suite files alike, so both refuse the same values with one line
before any work is done (rather than an allocation error or a traceback deep inside torch or numpy).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from leakbench.core.errors import ConfigError

MAX_SEED = 2**63
"""Seeds lie in [0, 2^63): torch.manual_seed takes a signed 64-bit integer."""

MAX_WIDTH = 65536
"""Hidden width of the victim's linear layers: 1 … 65536."""

MAX_DEPTH = 64
"""Layers of the victim: at most 64 (the model checks its own minimum, 2 for fc and 3 for conv)."""

MAX_CELLS = 100_000
"""A suite expanding to more cells than this is refused before anything is checked or run."""

MAX_GRID_IMAGES = 1024
"""Images per comparison grid (a suite's `grid_images`): 1 … 1024."""

MAX_COMPONENT = 200
"""Bytes in one component of an output path: leakbench writes temporary siblings (`.NAME.tmp-…`,
`.NAME.old-PID`) up to about 30 bytes longer than NAME, and file systems allow 255."""

MAX_PATH = 3000
"""Bytes in a whole output path (Linux allows 4096, and leakbench adds cell folders and file names)."""


def check_int(value: Any, where: str, low: int, high: int) -> int:
    """`value` as an int in [low, high], or a ConfigError naming `where` and the bounds."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where} must be an integer in [{low}, {high}], got {value!r}")
    return value


def check_seed(value: Any, where: str) -> int:
    """A seed in [0, 2^63)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_SEED:
        raise ConfigError(f"{where} must be an integer in [0, 2^63), got {value!r}")
    return value


def check_width(value: Any, where: str) -> int:
    return check_int(value, where, 1, MAX_WIDTH)


def check_depth(value: Any, where: str) -> int:
    return check_int(value, where, 1, MAX_DEPTH)


def check_path_length(path: Path, option: str) -> None:
    """Refuse an output path with a component longer than MAX_COMPONENT bytes, or longer than MAX_PATH
    in all (the write would fail with 'File name too long' after the work is done)."""
    absolute = os.fsencode(Path(path).absolute())
    if len(absolute) > MAX_PATH:
        raise ConfigError(f"{option}: the path is {len(absolute)} bytes long, more than the {MAX_PATH} allowed")
    for part in Path(path).parts:
        if len(os.fsencode(part)) > MAX_COMPONENT:
            raise ConfigError(f"{option}: the name {part[:40]}… is {len(os.fsencode(part))} bytes long, more than "
                              f"the {MAX_COMPONENT} allowed")


def check_writable_dir(path: Path, option: str) -> None:
    """Refuse an output folder that cannot be created or written, or whose path is too long, before any
    work is done.

    Walks up to the nearest existing ancestor: the path itself, or any component on the way,
    existing as something other than a folder is refused; then a temporary file is created and
    removed in that ancestor (a real probe: permission bits say nothing when running as root, but
    read-only or immutable folders still refuse). Nothing is left behind.
    """
    path = Path(path)
    check_path_length(path, option)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: creating the folder would fail
            raise ConfigError(f"{option} {path}: {probe} is a broken symbolic link")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{option} {path} cannot be created: {probe} is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".leakbench-probe-", dir=probe)
    except OSError as exc:
        raise ConfigError(f"{option} {path} is not writable (cannot create files in {probe}: "
                          f"{exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(name)
