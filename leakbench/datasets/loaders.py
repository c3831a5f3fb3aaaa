"""Dataset loaders. Each one is registered in `DATASETS` and returns an `ImageDataset`.

Every loader has the signature `(*, data_root: Path | None, image_size: int | None)`.
Every user-facing problem (missing folder or file, unreadable or corrupt file, bad image
size, failed download) is raised as a one-line `DatasetError`. Loaders never print.

Loaders that cache (`embedded`, `tinyimagenet`) return the same `ImageDataset` object on
repeated calls: treat its tensors as read-only (`sample_batch` copies what it takes).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import io
import os
import tempfile
import zipfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from leakbench.core.errors import DatasetError
from leakbench.datasets.base import ImageDataset
from leakbench.datasets.registry import DATASETS, FINGERPRINTS

DEFAULT_CACHE_ROOT = Path.home() / ".cache" / "leakbench" / "data"
"""Where `mnist` and `cifar10` download to when no `data_root` is given."""

EMBEDDED_MIN_STD = 0.02
"""Patches of `embedded` whose pixel standard deviation is below this are dropped."""

_MAX_IMAGE_SIZE = 1024
MIN_IMAGE_SIZE = 8
"""Smallest image side a dataset is resized to: digits' native 8×8 (an image of a few pixels is no image;
the conv victim needs 16 or more, a side of 8·2^k, and says so itself)."""
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg"})
_SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
EMBEDDED_PHOTOS = 2 + len(_SKIMAGE_PHOTOS)
"""Photos behind `embedded` (and its number of classes): scikit-learn's two and scikit-image's four."""
PUBLIC_MARKER = "PUBLIC"
"""A file of this name in an `imagefolder` data root declares its images public (`ImageDataset.public`)."""
_PIL_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


# --------------------------------------------------------------------------- helpers


def _check_size(dataset: str, image_size: int | None, default: int) -> int:
    """Return `image_size` (or `default` when None) after checking it is a sane integer."""
    if image_size is None:
        return default
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)):
        raise DatasetError(f"{dataset}: image size must be an integer, got {image_size!r}")
    if not MIN_IMAGE_SIZE <= int(image_size) <= _MAX_IMAGE_SIZE:
        raise DatasetError(f"{dataset}: image size must be between {MIN_IMAGE_SIZE} and {_MAX_IMAGE_SIZE}, "
                           f"got {image_size}")
    return int(image_size)


def _existing_dir(dataset: str, data_root: Path) -> Path:
    """`data_root` as a Path, or a DatasetError when it is not an existing folder."""
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise DatasetError(f"{dataset}: data root {root} does not exist or is not a folder")
    return root


def _to_dataset(name: str, images_uint8: np.ndarray, labels: np.ndarray, num_classes: int) -> ImageDataset:
    """Build an ImageDataset from uint8 images shaped (N, H, W, C) and integer labels."""
    images = torch.from_numpy(np.ascontiguousarray(images_uint8.transpose(0, 3, 1, 2)))
    return ImageDataset(
        name=name,
        images=images.to(torch.float32).div_(255.0),
        labels=torch.as_tensor(np.asarray(labels), dtype=torch.int64),
        num_classes=int(num_classes),
    )


def _resize_tensor(images: torch.Tensor, size: int) -> torch.Tensor:
    """Antialiased bilinear resize of a (N, C, H, W) float batch to size×size, kept in [0, 1]."""
    if images.shape[-2:] == (size, size):
        return images
    out = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return out.clamp_(0.0, 1.0)


def _open_rgb(path: Path, data: bytes | None = None) -> Image.Image:
    """Decode one image file (from `data`, its bytes, when given) as RGB, or raise a DatasetError naming the file."""
    try:
        with Image.open(path if data is None else io.BytesIO(data)) as img:
            return img.convert("RGB")
    except _PIL_ERRORS as exc:
        raise DatasetError(f"cannot read image {path}: {exc}") from None


# --------------------------------------------------------------------------- embedded


def _embedded_photos() -> list[np.ndarray]:
    """The six bundled RGB photos (uint8, H×W×3): sklearn's china and flower, then scikit-image's
    astronaut, chelsea, coffee and rocket. A missing source is a DatasetError naming the install
    command, never a smaller dataset (fewer photos would give the same cell ids other images)."""
    photos = [np.asarray(img) for img in _bundled("scikit-learn", _sklearn_photos)]
    photos += [np.asarray(img)[..., :3] for img in _bundled("scikit-image", _skimage_photos)]
    if len(photos) != EMBEDDED_PHOTOS:
        raise DatasetError(f"embedded: found {len(photos)} bundled photos, expected {EMBEDDED_PHOTOS}")
    return photos


def _sklearn_photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return list(load_sample_images().images)


def _skimage_photos() -> list[np.ndarray]:
    import skimage.data

    return [getattr(skimage.data, name)() for name in _SKIMAGE_PHOTOS]


def _bundled(package: str, load: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
    """The photos `load` reads from `package`, or a one-line DatasetError saying how to get them."""
    try:
        return load()
    except (ImportError, OSError, ValueError, AttributeError) as exc:
        raise DatasetError(f"embedded: the photos bundled with {package} cannot be read "
                           f"({type(exc).__name__}: {exc}); install it: pip install {package}") from None


def _halve(photo: np.ndarray) -> np.ndarray:
    """Downscale a photo by 2 (box filter), so each patch shows a thumbnail-sized scene."""
    return np.asarray(Image.fromarray(photo).reduce(2))


@lru_cache(maxsize=4)
def _embedded_cached(size: int) -> ImageDataset:
    photos = [_halve(photo) for photo in _embedded_photos()]
    patches: list[np.ndarray] = []
    labels: list[int] = []
    seen: set[bytes] = set()
    for label, photo in enumerate(photos):
        rows, cols = photo.shape[0] // size, photo.shape[1] // size
        for r in range(rows):
            for c in range(cols):
                patch = np.ascontiguousarray(photo[r * size : (r + 1) * size, c * size : (c + 1) * size])
                key = patch.tobytes()
                if (patch / 255.0).std() < EMBEDDED_MIN_STD or key in seen:
                    continue
                seen.add(key)
                patches.append(patch)
                labels.append(label)
    if not patches:
        raise DatasetError(f"embedded: image size {size} leaves no usable patch in the bundled photos")
    return _to_dataset("embedded", np.stack(patches), np.array(labels), len(photos))


def load_embedded(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """Non-overlapping RGB patches of real photos bundled with scikit-learn and scikit-image.

    The photos are first downscaled by 2, so a patch covers a 2S×2S region (a thumbnail-like
    scene rather than a flat close-up; flat close-ups make activation patterns nearly nested).
    Patches are image_size×image_size (default 32), cut on a regular grid in row-major order;
    near-constant patches (pixel std < 0.02) and exact duplicates are dropped. The label is the
    index of the source photo (6 classes). `data_root` is ignored. Cached in memory per image size.
    Both packages are dependencies: without either, loading fails with one line saying what to install.
    """
    return _embedded_cached(_check_size("embedded", image_size, 32))


# --------------------------------------------------------------------------- digits


def load_digits(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """scikit-learn's 1,797 handwritten digits: 1×8×8, values/16, 10 classes.

    `data_root` is ignored; `image_size` must be None or 8.
    """
    if image_size is not None and image_size != 8:
        raise DatasetError(f"digits: images are 8×8 and cannot be resized; got image size {image_size}")
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).div_(16.0).unsqueeze(1)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    return ImageDataset(name="digits", images=images.contiguous(), labels=labels, num_classes=10)


# --------------------------------------------------------------------------- mnist

_IDX_IMAGES = "t10k-images-idx3-ubyte"
_IDX_LABELS = "t10k-labels-idx1-ubyte"


def read_idx(path: Path, *, expect_magic: int) -> np.ndarray:
    """Parse an IDX file of unsigned bytes (gzip-compressed or plain) into a uint8 array.

    Checks the magic number (2051 for images, 2049 for labels) and that the payload size
    matches the header; raises DatasetError on anything else.
    """
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(f"mnist: cannot read {path}: {exc}") from None
    if len(raw) < 4:
        raise DatasetError(f"mnist: {path} is too short to be an IDX file")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expect_magic:
        raise DatasetError(f"mnist: {path} has magic number {magic}, expected {expect_magic}; corrupt IDX file")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"mnist: {path} has a truncated IDX header")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    if len(raw) - header != int(np.prod(dims)):
        raise DatasetError(
            f"mnist: {path} holds {len(raw) - header} bytes of data, header {dims} needs {int(np.prod(dims))}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_idx(folder: Path, stem: str) -> Path | None:
    """`folder/stem.gz` or `folder/stem`, whichever exists first."""
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    return None


def _mnist_raw_dir(root: Path) -> Path | None:
    """The folder holding the test-split IDX files, given root, root/MNIST or root/MNIST/raw."""
    for folder in (root / "MNIST" / "raw", root / "raw", root):
        if _find_idx(folder, _IDX_IMAGES) is not None:
            return folder
    return None


def _download_mnist(root: Path) -> Path:
    """Download MNIST with torchvision into `root`; return its raw folder or raise DatasetError."""
    try:
        from torchvision.datasets import MNIST

        MNIST(root=str(root), train=False, download=True)
    except Exception as exc:  # noqa: BLE001 - any download failure becomes one user-facing line
        reason = " ".join(str(exc).split())[:200]
        raise DatasetError(
            f"mnist: no data found; pass --data-root DIR containing MNIST/raw/{_IDX_IMAGES}.gz "
            f"and {_IDX_LABELS}.gz (download failed: {reason})"
        ) from None
    raw = _mnist_raw_dir(root)
    if raw is None:
        raise DatasetError(f"mnist: download finished but {root / 'MNIST' / 'raw'} has no {_IDX_IMAGES}")
    return raw


def load_mnist(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """MNIST test split (10,000 images) from the raw IDX files: 1×28×28, 10 classes.

    `data_root` may be the folder containing `MNIST/raw/`, `MNIST/` itself or `MNIST/raw/`.
    Without it, the files are looked for (then downloaded with torchvision) under
    ~/.cache/leakbench/data. Any other `image_size` is reached by antialiased bilinear resize.
    """
    size = _check_size("mnist", image_size, 28)
    if data_root is not None:
        root = _existing_dir("mnist", data_root)
        raw = _mnist_raw_dir(root)
        if raw is None:
            raise DatasetError(f"mnist: no {_IDX_IMAGES}(.gz) in {root}, {root / 'MNIST'} or {root / 'MNIST' / 'raw'}")
    else:
        raw = _mnist_raw_dir(DEFAULT_CACHE_ROOT) or _download_mnist(DEFAULT_CACHE_ROOT)
    labels_path = _find_idx(raw, _IDX_LABELS)
    if labels_path is None:
        raise DatasetError(f"mnist: {raw} has {_IDX_IMAGES} but no {_IDX_LABELS}(.gz)")
    images_path = _find_idx(raw, _IDX_IMAGES)
    assert images_path is not None
    images = read_idx(images_path, expect_magic=2051)
    labels = read_idx(labels_path, expect_magic=2049)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DatasetError(f"mnist: {images_path} {images.shape} and {labels_path} {labels.shape} do not match")
    if labels.size and labels.max() > 9:
        raise DatasetError(f"mnist: {labels_path} holds labels above 9; corrupt IDX file")
    tensor = torch.from_numpy(images.copy()).unsqueeze(1).to(torch.float32).div_(255.0)
    return ImageDataset(
        name="mnist",
        images=_resize_tensor(tensor, size).contiguous(),
        labels=torch.from_numpy(labels.astype(np.int64)),
        num_classes=10,
    )


# --------------------------------------------------------------------------- tinyimagenet


def _tinyimagenet_dir(root: Path) -> Path:
    """The `tiny-imagenet-200` folder: `root/tiny-imagenet-200` or `root` itself."""
    for candidate in (root / "tiny-imagenet-200", root):
        if (candidate / "wnids.txt").is_file():
            return candidate
    raise DatasetError(f"tinyimagenet: no wnids.txt in {root / 'tiny-imagenet-200'} or {root}")


def _read_lines(path: Path, dataset: str) -> list[str]:
    """Non-empty stripped lines of a text file, or a DatasetError naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{dataset}: cannot read {path}: {exc}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _confined(base: Path, name: str, where: str, resolved_base: Path | None = None) -> Path:
    """`base / name` for a file name read from an annotation file, refused unless it stays inside `base`.

    A relative name without '..' parts, whose resolved path (symbolic links followed) lies inside the
    resolved `base`: an annotation file cannot make the loader read files outside the data root.
    """
    rel = Path(name)
    if not name or rel.is_absolute() or ".." in rel.parts:
        raise DatasetError(f"tinyimagenet: {where} names {name!r}, not a file inside {base}")
    path = base / rel
    try:
        inside = path.resolve().is_relative_to(resolved_base or base.resolve())
    except (OSError, RuntimeError) as exc:  # a symbolic-link loop
        raise DatasetError(f"tinyimagenet: {where} names {name!r}: {exc}") from None
    if not inside:
        raise DatasetError(f"tinyimagenet: {where} names {name!r}, which leads outside {base}")
    return path


@lru_cache(maxsize=2)
def _tinyimagenet_cached(folder: Path, size: int) -> ImageDataset:
    wnids = _read_lines(folder / "wnids.txt", "tinyimagenet")
    class_of = {wnid: i for i, wnid in enumerate(wnids)}
    annotations = _read_lines(folder / "val" / "val_annotations.txt", "tinyimagenet")
    if not annotations:
        raise DatasetError(f"tinyimagenet: {folder / 'val' / 'val_annotations.txt'} lists no images")
    images = np.empty((len(annotations), size, size, 3), dtype=np.uint8)
    labels = np.empty(len(annotations), dtype=np.int64)
    image_dir = folder / "val" / "images"
    resolved_dir = image_dir.resolve()
    for i, line in enumerate(annotations):
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in class_of:
            raise DatasetError(f"tinyimagenet: bad line {i + 1} in {folder / 'val' / 'val_annotations.txt'}")
        path = _confined(image_dir, fields[0], f"line {i + 1} of {folder / 'val' / 'val_annotations.txt'}",
                          resolved_dir)
        if not path.is_file():
            raise DatasetError(f"tinyimagenet: missing image {path}")
        img = _open_rgb(path)
        if img.size != (size, size):
            img = img.resize((size, size), Image.Resampling.BILINEAR)
        images[i] = np.asarray(img)
        labels[i] = class_of[fields[1]]
    return _to_dataset("tinyimagenet", images, labels, len(wnids))


def load_tinyimagenet(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """TinyImageNet validation split (10,000 images, 200 classes), 3×64×64 RGB.

    `data_root` is the folder containing `tiny-imagenet-200/` or that folder itself. The label
    is the class's index in wnids.txt. Other image sizes use PIL's antialiased bilinear resize.
    Decoded once and cached in memory per (folder, image size).
    """
    size = _check_size("tinyimagenet", image_size, 64)
    if data_root is None:
        raise DatasetError("tinyimagenet: pass --data-root DIR containing tiny-imagenet-200/ (no download)")
    folder = _tinyimagenet_dir(_existing_dir("tinyimagenet", data_root)).resolve()
    for needed in (folder / "val" / "val_annotations.txt", folder / "val" / "images"):
        if not needed.exists():
            raise DatasetError(f"tinyimagenet: missing {needed}")
    return _tinyimagenet_cached(folder, size)


# --------------------------------------------------------------------------- imagefolder


def _fit_square(img: Image.Image, size: int) -> Image.Image:
    """Resize so the shorter side is `size`, then centre-crop to size×size."""
    w, h = img.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    return img.crop((left, top, left + size, top + size))


def _class_files(dataset: str, root: Path) -> list[tuple[int, list[Path]]]:
    """(label, sorted image files) per class subfolder of `root`, classes sorted by folder name; hidden
    entries and files that are not .png/.jpg/.jpeg skipped. A DatasetError when there is no class or a class
    holds no image."""
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"{dataset}: {root} has no class subfolders")
    listing = []
    for label, class_dir in enumerate(classes):
        files = sorted(
            p for p in class_dir.iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in _IMAGE_SUFFIXES
        )
        if not files:
            raise DatasetError(f"{dataset}: class folder {class_dir} has no .png/.jpg/.jpeg images")
        listing.append((label, files))
    return listing


class _FolderDigest:
    """The fingerprint of an image folder's served files, fed one file at a time in the loader's order:
    sha256 over each file's path under the root ('class/name.png', which gives its label), size and sha256
    of its bytes, then whether the root holds a PUBLIC marker (which changes the images' trust); the first
    16 hex digits. Neither where the root lies nor any file's time is in it: the same files anywhere give
    the same fingerprint."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.digest = hashlib.sha256(b"imagefolder-v1\n")

    def add(self, path: Path) -> bytes:
        """Read `path` (a file under the root), hash it and return its bytes (a DatasetError if unreadable)."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DatasetError(f"cannot read image {path}: {exc.strerror or exc}") from None
        rel = path.relative_to(self.root).as_posix()
        self.digest.update(f"{rel}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\n".encode())
        return data

    def hexdigest(self, public: bool) -> str:
        self.digest.update(b"public\n" if public else b"private\n")
        return self.digest.hexdigest()[:16]


def imagefolder_fingerprint(data_root: Path) -> str:
    """The identity of the images `load_imagefolder` serves from `data_root` (`_FolderDigest`), without
    decoding them: every listed file read and hashed once (the CIFAR-10 training folder's 50,000 JPEGs,
    197 MB: about 2 s besides the 3 s of listing them, warm page cache, 2 cores)."""
    root = _existing_dir("imagefolder", data_root)
    digest = _FolderDigest(root)
    for _, files in _class_files("imagefolder", root):
        for path in files:
            digest.add(path)
    return digest.hexdigest((root / PUBLIC_MARKER).is_file())


def load_imagefolder(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """A folder of class subfolders of .png/.jpg/.jpeg images (classes sorted by folder name).

    Images are converted to RGB, resized (shorter side to S) and centre-cropped to S×S,
    S = image_size or 32. Other files are ignored; hidden entries are skipped.

    Private images: the evaluator's own, which vouches that no attack's submitter can have them (the only
    images on which a third-party attack is verified, `records.trust`). A folder holding a file named
    PUBLIC (a copy of a published dataset, say) is recorded as public.

    Its `fingerprint` hashes the files it served (`imagefolder_fingerprint`): the folder's identity in
    its cells' ids, so two folders of the same layout never share ids, and a moved folder keeps them.
    """
    size = _check_size("imagefolder", image_size, 32)
    if data_root is None:
        raise DatasetError("imagefolder: pass --data-root DIR containing one subfolder of images per class")
    root = _existing_dir("imagefolder", data_root)
    listing = _class_files("imagefolder", root)
    digest = _FolderDigest(root)
    images = [np.asarray(_fit_square(_open_rgb(path, digest.add(path)), size)) for _, files in listing
              for path in files]
    labels = [label for label, files in listing for _ in files]
    dataset = _to_dataset("imagefolder", np.stack(images), np.array(labels), len(listing))
    public = (root / PUBLIC_MARKER).is_file()
    return dataclasses.replace(dataset, public=public, fingerprint=digest.hexdigest(public))


# --------------------------------------------------------------------------- cifar10

_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
"""CIFAR-10's classes in label order (alphabetical: the class folders sorted by name give the same labels)."""
CIFAR10_SIDE = 32
DECODED_DIR = "decoded"
"""Folder under DEFAULT_CACHE_ROOT for decoded image folders (`<name>-<hash>.npz`: uint8 images and labels)."""


def _cifar10_folder(root: Path) -> Path | None:
    """The folder of class subfolders: `root/train` or `root` itself (the `train` folder), when it holds
    CIFAR-10's ten class folders."""
    for candidate in (root / "train", root):
        if all((candidate / name).is_dir() for name in CIFAR10_CLASSES):
            return candidate
    return None


def _listing_hash(listing: list[tuple[int, list[Path]]], folder: Path) -> str:
    """sha256 (first 24 hex digits) over every file's class, path under `folder`, size and modification
    time: a changed, added or removed image gives another decoded cache file."""
    digest = hashlib.sha256()
    for label, files in listing:
        for path in files:
            st = path.stat()
            digest.update(f"{label}\t{path.relative_to(folder)}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _decode_cifar10(listing: list[tuple[int, list[Path]]]) -> tuple[np.ndarray, np.ndarray]:
    """Every listed image decoded as RGB uint8 (N, 32, 32, 3) (another size is fitted: shorter side to 32,
    centre crop), with its class label."""
    total = sum(len(files) for _, files in listing)
    images = np.empty((total, CIFAR10_SIDE, CIFAR10_SIDE, 3), dtype=np.uint8)
    labels = np.empty(total, dtype=np.int64)
    i = 0
    for label, files in listing:
        for path in files:
            images[i] = np.asarray(_fit_square(_open_rgb(path), CIFAR10_SIDE))
            labels[i] = label
            i += 1
    return images, labels


def _read_decoded(path: Path, total: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The decoded cache file's (images, labels), or None when it is absent, unreadable or of another shape."""
    try:
        with np.load(path, allow_pickle=False) as data:
            images, labels = data["images"], data["labels"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if images.shape != (total, CIFAR10_SIDE, CIFAR10_SIDE, 3) or images.dtype != np.uint8 or labels.shape != (total,):
        return None
    return images, labels.astype(np.int64)


def _write_decoded(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Store the decoded images atomically (temporary file, rename); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".npz", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, images=images, labels=labels)
        os.replace(tmp, path)
    except OSError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@lru_cache(maxsize=2)
def _cifar10_folder_cached(folder: Path, size: int) -> ImageDataset:
    """The class folders of `folder` decoded once: from the decoded cache file when it matches the listing,
    else from the JPEGs (then stored). Cached in memory per (folder, image size)."""
    listing = _class_files("cifar10", folder)
    if len(listing) != len(CIFAR10_CLASSES):
        raise DatasetError(f"cifar10: {folder} holds {len(listing)} class folders, expected {len(CIFAR10_CLASSES)}")
    total = sum(len(files) for _, files in listing)
    cache = DEFAULT_CACHE_ROOT / DECODED_DIR / f"cifar10-{_listing_hash(listing, folder)}.npz"
    decoded = _read_decoded(cache, total)
    if decoded is None:
        decoded = _decode_cifar10(listing)
        _write_decoded(cache, *decoded)
    dataset = _to_dataset("cifar10", decoded[0], decoded[1], len(CIFAR10_CLASSES))
    if size == CIFAR10_SIDE:
        return dataset
    return ImageDataset("cifar10", _resize_tensor(dataset.images, size).contiguous(), dataset.labels, 10)


def _cifar10_pickle(root: Path | None, size: int) -> ImageDataset:
    """The test split from `cifar-10-batches-py/` under `root` (never downloads), or, without `root`,
    under ~/.cache/leakbench/data (downloaded there if needed), via torchvision."""
    download = False
    if root is None:
        root = DEFAULT_CACHE_ROOT
        download = not (root / "cifar-10-batches-py").is_dir()
    try:
        from torchvision.datasets import CIFAR10

        data = CIFAR10(root=str(root), train=False, download=download)
    except Exception as exc:  # noqa: BLE001 - corrupt files or a failed download: one user-facing line
        reason = " ".join(str(exc).split())[:200]
        raise DatasetError(
            f"cifar10: cannot load {root / 'cifar-10-batches-py'}/ (get it from {_CIFAR_URL}): {reason}"
        ) from None
    dataset = _to_dataset("cifar10", np.asarray(data.data), np.asarray(data.targets), 10)
    if size == CIFAR10_SIDE:
        return dataset
    return ImageDataset("cifar10", _resize_tensor(dataset.images, size).contiguous(), dataset.labels, 10)


def load_cifar10(*, data_root: Path | None = None, image_size: int | None = None) -> ImageDataset:
    """CIFAR-10, 3×32×32, 10 classes: the training split as JPEGs, or the test split via torchvision.

    With `data_root`:

    - `<data_root>/train/<class>/*.jpg` (or `data_root` being that `train` folder): the 50,000 training
      images, in class order (CIFAR10_CLASSES, i.e. folder names sorted) then file name. Decoded once into a
      uint8 cache file under ~/.cache/leakbench/data/decoded/ (keyed on every file's name, size and
      modification time), so later loads (and every worker) read one file instead of 50,000 JPEGs.
      For trained victims `datasets.partition` cuts it into 5,000 attack images, 5,000 test images (the
      victim's test accuracy) and 40,000 training images: a permutation from PARTITION_SEED and the size
      50,000, so the same 5,000 test images every time (`partition(dataset).test` lists their indices).
    - `<data_root>/cifar-10-batches-py/` (or that folder itself): the 10,000-image test split, never downloaded.

    Without it, the test split under ~/.cache/leakbench/data (downloaded there if needed). Other image
    sizes are reached by antialiased bilinear resize.
    """
    size = _check_size("cifar10", image_size, CIFAR10_SIDE)
    if data_root is None:
        return _cifar10_pickle(None, size)
    root = _existing_dir("cifar10", data_root)
    if root.name == "cifar-10-batches-py":
        root = root.parent
    if (root / "cifar-10-batches-py").is_dir():
        return _cifar10_pickle(root, size)
    folder = _cifar10_folder(root)
    if folder is None:
        raise DatasetError(f"cifar10: no data in {root}; expected {root / 'train'}/<class>/*.jpg (the training split, "
                           f"one folder per class: {', '.join(CIFAR10_CLASSES)}) or {root / 'cifar-10-batches-py'}/ "
                           f"(from {_CIFAR_URL})")
    return _cifar10_folder_cached(folder.resolve(), size)


# --------------------------------------------------------------------------- where the data lies


def data_locations(data_root: Path | None = None) -> list[Path]:
    """Every place the shipped datasets read images from: `data_root`, the download cache, and the
    folders of the photos and digits bundled with scikit-learn and scikit-image (found without
    importing them). The attack worker may open nothing under these (`leakbench.harness.isolation`)."""
    places = [DEFAULT_CACHE_ROOT, Path.home() / ".cache" / "scikit-image"]
    if data_root is not None:
        places.append(Path(data_root))
    for package, folders in (("sklearn", ("datasets/images", "datasets/data")), ("skimage", ("data",))):
        spec = importlib.util.find_spec(package)
        for base in (spec.submodule_search_locations or []) if spec is not None else []:
            places += [Path(base, folder) for folder in folders]
    return [Path(os.path.realpath(p)) for p in places]


# --------------------------------------------------------------------------- registration

DATASETS.register("embedded", load_embedded,
                  "RGB patches (32×32) of real photos bundled with scikit-learn/scikit-image; no files needed")
DATASETS.register("digits", load_digits, "scikit-learn handwritten digits, 1×8×8, 10 classes, 1,797 images")
DATASETS.register("mnist", load_mnist, "MNIST test split from raw IDX files, 1×28×28, 10 classes, 10,000 images")
DATASETS.register("tinyimagenet", load_tinyimagenet, "TinyImageNet val split, 3×64×64, 200 classes, 10,000 images")
DATASETS.register("imagefolder", load_imagefolder, "your own images: --data-root with one subfolder per class")
FINGERPRINTS["imagefolder"] = imagefolder_fingerprint
DATASETS.register("cifar10", load_cifar10, "CIFAR-10, 3×32×32, 10 classes: train/<class>/*.jpg (50,000 images) "
                  "or the test split via torchvision (10,000)")
