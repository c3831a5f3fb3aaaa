"""Suite files (benchmarks/*.toml) expanded into cells; a malformed file fails before anything runs."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakbench.errors import ConfigError
from leakbench.harness.cell import CellSpec

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
KEYS = {"name": str, "dataset": str, "attacks": list, "batch_sizes": list, "seeds": list,
        "width": int, "depth": int, "layer": int, "image_size": int, "data_root": str,
        "hyperparameters": dict}
REQUIRED = ("name", "dataset", "attacks", "batch_sizes")


@dataclass(frozen=True)
class Suite:
    name: str
    cells: list[CellSpec]


def find_suite(name_or_path: str | None) -> Path:
    """A suite path: an existing file, or `benchmarks/NAME.toml`; default `default`."""
    candidate = Path(name_or_path or "default")
    if candidate.is_file():
        return candidate
    path = SUITE_DIR / f"{candidate.name}.toml"
    if not path.is_file():
        raise ConfigError(f"no suite {name_or_path!r} (looked for {candidate} and {path})")
    return path


def load_suite(path: Path, *, data_root: str | None = None) -> Suite:
    """Parse and validate a suite file into its cells (attacks × batch sizes × seeds).

    `[hyperparameters.ATTACK]` tables override that attack's Config defaults in every cell.
    """
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"suite {path}: {exc}") from None
    _validate(raw, path)
    params = raw.get("hyperparameters", {})
    cells = [CellSpec(attack=a, dataset=raw["dataset"], batch_size=int(b), seed=int(s),
                      width=raw.get("width", 200), depth=raw.get("depth", 6), layer=raw.get("layer", 1),
                      data_root=data_root or raw.get("data_root"), image_size=raw.get("image_size"),
                      hyperparameters=dict(params.get(a, {})))
             for a in raw["attacks"] for b in raw["batch_sizes"] for s in raw.get("seeds", [0])]
    return Suite(name=raw["name"], cells=cells)


def _validate(raw: dict[str, Any], path: Path) -> None:
    for key in raw:
        if key not in KEYS:
            raise ConfigError(f"suite {path}: unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
        if not isinstance(raw[key], KEYS[key]) or isinstance(raw[key], bool):
            raise ConfigError(f"suite {path}: key {key!r} must be a {KEYS[key].__name__}")
    for key in REQUIRED:
        if key not in raw:
            raise ConfigError(f"suite {path}: missing key {key!r}")
    for attack, table in raw.get("hyperparameters", {}).items():
        if attack not in raw["attacks"] or not isinstance(table, dict):
            raise ConfigError(f"suite {path}: key 'hyperparameters.{attack}' must be a table for a listed attack")
    for key in ("batch_sizes", "seeds"):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in raw.get(key, [])):
            raise ConfigError(f"suite {path}: key {key!r} must list integers")
