"""Victims from outside: any `torch.nn.Module` factory, plus which of its linear layers are attackable.

A victim plugin hands leakbench a `VictimFactory` (the object its entry point in the group
`leakbench.victims` names, or one it registers with `leakbench.models.register_victim`):

    resnet18 = VictimFactory(
        build=lambda input_shape, num_classes, width, depth: torchvision.models.resnet18(num_classes=num_classes),
        linear_layers=("fc",), relu_after=(), description="torchvision ResNet-18 at random init")

`build(input_shape, num_classes, width, depth)` returns the network; it takes **normalised** images
((x − mean) / std, with the factory's public `mean` and `std`) of shape (N, C, H, W) and returns
logits. PyTorch's default init is drawn from the cell's seed (`build_seeded`); the global RNG is
left as it was. `linear_layers` names the network's `nn.Linear` submodules in forward order, the
classifier last; `relu_after` those of them whose output goes straight into a ReLU (the layers
SPEAR and CPA can attack). `PluginVictim` wraps the network into the victim interface:

- layer numbering as in the conv victim: layer 1 is everything before the first named linear layer
  (no linear-layer attack there), layer L ≥ 2 is `linear_layers[L − 2]`, depth = len + 1;
- `layer_inputs(images, L)` runs the network with a forward pre-hook on that module (removed after
  the call, so the model stays picklable) and returns what it received, flattened;
- gradient-matching attacks (IG, DLG) attack the whole network through `forward`.

The update travels to the sandboxed attack worker pickled, so the network's classes must be
importable there: the worker imports from the harness's `sys.path` (a module of an installed
package, or of torchvision, is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from leakbench.core.errors import ConfigError
from leakbench.models.base import ImageVictim, build_seeded

Build = Callable[[tuple[int, int, int], int, int, int], nn.Module]
"""(input_shape, num_classes, width, depth) → a network taking normalised images and returning logits."""


@dataclass(frozen=True)
class VictimFactory:
    """What a victim plugin declares: how to build the network and which of its linear layers are attackable."""

    build: Build
    linear_layers: tuple[str, ...]
    relu_after: tuple[str, ...] = ()
    description: str = ""
    mean: float = 0.5
    std: float = 0.5
    sized: bool = False
    """Whether `build` uses `width` and `depth` (they then name the victim in tables)."""

    def __post_init__(self) -> None:
        if not self.linear_layers or not all(isinstance(n, str) and n for n in self.linear_layers):
            raise ConfigError("a victim factory must name its nn.Linear layers in forward order, the classifier last")
        unknown = set(self.relu_after) - set(self.linear_layers)
        if unknown:
            raise ConfigError(f"victim factory: relu_after names layers not in linear_layers: {sorted(unknown)}")

    @property
    def depth(self) -> int:
        """Layer 1 (the part before the first linear layer) and one layer per named linear layer."""
        return len(self.linear_layers) + 1

    def attackable(self) -> list[int]:
        """The layers a linear-layer attack can target: those followed by a ReLU."""
        return [i + 2 for i, name in enumerate(self.linear_layers) if name in self.relu_after]

    def __call__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int, depth: int,
                 seed: int = 0, dtype: torch.dtype = torch.float32) -> PluginVictim:
        """The victim, its init drawn from `seed`."""
        return build_seeded(PluginVictim, self, input_shape, num_classes, width, depth, seed=seed, dtype=dtype)


class PluginVictim(ImageVictim):
    """An outside network behind the victim interface (see the module docstring)."""

    def __init__(self, factory: VictimFactory, input_shape: tuple[int, int, int], num_classes: int, width: int,
                 depth: int) -> None:
        super().__init__()
        self.input_shape = (input_shape[0], input_shape[1], input_shape[2])
        self.num_classes = num_classes
        self.mean, self.std = factory.mean, factory.std
        self.linear_names = factory.linear_layers
        self.relu_after = factory.relu_after
        self.depth = factory.depth
        self.net = factory.build(self.input_shape, num_classes, width, depth)
        for name in self.linear_names:
            module = self.net.get_submodule(name) if _has(self.net, name) else None
            if not isinstance(module, nn.Linear):
                raise ConfigError(f"victim plugin: {name!r} is not an nn.Linear submodule of its network")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net((images - self.mean) / self.std)
        return out

    def _module(self, layer: int) -> str:
        if not 2 <= layer <= self.depth:
            raise ConfigError(f"victim plugin: layer {layer} is not a linear layer (layer 1 is what precedes "
                              f"the first named linear layer; linear layers are 2..{self.depth})")
        return self.linear_names[layer - 2]

    def layer_param_names(self, layer: int) -> tuple[str, str]:
        """Names (weight, bias) of linear layer `layer` (2..depth)."""
        name = self._module(layer)
        return f"net.{name}.weight", f"net.{name}.bias"

    def layer_inputs(self, images: torch.Tensor, layer: int) -> torch.Tensor:
        """What linear layer `layer` receives for `images`, flattened (layer 1: the flat normalised image)."""
        if layer == 1:
            return self.normalize(images)
        seen: list[torch.Tensor] = []

        def grab(module: nn.Module, args: tuple[Any, ...]) -> None:
            seen.append(args[0].flatten(1))

        handle = self.net.get_submodule(self._module(layer)).register_forward_pre_hook(grab)
        try:
            self(images)
        finally:
            handle.remove()
        return seen[0]

    def check_attackable(self, layer: int) -> None:
        """Raise unless `layer` is a named linear layer followed by a ReLU."""
        valid = [i + 2 for i, n in enumerate(self.linear_names) if n in self.relu_after]
        if layer not in valid:
            raise ConfigError(f"layer {layer} is not a linear layer followed by ReLU in this victim plugin "
                              f"(attackable: {', '.join(map(str, valid)) or 'none'})")


def _has(net: nn.Module, name: str) -> bool:
    try:
        net.get_submodule(name)
    except AttributeError:
        return False
    return True
