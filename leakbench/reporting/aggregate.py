"""Statistics of groups of per-image records; failed images are counted, never dropped silently.

A failed cell's images carry no PSNR/SSIM and count as not exact: `exact %` is over all n images,
PSNR/SSIM statistics are over the images that have a reconstruction, and `failures` says how many
did not (`metrics.score.recovered`). An incomplete batch (status "partial") is neither: its verified
samples are scored like any reconstruction, its other images are failures, and the cell is counted
as incomplete, never as failed. PSNR mean ± std is over finite values (∞ = bit-identical); the median includes ∞.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from leakbench.cell.axes import level_words, with_defaults
from leakbench.core.reconstruction import ANSWERED
from leakbench.core.server import SERVER_COLUMN
from leakbench.metrics.score import recovered
from leakbench.metrics.stats import describe
from leakbench.records.cell_state import ANSWERED_STATES, answered_any, state_counts, states_text, with_states
from leakbench.reporting.order import DEFAULT_THREAT, dp_levels, level_sorter

LPIPS_MISSING = "n/a — weights not available"


def group_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """Numbers for one group of records (rows of records.parquet) and their cells (see metrics.stats)."""
    psnr = describe(_column(records, "psnr"))
    return {
        "cells": len(cells),
        "failed_cells": failed_cells(cells["status"]) if len(cells) else 0,
        "incomplete": incomplete_batches(records, cells),
        "n": len(records),
        "failures": int((~recovered(records)).sum()),
        "exact_pct": 100.0 * float(records["exact"].astype(bool).mean()) if len(records) else math.nan,
        **reid_stats(records, cells),
        "psnr_mean": psnr.mean, "psnr_std": psnr.std, "psnr_median": psnr.median, "psnr_inf": psnr.n_inf,
        "ssim_mean": describe(_column(records, "ssim")).mean,
        "lpips_mean": describe(_column(records, "lpips")).mean,
        "rel_error_median": describe(_column(records, "rel_error")).median,
        "seconds_mean": describe(cells["seconds"].to_numpy(dtype=float)).mean if len(cells) else math.nan,
        "space": "/".join(sorted(set(records["space"]))) if "space" in records and len(records) else "",
        "reasons": sorted({str(r) for r in cells.get("reason", pd.Series(dtype=str)) if r}),
        **state_stats(records, cells),
    }


def reid_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """Re-identification of a group (`metrics.reid`): `reid_pct`, the % of the images of its cells scored for it
    (`reid_n` stored: image cells, failed ones included) whose true image ranks first (an image without a
    reconstruction is not re-identified), NaN when none was (feature space, runs stored before issue 43);
    `reid_n` / `reid_n_max`, the fewest and most distractors of those cells; `reid_distance`, their distances."""
    scored = cells[cells["reid_n"].notna()] if "reid_n" in cells and "reid_rank" in records else cells.iloc[:0]
    sub = records[records["cell_id"].isin(set(scored["cell_id"]))] if len(scored) else records.iloc[:0]
    if not len(sub):
        return {"reid_pct": math.nan, "reid_n": None, "reid_n_max": None, "reid_distance": ""}
    n = scored["reid_n"].astype(int)
    return {"reid_pct": 100.0 * float((sub["reid_rank"] == 1).mean()), "reid_n": int(n.min()),
            "reid_n_max": int(n.max()), "reid_distance": "/".join(sorted(set(scored["reid_distance"].astype(str))))}


def reid_scored(s: dict[str, Any]) -> bool:
    """Whether a group (`group_stats`) has a re-identification rate."""
    return not math.isnan(s.get("reid_pct", math.nan))


def reid_n_text(s: dict[str, Any]) -> str:
    """A scored group's N: '1000', or '200–1000' where its cells' N differ."""
    return f"{s['reid_n']}" + ("" if s["reid_n_max"] == s["reid_n"] else f"–{s['reid_n_max']}")


def reid_text(s: dict[str, Any]) -> str:
    """A group's top-1 re-identification for a table: '75 @1000' (% of its images at N distractors, see
    `reid_n_text`), '–' where not scored."""
    return f"{s['reid_pct']:.0f} @{reid_n_text(s)}" if reid_scored(s) else "–"


REID_NOTE = ("reid@N: % of the images whose reconstruction ranks their own true image first among the batch and "
             "N distractors of the same split (by the distance each cell records: LPIPS, else standardised pixel "
             "L2; an image without a reconstruction counts as not re-identified); '75 @1000' is 75 % at N = 1000.")
"""What the reid@N column says, for the notes of the tables that show it."""


def state_stats(records: pd.DataFrame, cells: pd.DataFrame) -> dict[str, Any]:
    """A group's leakage states (`records.cell_state`, issue 43): `states`, how many cells are in each state
    (`STATES` order, states with no cell left out); `leaked`, the images that leak (k) and `answered_n`, the
    images of the cells whose attack answered (n), for 'k of n'. Taken from the cells' `state` and `leaked`
    columns (`records.runs.read_run` adds them), else derived here."""
    if len(cells) and not {"state", "leaked"} <= set(cells.columns):
        cells = with_states(cells, records)
    if not len(cells):
        return {"states": {}, "leaked": 0, "answered_n": 0}
    answered = cells["state"].isin(ANSWERED_STATES)
    if "cell_id" in records and "cell_id" in cells:
        n = records["cell_id"].isin(set(cells.loc[answered, "cell_id"])).sum()
    else:  # one cell's records
        n = len(records) if answered.all() else 0
    return {"states": state_counts(cells["state"]), "leaked": int(cells.loc[answered, "leaked"].sum()),
            "answered_n": int(n)}


def failed_cells(status: pd.Series) -> int:
    """Cells with no answer (not ok, not partial)."""
    return int((~status.isin(ANSWERED)).sum())


def incomplete_cells(status: pd.Series) -> int:
    """Cells whose batch is incomplete (status partial: only their verified samples were returned)."""
    return int((status == "partial").sum())


def incomplete_batches(records: pd.DataFrame, cells: pd.DataFrame) -> list[tuple[int, int]]:
    """(k, b) for every incomplete batch among `cells`: k of its b images recovered (the verified samples the
    matching paired with them, counted from the records, never from the attack's own claim); sorted."""
    if not len(cells) or "status" not in cells:
        return []
    ids = set(cells.loc[cells["status"] == "partial", "cell_id"])
    sub = records[records["cell_id"].isin(ids)]
    return sorted((int(got.sum()), len(got)) for _, got in recovered(sub).groupby(sub["cell_id"]))


def incomplete_text(batches: list[tuple[int, int]], shown: int = 3) -> str:
    """How many batches are incomplete and what each verified: '1 (148/150 verified)', '3 (20/32, 30/32,
    31/32 verified)' (the first `shown`, then '…'); '' for none."""
    if not batches:
        return ""
    parts = [f"{k}/{b}" for k, b in batches[:shown]] + (["…"] if len(batches) > shown else [])
    return f"{len(batches)} ({', '.join(parts)} verified)"


def cells_note(status: pd.Series) -> str:
    """'2 failed', and ', 1 incomplete' when there are incomplete batches."""
    partial = incomplete_cells(status)
    return f"{failed_cells(status)} failed" + (f", {partial} incomplete" if partial else "")


INCOMPLETE_NOTE = ("a batch the attack did not finish; the samples it verified are scored as its reconstructions "
                   "(exact where pixel-perfect), its other images count as failures")
"""What an incomplete batch is, for the notes of the tables that count them."""


Key = tuple[Any, ...]
"""A group's key: the values of its `by` columns, in order."""


def key_values(key: Hashable) -> Key:
    """A pandas group key as a `Key` (pandas gives a tuple for several columns, the bare value for one)."""
    return key if isinstance(key, tuple) else (key,)


def grouped(records: pd.DataFrame, cells: pd.DataFrame, by: Sequence[str]) -> list[tuple[Key, dict[str, Any]]]:
    """`group_stats` for every combination of `by` present in `cells`, in `order.level_sorter` order (stored
    updates by their values; numbers as numbers: noise 1e-05 before 0.0001)."""
    out = []
    for key, cell_group in cells.groupby(list(by), sort=True, dropna=False):
        ids = set(cell_group["cell_id"])
        out.append((key_values(key), group_stats(records[records["cell_id"].isin(ids)], cell_group)))
    order = level_sorter(cells)
    return sorted(out, key=lambda kv: order(kv[0]))


def dp_order(cells: pd.DataFrame) -> list[str]:
    """DP labels from no noise to most noise ("none" first)."""
    table = cells.drop_duplicates("dp").assign(s=lambda d: d["dp_sigma"].fillna(-1.0),
                                               c=lambda d: d["dp_clip"].fillna(-1.0))
    return list(table.sort_values(["s", "c"])["dp"])


def epsilon_labels(cells: pd.DataFrame) -> dict[Hashable, str]:
    """Every `dp` value's level label with its accounting (`order.dp_levels`): 'DP σ=1 C=1 (ε=0.956 at q=0.01,
    T=1 step)', 'clipping + noise σ=0.01 C=1 (ε=5.56e+03 …)' past ε = 100, 'none'."""
    first = cells.drop_duplicates("dp")
    return dict(zip(first["dp"], dp_levels(first), strict=True))


def _threat_words(cells: pd.DataFrame) -> pd.Series:
    """Per cell, ' · ' and its threat model when not the default ('' for the default)."""
    threat = cells["threat"].fillna(DEFAULT_THREAT).astype(str) if "threat" in cells \
        else pd.Series(DEFAULT_THREAT, cells.index)
    return (" · " + threat).where(threat != DEFAULT_THREAT, "")


def _server_words(cells: pd.DataFrame) -> pd.Series:
    """Per cell, ' · malicious server' for a cell of a malicious server's attack ('' for an honest one)."""
    server = cells[SERVER_COLUMN].fillna("").astype(str) if SERVER_COLUMN in cells else pd.Series("", cells.index)
    return (" · " + server + " server").where(server != "", "")


def _label_settings(cells: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """The settings a cell's `client` label names after its update (`with_model`), each named and as per-cell
    words: its threat model (`_threat_words`), the server's (`_server_words`: malicious or nothing), then the axes
    declared later (`cell.axes.level_words`)."""
    return [("threat model", _threat_words(cells)), ("", _server_words(cells)),
            ("", level_words(with_defaults(cells)))]


def _is_shared(words: pd.Series) -> bool:
    """Every cell has the same words, and they say something: the setting is said once, not in each label."""
    return len(words) > 0 and words.nunique() == 1 and bool(words.iloc[0])


def shared_settings(cells: pd.DataFrame) -> list[str]:
    """The settings every cell of `cells` shares that `with_model` leaves out of its labels, as words
    ("threat model 'defence known'", 'E=2'): a threat model other than the default, the axes declared later
    away from their default (when every cell has the same); none when the cells differ in them."""
    out = []
    for name, words in _label_settings(cells):
        if _is_shared(words):
            said = str(words.iloc[0]).removeprefix(" · ").replace(" · ", ", ")
            out.append(f"{name} '{said}'" if name else said)
    return out


def shared_note(cells: pd.DataFrame) -> list[str]:
    """One line for a page's header saying the settings every cell shares (`shared_settings`), once; none
    when there are none."""
    shared = shared_settings(cells)
    if not shared:
        return []
    return [f"Every cell: {'; '.join(shared)} — said here once, left out of every label below."]


def with_model(cells: pd.DataFrame, *, keep_shared: bool = False) -> pd.DataFrame:
    """`cells` with a readable `model` column ('FC-6 w200', 'conv-3 w200', 'FC-6 w200 trained 5 ep') and
    a `client` naming the update's noise, defences and threat model when not the default ('fedsgd + noise
    σ=0.0001×max|g| + prune keep=0.5 · labels known', then ' · field=value' of each axis declared later in
    `cell.axes` away from its default), so tables and grids never pool them; runs stored before the
    arch and client axes existed get their defaults. The victim's name is the one the cell stored when it ran
    (`records.labels`: no registry entry needed, a plugin's victim named without the plugin installed).
    A threat model or later axis every cell of `cells` shares (`shared_settings`) is left out of the labels,
    for the page to say once (`shared_note`); `keep_shared` keeps it (a table printed without a header)."""
    cells = cells.copy()
    for column, default in (("arch", "fc"), ("client", "fedsgd")):
        cells[column] = cells[column].fillna(default) if column in cells else default
    if "noise_sigma" in cells:
        noise = cells["noise_sigma"].fillna(0.0)
        scale = (cells["noise_scale"] == "max").map({True: "×max|g|", False: ""})
        noised = cells["client"] + " + noise σ=" + noise.map("{:g}".format) + scale
        cells["client"] = cells["client"].where(noise == 0, noised)
    if "defence" in cells:  # the labels of a cell's defences (update transforms past the noise), '' for none
        defence = cells["defence"].fillna("")
        cells["client"] = cells["client"].where(defence == "", cells["client"] + " + " + defence)
    for _, words in _label_settings(cells):  # threat model, axes declared later: kept apart unless every cell shares
        cells["client"] = cells["client"] + (words if keep_shared or not _is_shared(words) else "")
    # a trained victim is another model (and other batches): its own tables, grids
    epochs = cells["train_epochs"].fillna(0).astype(int) if "train_epochs" in cells else pd.Series(0, index=cells.index)
    stored = cells["victim"].fillna("") if "victim" in cells else pd.Series("", index=cells.index)
    cells["model"] = [victim_name(*victim) for victim in zip(stored, cells["arch"], cells["depth"], cells["width"],
                                                             epochs, strict=True)]
    return cells


def victim_name(stored: object, arch: str, depth: int, width: int, epochs: int) -> str:
    """A cell's victim name: the one it `stored` when it ran (`records.labels`); for a cell stored without one,
    the registry's (`models.victim_label`) when it knows the architecture, else the architecture's own name."""
    from leakbench.core.errors import ConfigError
    from leakbench.models import victim_label

    if isinstance(stored, str) and stored:
        return stored
    try:
        return victim_label(arch, depth, width, epochs)
    except ConfigError:
        return f"{arch} trained {epochs} ep" if epochs else str(arch)


def model_order(cells: pd.DataFrame) -> list[str]:
    """Victim model labels by architecture, depth, width, then training epochs (numerically: 5 before 20)."""
    keys = [c for c in ("arch", "depth", "width", "train_epochs") if c in cells]
    return list(cells.assign(**{c: cells[c].fillna(0) for c in keys if c == "train_epochs"})
                .sort_values(keys).drop_duplicates("model")["model"])


def board_order_key(cells: pd.DataFrame) -> Callable[[Key], tuple[Any, ...]]:
    """Sort key of tables keyed (dataset, model, then anything) over `cells`: dataset, victim (`model_order`),
    then the rest in `order.level_sorter` order (stored updates by their values, numbers numerically,
    'none' first)."""
    rank = {m: i for i, m in enumerate(model_order(cells))}
    order = level_sorter(cells)
    return lambda key: (key[0], rank[key[1]], *[order(k) for k in key[2:]])


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table: '–' when missing, '∞' when infinite."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:.{digits}f}"


def stat_cells(s: dict[str, Any], *, lpips_note: str = LPIPS_MISSING) -> list[str]:
    """The shared statistic columns of every table (see STAT_HEADER)."""
    psnr = psnr_cell(s)
    if not math.isnan(s["lpips_mean"]):
        lpips = fmt(s["lpips_mean"], 3)
    else:  # feature-space groups have no images to score: not a missing-weights case
        lpips = "–" if s["space"] == "feature" or s["n"] == s["failures"] else lpips_note
    failures = str(s["failures"]) + failure_note(s)
    median = psnr_text(s["psnr_median"], exact=all_exact(s)).removesuffix(" dB")
    exact = state_words(s) if no_answer(s) else fmt(s["exact_pct"], 0)  # a failed group's state, never 0 %
    return [str(s["n"]), failures, exact, "–" if no_answer(s) else reid_text(s), psnr, median,
            fmt(s["ssim_mean"], 4), lpips, _sci(s["rel_error_median"]), fmt(s["seconds_mean"], 2), s["space"]]


def no_answer(s: dict[str, Any]) -> bool:
    """True when no cell of a group answered (every one failed, or is not applicable): its numbers say nothing,
    and tables show its state instead (`state_words`), never 0 % or 0 dB."""
    return bool(s.get("states")) and not answered_any(s["states"])


def scored_settings(row: Sequence[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    """The settings of a ranked row (group stats per setting; None: not run) that count in its mean leakage: every
    one but those without an answer (`no_answer`), which are never counted as 0 % or 0 dB (issue 43)."""
    return [s for s in row if not (s and no_answer(s))]


def state_words(s: dict[str, Any]) -> str:
    """What a group's numbers do not say, in words (issue 43): for a group without an answer its states
    ('failed (budget)', '1 failed (budget), 2 not applicable'); else 'k of n re-identified' when some but not
    all images leak, and how many cells failed or are not applicable ('1 failed (budget)'), joined by ' · ';
    '' when every cell answered and leaks all or none of its images."""
    states = s.get("states") or {}
    if no_answer(s):
        return states_text(states)
    parts = []
    if 0 < s.get("leaked", 0) < s.get("answered_n", 0) and not all_exact(s):
        parts.append(f"{s['leaked']} of {s['answered_n']} re-identified")
    unanswered = {state: count for state, count in states.items() if state not in ANSWERED_STATES}
    if unanswered:
        parts.append(", ".join(f"{count} {state}" for state, count in unanswered.items()))
    return " · ".join(parts)


def failure_note(s: dict[str, Any]) -> str:
    """After a group's failures: ' (1 of 4 cells)' failed, then any incomplete batches ('; incomplete: 1
    (148/150 verified)'); '' when every cell is complete."""
    parts = [f"{s['failed_cells']} of {s['cells']} cells"] if s["failed_cells"] else []
    parts += [f"incomplete: {incomplete_text(s['incomplete'])}"] if s.get("incomplete") else []
    return f" ({'; '.join(parts)})" if parts else ""


PSNR_CAP = 60.0
"""PSNR (dB) past which tables and figures stop telling values apart: an image at 60 dB is within 1/1000 of
the truth, under the 8-bit rounding step, so above it the number says only how many float digits agree
(a bit-identical image is ∞ dB, a float-exact one 140–150 dB). Shown as '≥ 60 dB', or 'exact' when every
image of the group is exact; figures draw such points in an 'exact' band above the capped axis."""


def psnr_text(value: float, *, exact: bool = False) -> str:
    """A PSNR for a table: 'exact' when `exact` (every image of the group exact), '≥ 60 dB' past `PSNR_CAP`
    (∞ included), '–' when missing, else one decimal with its unit."""
    if exact:
        return "exact"
    if math.isnan(value):
        return "–"
    return f"≥ {PSNR_CAP:.0f} dB" if value >= PSNR_CAP else f"{value:.1f} dB"


def all_exact(s: dict[str, Any]) -> bool:
    """True when every image of a group (`group_stats`) was recovered exactly (an empty group's exact % is NaN)."""
    return bool(s["exact_pct"] == 100.0)


def psnr_cell(s: dict[str, Any]) -> str:
    """'mean ± std' over finite PSNRs below the cap; 'exact' when every image is exact, '≥ 60' when the mean
    (or every value, all ∞) is past the cap."""
    if all_exact(s):
        return "exact"
    inf = s.get("psnr_inf", 0)
    if math.isnan(s["psnr_mean"]):
        return f"≥ {PSNR_CAP:.0f}" if inf else "–"
    if s["psnr_mean"] >= PSNR_CAP:
        return f"≥ {PSNR_CAP:.0f}"
    return f"{s['psnr_mean']:.1f} ± {s['psnr_std']:.1f}" + (f" (+{inf} ≥ {PSNR_CAP:.0f})" if inf else "")


STAT_HEADER = ["n", "failures", "exact %", "reid@N %", "PSNR mean ± std", "PSNR median", "SSIM", "LPIPS",
               "feature rel. error (median)", "seconds / cell", "space"]


def _sci(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1e}"


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame or not len(frame):
        return np.array([], dtype=float)
    return frame[name].to_numpy(dtype=float)
