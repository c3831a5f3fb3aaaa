"""Named report views: a stored run's cells table (`cells.parquet`, one row per cell) → one titled table.

    leakbench view noise results/paper-spear-noise --out noise.csv
    leakbench list views

A view is a function `cells → View` registered in `VIEWS` under its name; `leakbench reproduce NAME`
applies its paper entry's views after the suite ran and writes each beside the report
(`REPORTS/SUITE/VIEW.csv` and `.md`). Views read the cells table only (no records, no attack runs).
A cell without an answer (failed, not applicable) shows its leakage state (`records.cell_state`: column `state`
per cell, `states` per group) and no leakage numbers ('–'); a group's exact % and PSNR are means over the cells
that answered, so a failure never reads as 0 % exact. Views keep apart what a run varies besides their own
axis: each setting column (SETTING_KEYS: dataset, attack, model, layer, DP level, client, threat model, noise σ)
that takes more than one value in the run joins the view's key, so a view never pools two settings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from leakbench.core.errors import ConfigError
from leakbench.core.registry import Registry
from leakbench.records.cell_state import ANSWERED_STATES, state_counts, state_text, states_text, with_states
from leakbench.reporting.aggregate import failed_cells, incomplete_cells, with_model
from leakbench.reporting.render import Table, markdown_table


@dataclass(frozen=True)
class View:
    """A view's result: a title and a table (plain columns, numbers as numbers)."""

    name: str
    title: str
    table: pd.DataFrame

    def markdown(self) -> str:
        """The title as a heading, then the table (numbers rounded for reading; the CSV keeps them whole)."""
        rows = [[cell_text(v) for v in row] for row in self.table.itertuples(index=False)]
        table = Table(self.title, list(self.table.columns), rows)
        return "\n".join([f"## {self.title}", "", *markdown_table(table)]) + "\n"

    def csv(self) -> str:
        return self.table.to_csv(index=False)


VIEWS: Registry[View] = Registry("report view")
"""Views by name; each factory takes the cells table and returns a View."""
SETTING_KEYS = ("dataset", "attack", "model", "layer", "dp", "client", "threat", "noise_sigma")
"""Columns a view adds to its key when the run holds more than one value of them."""


def apply_view(name: str, cells: pd.DataFrame) -> View:
    """View `name` of a run's cells table (a ConfigError naming the known views if unknown)."""
    entry = VIEWS.entry(name)
    if cells.empty:
        raise ConfigError(f"view {name}: the run holds no cells")
    return entry.factory(cells)


def list_views() -> list[tuple[str, str]]:
    return [(e.name, e.description) for e in VIEWS.entries()]


def cell_text(value: object) -> str:
    """A table entry for reading: '–' missing, '∞' infinite, integers whole, small numbers in 3 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.3g}" if abs(value) < 0.01 else f"{value:.2f}"


def _require(cells: pd.DataFrame, view: str, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in cells]
    if missing:
        raise ConfigError(f"view {view} needs the cells column(s) {', '.join(missing)}, which this run lacks "
                          "(a run stored by an older leakbench, or not the view's kind of run)")


def _key(cells: pd.DataFrame, axis: Sequence[str]) -> list[str]:
    """The setting columns that vary in `cells` (SETTING_KEYS; older runs may lack some), then `axis`."""
    return [c for c in SETTING_KEYS if c not in axis and c in cells and cells[c].nunique(dropna=False) > 1] + list(axis)


def _with_model(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with the report's model label ('FC-6 w200', 'conv-3 w200 trained 5 ep'); other columns as stored."""
    return cells.assign(model=with_model(cells)["model"])


def _failed(status: pd.Series) -> int:
    return failed_cells(status)


LEAKAGE_COLUMNS = ("exact_fraction", "psnr_mean", "psnr_median", "psnr_min", "ssim_mean", "lpips_mean")
"""The cells' leakage numbers, which a view leaves empty (NaN) for a cell without an answer (`_stated`)."""


def _stated(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with their leakage `state` (`records.cell_state`; derived here when the cells lack it) and their
    `LEAKAGE_COLUMNS` NaN where the cell has no answer (failed, not applicable): a view then shows '–' and the
    state for such a cell, and a group's means are over the cells that answered, never a failure read as 0 %."""
    if "state" not in cells:
        cells = with_states(cells, pd.DataFrame())
    answered = cells["state"].isin(ANSWERED_STATES)
    return cells.assign(**{c: cells[c].where(answered) for c in LEAKAGE_COLUMNS if c in cells})


def _states(state: pd.Series) -> str:
    """A group's states in words ('3 exact, 1 failed (budget)'; one state alone: 'failed (budget)')."""
    return states_text(state_counts(state))


def _incomplete(status: pd.Series) -> int:
    return incomplete_cells(status)


def _exact_pct(fraction: pd.Series) -> float:
    return 100.0 * float(fraction.mean())


def attack_stats(text: object) -> dict[str, Any]:
    """One cell's attack stats (stored as a JSON object string; empty for none)."""
    try:
        stats = json.loads(str(text or "{}"))
    except ValueError:
        stats = None
    if not isinstance(stats, dict):
        raise ConfigError(f"a cell's attack_stats is not a JSON object: {str(text)[:60]!r}")
    return stats


def stat_column(cells: pd.DataFrame, key: str) -> pd.Series:
    """One number from every cell's attack stats (NaN for attacks that report none)."""
    return cells["attack_stats"].map(lambda text: float(attack_stats(text).get(key, math.nan)))


def draws(cells: pd.DataFrame) -> pd.Series:
    """The draws SPEAR-family attacks report in their attack stats (NaN for attacks that report none)."""
    return stat_column(cells, "draws")


BASE = ("attack", "arch", "width", "depth", "layer", "seed", "status", "exact_fraction", "seconds")


def noise_view(cells: pd.DataFrame) -> View:
    """Per additive-noise level σ (and batch size, when the run has several): cells, failed, incomplete, mean
    PSNR of the cells (a failed cell has none), exact %, median seconds (the table of `paper/spear-noise`)."""
    _require(cells, "noise", (*BASE, "noise_sigma", "noise_scale", "psnr_mean"))
    frame = _stated(_with_model(cells))
    scales = set(frame.loc[frame["noise_sigma"] > 0, "noise_scale"])  # σ = 0 is stored as "absolute"
    axis = ["noise_scale", "noise_sigma"] if len(scales) > 1 else ["noise_sigma"]
    if "batch_size" in frame and frame["batch_size"].nunique() > 1:  # one level's b = 25 and b = 50 never pooled
        axis = ["batch_size", *axis]
    table = frame.groupby(_key(frame, axis), sort=True, dropna=False).agg(
        n=("seed", "size"), failed=("status", _failed), incomplete=("status", _incomplete),
        psnr_mean=("psnr_mean", "mean"),
        exact_pct=("exact_fraction", _exact_pct), seconds_median=("seconds", "median"),
        states=("state", _states)).reset_index()
    if len(scales) > 1:
        scale = "σ, absolute or × max |g| (column noise_scale)"
    else:
        scale = "σ × max |g| of each tensor" if scales == {"max"} else "σ (absolute)"
    return View("noise", f"Gaussian noise on the shared gradient, std {scale}: per level", table)


def spear_speed_view(cells: pd.DataFrame) -> View:
    """Per batch size: cells, failed, incomplete, exact %, median and max seconds, median and max draws."""
    _require(cells, "spear-speed", (*BASE, "batch_size", "attack_stats"))
    frame = _stated(_with_model(cells)).assign(draws=draws(cells))
    table = frame.groupby(_key(frame, ["batch_size"]), sort=True, dropna=False).agg(
        n=("seed", "size"), failed=("status", _failed), incomplete=("status", _incomplete),
        exact_pct=("exact_fraction", _exact_pct), seconds_median=("seconds", "median"), seconds_max=("seconds", "max"),
        draws_median=("draws", "median"), draws_max=("draws", "max"), states=("state", _states)).reset_index()
    return View("spear-speed", "Speed per batch size: exact %, seconds and draws", table)


def frontier_view(cells: pd.DataFrame) -> View:
    """One row per cell by width, b and seed: b/m, samples found (the attack's `samples_found`; an exact
    batch found all b), exact %, seconds, status (`leakbench view frontier RUN [RUN ...]` joins the runs of
    the paper/spear-frontier-04m-w* suites, one width each, into the width × b × seed table). Runs of
    trained victims (paper/spear-trained*) get a `train_epochs` column: the epochs × b × seed table."""
    _require(cells, "frontier", (*BASE, "batch_size", "attack_stats"))
    frame = _stated(_with_model(cells))
    frame = frame.assign(b_over_m=frame["batch_size"] / frame["width"], found=stat_column(frame, "samples_found"),
                         exact_pct=100.0 * frame["exact_fraction"],
                         state=[state_text(row) for _, row in frame.iterrows()])
    settings = [c for c in _key(frame, []) if c not in ("model",)]
    trained = ["train_epochs"] if "train_epochs" in frame and bool((frame["train_epochs"] > 0).any()) else []
    rows = [*settings, *trained, "width", "batch_size"]
    columns = [*rows, "b_over_m", "seed", "found", "exact_pct", "seconds", "status", "state"]
    table = frame.sort_values([*rows, "seed"], kind="stable")[columns]
    return View("frontier", "Frontier: samples found, exact % and seconds per width × b × seed",
                table.reset_index(drop=True))


BASELINE_COLUMNS = ["exact_pct", "psnr_mean", "psnr_median", "ssim_mean", "seconds", "status", "note", "state"]


def baselines_view(cells: pd.DataFrame) -> View:
    """One row per cell, by attack, model, b and seed: exact %, PSNR mean and median, SSIM, seconds,
    status and a note (failure reason, ICA not converged, loss, label strategy)."""
    _require(cells, "baselines", (*BASE, "batch_size", "psnr_mean", "psnr_median", "ssim_mean", "reason",
                                  "attack_stats"))
    frame = _stated(_with_model(cells))
    order = {a: i for i, a in enumerate(dict.fromkeys(frame["attack"]))}  # the suite's attack order
    frame = frame.assign(exact_pct=100.0 * frame["exact_fraction"], note=[note(s, r, st) for s, r, st in zip(
        frame["status"], frame["reason"], frame["attack_stats"], strict=True)], _order=frame["attack"].map(order),
        state=[state_text(row) for _, row in frame.iterrows()])
    settings = [c for c in _key(frame, []) if c not in ("attack", "model")]  # what else the run varies
    frame = frame.sort_values(["_order", "width", "depth", "model", *settings, "batch_size", "seed"], kind="stable")
    columns = ["attack", "model", *settings, "batch_size", "seed", *BASELINE_COLUMNS]
    return View("baselines", "Baselines: every attack × model × batch size", frame[columns].reset_index(drop=True))


def note(status: str, reason: object, stats_json: object) -> str:
    """A short attack-specific remark: the failure reason (an incomplete batch's: 'batch incomplete: k of b
    verified (…)'), ICA not converged, loss before → after, label strategy."""
    if status != "ok":
        return str(reason or "")[:80]
    stats = attack_stats(stats_json)
    bits = []
    if "converged" in stats and not stats["converged"]:
        bits.append("ICA not converged")
    if "final_loss" in stats and "initial_loss" in stats:
        bits.append(f"loss {stats['initial_loss']:.3g}->{stats['final_loss']:.3g}")
    if "label_strategy" in stats and stats["label_strategy"] != "given":
        bits.append(str(stats["label_strategy"]).split(" ")[0])
    return "; ".join(bits)


def victims_view(cells: pd.DataFrame) -> View:
    """One row per victim (model, training epochs, init seed): its train and test accuracy % (NaN at
    init) and the hash of the trained weights ('' at init); the models join the key when they vary."""
    _require(cells, "victims", ("dataset", "arch", "width", "depth", "seed", "train_epochs", "train_accuracy",
                                "test_accuracy", "victim_hash"))
    key = [c for c in ("dataset", "arch", "width", "depth") if cells[c].nunique(dropna=False) > 1]
    table = cells.groupby([*key, "train_epochs", "seed"], sort=True, dropna=False).agg(
        train_accuracy_pct=("train_accuracy", lambda v: 100.0 * float(v.iloc[0])),
        test_accuracy_pct=("test_accuracy", lambda v: 100.0 * float(v.iloc[0])),
        victim_hash=("victim_hash", lambda v: str(v.iloc[0] or ""))).reset_index()
    return View("victims", "Victims: accuracy after training (train part / test part)", table)


def defences_view(cells: pd.DataFrame) -> View:
    """Per defence level (DP, noise, defences: `reporting.defences.defence_levels`) and attack, with batch size
    and model: the victims' test accuracy % (NaN at init), cells, failed, incomplete, exact %, mean PSNR and mean
    LPIPS."""
    from leakbench.reporting.order import defence_levels

    _require(cells, "defences", (*BASE, "batch_size", "psnr_mean", "lpips_mean", "test_accuracy"))
    frame = _stated(with_model(cells, keep_shared=True))  # no header to say a shared threat model once
    frame = frame.assign(defence=defence_levels(frame), test_accuracy_pct=100.0 * frame["test_accuracy"])
    key = [c for c in ("dataset", "model", "layer") if frame[c].nunique(dropna=False) > 1]
    table = frame.groupby([*key, "batch_size", "attack", "defence"], sort=True, dropna=False).agg(
        test_accuracy_pct=("test_accuracy_pct", "mean"), n=("seed", "size"), failed=("status", _failed),
        incomplete=("status", _incomplete),
        exact_pct=("exact_fraction", _exact_pct), psnr_mean=("psnr_mean", "mean"),
        lpips_mean=("lpips_mean", "mean"), states=("state", _states)).reset_index()
    return View("defences", "Defences: leakage per attack beside the test accuracy of the victim trained with "
                "the defence", table)


VIEWS.register("noise", noise_view,
               "per additive-noise level σ: n, failed, incomplete, PSNR mean, exact %, median seconds, states")
VIEWS.register("spear-speed", spear_speed_view,
               "per batch size: n, failed, incomplete, exact %, median/max seconds, median/max draws "
               "(SPEAR's attack stats), states")
VIEWS.register("frontier", frontier_view,
               "one row per cell by width × b × seed: b/m, samples found, exact %, seconds, status, state "
               "(several runs: `leakbench view frontier RUN RUN …`)")
VIEWS.register("baselines", baselines_view,
               "one row per cell by attack × model × b × seed: exact %, PSNR mean/median, SSIM, seconds, status, note, "
               "state")
VIEWS.register("victims", victims_view,
               "per victim (model, train epochs, init seed): train / test accuracy %, hash of the trained weights")
VIEWS.register("defences", defences_view,
               "per defence level × attack × b: victim test accuracy %, n, failed, incomplete, exact %, mean PSNR, "
               "mean LPIPS, states")
