"""A plugin's attack as data: what the harness knows of an attack whose code it never imports.

Plugin attacks are imported only inside the sandboxed attack worker (`leakbench.plugins`). There,
`describe(cls)` turns each into JSON: name, description, module, its Config's fields (type, default,
declared range or choices, help) and its requirements. In the harness,
`described_attack(data)` rebuilds a stand-in class with the same name, Config and requirements (and
so the same capabilities, `Attack.layered`, derived from the Config) and paper, so
that listing, `show`, suite parsing and hyperparameter checks work as for a shipped attack; its
`reconstruct` refuses to run (the worker runs the real one); `code_hash` is the harness's hash of its
plugin's files (`leakbench.harness.fingerprint.plugin_code`, set in `leakbench.plugins`; the worker's
hash only where the harness cannot find them), so resuming notices a changed plugin; `described`
(True) marks it a plugin's (`fingerprint.attack_origin`: its module name is the worker's word).
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, Field, asdict, field, fields, make_dataclass
from typing import Any

from leakbench.attacks.base import Attack, Reconstruction, Requirements
from leakbench.attacks.params import field_help
from leakbench.core.citation import Citation, stored_citation
from leakbench.core.errors import LeakbenchError
from leakbench.core.ranges import Range, field_choices, field_range


def describe(cls: type[Attack]) -> dict[str, Any]:
    """An attack class as plain JSON data (see `described_attack`)."""
    return {"name": cls.name, "description": cls.description, "module": cls.__module__,
            "config": cls.Config.__name__, "help": field_help(cls.Config),
            "fields": [_describe_field(f) for f in fields(cls.Config)], "requires": asdict(cls.requires),
            "paper": asdict(cls.paper) if isinstance(cls.paper, Citation) else None}


def described_attack(data: dict[str, Any]) -> type[Attack]:
    """The harness's stand-in for a described plugin attack."""
    config = make_dataclass(str(data["config"]), [_field(f) for f in data["fields"]], frozen=True)
    config.__doc__ = "\n".join(f"{name}: {text}" for name, text in dict(data["help"]).items())

    def reconstruct(self: Attack, update: Any, *, seed: int) -> Reconstruction:
        raise LeakbenchError(f"attack {self.name!r} is a plugin's: it runs only in the sandboxed attack worker")

    return type(f"Described{config.__name__}", (Attack,), {
        "name": str(data["name"]), "description": str(data["description"]), "Config": config,
        "requires": Requirements(**data["requires"]), "reconstruct": reconstruct,
        "__module__": str(data["module"]), "__doc__": f"{data['name']} (described by the attack worker)",
        "code_hash": data.get("code_hash"), "described": True, "paper": stored_citation(data.get("paper"))})


def _describe_field(f: Field[Any]) -> dict[str, Any]:
    default = f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING
                                                          else None)
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    rng, choices = field_range(f), field_choices(f)
    return {"name": f.name, "type": kind, "default": _plain(default), "tuple": isinstance(default, tuple),
            "range": asdict(rng) if rng is not None else None,
            "choices": list(choices) if choices is not None else None}


SAFE_TYPE = re.compile(r"[A-Za-z_][\w.\[\], '\"|]*")
"""A type annotation as text that names types only: no call, no assignment (were it ever evaluated —
`typing.get_type_hints` evaluates annotations — it could run no code)."""


def _field(data: dict[str, Any]) -> tuple[str, str, Any]:
    kind = str(data["type"]) if SAFE_TYPE.fullmatch(str(data["type"])) else "object"
    default = tuple(data["default"]) if data["tuple"] else data["default"]
    meta: dict[str, Any] = {"range": Range(**data["range"])} if data.get("range") else {}
    if data.get("choices"):
        meta["choices"] = tuple(str(choice) for choice in data["choices"])
    if isinstance(default, (list, dict)):
        def fresh(d: Any = default) -> Any:
            """A new copy of the default per instance."""
            return json.loads(json.dumps(d))

        return data["name"], kind, field(default_factory=fresh, metadata=meta)
    return data["name"], kind, field(default=default, metadata=meta)


def _plain(value: Any) -> Any:
    """Tuples as lists (JSON has no tuples)."""
    return json.loads(json.dumps(value, default=list)) if _is_plain(value) else None


def _is_plain(value: Any) -> bool:
    try:
        json.dumps(value, default=list)
    except (TypeError, ValueError):
        return False
    return True
