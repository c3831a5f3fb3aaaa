"""Victim networks. Normalisation happens inside the model, once; inputs are images in [0, 1].

`VICTIMS` is the registry of victim architectures (a suite's `arch`, `--arch`): the shipped `fc`,
`lt-mlp` (the LT-code peeling paper's two-layer MLP on raw pixels, `leakbench.models.lt_mlp`), `conv` and
`resnet`, and victim plugins (entry-point group `leakbench.victims`, or a suite's `victim_plugins`;
`leakbench.models.outside`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from leakbench.core.errors import ConfigError
from leakbench.core.registry import Registry
from leakbench.models.base import ImageVictim
from leakbench.models.conv import ConvNet, build_conv
from leakbench.models.fc import FCNet, build_fc
from leakbench.models.lt_mlp import LTMLP, build_lt_mlp
from leakbench.models.outside import PluginVictim, VictimFactory
from leakbench.models.resnet import ResNet, build_resnet
from leakbench.plugins import load_victim_plugins, serve

Builder = Callable[..., ImageVictim]
"""(input_shape, num_classes, *, width, depth, seed, dtype) → the victim, its init drawn from `seed`."""


@dataclass(frozen=True)
class Architecture:
    """A registered victim architecture: how to build it, its default depth, which layers a linear-layer
    attack can target at a depth, and how tables name it."""

    build: Builder
    default_depth: int
    attackable: Callable[[int], list[int]]
    short: str
    sized: bool = True
    """Whether width and depth shape it (then they name it: 'FC-6 w200'); else its name alone does."""

    def label(self, depth: int, width: int) -> str:
        return f"{self.short}-{depth} w{width}" if self.sized else self.short


VICTIMS: Registry[Architecture] = Registry("victim architecture", on_first_use=load_victim_plugins)
"""Every victim architecture by name: fc (layers 1..depth linear), conv and resnet (layer 1 = the trunk)."""


def register_victim(name: str, factory: VictimFactory) -> None:
    """Register an outside victim (`leakbench.models.outside`) under `name`."""
    if not isinstance(factory, VictimFactory):
        raise ConfigError(f"victim {name!r}: expected a VictimFactory, got {type(factory).__name__}")
    VICTIMS.register(name, lambda: Architecture(factory, factory.depth, lambda _depth: factory.attackable(),
                                                name, sized=factory.sized),
                     factory.description or name)


VICTIMS.register("fc", lambda: Architecture(build_fc, 6, lambda d: list(range(1, d)), "FC"),
                 "FCNet: Normalise → (Linear → ReLU) × (depth−1) → Linear; layers 1..depth linear")
VICTIMS.register("lt-mlp", lambda: Architecture(build_lt_mlp, 2, lambda d: list(range(1, d)), "LT-MLP"),
                 "the LT-code peeling paper's MLP (Shariati & Alambardar Meybodi 2026): raw [0, 1] pixels → "
                 "Linear(width), N(0, 0.5²) weights, zero bias → ReLU → Xavier-uniform classifier; depth 2 only")
VICTIMS.register("conv", lambda: Architecture(build_conv, 3, lambda d: list(range(2, d)), "conv"),
                 "ConvNet: VGG-style conv trunk (layer 1) → FC+ReLU head (layers 2..depth)")
VICTIMS.register("resnet", lambda: Architecture(build_resnet, 3, lambda d: list(range(2, d)), "resnet"),
                 "ResNet-8 with BatchNorm (layer 1: trunk, global average pool) → FC+ReLU head (layers 2..depth)")


def architecture(arch: str) -> Architecture:
    """The registered architecture `arch` (a ConfigError naming the known ones if none). A shipped one is
    found without loading the installed victim plugins (a run of FC cells records no victim plugin)."""
    if arch in VICTIMS.registered():
        return VICTIMS.entry_as_registered(arch).factory()
    return VICTIMS.create(arch)


def known_arch(arch: object) -> bool:
    """Whether `arch` names a victim: a shipped one, else after loading the victim plugins."""
    return isinstance(arch, str) and (arch in VICTIMS.registered() or arch in VICTIMS.names())


def arch_names() -> list[str]:
    """The registered victim architectures (plugins' included)."""
    return VICTIMS.names()


def build_model(arch: str, input_shape: tuple[int, int, int], num_classes: int, *, width: int, depth: int,
                seed: int = 0, dtype: torch.dtype = torch.float32) -> ImageVictim:
    """The victim `arch` (a registered architecture) with init drawn from `seed`."""
    return architecture(arch).build(input_shape, num_classes, width=width, depth=depth, seed=seed, dtype=dtype)


def victim_label(arch: str, depth: int, width: int, train_epochs: int = 0) -> str:
    """The one name of a victim in tables, grids, captions and progress lines: 'FC-6 w200', 'conv-3 w200',
    'FC-6 w200 trained 5 ep' (architecture and depth, hidden width, training epochs when trained)."""
    name = architecture(arch).label(depth, width)
    return f"{name} trained {train_epochs} ep" if train_epochs else name


def first_attackable_layer(arch: str, depth: int | None = None) -> int:
    """The first layer a linear-layer attack can target: 1 for fc, 2 for conv and resnet (layer 1 is
    the trunk); for a plugin, its first linear layer followed by a ReLU (1 when it has none)."""
    spec = architecture(arch)
    layers = spec.attackable(spec.default_depth if depth is None else depth)
    return layers[0] if layers else 1


def default_depth(arch: str) -> int:
    """The depth of a victim whose suite gives none: 6 for fc, 3 for conv and resnet."""
    return architecture(arch).default_depth


def _admit(name: str, obj: object) -> bool:
    """A victim entry point's object (`leakbench.plugins`): a VictimFactory is registered under the entry
    point's name (unless a victim is registered as that already); anything else is not a victim."""
    if not isinstance(obj, VictimFactory):
        return False
    if name not in VICTIMS.registered():
        register_victim(name, obj)
    return True


serve("victims", VICTIMS, _admit, "a VictimFactory")  # the shipped architectures are in

__all__ = ["LTMLP", "VICTIMS", "Architecture", "ConvNet", "FCNet", "ImageVictim", "PluginVictim", "ResNet",
           "VictimFactory", "arch_names", "architecture", "build_conv", "build_fc", "build_lt_mlp", "build_model",
           "build_resnet", "default_depth",
           "first_attackable_layer", "known_arch", "register_victim", "victim_label"]
