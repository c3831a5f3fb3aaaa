"""What the harness accepts from an attack worker (issue 41): a reply within hard limits, checked
before anything is parsed or allocated, and within the cell's time limit.

The worker runs untrusted code, so its reply is untrusted bytes. Before any of it is parsed:

- each message's length is read before its body (`receive`): the JSON header may hold at most
  MAX_HEADER_BYTES, the arrays at most what the cell can legitimately return (`ArrayBounds`);
- the header's nesting depth is counted without parsing (`json_depth`, at most MAX_DEPTH), then it
  must be an object of one expected kind with exactly that kind's keys (`read_header`);
- the `.npz` is read from its zip metadata first (`read_arrays`): at most three members named
  images / features / inverted, stored uncompressed (np.savez never compresses: no decompression
  bomb), each member's `.npy` header little-endian float32 of the cell's shape, its size equal to
  what the header claims and within the bound, all before one array is allocated.

A reply outside these limits raises `ReplyRefused`; the harness stores the cell as failed with the
reason (`isolation.check_reply`), never a traceback and never a stop of the suite.

The time limit (`time_limit`): the attack's declared `max_seconds` (its Config's field), doubled and
at least TIME_MARGIN seconds more; an attack that declares none gets LEAKBENCH_TIME_LIMIT seconds
(DEFAULT_TIME_LIMIT: 6 hours); feature inversion (undeclared work) adds that default again. The
harness kills the worker when the limit is reached and stores the cell as failed with reason "time: …".
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import struct
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

import numpy as np

from leakbench.core.errors import ConfigError, LeakbenchError

MAX_HEADER_BYTES = 1 << 20
"""The most bytes a reply's JSON header may hold (a real one holds a few kilobytes)."""
MAX_DEPTH = 32
"""The deepest nesting of objects and arrays a reply's JSON header may have (a real one has at most 8)."""
MAX_REPLY_ROWS = 1 << 16
"""The most images or feature rows a reply may hold."""
MAX_NPY_HEADER = 4096
"""The most bytes of an `.npy` member's header (np.savez writes 128)."""
MAX_REPLY_BYTES = (1 << 31) - 1
"""The most bytes of a reply's arrays whatever the cell (2 GiB: no zip64 is ever read)."""
ZIP_OVERHEAD = 1024
"""Bytes of zip headers per member (local header and central directory entry) allowed beyond its data."""
MEMBERS = {"images.npy": 4, "features.npy": 2, "inverted.npy": 4}
"""The arrays a reply may hold, by member name, and their dimensions."""
FLOAT32 = np.dtype("<f4")
HEADERS: dict[str, dict[str, frozenset[str]]] = {
    "cell": {"ok": frozenset({"kind", "meta"}), "error": frozenset({"kind", "message"}),
             "config": frozenset({"kind", "message"})},
    "describe": {"describe": frozenset({"kind", "found"}), "error": frozenset({"kind", "message"}),
                 "config": frozenset({"kind", "message"})},
    "modify": {"modified": frozenset({"kind", "block"}), "error": frozenset({"kind", "message"}),
               "config": frozenset({"kind", "message"})}}
"""Per request: the reply kinds the worker may answer with, and the exact keys of each."""

TIME_LIMIT_ENV = "LEAKBENCH_TIME_LIMIT"
"""The time limit, in seconds, of a cell whose attack declares no `max_seconds` (DEFAULT_TIME_LIMIT if unset)."""
DEFAULT_TIME_LIMIT = 6 * 3600.0
"""Six hours: longer than any shipped attack without a declared budget takes on a CPU at the suites' sizes."""
TIME_MARGIN = 300.0
"""Seconds a cell may take beyond its attack's doubled `max_seconds`, at least (start-up, plugin import, set-up)."""
DESCRIBE_SECONDS = 600.0
"""The time limit of the worker that imports and describes the attack plugins."""


class ReplyRefused(ValueError):
    """The attack worker's reply is outside the limits; the message says which one."""


class OutOfTime(LeakbenchError):
    """The attack worker did not answer within its time limit and was killed."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"no answer within the time limit of {limit:g} s")
        self.limit = limit


def receive(conn: Connection, limit: int, what: str) -> bytes:
    """One message of at most `limit` bytes from `conn`: its length is read before its body, so a longer
    one is refused (ReplyRefused) without allocating it; EOFError when the worker ended first."""
    try:
        return conn.recv_bytes(limit)
    except OSError:
        if conn.closed:  # multiprocessing closes a read-only connection on a message longer than `limit`
            raise ReplyRefused(f"{what} is longer than {limit:,} bytes") from None
        raise


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text `data`, counted without parsing it
    (brackets inside strings do not count); linear in its length."""
    brackets = _OPEN[np.frombuffer(_STRING.sub(b"", data), np.uint8)]
    return int(np.cumsum(brackets, dtype=np.int64).max(initial=0))


def read_header(data: bytes, request: str) -> dict[str, Any]:
    """The worker's JSON header for a `request` ("cell", "describe" or "modify"): at most MAX_HEADER_BYTES and
    MAX_DEPTH deep, an object of a kind expected for the request with exactly that kind's keys, and
    a message (kinds error and config) that is text. ReplyRefused otherwise."""
    if len(data) > MAX_HEADER_BYTES:
        raise ReplyRefused(f"the header is longer than {MAX_HEADER_BYTES:,} bytes")
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise ReplyRefused(f"the header is nested {depth:,} deep (at most {MAX_DEPTH})")
    try:
        header = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, an integer of too many digits
        raise ReplyRefused(f"the header is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    kinds = HEADERS[request]
    kind = header.get("kind") if isinstance(header, dict) else None
    if not isinstance(kind, str) or kind not in kinds:
        shown = repr(kind)[:80] if isinstance(header, dict) else f"a JSON {type(header).__name__}"
        raise ReplyRefused(f"a reply of kind {shown} to a {request} request (expected: {', '.join(kinds)})")
    if set(header) != kinds[kind]:
        raise ReplyRefused(f"a {kind!r} reply with keys {sorted(header)[:10]} (expected: {sorted(kinds[kind])})")
    if "message" in header and not isinstance(header["message"], str):
        raise ReplyRefused(f"a {kind!r} reply whose message is a {type(header['message']).__name__}")
    checked: dict[str, Any] = header
    return checked


@dataclass(frozen=True)
class ArrayBounds:
    """What a cell's reply may legitimately hold: up to `rows` images of `image_shape` (and as many
    inverted images), up to `rows` feature rows of at most `feature_width` values, float32."""

    image_shape: tuple[int, ...]
    feature_width: int
    rows: int = MAX_REPLY_ROWS

    def row_values(self, name: str) -> int:
        """Values in one row of member `name`, at most."""
        return math.prod(self.image_shape) if MEMBERS[name] == 4 else self.feature_width

    def member_bytes(self, name: str) -> int:
        """The most bytes member `name` may hold: its npy header and `rows` rows."""
        return MAX_NPY_HEADER + self.rows * self.row_values(name) * FLOAT32.itemsize

    def total_bytes(self) -> int:
        """The most bytes of the whole .npz (MAX_REPLY_BYTES at most)."""
        return min(MAX_REPLY_BYTES, 22 + sum(ZIP_OVERHEAD + self.member_bytes(name) for name in MEMBERS))


def bounds_of(model: Any) -> ArrayBounds:
    """The bounds of a reply for a cell on `model` (the update's public model): images of its input
    shape; features no wider than its widest linear layer's input (a weight's second dimension)."""
    image_shape = tuple(int(n) for n in model.input_shape)
    widths = [int(p.shape[1]) for p in model.parameters() if p.ndim == 2]
    return ArrayBounds(image_shape, max(widths, default=math.prod(image_shape)))


def read_arrays(npz: bytes, bounds: ArrayBounds) -> dict[str, np.ndarray]:
    """The arrays of a reply's .npz by name (images, features, inverted), each checked from the zip's
    and the .npy header's metadata against `bounds` before it is allocated (ReplyRefused otherwise)."""
    if len(npz) > bounds.total_bytes():
        raise ReplyRefused(f"the arrays hold {len(npz):,} bytes, at most {bounds.total_bytes():,} for this cell")
    return _read_members(npz, set(MEMBERS), lambda name: bounds.member_bytes(name),
                         lambda name, shape: _check_shape(name, shape, bounds))


def read_values(npz: bytes, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The arrays of a server model's reply (`harness.server`) by parameter name: members named after parameters
    of `shapes` (at most one each), each float32 of exactly that parameter's shape, checked before it is allocated
    (ReplyRefused otherwise)."""
    members = {f"{name}.npy" for name in shapes}
    return _read_members(npz, members, lambda member: MAX_NPY_HEADER + math.prod(shapes[member[:-4]]) * 4,
                         lambda member, shape: _check_exact(member, shape, shapes[member[:-4]]))


def _read_members(npz: bytes, members: set[str], max_bytes: Callable[[str], int],
                  check: Callable[[str, Any], None]) -> dict[str, np.ndarray]:
    """The members of `npz` by name without '.npy': only members among `members` (file names), each at most
    `max_bytes(member)` bytes and of a shape `check(member, shape)` accepts."""
    _check_directory(npz, len(members))
    try:
        with zipfile.ZipFile(io.BytesIO(npz)) as archive:
            infos = archive.infolist()
            names = [info.filename for info in infos]
            if len(set(names)) != len(names) or not set(names) <= members:
                allowed = ", ".join(sorted(members)[:8])
                raise ReplyRefused(f"members {sorted(names)[:5]} (at most one each of {allowed})")
            return {info.filename[:-4]: _member(archive, info, max_bytes(info.filename), check)
                    for info in infos}
    except (zipfile.BadZipFile, EOFError, struct.error, NotImplementedError, RuntimeError) as exc:
        raise ReplyRefused(f"the arrays are not a plain .npz ({type(exc).__name__}: {str(exc)[:200]})") from None


def _check_directory(npz: bytes, members: int) -> None:
    """The zip's end record (the last 22 bytes: np.savez writes no comment and no zip64 record) lists at
    most `members` entries in a central directory of at most `members` × ZIP_OVERHEAD bytes right
    before it: checked before the zip module reads any entry."""
    end = npz[-22:]
    if len(end) != 22 or end[:4] != b"PK\x05\x06":
        raise ReplyRefused("the arrays are not a plain .npz (no end record where np.savez writes it)")
    disk, start_disk, here, entries, size, offset, comment = struct.unpack("<4xHHHHIIH", end)
    if disk or start_disk or comment or here != entries or entries > members \
            or size > members * ZIP_OVERHEAD or offset + size != len(npz) - 22:
        raise ReplyRefused(f"the arrays' zip directory lists {entries} entries in {size:,} bytes at {offset:,} "
                           f"(at most {members}, one disk, no comment, right before its end record)")


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, max_bytes: int, check: Callable[[str, Any], None]) \
        -> np.ndarray:
    """One member, read only once its zip entry holds at most `max_bytes`, its .npy header is float32 of a shape
    `check(name, shape)` accepts, and the two fit each other."""
    name = info.filename
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 or info.compress_size != info.file_size:
        raise ReplyRefused(f"{name} is compressed or encrypted (np.savez stores arrays as they are)")
    if info.file_size > max_bytes:
        raise ReplyRefused(f"{name} holds {info.file_size:,} bytes, at most {max_bytes:,} here")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in ((1, 0), (2, 0)):
            raise ReplyRefused(f"{name} has .npy version {version}")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        try:
            shape, fortran, dtype = read(member, max_header_size=MAX_NPY_HEADER)
        except (ValueError, SyntaxError) as exc:
            raise ReplyRefused(f"{name} has a bad .npy header ({str(exc)[:200]})") from None
        data_start = member.tell()
        if dtype != FLOAT32 or not isinstance(fortran, bool):
            raise ReplyRefused(f"{name} of dtype {dtype}, fortran_order {str(fortran)[:20]}: float32 only")
        check(name, shape)
        size = math.prod(shape) * FLOAT32.itemsize
        if data_start + size != info.file_size:
            raise ReplyRefused(f"{name}: its header claims {shape} ({size:,} bytes) but it holds "
                               f"{info.file_size - data_start:,}")
        data = member.read(size)
        if len(data) != size:
            raise ReplyRefused(f"{name} ends before its {size:,} bytes")
        member.read(1)  # the end of the member: its CRC is checked
    order: Literal["F", "C"] = "F" if fortran else "C"  # np.savez writes a Fortran-ordered (transposed) array as is
    return np.frombuffer(data, FLOAT32).reshape(shape, order=order).copy(order="C")  # writable, its own


def _check_exact(name: str, shape: Any, expected: tuple[int, ...]) -> None:
    """Raise ReplyRefused unless a member's shape is `expected` (a parameter's)."""
    if shape != tuple(expected):
        raise ReplyRefused(f"{name} of shape {str(shape)[:100]}: the parameter's is {tuple(expected)}")


def _check_shape(name: str, shape: Any, bounds: ArrayBounds) -> None:
    """Raise ReplyRefused unless a member's shape is its kind's within `bounds`."""
    dims = MEMBERS[name]
    if not (isinstance(shape, tuple) and len(shape) == dims and all(type(n) is int and n > 0 for n in shape)):
        raise ReplyRefused(f"{name} of shape {str(shape)[:100]}: {dims} positive dimensions")
    if shape[0] > bounds.rows:
        raise ReplyRefused(f"{name} of shape {shape}: at most {bounds.rows:,} rows")
    if dims == 4 and shape[1:] != bounds.image_shape:
        raise ReplyRefused(f"{name} of shape {shape}, the model takes {bounds.image_shape}")
    if dims == 2 and shape[1] > bounds.feature_width:
        raise ReplyRefused(f"{name} of shape {shape}: the widest layer takes {bounds.feature_width:,} inputs")


def default_time_limit() -> float:
    """The time limit of a cell whose attack declares no budget: LEAKBENCH_TIME_LIMIT (seconds) if set,
    else DEFAULT_TIME_LIMIT; a value that is not a positive number is a ConfigError."""
    text = os.environ.get(TIME_LIMIT_ENV, "")
    if not text:
        return DEFAULT_TIME_LIMIT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{TIME_LIMIT_ENV}={text!r}: expected a positive number of seconds")
    return value


def declared_seconds(config: Any) -> float | None:
    """The attack's declared time budget: its Config's `max_seconds` when it has one (a positive number)."""
    value = asdict(config).get("max_seconds") if is_dataclass(config) and not isinstance(config, type) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def time_limit(config: Any, inversion_steps: int = 0) -> float:
    """The seconds a cell's attack worker may take, from the harness's own resolved `config`: its declared
    `max_seconds` doubled, and at least TIME_MARGIN more; the default limit where it declares none; plus
    the default limit when feature inversion (`inversion_steps` > 0) runs after the attack."""
    declared = declared_seconds(config)
    limit = default_time_limit() if declared is None else declared + max(declared, TIME_MARGIN)
    return limit + (default_time_limit() if inversion_steps > 0 else 0.0)
