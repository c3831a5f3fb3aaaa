"""Baselines as published: registered attacks whose defaults are a released code's settings.

(And leakbench's own variants of them, under their own names, marked `published=False`.)

A preset is its base attack with other Config defaults, registered under its own name: a suite
lists `cpa-released` like any attack, `leakbench show attack cpa-released` prints the values, every
record stores the full hyperparameters (the step budget among them), and `--param` or a suite's
`[hyperparameters.NAME]` table still overrides any of them. The base attacks' own defaults stay
CPU-sized; the presets' budgets are the published ones (minutes to hours on a CPU).

`PRESETS` is the one table of published values; `tests/test_presets.py` checks each value against
its source independently, so a value that drifts fails there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from leakbench.attacks.base import Attack
from leakbench.attacks.cpa import CPAAttack
from leakbench.attacks.gradient_matching import InvertingGradientsAttack
from leakbench.attacks.registry import register_attack
from leakbench.core.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """One baseline as published: a registered name, its base attack, the values and their source."""

    name: str
    base: type[Attack]
    values: dict[str, Any]
    source: str
    description: str
    published: bool = True


PRESETS: tuple[Preset, ...] = (
    Preset("cpa-released", CPAAttack,
           {"method": "official", "iterations": 25_000, "lr": 1e-3, "decor": 1.47, "temperature": 12.4, "tv": 3.1},
           source="the released Cocktail Party Attack code (Kariyappa et al., ICML 2023): its objective "
                  "(decorrelation + TV, Adam) with the repository's Tiny-ImageNet FC-2 values, 25,000 steps",
           description="Cocktail Party Attack as released: decorrelation + TV objective, 25,000 Adam steps "
                       "at lr 1e-3 (Tiny-ImageNet FC-2 values)"),
    Preset("ig-breaching", InvertingGradientsAttack,
           {"iterations": 24_000, "restarts": 1, "step_size": 0.1, "tv": 0.2, "tv_form": "breaching",
            "signed": True, "boxed": True, "decay": True},
           source="breaching's attack/invertinggradients.yaml: 24,000 signed-Adam steps at 0.1 with step-lr "
                  "decay, boxed, one trial, total variation 0.2 in breaching's zero-padded form",
           description="Inverting Gradients as configured in breaching: 24,000 signed Adam steps, TV 0.2 "
                       "(breaching's form), step decay, box constraint"),
    Preset("cpa-derivative", CPAAttack, {"method": "fastica", "prefilter": "derivative"},
           source="leakbench's addition, not the published attack: scikit-learn FastICA learnt on the gradient "
                  "rows' pixel differences, applied to the raw rows (docs/notebook/baselines.md)",
           description="Cocktail Party Attack with leakbench's derivative prefilter: FastICA on pixel "
                       "differences (not in the paper)", published=False),
)


def preset_config(preset: Preset) -> type:
    """The base Config with the preset's values as defaults (a frozen dataclass subclass)."""
    base_config = preset.base.Config
    known = {f.name: f for f in fields(base_config)}
    unknown = sorted(set(preset.values) - set(known))
    if unknown:
        raise ConfigError(f"preset {preset.name!r}: {', '.join(unknown)} not fields of {base_config.__name__}")
    name = "".join(part.capitalize() for part in preset.name.split("-")) + "Config"
    config = make_dataclass(name, [(key, known[key].type, field(default=value, metadata=known[key].metadata))
                                  for key, value in preset.values.items()],
                            bases=(base_config,), frozen=True, namespace={"__module__": __name__})
    config.__doc__ = f"{base_config.__name__} with the defaults of {preset.source}."  # field help: the base's
    return config


def register_preset(preset: Preset) -> type[Attack]:
    """Register `preset` as an attack: the base class under the preset's name, with the preset's Config."""
    cls = type(preset.base.__name__ + "".join(p.capitalize() for p in preset.name.split("-")[1:]),
               (preset.base,), {"name": preset.name, "description": preset.description,
                                "Config": preset_config(preset), "preset": preset, "__module__": __name__})
    return register_attack(cls)


for _preset in PRESETS:
    register_preset(_preset)

__all__ = ["PRESETS", "Preset", "preset_config", "register_preset"]
