"""The verdict on each defence level, from stored records only: its worst leakage against every attack that ran
against it (adaptive attacks included), against its victims' accuracy cost with a 95 % interval.

A *defence level* is what a cell's client did to its update besides plain FedSGD: its DP-SGD setting, its
noise, its defences (and a FedAvg client or a threat model other than the default), named by one label
('none', 'DP σ=0.5 C=1', 'noise σ=0.01', 'prune p=0.5'). The threat 'defence known' is no level of its own:
a cell whose attacker was told the defence stands in its defence's own row (`verdict_levels`), so a level's
verdict is the worst case over the attacks that ran against it with and without that knowledge.

- *Adaptive attack*: a cell whose attacker knew the defence (`defence known`) and whose attack adapts to every
  defence of the level (`Attack.adapts_to`, looked up at report time from the registered attacks:
  `citation.registered_adaptations`; an attack not installed counts as non-adaptive). A defended level without
  an adaptive attack that answered is marked "no adaptive attack (potentially unreliable)".
- *Worst leakage*: over the attacks (and attacked layers) that answered, each scored over its answered cells
  (status ok or partial) only: re-identification % (when the records carry it), then exact %, then PSNR median
  over the answered images (`leakage.leakage_vector`). A failed cell is no evidence of no leakage: it is left
  out, and a level where every attack failed is "not evaluated" (unranked), never a defence that stops them.
- *Seeds*: each compared value is shown with its seed spread (standard deviation over the answered seeds,
  '± 0' included; a PSNR median whose seeds mix exact and finite medians with their range, '22.5 (15.0–exact)');
  an attack that failed on some seeds says 'answered on k of n seeds'. How a failed seed counts is
  `leakage.SeedLeakage`'s rule: never as no leakage, never tighter or safer (`dominates`).
- *Accuracy cost*: the undefended victims' ('none') mean test accuracy minus the level's, over distinct victims
  (`victim_hash`; one per training seed), with Welch's 95 % t-interval of the difference when each side has
  at least two victims. A level within `UNUSABLE_PP` points of chance accuracy (1 / classes) is "unusable".
- *Rank*: on the privacy–utility front. Level A *dominates* B when A leaks less beyond the seed spread
  (`leakage.compare_leakage`) at an accuracy cost not greater than B's beyond the interval (`costs_more`).
  Rank 1 holds the evaluated, usable levels no other dominates; rank k + 1 those no level left after rank k
  dominates (non-dominated sorting); levels that share a rank are ties. A level that an attack answering
  against the undefended level never ran against is not compared on the same attacks: ranked after the levels
  measured against all of them. A level that does not leak less than the undefended one beyond the seed
  spread (`protects`) never ranks above it, whatever its cost (its rank is raised to the undefended level's).
  Unusable levels are ranked after the usable ones in the same way, levels not
  evaluated are not ranked ('–').

`defence_blocks` are the report's defence boards, `defence_ranking` the leaderboard's view "Defences ranked"
(both the same `verdict_board`); `privacy_utility_data` feeds the report's figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from leakbench.core.citation import Citation, Papers
from leakbench.core.reconstruction import ANSWERED
from leakbench.fl.dp import CLIPPING_NOISE
from leakbench.records.labels import update_steps
from leakbench.reporting.aggregate import (
    PSNR_CAP,
    board_order_key,
    grouped,
    incomplete_text,
    key_values,
    model_order,
)
from leakbench.reporting.board_page import Board, Column, Entry, anchor, number, paper_entry
from leakbench.reporting.leakage import (
    EXACT_DB,
    Leakage,
    SeedLeakage,
    leakage_stats,
    leaks_less,
    seed_leakage,
)
from leakbench.reporting.order import DEFAULT_THREAT, NONE, defence_levels, level_sorter
from leakbench.reporting.palette import colour
from leakbench.reporting.render import Block, Table

Adaptations = Mapping[str, frozenset[str]]
"""Attack name → the defences (update-transform names) it adapts to (`Attack.adapts_to` of the attacks
registered where the report is made: `citation.registered_adaptations`)."""
NO_ADAPTATIONS: Adaptations = {}
DEFENCE_KNOWN = "defence known"
"""The part of a threat model's label (`ThreatModel.label`) that grants the attacker the defence."""
DEFENCE_BOARD = ["suite", "dataset", "model", "batch_size"]
"""What one defence board of the report holds fixed; its rows are the defence levels, ranked."""
RANKING_BOARD = ["dataset", "model", "batch_size"]
"""What one defence ranking of the leaderboard holds fixed (whatever run the cells come from)."""
UNUSABLE_PP = 5.0
"""A level whose victims' mean test accuracy is within this many points of chance (1 / classes) is unusable."""
CLASSES = {"cifar10": 10, "mnist": 10, "digits": 10, "tinyimagenet": 200, "embedded": 6}
"""Class counts of the shipped datasets (their loaders' `num_classes`), for chance accuracy when the cells
store no `num_classes` column; another dataset's chance is unknown (no level is marked unusable)."""
NO_ADAPTIVE = "no adaptive attack (potentially unreliable)"
ADAPTIVE_FAILED = "adaptive attack failed (potentially unreliable)"
NOT_EVALUATED = "not evaluated: every attack failed"


# --------------------------------------------------------------------------- levels: the threat 'defence known' merged

def verdict_levels(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` (with `client` as `aggregate.with_model` makes it) with 'defence known' taken out of their threat
    model (`threat` and the `client` label), a boolean `defence_known` (the attacker knew the defence) and each
    cell's `level` (`order.defence_levels` of the rest): a defence-known cell lands in its defence's own row."""
    threat = cells["threat"].fillna(DEFAULT_THREAT).astype(str) if "threat" in cells \
        else pd.Series(DEFAULT_THREAT, cells.index)
    parts = [t.split(", ") for t in threat]
    known = [DEFENCE_KNOWN in p for p in parts]
    rest = [", ".join(x for x in p if x != DEFENCE_KNOWN) or DEFAULT_THREAT for p in parts]
    stored = cells["defence_known"].fillna(False).astype(bool) if "defence_known" in cells \
        else pd.Series(False, cells.index)
    client = cells["client"].astype(str) if "client" in cells else pd.Series("fedsgd", cells.index)
    merged = [c.replace(f" · {t}", f" · {r}" if r != DEFAULT_THREAT else "", 1) if k else c
              for c, t, r, k in zip(client, threat, rest, known, strict=True)]
    out = cells.assign(client=merged, threat=rest, defence_known=[k or bool(s) for k, s in zip(known, stored,
                                                                                                strict=True)])
    return out.assign(level=defence_levels(out))


def level_transforms(level: str, cells: pd.DataFrame) -> list[str]:
    """The update transforms of a defence level's `cells`, each once, in the order they run (a leading FedSGD,
    which the level does not name, left out), from the transform names their stored updates list
    (`records.labels`). Only for cells stored without their update: the names that start the parts of its
    label before any threat model ('DP σ=1 C=1 + prune p=0.5' → dp, prune)."""
    stored = [steps for steps in map(update_steps, cells["update"] if "update" in cells else ()) if steps]
    names = [name for steps in stored for i, (name, _) in enumerate(steps) if i or name != "fedsgd"]
    if not stored and level != NONE:  # cells stored before `update`
        parts = level.replace(CLIPPING_NOISE, "dp").split(" · ")[0].split(" + ")  # 'clipping + noise' is DP's
        names = [part.split(" ")[0].lower() for part in parts]
    return list(dict.fromkeys(names))


def level_papers(level: str, cells: pd.DataFrame, papers: Papers) -> list[tuple[str, Citation]]:
    """The papers of the update transforms of a defence level's `cells` (`level_transforms`), each once;
    transforms without a paper in `papers` give none."""
    return [(name, papers.defences[name]) for name in level_transforms(level, cells) if name in papers.defences]


def chance(cells: pd.DataFrame) -> float:
    """Chance accuracy of the board's dataset: 1 / its classes (a stored `num_classes` column, else `CLASSES`);
    NaN when unknown."""
    if "num_classes" in cells and cells["num_classes"].notna().any():
        return 1.0 / float(cells["num_classes"].dropna().iloc[0])
    classes = CLASSES.get(str(cells["dataset"].iloc[0])) if len(cells) and "dataset" in cells else None
    return 1.0 / classes if classes else math.nan


# --------------------------------------------------------------------------- one level's verdict

@dataclass(frozen=True)
class Attempt:
    """One attack (at one attacked layer, adaptive or not) against one level: its stats over the cells that
    answered (None when every cell failed) and its leakage per seed (`leakage.SeedLeakage`: spread, failed
    seeds)."""

    attack: str
    layer: int
    adaptive: bool
    cells: int
    answered: int
    stats: dict[str, Any] | None
    seeds: SeedLeakage

    @property
    def leakage(self) -> Leakage:
        return self.seeds.value


def _order_key(a: Attempt) -> tuple[float, ...]:
    """Larger leaks more (a NaN re-identification counts below any): picks a level's worst attempt."""
    return tuple(-math.inf if math.isnan(v) else v for v in a.leakage)


def attempts(records: pd.DataFrame, cells: pd.DataFrame, defences: list[str],
             adaptations: Adaptations) -> list[Attempt]:
    """Every (attack, layer, adaptive) of one level's `cells` (with `defence_known`, `verdict_levels`), by name:
    a cell is adaptive when its attacker knew the defence and its attack adapts to each of `defences`."""
    adapts = [bool(defences) and bool(known) and set(defences) <= adaptations.get(str(attack), frozenset())
              for attack, known in zip(cells["attack"], cells["defence_known"], strict=True)]
    out = []
    for key, sub in cells.assign(adaptive=adapts).groupby(["attack", "layer", "adaptive"], sort=True):
        attack, layer, adaptive = key_values(key)
        answered = sub[sub["status"].isin(ANSWERED)]
        mine = records[records["cell_id"].isin(set(sub["cell_id"]))]
        out.append(Attempt(str(attack), int(layer), bool(adaptive), len(sub), len(answered),
                           leakage_stats(mine[mine["cell_id"].isin(set(answered["cell_id"]))], answered)
                           if len(answered) else None, seed_leakage(mine, sub)))
    return out


def _victim_accuracies(cells: pd.DataFrame) -> np.ndarray:
    """Test accuracy of each distinct victim (`victim_hash`) of `cells` that has one (empty when none was trained)."""
    if "test_accuracy" not in cells:
        return np.array([], dtype=float)
    victims = cells.drop_duplicates("victim_hash") if "victim_hash" in cells else cells
    values: np.ndarray = victims["test_accuracy"].to_numpy(dtype=float)
    return np.asarray(values[np.isfinite(values)], dtype=float)


def _accuracy(cells: pd.DataFrame) -> float:
    """Mean test accuracy over the distinct victims of `cells` (NaN when none was trained)."""
    values = _victim_accuracies(cells)
    return float(values.mean()) if values.size else math.nan


def welch_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) − mean(b) and its Welch t-interval (`level`); NaN bounds unless each side has two values
    (an interval of zero width when both sides are constant); all NaN when a side is empty."""
    if not a.size or not b.size:
        return math.nan, math.nan, math.nan
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return diff, math.nan, math.nan
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    if va + vb == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = float(scipy_stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


@dataclass(eq=False)
class Verdict:
    """One defence level of a board: its attempts, its victims' accuracy and cost against 'none'."""

    level: str
    defences: list[str]
    attempts: list[Attempt]
    accuracies: np.ndarray
    cost: float
    """Undefended mean test accuracy minus the level's (a fraction; NaN without trained victims)."""
    low: float
    high: float
    """The 95 % interval of `cost` (NaN without two victims on each side)."""
    usable: bool
    cells: int
    missing: list[str]
    """Attacks that answered against the undefended level but never ran against this one (not compared)."""

    def worst(self, adaptive: bool | None = None) -> Attempt | None:
        """The attempt that leaks most among those that answered (only the adaptive or non-adaptive ones when
        `adaptive` says so); the first by name among equals; None when none answered."""
        found = [a for a in self.attempts if a.stats and (adaptive is None or a.adaptive == adaptive)]
        return max(found, key=_order_key) if found else None  # max keeps the first of equals

    @property
    def evaluated(self) -> bool:
        return self.worst() is not None

    @property
    def accuracy(self) -> float:
        return float(self.accuracies.mean()) if self.accuracies.size else math.nan

    def marks(self) -> list[str]:
        """What a reader must know before trusting the row: not evaluated, unusable, no adaptive attack."""
        out = [] if self.evaluated else [NOT_EVALUATED]
        out += [] if self.usable else ["unusable: accuracy within 5 pp of chance"]
        if self.defences and self.worst(adaptive=True) is None:
            out.append(ADAPTIVE_FAILED if any(a.adaptive for a in self.attempts) else NO_ADAPTIVE)
        if self.missing:
            out.append(f"not run: {', '.join(self.missing)} (ranked after the levels measured against every attack)")
        return out


def verdicts(records: pd.DataFrame, cells: pd.DataFrame, adaptations: Adaptations) -> list[Verdict]:
    """One `Verdict` per defence level of one board's `cells` (`verdict_levels` applied), in level order."""
    undefended = cells[cells["level"] == NONE]
    base = _victim_accuracies(undefended)
    ran = set(undefended.loc[undefended["status"].isin(ANSWERED), "attack"].astype(str))
    floor = chance(cells) + UNUSABLE_PP / 100
    order = level_sorter(cells)
    out = []
    for level, sub in sorted(cells.groupby("level", sort=True), key=lambda g: order(g[0])):
        defences = [] if level == NONE else level_transforms(str(level), sub)
        accuracies = _victim_accuracies(sub)
        cost, low, high = welch_interval(base, accuracies)
        usable = not (accuracies.size and float(accuracies.mean()) <= floor)  # NaN floor: usable
        out.append(Verdict(str(level), defences, attempts(records, sub, defences, adaptations), accuracies,
                           cost, low, high, usable, len(sub),
                           sorted(ran - set(sub["attack"].astype(str)))))
    return out


def costs_more(a: Verdict, b: Verdict) -> bool | None:
    """Whether `a` costs more accuracy than `b` beyond the 95 % interval (Welch, over their victims): b's
    accuracy minus a's above 0 over the whole interval; with fewer than two victims on a side, a's cost as
    shown (0.1 pp) above b's. None when either has no trained victim."""
    if not a.accuracies.size or not b.accuracies.size:
        return None if (a.accuracies.size or b.accuracies.size) else False
    diff, low, _ = welch_interval(b.accuracies, a.accuracies)
    if math.isnan(low):
        return round(100 * diff, 1) > 0
    return low > 0


def dominates(a: Verdict, b: Verdict) -> bool:
    """`a` leaks less than `b` beyond the seed spread, at an accuracy cost not greater beyond the interval
    (victims at init on both sides: leakage alone; trained on one side only: never). a's worst attempt and
    every attempt of a that failed on some seeds but answered on others (their failed seeds might have leaked
    more than the worst) must each leak less than b's worst (`leakage.leaks_less`: a failed seed counts as
    leaking the most it can)."""
    wa, wb = a.worst(), b.worst()
    if wa is None or wb is None or costs_more(a, b) is not False:
        return False
    unsure = [x for x in a.attempts if x.stats is not None and x.seeds.failed and x is not wa]
    return all(leaks_less(x.seeds, wb.seeds) for x in (wa, *unsure))


def protects(v: Verdict, rows: list[Verdict]) -> bool:
    """Whether level `v` leaks less than the undefended level of `rows` beyond the seed spread (`leaks_less`,
    costs aside); True where the board has no answered undefended level. A level that does not (the undefended
    level itself included) never ranks above the undefended level, whatever its cost: tie-by-interval cost
    comparisons are not transitive, and without this a level leaking as much as no defence could rank above
    it on victims that came out a little more accurate."""
    none = next((w for r in rows if r.level == NONE and (w := r.worst()) is not None), None)
    wv = v.worst()
    return none is None or (v.level != NONE and wv is not None and leaks_less(wv.seeds, none.seeds))


def ranked(rows: list[Verdict], order: Callable[[object], tuple[Any, ...]]) -> list[tuple[int | None, Verdict]]:
    """Levels with their rank (`dominates`, non-dominated sorting: the module's doc): usable evaluated levels
    first, then those an attack of the undefended level never ran against (`Verdict.missing`: not compared on
    the same attacks), then unusable ones, ranks counting on; a level that does not leak less than the
    undefended one (`protects`) never ranks above it (its rank is raised to the undefended level's); levels not
    evaluated last, unranked (None).
    Within a rank: least leakage, then smallest cost (unknown last), then level order."""
    def within(v: Verdict) -> tuple[Any, ...]:
        w = v.worst()
        return (_order_key(w) if w else (), v.cost if not math.isnan(v.cost) else math.inf, order(v.level))
    out: list[tuple[int, Verdict]] = []
    rank = 0
    evaluated = [v for v in rows if v.evaluated]
    tiers = ([v for v in evaluated if v.usable and not v.missing], [v for v in evaluated if v.usable and v.missing],
             [v for v in evaluated if not v.usable])
    for group in tiers:
        left = list(group)
        while left:
            front = [v for v in left if not any(dominates(o, v) for o in left if o is not v)] or left  # no cycle
            rank += 1
            out += [(rank, v) for v in sorted(front, key=within)]
            left = [v for v in left if all(v is not f for f in front)]
    floor = next((r for r, v in out if v.level == NONE), 0)
    out = [(r if protects(v, rows) else max(r, floor), v) for r, v in out]
    unevaluated = sorted((v for v in rows if not v.evaluated), key=lambda v: order(v.level))
    ranks: list[tuple[int | None, Verdict]] = [*sorted(out, key=lambda rv: (rv[0], within(rv[1])))]
    return ranks + [(None, v) for v in unevaluated]


# --------------------------------------------------------------------------- the board (report and leaderboard)

def _columns(reid: bool) -> list[Column]:
    """The board's columns; `reid`: the records carry re-identification (a 'reid %' per attack group)."""
    def group(name: str) -> list[Column]:
        return [Column(name, "attack", False), *([Column(name, "reid %")] if reid else []), Column(name, "exact %"),
                Column(name, "PSNR med. (dB)"), Column(name, "LPIPS")]
    return [Column("rank"), Column("defence", numeric=False), Column("verdict", numeric=False),
            Column(ACCURACY, "test %"), Column(ACCURACY, "cost (pp) [95 % CI]"),
            *group("worst non-adaptive"), *group("worst adaptive"), Column("attacks answered", numeric=False)]


ACCURACY = "accuracy"
ACCURACY_COLUMNS = 2
"""test accuracy and cost: left out of a board whose victims are all at init."""


def _attempt_entries(a: Attempt | None, several_layers: bool, papers: Papers, reid: bool) -> list[Entry]:
    """An attempt's attack (its failed seeds and incomplete batches said), then reid %, exact % and PSNR median,
    each with its seed spread (`_spread`), and LPIPS."""
    if a is None or a.stats is None:
        return [Entry("–"), *([Entry("–")] if reid else []), Entry("–"), Entry("–"), Entry("–")]
    s, seeds = a.stats, a.seeds
    name = a.attack + (f" (layer {a.layer})" if several_layers else "")
    name += f" (answered on {seeds.answered} of {seeds.total} seeds)" if seeds.failed else ""
    name += f" (incomplete: {incomplete_text(s['incomplete'])})" if s.get("incomplete") else ""
    reid_entry = [_spread(number(float(s.get("reid_pct", math.nan)), 0), seeds, 0, 0)] if reid else []
    return [paper_entry(name, papers.attacks.get(a.attack), colour(a.attack)), *reid_entry,
            _spread(number(s["exact_pct"], 0), seeds, 1, 0), _spread(psnr_entry(s), seeds, 2, 1),
            number(s["lpips_mean"], 3)]


def _spread(entry: Entry, seeds: SeedLeakage, component: int, digits: int) -> Entry:
    """A compared leakage number (`component` of `leakage.Leakage`) with ' ± ' its seed spread
    (`SeedLeakage.spread`, the standard deviation over the answered seeds, '± 0' included) so that a tie
    reads as one; as is with fewer than two answered seeds (no spread) or without a value. A PSNR median whose
    seeds mix an exact median (ranked as `leakage.EXACT_DB`) with finite ones has no spread in dB: it gives the
    seeds' range instead, '22.5 (14.1–exact)'."""
    if seeds.answered < 2 or entry.sort is None:
        return entry
    hint = f"± standard deviation over {seeds.answered} answered seeds"
    values = [seed[component] for seed in seeds.seeds]
    if component == 2 and any(v >= EXACT_DB for v in values):
        if all(v >= EXACT_DB for v in values):
            return entry  # every seed's median exact: 'exact', no spread
        low, high = (_psnr_text(v) for v in (min(values), max(values)))
        return Entry(f"{entry.text} ({low}–{high})", entry.sort, entry.href,
                     f"an exact median (ranked as {EXACT_DB:.0f} dB) among finite ones: no spread in dB")
    return Entry(f"{entry.text} ± {seeds.spread[component]:.{digits}f}", entry.sort, entry.href, hint)


def _psnr_text(shown: float) -> str:
    """A PSNR median as shown (`leakage.shown_median`): 'exact', '≥ 60' at the cap, else 0.1 dB."""
    return "exact" if shown >= EXACT_DB else f"≥ {PSNR_CAP:.0f}" if shown >= PSNR_CAP else f"{shown:.1f}"


def _verdict_text(v: Verdict) -> str:
    if v.marks():
        return "; ".join(v.marks())
    return "undefended" if v.level == NONE else "adaptively evaluated"


def _answered(v: Verdict) -> Entry:
    """'1/2 · spear failed · ig 1/3 failed': the attacks that answered on at least one cell (adaptive or
    not, any layer) of all, the attacks that failed on every cell, and the failed cells of the attacks that
    answered (failed of all their cells)."""
    names = sorted({a.attack for a in v.attempts})
    mine = {n: [a for a in v.attempts if a.attack == n] for n in names}
    failed = [n for n in names if all(a.stats is None for a in mine[n])]
    some = [f"{n} {sum(a.cells - a.answered for a in mine[n])}/{sum(a.cells for a in mine[n])} failed"
            for n in names if n not in failed and any(a.answered < a.cells for a in mine[n])]
    parts = [f"{len(names) - len(failed)}/{len(names)}", *([f"{', '.join(failed)} failed"] if failed else []),
             *some]
    return Entry(" · ".join(parts), len(names) - len(failed))


def _cost(v: Verdict) -> Entry:
    """The accuracy cost in points with its 95 % interval: '5.0 [−2.6, 12.7]', '5.0 (1 victim)' without one
    (sorted by the cost either way); '0.0' for the undefended level itself."""
    entry = number(100 * v.cost, 1)
    if math.isnan(v.cost) or v.level == NONE:
        return entry
    if math.isnan(v.low):
        return Entry(f"{entry.text} (1 victim)", entry.sort,
                     hint="fewer than two trained victims on a side: no interval")
    return Entry(f"{entry.text} [{100 * v.low:.1f}, {100 * v.high:.1f}]", entry.sort,
                 hint=f"Welch 95 % t-interval over {v.accuracies.size} victims")


def verdict_board(records: pd.DataFrame, cells: pd.DataFrame, papers: Papers,
                  adaptations: Adaptations) -> tuple[list[Column], list[list[Entry]], list[str]]:
    """One board's columns, ranked rows and notes (`cells` of one board with `verdict_levels` applied)."""
    rows = verdicts(records, cells, adaptations)
    reid = any(a.stats and not math.isnan(float(a.stats.get("reid_pct", math.nan))) for v in rows for a in v.attempts)
    several_layers = cells["layer"].nunique() > 1
    body = []
    for rank, v in ranked(rows, level_sorter(cells)):
        cited = level_papers(v.level, cells[cells["level"] == v.level], papers)
        name = Entry(v.level, None, cited[0][1].url if cited else None,
                     "; ".join(f"{n}: {c.short}" for n, c in cited))
        body.append([Entry(str(rank), rank) if rank else Entry("–"), name, Entry(_verdict_text(v)),
                     number(100 * v.accuracy, 1), _cost(v),
                     *_attempt_entries(v.worst(adaptive=False), several_layers, papers, reid),
                     *_attempt_entries(v.worst(adaptive=True), several_layers, papers, reid),
                     _answered(v)])
    notes = [RANK_NOTE]
    if max((a.answered for v in rows for a in v.attempts), default=0) < 2:
        notes.append("One seed per setting: no seed spread, leakage compared as shown.")
    columns = _columns(reid)
    if all(math.isnan(v.accuracy) for v in rows):
        notes.append("Victims at init (untrained): no accuracy measured, ranked by leakage alone.")
        cut = slice(3, 3 + ACCURACY_COLUMNS)
        columns = columns[:cut.start] + columns[cut.stop:]
        body = [row[:cut.start] + row[cut.stop:] for row in body]
    elif not any(v.level == NONE for v in rows):
        notes.append("No undefended level in this board: no accuracy cost.")
    elif any(math.isnan(v.low) for v in rows if not math.isnan(v.cost) and v.level != NONE):
        notes.append("Cost '(1 victim)': fewer than two trained victims (training seeds) on a side, so no "
                     "interval; such costs are compared as shown (0.1 pp).")
    if math.isnan(chance(cells)):
        notes.append("Chance accuracy unknown for this dataset: no level is marked unusable.")
    return columns, body, notes


RANK_NOTE = (
    "Rank: a level ranks above another only where a level of the rank above leaks less beyond the seed spread "
    "(re-identification %, then exact %, then PSNR median of its worst attack; a difference within the larger "
    "standard deviation over seeds is a tie) at an accuracy cost not greater beyond the 95 % interval; levels "
    "that share a rank are ties. Every compared value is shown '± its standard deviation over the answered "
    "seeds' ('± 0': the seeds agree; none with one seed); a PSNR median whose seeds mix an exact median with "
    "finite ones gives the seeds' range instead ('22.5 (15.0–exact)'). Worst attack: over the attacks that "
    "answered (failed cells left out, never counted as no leakage), the adaptive ones (attacker told the "
    "defence, attack adapts to it) beside the others. An attack that failed on some seeds says 'answered on k "
    "of n seeds': its value and spread are over the k that answered, and its level ranks above another only if "
    "it would still leak less had each failed seed leaked everything (every image re-identified and exact). "
    "Levels an "
    "attack of the undefended level never ran against rank after those measured against every one; unusable "
    "levels (accuracy within 5 pp of chance) after the usable ones; levels where every attack failed are not "
    "evaluated and not ranked ('–'). Accuracy cost: undefended victims' mean test accuracy minus the level's "
    "(victims trained with the level on every update), in points, with Welch's 95 % interval over the training "
    "seeds' victims.")


def defence_table(records: pd.DataFrame, cells: pd.DataFrame, board: tuple[Any, ...],
                  adaptations: Adaptations = NO_ADAPTATIONS) -> Table:
    """One report board (`cells` with `verdict_levels` applied): the leaderboard's board as text, without its
    LPIPS columns (so that it fits a 1,400-pixel window)."""
    suite, dataset, model, b = board
    columns, body, notes = verdict_board(records, cells, Papers(), adaptations)
    kept = [i for i, c in enumerate(columns) if c.setting != "LPIPS"]  # the page's width: LPIPS in the leaderboard
    return Table(f"Defences: {dataset} · {model} · b={b} (suite {suite})", [columns[i].label for i in kept],
                 [[row[i].text for i in kept] for row in body],
                 [*notes, "Mean LPIPS of each worst attack: in the leaderboard's view 'Defences ranked'."])


def _boards(cells: pd.DataFrame, by: list[str],
            key: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """The boards of `cells` (`verdict_levels` applied) grouped `by`, in `key` order, those with a defended level."""
    groups = sorted(((key_values(k), sub) for k, sub in cells.groupby(by, sort=True)), key=lambda g: key(g[0]))
    return [(k, sub) for k, sub in groups if (sub["level"] != NONE).any()]


def defence_blocks(records: pd.DataFrame, cells: pd.DataFrame,
                   adaptations: Adaptations = NO_ADAPTATIONS) -> list[Block]:
    """The board "defences": one table per suite, dataset, model and batch size that holds a defended level
    (`cells` with `model` and `client`, as `aggregate.with_model` makes them, and `suite`)."""
    cells = verdict_levels(cells)
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    blocks: list[Block] = []
    for board, sub in _boards(cells, DEFENCE_BOARD, lambda k: (k[0], k[1], rank[k[2]], k[3])):
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"])) & (records["suite"] == board[0])] \
            if "suite" in records else records[records["cell_id"].isin(set(sub["cell_id"]))]
        blocks.append(defence_table(sub_records, sub, board, adaptations))
    return blocks


def privacy_utility_data(records: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, model, batch size, attack, defence level) of trained victims: test accuracy %,
    exact %, PSNR median and mean LPIPS pooled over the level's cells (seeds, layers) that answered."""
    cells = verdict_levels(cells)
    cells = cells[np.isfinite(cells["test_accuracy"].to_numpy(dtype=float)) & cells["status"].isin(ANSWERED)] \
        if "test_accuracy" in cells else cells.iloc[0:0]
    by = ["dataset", "model", "batch_size", "attack", "level"]
    rows = []
    for key, s in grouped(records, cells, by):
        sub = cells[(cells[by] == list(key)).all(axis=1)]
        rows.append({**dict(zip(by, key, strict=True)), "accuracy_pct": 100 * _accuracy(sub),
                     "exact_pct": s["exact_pct"], "psnr_median": s["psnr_median"], "lpips_mean": s["lpips_mean"]})
    return pd.DataFrame(rows, columns=[*by, "accuracy_pct", "exact_pct", "psnr_median", "lpips_mean"])


VERDICT_POINTS = ["dataset", "model", "batch_size", "level", "rank", "cost_pp", "cost_low_pp", "cost_high_pp",
                  "leakage_pct", "leakage_spread", "measure", "attack", "adaptive", "marked"]
"""The columns of `verdict_points`."""


def verdict_points(records: pd.DataFrame, cells: pd.DataFrame,
                   adaptations: Adaptations = NO_ADAPTATIONS) -> pd.DataFrame:
    """The verdict boards as points of a privacy–utility plane (the report's verdict figure): per board
    (dataset, model, batch size) with trained victims, one row per evaluated level with an accuracy cost — its
    rank (None: not ranked), cost and 95 % interval in points, and its worst attack's leakage (adaptive attacks
    included, `Verdict.worst`): re-identification % with its seed spread, or exact % where the records carry
    no re-identification (`measure` says which); `marked`: the row carries a mark (`Verdict.marks`)."""
    cells = verdict_levels(cells)
    rows = []
    for (dataset, model, b), sub in _boards(cells, RANKING_BOARD, board_order_key(cells)):
        mine = records[records["cell_id"].isin(set(sub["cell_id"]))]
        for rank, v in ranked(verdicts(mine, sub, adaptations), level_sorter(sub)):
            worst = v.worst()
            if worst is None or math.isnan(v.cost):
                continue
            reid = not math.isnan(worst.leakage[0])
            component = 0 if reid else 1
            rows.append({"dataset": dataset, "model": model, "batch_size": b, "level": v.level, "rank": rank,
                         "cost_pp": 100 * v.cost, "cost_low_pp": 100 * v.low, "cost_high_pp": 100 * v.high,
                         "leakage_pct": worst.leakage[component], "leakage_spread": worst.seeds.spread[component],
                         "measure": "reid" if reid else "exact", "attack": worst.attack,
                         "adaptive": worst.adaptive, "marked": bool(v.marks())})
    return pd.DataFrame(rows, columns=VERDICT_POINTS)


# --------------------------------------------------------------------------- the leaderboard's defence ranking

def defence_ranking(records: pd.DataFrame, cells: pd.DataFrame, papers: Papers | None = None,
                    adaptations: Adaptations = NO_ADAPTATIONS) -> list[Board]:
    """The leaderboard's view "Defences ranked": per dataset, victim and batch size with a defended level,
    the defence levels ranked by `verdict_board` (`cells` with `model`, `client` and `suite`, as the
    leaderboard loads them)."""
    cells = verdict_levels(cells)
    boards = []
    for key, sub in _boards(cells, RANKING_BOARD, board_order_key(cells)):
        sub_records = records[records["cell_id"].isin(set(sub["cell_id"]))]
        boards.append(ranking_board(sub_records, sub, key, papers or Papers(), adaptations))
    return boards


def ranking_board(records: pd.DataFrame, cells: pd.DataFrame, board: tuple[Any, ...], papers: Papers,
                  adaptations: Adaptations = NO_ADAPTATIONS) -> Board:
    """One board of the defence ranking (`cells` with `verdict_levels` applied): `verdict_board`."""
    dataset, model, b = board
    columns, body, notes = verdict_board(records, cells, papers, adaptations)
    notes = [n for n in notes if n != RANK_NOTE]  # the view's intro says it once (`leaderboard.DEFENCES_INTRO`)
    return Board(f"{dataset} · {model} · b={b}", columns, body, notes, [], anchor("d", *board))



def psnr_entry(s: dict[str, Any] | None) -> Entry:
    """A PSNR median entry: 'exact' (sorted as +∞) when the median image is exact, '≥ 60' past
    `aggregate.PSNR_CAP` (sorted as the cap: above it the number tells only float digits), '–' when none."""
    if s is None:
        return Entry("–")
    value = s["psnr_exact_median"]
    if math.isnan(value):
        return Entry("–")
    if math.isinf(value):
        return Entry("exact", math.inf, hint="the median image is exact (pixel-equal at 8 bits)")
    if value >= PSNR_CAP:
        return Entry(f"≥ {PSNR_CAP:.0f}", PSNR_CAP, hint=f"{value:.1f} dB: within the 8-bit rounding step, not exact")
    return number(value, 1)

