"""`leakbench reproduce NAME`: a paper table or figure as a shipped suite (leakbench/suites/paper/) plus named views.

The suite runs like `leakbench run` (records under --out, resumable) and its report is written under
--reports; then the entry's views (`leakbench.reporting.views`) are applied to the run's cells table
and each is written as `REPORTS/SUITE/VIEW.csv` and `VIEW.md`, beside the report (listed in the
report folder's marker, so a later report replaces them), and printed. All of it runs in this process.

benchmarks/spear_draws.py and benchmarks/spear_guided.py are not entries: their figures need ground
truth the cells table does not hold (each batch's zero counts, the guide's sign accuracy), so they
stay benchmark scripts of a source checkout (docs/reference/reproduce.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakbench.core.registry import Registry
from leakbench.reporting.views import View


@dataclass(frozen=True)
class Paper:
    """A paper entry: the suite it runs (a shipped `paper/NAME`, or a file) and the views applied to its run."""

    suite: str
    views: tuple[str, ...] = ()


@dataclass
class Reproduction:
    """What `reproduce` wrote: the report's Markdown page, the views (in order) and their files."""

    report: Path
    views: list[View] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def paths(self) -> list[Path]:
        return [self.report, *self.files]


PAPERS: Registry[Paper] = Registry("paper table")

ENTRIES = (
    ("spear-batch-size", Paper("paper/spear-batch-size", ("spear-speed",)),
     "SPEAR (NeurIPS 2024) batch-size table: TinyImageNet, FC-6 width 200, b = 1…20 (needs --data-root)"),
    ("spear-speed", Paper("paper/spear-speed", ("spear-speed",)),
     "SPEAR speed: exact %, seconds and draws per b = 1…25, FC-6 width 200, seeds 0–4, 900 s "
     "(TinyImageNet; needs --data-root)"),
    ("spear-layers", Paper("paper/spear-layers"),
     "SPEAR layer table: layers 1–5 of FC-6 at b = 16 and 20 (needs --data-root)"),
    ("layers-images", Paper("paper/layers-images"),
     "SPEAR layers 1–5 of FC-6, b = 20: feature exact % and image PSNR after inversion (needs --data-root)"),
    ("conv", Paper("paper/conv"),
     "conv+FC victim on TinyImageNet: SPEAR/CPA on the first FC layer + inversion vs IG (needs --data-root)"),
    ("conv-embedded", Paper("paper/conv-embedded"),
     "conv+FC victim on the embedded 32×32 patches: SPEAR/CPA + inversion vs IG"),
    ("dp", Paper("paper/dp"),
     "every attack against DP-SGD σ ∈ {0 … 1} with ε (TinyImageNet FC-6, b = 8; needs --data-root)"),
    ("spear-guided-w400", Paper("paper/spear-guided-w400"),
     "guided SPEAR vs CPA, b = 25…100, FC-6 width 400 (TinyImageNet; needs --data-root)"),
    ("spear-guided-w2000", Paper("paper/spear-guided-w2000"),
     "guided SPEAR vs CPA, b = 25…100, FC-6 width 2000 (TinyImageNet; needs --data-root)"),
    ("spear-frontier", Paper("paper/spear-frontier", ("spear-speed",)),
     "guided SPEAR past b = 100: b = 150, 200, 256, FC-6 width 2000, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-w400", Paper("paper/spear-frontier-w400", ("spear-speed",)),
     "guided SPEAR at b = 150, FC-6 width 400, 900 s per batch, seeds 0–2 (TinyImageNet; needs --data-root)"),
    ("spear-frontier-w1000", Paper("paper/spear-frontier-w1000", ("frontier", "baselines", "spear-speed")),
     "guided SPEAR at b = 250, 300, 350, FC-6 width 1000, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-w2000", Paper("paper/spear-frontier-w2000", ("frontier", "baselines", "spear-speed")),
     "guided SPEAR at b = 400, 450, 500, FC-6 width 2000, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-04m-w400", Paper("paper/spear-frontier-04m-w400", ("frontier", "baselines", "spear-speed")),
     "guided SPEAR at b = 0.4·m: b = 160, FC-6 width 400, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-04m-w1000", Paper("paper/spear-frontier-04m-w1000", ("frontier", "baselines", "spear-speed")),
     "guided SPEAR at b = 0.4·m: b = 400, FC-6 width 1000, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-04m-w2000", Paper("paper/spear-frontier-04m-w2000", ("frontier", "baselines", "spear-speed")),
     "guided SPEAR at b = 0.4·m: b = 800, FC-6 width 2000, 900 s per batch, seeds 0–2 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-frontier-edge-w1000", Paper("paper/spear-frontier-edge-w1000", ("frontier", "baselines", "spear-speed")),
     "the frontier table at the physical limit: guided SPEAR at b = 450, 500, FC-6 width 1000, 900 s per batch "
     "guide included, seeds 0–2 (TinyImageNet; needs --data-root)"),
    ("spear-frontier-edge-w2000", Paper("paper/spear-frontier-edge-w2000", ("frontier", "baselines", "spear-speed")),
     "the frontier table at the physical limit: guided SPEAR at b = 500, 600, 800, FC-6 width 2000, 900 s per "
     "batch guide included, seeds 0–2 (TinyImageNet; needs --data-root)"),
    ("spear-dl", Paper("paper/spear-dl"), "spear-dl (dictionary-learning proposals) vs guided SPEAR, b = 25…200, "
                                    "FC-6 width 2000 (TinyImageNet; needs --data-root)"),
    ("spear-dl-seeds", Paper("paper/spear-dl-seeds", ("baselines",)),
     "spear-dl vs guided SPEAR, FC-6 width 2000, seeds 1–2 at b = 100 and 200, 600 s per run "
     "(TinyImageNet; needs --data-root)"),
    ("spear-dl-w400", Paper("paper/spear-dl-w400", ("baselines",)),
     "spear-dl vs guided SPEAR, b = 25…200, FC-6 width 400, seeds 0–2 (TinyImageNet; needs --data-root)"),
    ("spear-dl-noise", Paper("paper/spear-dl-noise", ("noise",)),
     "spear-dl vs guided SPEAR under additive gradient noise σ = 0 … 1e-3 × max|g|, b = 25, 50, FC-6 width 400 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-dl-density", Paper("paper/spear-dl-density", ("baselines",)),
     "spear-dl vs guided SPEAR on FC-6 width 400 victims trained 0, 1, 5 epochs (ReLU density), b = 25, 64 "
     "(TinyImageNet; needs --data-root)"),
    ("spear-trained", Paper("paper/spear-trained", ("frontier", "spear-speed", "victims")),
     "guided SPEAR on FC-6 width 400 victims trained 5, 20 epochs, b = 64, 100, 900 s per batch "
     "(TinyImageNet; needs --data-root)"),
    ("spear-trained-cifar10", Paper("paper/spear-trained-cifar10", ("frontier", "spear-speed", "victims")),
     "guided SPEAR on FC-6 width 400 victims trained 5, 20 epochs, b = 64, 100, 900 s per batch "
     "(CIFAR-10; needs --data-root DIR/cifar10)"),
    ("spear-noise", Paper("paper/spear-noise", ("noise",)),
     "SPEAR under additive gradient noise σ = 0 … 1e-2 × max|g| (TinyImageNet FC-6, b = 8; needs --data-root)"),
    ("fedavg", Paper("paper/fedavg"), "FedAvg table: E ∈ {1, 5}, mini-batch ∈ {b, b/4}, η ∈ {0.1, 0.01} "
                                "(TinyImageNet FC-6, b = 20; needs --data-root)"),
    ("victims", Paper("paper/victims", ("victims",)),
     "every attack on FC-6 width 200 victims trained 0, 1, 5, 20 epochs, b = 4, 16, 64 (docs/notebook/victims.md; "
     "TinyImageNet; needs --data-root)"),
    ("victims-fc2", Paper("paper/victims-fc2", ("victims",)),
     "every attack on FC-2 width 256 victims trained 0, 1, 5, 20 epochs, b = 4, 16 (docs/notebook/victims.md; "
     "TinyImageNet; needs --data-root)"),
    ("secagg", Paper("paper/secagg"),
     "secure aggregation over K = 1, 2, 4, 8 clients of b = 16 vs SPEAR and guided SPEAR (docs/notebook/defences.md; "
     "embedded, FC-6 width 400)"),
    ("flower", Paper("paper/flower"),
     "leakbench's FedSGD client vs a real Flower client, under leakbench's DP / secure aggregation and Flower's "
     "central DP (received and released), LocalDpMod and SecAgg+, K = 4; spear, spear-guided, cpa, ig; CIFAR-10 b = 8 "
     "(needs flwr and --data-root DIR/cifar10)"),
    ("malicious", Paper("paper/malicious"),
     "a malicious server: Robbing the Fed's imprint block (128 bins), trap weights and class fishing against secure "
     "aggregation over K = 1, 10, 100 clients of b = 8 (docs/notebook/malicious.md; CIFAR-10, needs --data-root "
     "DIR/cifar10)"),
    ("malicious-512", Paper("paper/malicious-512"),
     "Robbing the Fed with 512 bins against secure aggregation, K = 1, 10, 100 (docs/notebook/malicious.md; CIFAR-10, "
     "needs --data-root DIR/cifar10)"),
    ("malicious-tinyimagenet", Paper("paper/malicious-tinyimagenet"),
     "Robbing the Fed with 512 bins against secure aggregation, K = 1, 10, 100 clients of b = 8 (docs/notebook/"
     "malicious.md; TinyImageNet, needs --data-root)"),
    ("malicious-defences", Paper("paper/malicious-defences"),
     "Robbing the Fed (512 bins; its adaptive form against noise), trap weights (and theirs against check-weights) and "
     "class fishing under noise, DP-SGD, pruning, QSGD and clients that check the model, b = 64 "
     "(docs/notebook/malicious.md; CIFAR-10, needs --data-root DIR/cifar10)"),
    ("defences", Paper("paper/defences", ("defences",)),
     "every attack (adaptive ones where they adapt) × every defence × 3 strengths × 3 seeds, CIFAR-10 b = 16, "
     "FC-6 width 200 at init and trained 1 epoch with the defence (docs/notebook/defences.md; needs --data-root "
     "DIR/cifar10)"),
    ("defences-adaptive", Paper("paper/defences-adaptive", ("defences",)),
     "IG and DLG beside their masked (defence-aware) forms against pruning and Soteria, CIFAR-10, b = 1, 16 "
     "(docs/notebook/defences.md; needs --data-root DIR/cifar10)"),
    ("baselines", Paper("paper/baselines", ("baselines",)),
     "SPEAR, CPA, CPA + derivative prefilter, IG, DLG on FC-2 width 256 and FC-6 width 200, b = 1…64 "
     "(docs/notebook/baselines.md; TinyImageNet; needs --data-root)"),
)
"""(name, entry, description) of every paper entry; each runs a shipped suite leakbench/suites/paper/NAME.toml."""

for _name, _paper, _description in ENTRIES:
    PAPERS.register(_name, lambda paper=_paper: paper,
                    _description + (f"; views: {', '.join(_paper.views)}" if _paper.views else ""))


def list_papers() -> list[tuple[str, str]]:
    return [(e.name, e.description) for e in PAPERS.entries()]


def reproduce(name: str, *, out: Path = Path("results"), reports: Path = Path("reports"),
              **kwargs: Any) -> Reproduction:
    """Run paper entry `name` (a ConfigError naming the known ones if unknown): its suite, its report,
    then its views, written beside the report; `kwargs` go to `pipeline.run_suite`."""
    from leakbench.pipeline import run_suite
    from leakbench.records.atomic import write_text_atomic
    from leakbench.records.runs import read_cells
    from leakbench.reporting.target import write_marker
    from leakbench.reporting.views import VIEWS, apply_view

    paper = PAPERS.create(name)
    for view_name in paper.views:
        VIEWS.entry(view_name)  # a misspelt view fails now, not after the suite ran
    report = run_suite(paper.suite, out=Path(out), reports=Path(reports), **kwargs)
    done = Reproduction(report)
    if not paper.views:
        return done
    cells = read_cells(Path(out) / report.stem)
    folder = Path(reports) / report.stem
    for view in (apply_view(v, cells) for v in paper.views):
        done.views.append(view)
        for suffix, text in ((".csv", view.csv()), (".md", view.markdown())):
            write_text_atomic(folder / f"{view.name}{suffix}", text)
            done.files.append(folder / f"{view.name}{suffix}")
    write_marker(folder, report.stem)  # the views are the report's files: a later report may replace them
    return done
