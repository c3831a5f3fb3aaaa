"""The steps of a benchmark run in order — plan and attack (harness), then report (reporting).

The only module besides the CLI that calls both rooms: the harness stores records and knows nothing
of rendering; the reporting reads what the harness stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from leakbench.citation import registered_adaptations
from leakbench.harness.run import run_sweep
from leakbench.harness.suite import Suite
from leakbench.reporting.report import write_report
from leakbench.reporting.target import check_report_target


def run_suite(name: str | Suite | None, *, data_root: str | None = None, out: Path = Path("results"),
              reports: Path = Path("reports"), executor: str = "serial", jobs: int = 1,
              address: str | None = None, resume: bool = True, lpips_weights: str | None = None,
              lpips_net: str = "alex", progress: TextIO | None = None) -> Path:
    """Run a suite (see `harness.run.run_sweep`) and write its report under `reports/`; return the Markdown path."""
    sweep = run_sweep(name, data_root=data_root, out=out, executor=executor, jobs=jobs, address=address,
                      resume=resume, lpips_weights=lpips_weights, lpips_net=lpips_net, progress=progress,
                      before_run=lambda suite: check_report_target(reports, suite.name))
    return write_report(sweep.run_dir, reports, adaptations=registered_adaptations())
