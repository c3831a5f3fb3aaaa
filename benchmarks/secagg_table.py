"""Secure aggregation (issue 24): the table of docs/notebook/defences.md, "Secure aggregation", from a stored run.

    leakbench run paper/secagg --out RESULTS
    python benchmarks/secagg_table.py RESULTS/paper-secagg

Reads the cells' summary.json only (no attack runs): per attack and number of clients K, the batches
and images recovered exactly, SPEAR's count of samples found when its budget ran out, the mean PSNR
of the cells that returned images, and the seconds. Prints a markdown table.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HEADER = ("| attack | K | K·b | batches exact | images exact | samples found (median) | "
          "PSNR dB (mean over cells with images) | median s | max s |")


def row(attack: str, k: int, cells: list[dict[str, Any]]) -> str:
    """One table row: the cells of one attack at K clients."""
    n, kb = len(cells), int(cells[0]["n_images"])
    exact = sum(c["status"] == "ok" and c["exact_fraction"] == 1 for c in cells)
    images = sum(c["exact_fraction"] * c["n_images"] for c in cells) / sum(c["n_images"] for c in cells)
    found = statistics.median(c["attack_stats"].get("samples_found", 0) for c in cells)
    psnrs = [c["psnr_mean"] for c in cells if c["psnr_mean"] is not None]
    psnr = f"{statistics.mean(psnrs):.1f} ({len(psnrs)} of {n})" if psnrs else "— (no images)"
    seconds = [c["seconds"] for c in cells]
    return (f"| {attack} | {k} | {kb} | {exact}/{n} | {100 * images:.0f} % | {found:g} of {kb} | {psnr} | "
            f"{statistics.median(seconds):.1f} | {max(seconds):.1f} |")


def main(run_dir: Path) -> None:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(run_dir.glob("cells/*/summary.json")):
        summary = json.loads(path.read_text())
        groups[summary["attack"], int(summary.get("secagg_clients") or 1)].append(summary)
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|")
    for (attack, k), cells in sorted(groups.items()):
        print(row(attack, k, cells))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
