"""LPIPS (AlexNet variant) with real pretrained trunk weights only.

LPIPS compares deep features of two images. Its value is meaningful only with
the ImageNet-pretrained AlexNet trunk, which the ``lpips`` package normally
downloads through torchvision. This module never downloads: it builds the
model with a random trunk (``pnet_rand=True``), then loads torchvision's
AlexNet state dict (``alexnet-owt-7be5be79.pth``) from a local file into it and
checks that every trunk parameter was replaced. The small linear heads of
LPIPS v0.1 ship inside the ``lpips`` package and are loaded from there.

When no weights file is found, :func:`load_lpips` returns no scorer and a note
saying why; it never falls back to a random trunk.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from leakbench.errors import LeakbenchError

ALEXNET_WEIGHTS_FILE = "alexnet-owt-7be5be79.pth"
"""File name of torchvision's ImageNet AlexNet weights."""

WEIGHTS_ENV_VAR = "LEAKBENCH_ALEXNET_WEIGHTS"
"""Environment variable naming an AlexNet weights file."""

MIN_SIDE = 32
"""Images with a side below this are upsampled (AlexNet's pooling needs ~31 px)."""

# lpips.pretrained_networks.alexnet splits torchvision's alexnet.features into
# slices, keeping each module's index as its name inside the slice:
# slice1 = features[0:2], slice2 = [2:5], slice3 = [5:8], slice4 = [8:10], slice5 = [10:12].
# The convolutions (the only modules with parameters) sit at indices 0, 3, 6, 8, 10.
_FEATURE_SLICES = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}


def hub_weights_path() -> Path:
    """Where torchvision caches the AlexNet weights: ``<torch hub dir>/checkpoints/``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_WEIGHTS_FILE


def weights_search_locations(path: Path | None = None) -> list[tuple[str, Path]]:
    """The places :func:`find_alexnet_weights` looks, as ``(origin, path)`` pairs.

    An explicitly named location (the ``path`` argument, else the environment
    variable) is the only one looked at: when it names a missing file the
    search does not quietly move on to another file.
    """
    if path is not None:
        return [("explicit path", Path(path).expanduser())]
    env = os.environ.get(WEIGHTS_ENV_VAR, "").strip()
    if env:
        return [(f"${WEIGHTS_ENV_VAR}", Path(env).expanduser())]
    return [("torch hub cache", hub_weights_path())]


def find_alexnet_weights(path: Path | None = None) -> Path | None:
    """Locate torchvision's AlexNet weights file.

    Order: an explicit ``path`` wins; else ``$LEAKBENCH_ALEXNET_WEIGHTS``; else
    the torch hub cache (``torch.hub.get_dir()/checkpoints/alexnet-owt-7be5be79.pth``).

    Returns:
        The path if that file exists, else ``None``.
    """
    for _, candidate in weights_search_locations(path):
        if candidate.is_file():
            return candidate
    return None


def _packaged_lin_weights() -> dict[str, Tensor]:
    import lpips

    lin_path = Path(lpips.__file__).parent / "weights" / "v0.1" / "alex.pth"
    if not lin_path.is_file():
        raise LeakbenchError(f"the lpips package lacks its linear-layer weights ({lin_path})")
    return torch.load(lin_path, map_location="cpu", weights_only=True)


def _build_lpips_model() -> torch.nn.Module:
    """LPIPS-Alex with packaged linear heads and a random (not downloaded) trunk."""
    import lpips

    with warnings.catch_warnings():
        # lpips still calls torchvision with the deprecated ``pretrained=`` argument.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torchvision\..*")
        model = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)
    state = model.state_dict()
    for key, value in _packaged_lin_weights().items():
        if key not in state or not torch.equal(state[key], value):
            raise LeakbenchError(f"lpips did not load its packaged linear weights ({key})")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _trunk_key(torchvision_key: str) -> str | None:
    """Map ``features.K.weight`` to ``net.sliceS.K.weight``; None for other keys."""
    parts = torchvision_key.split(".")
    if len(parts) != 3 or parts[0] != "features" or not parts[1].isdigit():
        return None
    index = int(parts[1])
    if index not in _FEATURE_SLICES:
        return None
    return f"net.slice{_FEATURE_SLICES[index]}.{index}.{parts[2]}"


class LpipsScorer:
    """Per-image LPIPS distance (AlexNet, v0.1) between reconstructions and truth.

    Build with :meth:`from_weights` (real pretrained trunk) for any reported
    number; :meth:`random_trunk_for_tests` exists only to test plumbing.
    """

    def __init__(self, model: torch.nn.Module, trunk_source: str) -> None:
        self.model = model
        self.trunk_source = trunk_source
        """Where the trunk weights came from (a path, or a random-trunk marker)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device | str) -> LpipsScorer:
        """Move the network to ``device``; returns self."""
        self.model.to(device)
        return self

    @classmethod
    def from_weights(cls, path: Path) -> LpipsScorer:
        """Build a scorer whose trunk is loaded from torchvision's AlexNet state dict.

        Args:
            path: a file saved like torchvision's ``alexnet-owt-7be5be79.pth``
                (keys ``features.K.weight`` / ``features.K.bias``; ``classifier.*``
                keys are ignored).

        Raises:
            LeakbenchError: the file is unreadable, or it does not provide every
                trunk parameter with the right shape.
        """
        path = Path(path)
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # unreadable, not a torch file, pickled objects...
            raise LeakbenchError(f"cannot read AlexNet weights {path}: {exc}") from exc
        if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
            loaded = loaded["state_dict"]
        if not isinstance(loaded, dict):
            raise LeakbenchError(f"AlexNet weights {path} do not hold a state dict")

        model = _build_lpips_model()
        trunk = {k: v for k, v in model.state_dict().items() if k.startswith("net.")}
        new: dict[str, Tensor] = {}
        for key, value in loaded.items():
            target = _trunk_key(str(key))
            if target is None:
                continue
            if target not in trunk:
                raise LeakbenchError(f"AlexNet weights {path}: unexpected key {key}")
            if tuple(value.shape) != tuple(trunk[target].shape):
                raise LeakbenchError(
                    f"AlexNet weights {path}: {key} has shape {tuple(value.shape)}, "
                    f"expected {tuple(trunk[target].shape)}"
                )
            new[target] = value
        missing = sorted(set(trunk) - set(new))
        if missing:
            raise LeakbenchError(
                f"AlexNet weights {path} lack trunk parameters "
                f"{', '.join(missing)} (expected torchvision's alexnet state dict)"
            )
        result = model.load_state_dict(new, strict=False)
        if any(k.startswith("net.") for k in result.missing_keys) or result.unexpected_keys:
            raise LeakbenchError(f"AlexNet weights {path} did not load into the LPIPS trunk")
        after = model.state_dict()
        if not all(torch.equal(after[k], new[k].to(after[k].dtype)) for k in trunk):
            raise LeakbenchError(f"AlexNet weights {path} did not load into the LPIPS trunk")
        return cls(model, trunk_source=str(path))

    @classmethod
    def random_trunk_for_tests(cls, seed: int = 0) -> LpipsScorer:
        """A scorer with a randomly initialised trunk. For plumbing tests only:
        its numbers are not LPIPS and must never be reported."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _build_lpips_model()
        return cls(model, trunk_source=f"random trunk (tests only, seed {seed})")

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


def load_lpips(path: Path | None = None) -> tuple[LpipsScorer | None, str]:
    """Build the real LPIPS scorer if AlexNet weights can be found.

    Returns:
        ``(scorer, note)``. With weights, the note names the file used. Without,
        the scorer is ``None``, the note says where it looked and how to fix it,
        and a warning is emitted. Never falls back to a random trunk.

    Raises:
        LeakbenchError: a weights file was found but is not usable.
    """
    found = find_alexnet_weights(path)
    if found is None:
        looked = "; ".join(f"{origin}: {p}" for origin, p in weights_search_locations(path))
        note = (
            f"LPIPS not computed: AlexNet weights not found (looked in {looked}); "
            f"pass --lpips-weights PATH or set ${WEIGHTS_ENV_VAR} to a copy of "
            f"torchvision's {ALEXNET_WEIGHTS_FILE}"
        )
        warnings.warn(note, stacklevel=2)
        return None, note
    return LpipsScorer.from_weights(found), f"LPIPS (AlexNet, v0.1) with trunk weights from {found}"


__all__ = [
    "ALEXNET_WEIGHTS_FILE",
    "WEIGHTS_ENV_VAR",
    "LpipsScorer",
    "find_alexnet_weights",
    "hub_weights_path",
    "load_lpips",
    "weights_search_locations",
]
