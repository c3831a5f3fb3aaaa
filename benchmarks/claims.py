"""Claims as tests (RobustBench's habit): re-measure the numbers the docs quote and fail outside tolerance.

    PYTHONPATH=. python benchmarks/claims.py [docs/claims.toml] --data-root ../shared/data [--only TEXT]

`make claims` runs it (not part of `make test`: the claims are real measurements, minutes each).
Each `[[claims]]` entry of the file names the doc quoting it, the cell it was measured on (an attack,
its hyperparameters and a `setting`: the fields of `leakbench.harness.cell.CellSpec`), a metric of the
cell's summary (`psnr_mean`, `lpips_mean`, `exact_fraction`, …), the value and the tolerance. A claim
holds when |measured − value| ≤ tolerance; a missing or non-finite measurement fails. Exit status 1
when any claim fails, with one line per claim either way.
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_FILE = Path(__file__).resolve().parent.parent / "docs" / "claims.toml"
REQUIRED = ("doc", "quote", "attack", "setting", "metric", "value", "tolerance")


@dataclass(frozen=True)
class Claim:
    """One number a doc quotes and the cell that measures it."""

    doc: str
    quote: str
    attack: str
    setting: dict[str, Any]
    metric: str
    value: float
    tolerance: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    def holds(self, measured: float | None) -> bool:
        """|measured − value| ≤ tolerance; a missing or non-finite measurement never holds."""
        if measured is None or not math.isfinite(float(measured)):
            return False
        return abs(float(measured) - self.value) <= self.tolerance

    def line(self, measured: float | None) -> str:
        verdict = "ok  " if self.holds(measured) else "FAIL"
        shown = "missing" if measured is None else f"{float(measured):.4g}"
        return (f"{verdict} {self.metric} = {shown} (claimed {self.value:g} ± {self.tolerance:g}; "
                f"{self.doc}: {self.quote})")


def load_claims(path: Path) -> list[Claim]:
    """The claims of a TOML file; a malformed entry raises ValueError naming it."""
    raw = tomllib.loads(path.read_text())
    out = []
    for i, entry in enumerate(raw.get("claims", [])):
        missing = [k for k in REQUIRED if k not in entry]
        unknown = sorted(set(entry) - {f.name for f in fields(Claim)})
        if missing or unknown:
            raise ValueError(f"{path}: claim {i + 1}: missing {missing}, unknown {unknown}")
        if float(entry["tolerance"]) < 0:
            raise ValueError(f"{path}: claim {i + 1}: negative tolerance")
        out.append(Claim(**{**entry, "value": float(entry["value"]), "tolerance": float(entry["tolerance"])}))
    if not out:
        raise ValueError(f"{path}: no [[claims]] entries")
    return out


def measure(claim: Claim, data_root: str | None) -> float | None:
    """Run the claim's cell (LPIPS with verified weights when the metric needs it); the metric's value."""
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.cell import run_cell
    from leakbench.metrics import load_lpips

    lpips = load_lpips()[0] if claim.metric.startswith("lpips") else None
    setting = dict(claim.setting)
    if data_root and "data_root" not in setting and setting.get("dataset") not in ("embedded", "digits"):
        setting["data_root"] = data_root
    spec = CellSpec(attack=claim.attack, hyperparameters=dict(claim.hyperparameters), **setting)
    return run_cell(spec, lpips=lpips).summary.get(claim.metric)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", type=Path, nargs="?", default=DEFAULT_FILE)
    p.add_argument("--data-root", default=None, help="folder holding tiny-imagenet-200/, MNIST/, …")
    p.add_argument("--only", default="", help="run the claims whose quote or attack contains TEXT")
    args = p.parse_args(argv)
    claims = [c for c in load_claims(args.file) if args.only in c.quote or args.only in c.attack]
    failed = 0
    for claim in claims:
        measured = measure(claim, args.data_root)
        failed += not claim.holds(measured)
        print(claim.line(measured), flush=True)
    print(f"{len(claims) - failed} of {len(claims)} claims hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
