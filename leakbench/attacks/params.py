"""An attack's hyperparameters as data: name, type, default and one line of help, read from its Config.

The help comes from the Config's docstring, where every field is documented in one entry:

    field_name: what it does, possibly continued on
        more-indented lines.
    first / second: one entry documenting two related fields.

An entry starts at the docstring's left margin with field names (all of them fields of the
Config) and a colon; it ends at a blank line or the next line at the margin. Entries of a base
class's docstring document the fields a subclass inherits. `tests/test_params.py` checks that every
field of every registered attack has help.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, fields
from typing import Any

from leakbench.core.ranges import range_text

ENTRY = re.compile(r"^([A-Za-z_]\w*(?:\s*/\s*[A-Za-z_]\w*)*):\s+(.*)$")
"""The first line of a docstring entry: `name: help` or `name / other: help`."""


@dataclass(frozen=True)
class Param:
    """One hyperparameter of an attack's Config."""

    name: str
    type: str
    default: Any
    help: str
    range: str = ""
    """' in [low, high]' when the field declares a range, ' in {a, b}' when it declares choices
    (leakbench.core.ranges), else ''."""

    required: bool = False
    """The field has no default: it must be given."""

    def line(self) -> str:
        """`name (type in [low, high], default …): help` on one line ('required' for a field without a default)."""
        default = "required" if self.required else f"default {self.default!r}"
        return f"{self.name} ({self.type}{self.range}, {default}): {self.help}"


def config_params(config_cls: type) -> list[Param]:
    """Every field of the dataclass `config_cls`, in declaration order, with its docstring help ('' if none)
    and its declared range."""
    from dataclasses import MISSING

    from leakbench.core.settings import field_default

    helps = field_help(config_cls)
    return [Param(f.name, f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
                  None if field_default(f) is MISSING else field_default(f), helps.get(f.name, ""), range_text(f),
                  field_default(f) is MISSING)
            for f in fields(config_cls)]


def field_help(config_cls: type) -> dict[str, str]:
    """Field name → help, from the docstrings of `config_cls` and its bases (the nearest class wins)."""
    names = {f.name for f in fields(config_cls)}
    helps: dict[str, str] = {}
    for klass in reversed(config_cls.__mro__):
        helps.update(_docstring_entries(vars(klass).get("__doc__") or "", names))
    return helps


def _docstring_entries(doc: str, names: set[str]) -> dict[str, str]:
    """The `name: help` entries of one docstring whose names are all in `names`, each joined onto one line."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        match = ENTRY.match(line)
        keys = [k.strip() for k in match.group(1).split("/")] if match else []
        if match and keys and all(k in names for k in keys):
            current = [match.group(2).strip()]
            for key in keys:
                entries[key] = current
        elif current is not None and line[:1].isspace() and line.strip():
            current.append(line.strip())
        else:
            current = None
    return {key: " ".join(parts) for key, parts in entries.items()}


LAYER_NOTE = "set with --layer, or a suite's 'layers', never as a hyperparameter"
"""`layer` is a field of layer attacks' Configs but an axis of the cell (leakbench.harness.cell.build_attack)."""


def param_lines(config_cls: type, indent: str = "  ", *, layer_axis: bool = True) -> list[str]:
    """One line per hyperparameter of `config_cls`: name, type, default, help (`layer_axis`: an attack's
    `layer` is the cell's axis, and says so; a defence's `layer` is one of its settings)."""
    return [indent + p.line() + (f" ({LAYER_NOTE})" if layer_axis and p.name == "layer" else "")
            for p in config_params(config_cls)]


def describe_attack(name: str) -> list[str]:
    """What `leakbench show attack NAME` prints: the description, what it needs, every hyperparameter."""
    from leakbench.attacks import ATTACKS, attack_class

    cls, entry = attack_class(name), ATTACKS.entry(name)
    needs = [k.replace("_", " ") for k, v in vars(cls.requires).items() if v] or ["nothing beyond the update"]
    summary = (inspect.getdoc(cls.Config) or "").split("\n\n")[0].replace("\n", " ")
    return [f"{entry.name}: {entry.description}", f"config: {cls.Config.__name__} — {summary}",
            f"needs: {', '.join(needs)}",
            f"hyperparameters (--param KEY=VALUE, or [hyperparameters.{name}] in a suite):",
            *param_lines(cls.Config)]
