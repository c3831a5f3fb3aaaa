"""Paths leakbench writes: names read from files made safe, and folders replaced only when leakbench wrote them.

A name that becomes a path (a suite's name, a cell id) must be a single folder name: every name read
from a suite file or a stored manifest goes through `folder_name`. An existing folder is replaced
only when it holds nothing but what leakbench writes there (`foreign` lists anything else); leakbench
never deletes a file it did not write.

A folder is written in a temporary folder beside it (`temp_folder`) and renamed into place
(`replace_folder`). Temporary and moved-aside folders carry a marker file (`TEMP_MARKER`) from the
moment they are made until the rename; an interrupted command can leave them behind, and a later one
removes them (`remove_leftovers`) — only folders holding the marker, or empty ones named exactly as
`temp_folder` names them (a command killed between making the folder and marking it leaves that);
never a user's folder that holds anything, and never through a link.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from leakbench.core.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A folder name leakbench makes from a name it was given: at most 100 characters (with the suffixes
and temporary siblings leakbench adds, it stays under file systems' 255 bytes)."""

Foreign = Callable[[Path], list[str]]
"""Lists the entries of a folder that leakbench did not write there ([] when it is absent)."""


def folder_name(value: object, what: str) -> str:
    """`value` when it is one folder name (letters, digits, '.', '_', '-'; no separator, not '.' or '..')."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) <= 60 else f"{value[:40]}… ({len(value)} characters)"
        raise ConfigError(f"{what} must be a folder name (letters, digits, '.', '_', '-'; at most 100 characters), "
                          f"got {shown!r}")
    return value


def honour_umask(path: Path) -> Path:
    """Give a file or folder made by `tempfile.mkstemp`/`mkdtemp` (owner-only: 0600/0700) the mode a plain
    `open`/`mkdir` gives (0666/0777 less the umask), so that a colleague or a web server can read what
    leakbench writes when the umask allows it; returns `path`."""
    mode = 0o777 if path.is_dir() else 0o666
    os.chmod(path, mode & ~current_umask())
    return path


def current_umask() -> int:
    """The process's umask, read from /proc where it can be (setting it to read it back races with
    threads that create files meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def foreign_entries(folder: Path, allowed: Callable[[Path], bool]) -> list[str]:
    """Names of the entries of `folder` that `allowed` rejects; [folder name] when it is not a folder."""
    if not os.path.lexists(folder):
        return []
    if folder.is_symlink() or not folder.is_dir():
        return [folder.name]
    return sorted(p.name for p in folder.iterdir() if not allowed(p))


def is_plain_file(path: Path) -> bool:
    """A regular file, not a link (leakbench writes no links)."""
    return path.is_file() and not path.is_symlink()


def refusal(folder: Path, foreign: list[str]) -> str:
    """The one-line error for a folder holding files leakbench did not write."""
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    return (f"{folder} holds files leakbench did not write ({shown}); leakbench replaces only its own output: "
            "move them away or choose another folder")


def check_owned(folder: Path, foreign: Foreign) -> None:
    """Raise a one-line ConfigError when `folder` exists and holds anything leakbench did not write."""
    found = foreign(folder)
    if found:
        raise ConfigError(refusal(folder, found))


TEMP_MARKER = ".leakbench-temporary"
"""The file that marks a temporary or moved-aside folder as leakbench's (left out of seals and report markers)."""
LEFTOVER = re.compile(r"\.(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\.(tmp-[A-Za-z0-9_]+|old-[0-9]+)")
"""The names of temporary (`.NAME.tmp-XXXX`) and moved-aside (`.NAME.old-PID`) folders."""
UNMARKED = re.compile(r"tmp-[a-z0-9_]{8}")
"""The exact suffix `tempfile.mkdtemp` gives `temp_folder`'s folders (`LEFTOVER`'s second group), before the marker
is written."""


def temp_folder(out: Path) -> Path:
    """A new, marked temporary folder `.NAME.tmp-XXXX` beside `out` (whose parent is created) to build `out` in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = honour_umask(Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent)))
    _mark(tmp)
    return tmp


def _mark(folder: Path) -> None:
    (folder / TEMP_MARKER).write_text("a temporary folder of leakbench's; the next command removes it if it is left\n")


def is_leftover(path: Path, name: str | None = None) -> bool:
    """Whether `path` is a temporary or moved-aside folder leakbench made (of folder `name`, when given):
    named like one, a folder and not a link, holding leakbench's marker — or empty and named exactly as
    `temp_folder` names it, as a command killed before the marker is written leaves it."""
    match = LEFTOVER.fullmatch(path.name)
    if match is None or (name is not None and match["name"] != name) or not path.is_dir() or path.is_symlink():
        return False
    return is_plain_file(path / TEMP_MARKER) or (UNMARKED.fullmatch(match[2]) is not None and not any(path.iterdir()))


def remove_leftovers(folder: Path, name: str | None = None) -> int:
    """Delete the folders an interrupted command left in `folder` (`is_leftover`); how many."""
    found = [p for p in folder.iterdir() if is_leftover(p, name)] if folder.is_dir() else []
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return len(found)


def replace_folder(new: Path, out: Path, foreign: Foreign) -> None:
    """Put the complete folder `new` (from `temp_folder`) at `out`; an older `out` of leakbench's own is
    moved aside (and marked), then deleted.

    An `out` holding anything else is left untouched and ConfigError is raised.
    """
    check_owned(out, foreign)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        _mark(old)
    (new / TEMP_MARKER).unlink(missing_ok=True)
    os.replace(new, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def held_folder(folder: Path, what: str) -> Iterator[None]:
    """Hold `folder` (created if absent, with its missing parents) for one command that writes it: an
    exclusive `flock` on the folder itself, released when the command ends, however it ends (`kill -9`
    included: the kernel drops the lock with the process). A second command into the same folder
    meanwhile is refused with one line naming `what` (it would remove the first one's temporary
    folders, and each would rebuild the tables from its own cells only). Folders this call created
    are removed again when the command fails and leaves them empty, so a refusal writes nothing.
    File systems without `flock` (some network mounts) are used unlocked, as before.
    """
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ConfigError(f"{folder} is being written by another leakbench command ({what} into the same "
                                  "folder); wait for it to finish, or choose another --out") from None
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        try:
            yield
        except BaseException:
            for path in missing:  # innermost first: only the empty folders this call made
                try:
                    path.rmdir()
                except OSError:
                    break
            raise
    finally:
        os.close(fd)
