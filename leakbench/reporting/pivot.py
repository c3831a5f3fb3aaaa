"""Compact pivot tables: attacks as rows (ranked), settings as columns, one short entry per setting.

The leaderboard (one headline number per entry, batch size × DP level as columns) and the report
(exact %, PSNR median and LPIPS per entry, batch size as columns) are both built here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from leakbench.records.schema import FULL
from leakbench.reporting.aggregate import (
    PSNR_CAP,
    Key,
    all_exact,
    cells_note,
    fmt,
    grouped,
    incomplete_text,
    no_answer,
    psnr_text,
    reid_n_text,
    reid_scored,
    scored_settings,
    state_words,
)
from leakbench.reporting.order import level_sorter
from leakbench.reporting.render import Cell, Table

Stats = dict[str, Any]


def headline(s: Stats) -> str:
    """One number: exact % when any image is exact, else the PSNR median (in feature space, where
    there is none, 0 %), "failed" when every image failed; mean LPIPS after the dot. A setting whose every
    cell failed shows its state ('failed (budget)'), never 0 %; a partial leak and failed cells follow the
    number (`aggregate.state_words`: '6 % · 2 of 32 re-identified · 1 failed (budget)')."""
    if no_answer(s):
        return state_words(s)
    return _headline(s) + _words(s) + ("" if math.isnan(s["lpips_mean"]) else f" · {s['lpips_mean']:.3f}")


def _words(s: Stats) -> str:
    """' · ' and a group's `aggregate.state_words`, or '' when there are none."""
    words = state_words(s)
    return f" · {words}" if words else ""


def _headline(s: Stats) -> str:
    if all_exact(s):
        main = "100 % exact"
    elif s["exact_pct"] > 0 or (math.isnan(s["psnr_median"]) and s["failures"] < s["n"]):
        main = f"{fmt(s['exact_pct'], 0)} %"
    else:
        main = psnr_text(s["psnr_median"]) if not math.isnan(s["psnr_median"]) else "failed"
    return main


def triple(s: Stats) -> str:
    """Exact %, top-1 re-identification (' · reid@1000 75 %', where scored), PSNR median and LPIPS of one
    setting; in feature space (no images, so neither PSNR nor
    LPIPS) exact % and the median relative feature error instead; then its incomplete batches, if any
    (' · incomplete: 1 (88/100 verified)'). A setting whose every cell failed shows its state ('failed
    (budget)'), never 0 %; a partial leak and failed cells follow (`aggregate.state_words`)."""
    if no_answer(s):
        return state_words(s)
    incomplete = f" · incomplete: {incomplete_text(s['incomplete'])}" if s.get("incomplete") else ""
    return _triple(s) + _words(s) + incomplete


def _triple(s: Stats) -> str:
    if s["space"] == "feature":
        error = s["rel_error_median"]
        return f"{fmt(s['exact_pct'], 0)} % · " + ("–" if math.isnan(error) else f"rel. error {error:.1e}")
    reid = f" · reid@{reid_n_text(s)} {fmt(s['reid_pct'], 0)} %" if reid_scored(s) else ""
    if all_exact(s):
        return f"100 % exact{reid} · {fmt(s['lpips_mean'], 3)}"
    return f"{fmt(s['exact_pct'], 0)} %{reid} · {psnr_text(s['psnr_median'])} · {fmt(s['lpips_mean'], 3)}"


def shown_psnr(value: float) -> float:
    """A PSNR as a table shows it: capped at `PSNR_CAP` (∞ included), one decimal; missing = 0 dB."""
    return 0.0 if math.isnan(value) else round(min(value, PSNR_CAP), 1)


def rank_key(row: Sequence[Stats | None]) -> tuple[int, float, float, int, int]:
    """Rank over a table's settings: mean exact % high first, then mean PSNR median, then fewer settings
    without an answer, then fewer failures.

    Each is compared at the precision a table shows it (exact % whole, PSNR to 0.1 dB and capped at
    `PSNR_CAP`), so two attacks whose entries read the same share a rank: float noise in the 10th digit
    (147.3 against 147.1 dB for two exact attacks) decides nothing. A setting the attack did not run counts
    as 0 % exact; a missing PSNR counts as 0 dB. A setting whose every cell failed (`aggregate.no_answer`) is
    left out of the means, never counted as 0 % or 0 dB (issue 43); an attack without any answer ranks last.
    """
    scored = scored_settings(row)
    if not scored:
        return 1, 0.0, 0.0, len(row), sum(s["failures"] for s in row if s)
    exact = [s["exact_pct"] if s else 0.0 for s in scored]
    psnr = [shown_psnr(s["psnr_median"]) if s else 0.0 for s in scored]
    return (0, -round(sum(exact) / len(scored)), -round(sum(psnr) / len(scored), 1), len(row) - len(scored),
            sum(s["failures"] for s in row if s))


def ranks(keys: Sequence[Any]) -> list[int]:
    """Competition ranks ('1, 1, 3') of items already sorted by `keys`: equal keys, equal rank."""
    out: list[int] = []
    for i, key in enumerate(keys):
        out.append(out[-1] if i and key == keys[i - 1] else i + 1)
    return out


def column_order(cells: pd.DataFrame, columns: Sequence[str]) -> Callable[[Key], Key]:
    """Sort key for column settings: batch size ascending, DP from none to most noise, any other level in
    `order.level_sorter` order (stored updates by their values, numbers as numbers)."""
    sigma = {dp: (-1.0 if math.isnan(s) else float(s)) for dp, s in
             cells.drop_duplicates("dp").set_index("dp")["dp_sigma"].items()} if "dp" in cells else {}

    order = level_sorter(cells)

    def key(setting: Key) -> Key:
        out: list[Any] = []
        for name, value in zip(columns, setting, strict=True):
            out += [sigma.get(value, 0.0), str(value)] if name == "dp" else [order(value)]
        return tuple(out)
    return key


def pivot_table(records: pd.DataFrame, cells: pd.DataFrame, *, title: str, columns: Sequence[str],
                label: Callable[[Key], str], entry: Callable[[Stats], str] = headline,
                link: Callable[[str, Key], str | None] | None = None) -> Table:
    """Attacks ranked as rows, every combination of `columns` present in `cells` as a column.

    `label(setting)` names a column; `link(attack, setting)`, when given, is the target of its entry.
    """
    from leakbench.reporting.render import Link

    stats = dict(grouped(records, cells, ["attack", *columns]))
    settings = sorted({key[1:] for key in stats}, key=column_order(cells, columns))
    attacks = sorted({key[0] for key in stats})
    rows = {a: [stats.get((a, *c)) for c in settings] for a in attacks}
    exposed = not_isolated(cells)
    body: list[list[Cell]] = []
    ranked = sorted(attacks, key=lambda a: (rank_key(rows[a]), a))
    for rank, attack in zip(ranks([rank_key(rows[a]) for a in ranked]), ranked, strict=True):
        entries: list[Cell] = []
        for setting, s in zip(settings, rows[attack], strict=True):
            target = link(attack, setting) if (link and s) else None
            text = entry(s) if s else "–"
            entries.append(Link(text, target) if target else text)
        n = sum(s["n"] for s in rows[attack] if s)
        failures = sum(s["failures"] for s in rows[attack] if s)
        name = attack if attack not in exposed else f"{attack} (not isolated)"
        body.append([str(rank), name, budgets(cells, attack), *entries, str(n), str(failures)])
    notes = [f"{len(cells)} cells, {cells_note(cells['status'])}; seeds pooled per setting. "
             "budget: the attack's steps (or draws, seconds) as stored with every record. rank: mean exact %, then "
             f"mean PSNR median (capped at {PSNR_CAP:.0f} dB), each over the settings with an answer (a setting "
             "whose every cell failed shows its state and counts as no number, never 0 %), then fewer settings "
             "without an answer, then fewer failures, each as shown (whole %, 0.1 dB): "
             "attacks that read the same share a rank, listed by name."]
    if exposed:
        notes.append("not isolated: some of the attack's cells ran without the operating-system sandbox "
                     "(Python guard only, or in process), so it could have read the batch.")
    return Table(title, ["rank", "attack", "budget", *map(label, settings), "n", "failures"], body, notes)


def not_isolated(cells: pd.DataFrame) -> set[str]:
    """The attacks with a cell that ran outside the operating-system sandbox (cells stored before
    issue 22 have no `isolation`: they ran under the Python guard)."""
    isolation = cells["isolation"] if "isolation" in cells else pd.Series([None] * len(cells), index=cells.index)
    return set(cells.loc[isolation.fillna("") != FULL, "attack"])


def budgets(cells: pd.DataFrame, attack: str) -> str:
    """The distinct budgets of `attack`'s cells, as stored with each cell (the `budget` column `records.runs.
    read_run` adds; '' for cells stored without one), joined by ' / '."""
    if "budget" not in cells:
        return ""
    found = set(cells.loc[cells["attack"] == attack, "budget"].dropna())
    return " / ".join(sorted(str(b) for b in found if b))
