"""`leakbench run`: execute a suite's cells and write a Markdown table and grids under reports/."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from leakbench.harness.cell import CellSpec, build_attack, prepare, run_cell
from leakbench.harness.store import write_cell
from leakbench.harness.suite import find_suite, load_suite
from leakbench.metrics import LpipsScorer
from leakbench.reporting.table import cell_caption, markdown_table


def check_cells(cells: list[CellSpec]) -> None:
    """Raise on the first cell that cannot run (names, data, sizes, hyperparameters), before any runs."""
    for spec in cells:
        _, _, update = prepare(spec)
        build_attack(spec).check_update(update)


def run_suite(name: str | None, *, data_root: str | None, reports: Path, lpips: LpipsScorer | None,
              lpips_note: str, progress: TextIO | None = None) -> Path:
    """Run every cell of the suite (validated first); return the path of the Markdown report."""
    suite = load_suite(find_suite(name), data_root=data_root)
    check_cells(suite.cells)
    rows = []

    for i, spec in enumerate(suite.cells, 1):
        result = run_cell(spec, lpips=lpips, lpips_note=lpips_note)
        cell_dir = reports / suite.name / f"{spec.attack}_{spec.dataset}_b{spec.batch_size}_s{spec.seed}"
        write_cell(result, cell_dir, caption=cell_caption(result.summary))
        rows.append((result.summary, result.records))
        if progress is not None:
            s = result.summary
            print(f"[{i}/{len(suite.cells)}] {spec.attack} b={spec.batch_size} seed={spec.seed}: {s['status']}, "
                  f"exact {100 * s['exact_fraction']:.0f}%, {s['seconds']:.2f} s", file=progress)
    report = reports / f"{suite.name}.md"
    text = markdown_table(rows, title=f"leakbench suite '{suite.name}'")
    text += "\nGrids (reconstruction above ground truth, every image of the batch): " + ", ".join(
        f"[{s['attack']} b={s['batch_size']}]({suite.name}/{s['attack']}_{s['dataset']}_b{s['batch_size']}_s{s['seed']}/grid.png)"
        for s, _ in rows) + "\n"
    reports.mkdir(parents=True, exist_ok=True)
    tmp = report.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(report)
    return report
