"""What a run found, in a few lines: the report's "Key findings" and its one headline table.

For each dataset, victim and defence level (`defences.defence_levels`: DP, noise, defences, client and
threat model in one label) the *strongest attack* is the one that recovers the largest batch exactly
(every image of every seed exact), then the most exact images over the batch sizes run, then the highest
PSNR median, each compared as a table shows it (whole %, 0.1 dB capped at 60 dB); equally strong attacks
are listed by name. Where an attack has several attacked layers, its best layer per batch size counts.
"Every attack fails" at a batch size means that no attack recovered a single image of it exactly.
n (images) and failures (images without a reconstruction) are given with every claim.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from leakbench.fl.dp import CLIPPING_NOISE
from leakbench.reporting.aggregate import all_exact, fmt, grouped, model_order, no_answer, psnr_text, state_words
from leakbench.reporting.order import NONE, defence_levels, level_sorter
from leakbench.reporting.pivot import shown_psnr
from leakbench.reporting.render import Table, Text

Stats = dict[str, Any]


@dataclass(frozen=True)
class AttackResult:
    """One attack against one defence level: its best layer's stats per batch size (ascending)."""

    attack: str
    by_size: dict[int, tuple[int, Stats]]
    """batch size → (layer, stats) of the layer that leaked most at that size."""

    @property
    def exact_up_to(self) -> int | None:
        """The largest batch size recovered exactly (every image), None when none was."""
        sizes = [b for b, (_, s) in self.by_size.items() if all_exact(s)]
        return max(sizes) if sizes else None

    @property
    def largest(self) -> tuple[int, int, Stats]:
        """(batch size, layer, stats) at the largest batch size the attack ran."""
        b = max(self.by_size)
        return b, *self.by_size[b]

    def totals(self) -> tuple[int, int]:
        """Images and failed images over every batch size (best layers)."""
        return (sum(s["n"] for _, s in self.by_size.values()), sum(s["failures"] for _, s in self.by_size.values()))

    def strength(self) -> tuple[float, float, float]:
        """Larger is stronger: largest exact batch, then mean exact %, then mean PSNR median (as shown)."""
        stats = [s for _, s in self.by_size.values()]
        return (float(self.exact_up_to or 0), round(sum(s["exact_pct"] for s in stats) / len(stats)),
                round(sum(shown_psnr(s["psnr_median"]) for s in stats) / len(stats), 1))


@dataclass(frozen=True)
class Setting:
    """One dataset, victim and defence level: every attack's result, strongest first."""

    dataset: str
    model: str
    level: str
    results: list[AttackResult]
    layered: bool
    """True when some attack ran at several layers (then the layer is named)."""

    @property
    def strongest(self) -> AttackResult:
        return self.results[0]

    def sizes(self) -> list[int]:
        """Every batch size some attack ran, ascending."""
        return sorted({b for r in self.results for b in r.by_size})

    def sizes_all_fail(self) -> list[int]:
        """Batch sizes at which no attack recovered any image exactly."""
        return [b for b in self.sizes()
                if all(r.by_size[b][1]["exact_pct"] == 0 for r in self.results if b in r.by_size)]

    def totals(self) -> tuple[int, int]:
        """Images and failed images over every attack (best layers)."""
        pairs = [r.totals() for r in self.results]
        return sum(n for n, _ in pairs), sum(f for _, f in pairs)


def _best_layer(entries: list[tuple[int, Stats]]) -> tuple[int, Stats]:
    return min(entries, key=lambda e: (-round(e[1]["exact_pct"]), -shown_psnr(e[1]["psnr_median"]), e[0]))


def settings(records: pd.DataFrame, cells: pd.DataFrame) -> list[Setting]:
    """Every dataset × victim × defence level of `cells` (with `model` and `client`, as
    `aggregate.with_model` makes them), datasets by name, victims in `model_order`, levels in `level_sorter`
    order (undefended first)."""
    cells = cells.assign(level=defence_levels(cells))
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    out = []
    order = level_sorter(cells)
    groups = sorted(cells.groupby(["dataset", "model", "level"], sort=True),
                    key=lambda g: (g[0][0], rank[g[0][1]], order(g[0][2])))
    for (dataset, model, level), sub in groups:
        per: dict[str, dict[int, list[tuple[int, Stats]]]] = {}
        for (attack, b, layer), s in grouped(records, sub, ["attack", "batch_size", "layer"]):
            per.setdefault(str(attack), {}).setdefault(int(b), []).append((int(layer), s))
        results = [AttackResult(a, {b: _best_layer(e) for b, e in sorted(sizes.items())}) for a, sizes in per.items()]
        results.sort(key=lambda r: (tuple(-v for v in r.strength()), r.attack))
        out.append(Setting(str(dataset), str(model), str(level), results, bool(sub.groupby("attack")["layer"]
                                                                               .nunique().max() > 1)))
    return out


def _claim(result: AttackResult, layered: bool) -> str:
    """'spear (layer 1): every image exact up to b = 16; 100 % at b = 16 (n = 16, 0 failures)'."""
    b, layer, s = result.largest
    n, failures = result.totals()
    name = result.attack + (f" (layer {layer})" if layered else "")
    up_to = result.exact_up_to
    head = (f"every image exact up to b = {up_to}" if up_to is not None
            else "no batch exact" + (f", {fmt(s['exact_pct'], 0)} % of images" if s["exact_pct"] > 0 else ""))
    psnr = psnr_text(s["psnr_median"], exact=all_exact(s))
    detail = (f"{state_words(s)} at b = {b}" if no_answer(s)  # its state, never "0 % exact" (issue 43)
              else f"{fmt(s['exact_pct'], 0)} % exact at b = {b}, PSNR median {psnr}")
    return f"{name}: {head} ({detail}; n = {n}, {failures} failures)"


def family(level: str) -> str:
    """The defence a level belongs to: the first word of its label ('noise σ=1e-05' → 'noise'); DP's levels
    labelled 'clipping + noise …' (ε past 100, `fl.dp.CLIPPING_NOISE`) are 'clipping + noise'."""
    return CLIPPING_NOISE if level.startswith(CLIPPING_NOISE + " ") else level.split(" ", 1)[0]


def _levels(group: list[Setting]) -> str:
    """'noise σ=0.0001, σ=0.001, σ=0.01; prune p=0.1, p=0.5' — levels grouped by their defence."""
    families: dict[str, list[str]] = {}
    for s in group:
        families.setdefault(family(s.level), []).append(s.level.removeprefix(family(s.level)).strip())
    return "; ".join(f"{name} {', '.join(v for v in values if v)}".strip() for name, values in families.items())


def _counts(group: list[Setting], *, strongest: bool = False) -> str:
    """'n = 240, 96 failures' over the settings (every attack, or only each one's strongest)."""
    pairs = [s.strongest.totals() if strongest else s.totals() for s in group]
    return f"n = {sum(n for n, _ in pairs)}, {sum(f for _, f in pairs)} failures"


def findings_block(found: list[Setting]) -> Text:
    """Key findings: per dataset and victim, the undefended strongest attack, which defence levels still
    let an attack recover images exactly (wholly or partly), and under which every attack fails."""
    bullets: list[str] = []
    victims = list(dict.fromkeys((s.dataset, s.model) for s in found))
    for dataset, model in victims:
        mine = [s for s in found if (s.dataset, s.model) == (dataset, model)]
        where = f"{dataset} · {model}"
        for s in mine:
            if s.level == NONE:
                bullets.append(f"{where}, no defence: {_claim(s.strongest, s.layered)}.")
        defended = [s for s in mine if s.level != NONE]
        whole = [s for s in defended if s.strongest.exact_up_to is not None]
        partial = [s for s in defended if s.strongest.exact_up_to is None and s.strongest.strength()[1] > 0]
        failing = [s for s in defended if s.sizes_all_fail() == s.sizes()]
        if whole:
            attacks = ", ".join(dict.fromkeys(s.strongest.attack for s in whole))
            sizes = sorted({s.strongest.exact_up_to or 0 for s in whole})
            bullets.append(f"{where}, still recovered exactly (every image, b ≤ {'/'.join(map(str, sizes))}, by "
                           f"{attacks}) under {_levels(whole)} ({_counts(whole, strongest=True)}).")
        if partial:
            bullets.append(f"{where}, some images exact under " + "; ".join(
                f"{s.level} ({s.strongest.attack} {fmt(s.strongest.largest[2]['exact_pct'], 0)} % at "
                f"b = {s.strongest.largest[0]}, {_counts([s], strongest=True)})" for s in partial) + ".")
        if failing:
            best = max(failing, key=lambda s: shown_psnr(_best(s)[0]))
            psnr, attack, b = _best(best)
            closest = (f"; the closest: PSNR median {psnr_text(psnr)} by {attack} at b = {b} under {best.level}"
                       if not math.isnan(psnr) else "; no attack returned a reconstruction")
            bullets.append(f"{where}, no attack recovers an image exactly under {_levels(failing)} "
                           f"({_counts(failing)} over all attacks){closest}{_reidentified(failing)}.")
    return Text("Key findings", bullets=bullets, notes=[
        "Generated from the records. Strongest attack: the largest batch recovered exactly (every image of every "
        "seed), then the most exact images, then the highest PSNR median, compared as shown (whole %, 0.1 dB, "
        "capped at 60 dB); equally strong attacks are listed by name. n: images scored; failures: images an "
        "attack returned no reconstruction for (counted as not exact). Every defence level in the headline table."])


def _reidentified(settings: list[Setting]) -> str:
    """'; re-identified: 75 % of images by cpa at b = 16 under prune p=0.5' — the highest top-1
    re-identification rate (`metrics.reid`) of any attack in `settings` where one was scored, '' otherwise: no
    image exact is not no leakage (issue 43)."""
    found = [(float(stats["reid_pct"]), r.attack, b, s.level) for s in settings for r in s.results
             for b, (_, stats) in r.by_size.items() if not math.isnan(stats.get("reid_pct", math.nan))]
    if not found or max(found)[0] == 0:
        return ""
    pct, attack, b, level = max(found, key=lambda f: (round(f[0]), f[1]))
    return f"; re-identified: {fmt(pct, 0)} % of images by {attack} at b = {b} under {level}"


def _best(setting: Setting) -> tuple[float, str, int]:
    """The highest PSNR median any attack reached, at the largest batch size where one reached any:
    (PSNR, attack, b); (NaN, strongest attack, largest b) when no attack reconstructed anything."""
    for b in reversed(setting.sizes()):
        at = [(r.by_size[b][1]["psnr_median"], r.attack) for r in setting.results
              if b in r.by_size and not math.isnan(r.by_size[b][1]["psnr_median"])]
        if at:
            psnr, attack = max(at, key=lambda a: (shown_psnr(a[0]), a[1]))
            return psnr, attack, b
    return math.nan, setting.strongest.attack, max(setting.sizes())


def _strongest_text(s: Setting) -> str:
    """The strongest attack (and those as strong), or 'none exact (closest: ig)' where every attack fails."""
    r = s.strongest
    layer = f" (layer {r.largest[1]})" if s.layered else ""
    if s.sizes_all_fail() == s.sizes():
        return f"none exact (closest: {_best(s)[1]})"
    peers = [t.attack for t in s.results[1:] if t.strength() == r.strength()]
    return r.attack + layer + (f" = {', '.join(peers)}" if peers else "")


def _shown(s: Setting) -> AttackResult:
    """The attack whose numbers a headline row shows: the strongest, or where every attack fails the
    closest one (highest PSNR median at the largest batch size with any)."""
    if s.sizes_all_fail() != s.sizes():
        return s.strongest
    closest = _best(s)[1]
    return next(r for r in s.results if r.attack == closest)


VICTIM_HEADER = ["strongest attack", "exact up to b", "exact % · PSNR median", "n / failures"]


def headline_table(found: list[Setting]) -> Table:
    """One row per dataset and defence level, one group of columns per victim: the strongest attack, the
    largest batch it recovers exactly, its exact % and PSNR median at the largest batch, its n and failures."""
    victims = list(dict.fromkeys(s.model for s in found))
    by_key = {(s.dataset, s.level, s.model): s for s in found}
    datasets = list(dict.fromkeys(s.dataset for s in found))
    sizes = {max(_shown(s).by_size) for s in found}
    at = f" at b = {next(iter(sizes))}" if len(sizes) == 1 else ""
    rows = []
    for dataset in datasets:
        for level in dict.fromkeys(s.level for s in found if s.dataset == dataset):
            row = [dataset, level] if len(datasets) > 1 else [level]
            for model in victims:
                s = by_key.get((dataset, level, model))
                if s is None:
                    row += ["–"] * len(VICTIM_HEADER)
                    continue
                shown = _shown(s)
                b, _, stats = shown.largest
                n, failures = shown.totals()
                leak = state_words(stats) if no_answer(stats) else (  # a failed setting: its state, never 0 %
                    f"{fmt(stats['exact_pct'], 0)} % · {psnr_text(stats['psnr_median'], exact=all_exact(stats))}")
                row += [_strongest_text(s), str(shown.exact_up_to or "none"), leak + ("" if at else f" (b = {b})"),
                        f"{n} / {failures}"]
            rows.append(row)
    single = len(victims) == 1
    names = [*VICTIM_HEADER[:2], VICTIM_HEADER[2] + (at or " (at the largest b)"), VICTIM_HEADER[3]]
    header = ["dataset"] * (len(datasets) > 1) + ["defence"] + [
        h if single else f"{model}: {h}" for model in victims for h in names]
    title = "Headline: the strongest attack per defence" + ("" if single else ", per victim") + (
        f" ({datasets[0]}, {victims[0]})" if single and len(datasets) == 1 else "")
    return Table(title, header, rows, [
        "exact up to b: the largest batch size whose every image (all seeds) the attack recovered exactly. "
        "'= other': attacks exactly as strong. 'none exact (closest: …)': no attack recovered a single image "
        "exactly at any batch size; the closest is the one with the highest PSNR median. n / failures: the "
        "strongest attack's images and failed images over every batch size (its best layer per size). "
        "Per-attack detail: the per-setting tables below."])


__all__ = ["AttackResult", "Setting", "findings_block", "headline_table", "settings"]
