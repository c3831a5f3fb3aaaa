"""Defence verdicts a reviewer accepts (issue 43), on synthetic stored tables: a failed cell is never ranked as
leaking nothing, adaptive (defence-known) cells stand in their defence's own row, a level without an adaptive
attack is marked, and levels rank on the privacy–utility front (accuracy intervals over training seeds,
unusable levels at chance, seed spread of the leakage)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from leakbench.reporting.aggregate import with_model
from leakbench.reporting.defences import (
    NO_ADAPTIVE,
    NOT_EVALUATED,
    costs_more,
    defence_blocks,
    defence_ranking,
    verdict_levels,
    verdicts,
    welch_interval,
)
from leakbench.reporting.render import Table

MASKED = {"ig-masked": frozenset({"prune", "soteria"})}
"""What the registry says of the shipped adaptive attacks (`Attack.adapts_to`)."""
NOISE = "noise σ=0.01"


def _cell(level: str, attack: str, seed: int, *, exact: float = 0.0, psnr: float | list[float] = 20.0,
          status: str = "ok", threat: str = "default", accuracy: float = float("nan"),
          victim: str | None = None, reid: float | None = None) -> dict[str, Any]:
    """A cell spec: `level` 'none', 'noise σ=S' or a defence label ('prune p=0.5'); `psnr` the PSNR of each of
    its 4 images (one value: all four); a failed cell has no image; `reid` the fraction of its images whose
    true image ranks first among the distractors (None: not scored)."""
    sigma = float(level.split("=")[1]) if level.startswith("noise") else 0.0
    defence = level if level not in ("none",) and not level.startswith("noise") else None
    return {"level": level, "attack": attack, "seed": seed, "exact": exact, "psnr": psnr, "status": status,
            "threat": threat, "accuracy": accuracy, "victim": victim or f"{level}-{seed}", "sigma": sigma,
            "defence": defence, "reid": reid}


def _tables(specs: list[dict[str, Any]], images: int = 4, labelled: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stored cells and records of `specs` (as `leakbench run` stores them), cells through `with_model` when
    `labelled`."""
    cells, records = [], []
    for i, s in enumerate(specs):
        cid = f"c{i}"
        cells.append({"suite": "s", "cell_id": cid, "attack": s["attack"], "dataset": "cifar10", "batch_size": 4,
                      "width": 200, "depth": 6, "layer": 1, "seed": s["seed"], "dp": "none", "dp_sigma": np.nan,
                      "dp_clip": np.nan, "dp_epsilon": np.nan, "arch": "fc", "client": "fedsgd", "train_epochs": 2,
                      "test_accuracy": s["accuracy"], "victim_hash": s["victim"], "status": s["status"],
                      "seconds": 1.0, "noise_sigma": s["sigma"], "noise_scale": "absolute", "defence": s["defence"],
                      "threat": s["threat"], "space": "image",
                      "reid_n": np.nan if s["reid"] is None else 100.0, "reid_distance": "lpips"})
        failed = s["status"] == "failed"
        psnrs = s["psnr"] if isinstance(s["psnr"], list) else [s["psnr"]] * images
        for k, psnr in enumerate(psnrs):
            records.append({"suite": "s", "cell_id": cid, "exact": not failed and k < s["exact"] * images,
                            "psnr": np.nan if failed else psnr, "ssim": np.nan if failed else 0.5,
                            "lpips": np.nan if failed else 0.3, "rel_error": np.nan,
                            "status": s["status"], "space": "image",
                            "reid_rank": np.nan if failed or s["reid"] is None else 1 + (k >= s["reid"] * images)})
    return pd.DataFrame(records), with_model(pd.DataFrame(cells)) if labelled else pd.DataFrame(cells)


def _rows(table: Table) -> dict[str, dict[str, str]]:
    """A report board's rows by defence level, each as {column header: text}."""
    return {row[1]: dict(zip(table.header, map(str, row), strict=True)) for row in table.rows}


def test_a_failed_cell_is_never_ranked_as_leaking_nothing() -> None:
    """spear fails under both noise levels; under σ = 0.01 ig still answers at 18 dB, under σ = 0.1 every attack
    failed. Old code: σ = 0.1 scored 0 % and 0 dB and ranked first ("exact cut 100 pp")."""
    specs = [_cell(level, attack, seed, **kw) for seed in (0, 1, 2) for level, attack, kw in (
        ("none", "spear", {"exact": 1.0, "psnr": np.inf}), ("none", "ig", {"psnr": 20.0}),
        (NOISE, "spear", {"status": "failed"}), (NOISE, "ig", {"psnr": 18.0}),
        ("noise σ=0.1", "spear", {"status": "failed"}), ("noise σ=0.1", "ig", {"status": "failed"}))]
    records, cells = _tables(specs)
    [table] = defence_blocks(records, cells, MASKED)
    rows = _rows(table)
    assert rows["noise σ=0.1"]["rank"] == "–" and rows["noise σ=0.1"]["verdict"].startswith(NOT_EVALUATED)
    assert rows["noise σ=0.1"]["worst non-adaptive exact %"] == "–"
    assert table.rows[-1][1] == "noise σ=0.1"  # after every evaluated level
    assert rows[NOISE]["worst non-adaptive attack"] == "ig" and rows[NOISE]["worst non-adaptive PSNR med. (dB)"] \
        == "18.0 ± 0.0" and rows[NOISE]["attacks answered"] == "1/2 · spear failed"
    assert rows[NOISE]["rank"] == "1" and rows["none"]["rank"] == "2"
    [board] = defence_ranking(records, cells, None, MASKED)  # the leaderboard's view: the same verdicts
    shown = {row[1].text: [e.text for e in row] for row in board.rows}
    assert shown["noise σ=0.1"][0] == "–" and "100" not in shown["noise σ=0.1"]


def test_defence_known_cells_land_in_their_defence_row() -> None:
    """ig-masked ran with the defence known: its result is the prune level's adaptive worst case, in the prune
    row beside plain ig (old code: a separate 'prune p=0.5 · defence known' row)."""
    known = "defence known"
    specs = [_cell(level, attack, seed, psnr=psnr, threat=threat) for seed in (0, 1, 2)
             for level, attack, psnr, threat in (
                 ("none", "ig", 40.0, "default"), ("none", "ig-masked", 40.0, known),
                 ("prune p=0.5", "ig", 15.0, "default"), ("prune p=0.5", "ig-masked", 35.0, known))]
    records, cells = _tables(specs)
    assert set(verdict_levels(cells)["level"]) == {"none", "prune p=0.5"}
    [table] = defence_blocks(records, cells, MASKED)
    rows = _rows(table)
    assert set(rows) == {"none", "prune p=0.5"}
    prune = rows["prune p=0.5"]
    assert (prune["worst non-adaptive attack"], prune["worst non-adaptive PSNR med. (dB)"]) == ("ig", "15.0 ± 0.0")
    assert (prune["worst adaptive attack"], prune["worst adaptive PSNR med. (dB)"]) == ("ig-masked", "35.0 ± 0.0")
    assert NO_ADAPTIVE not in prune["verdict"] and prune["attacks answered"] == "2/2"
    # labels known stays a threat model of its own: only 'defence known' is taken out of it
    both = _tables([{**s, "threat": "labels known, defence known"} if s["threat"] == known else s for s in specs])[1]
    assert set(verdict_levels(both)["level"]) == {"none", "prune p=0.5", "labels known", "prune p=0.5 · labels known"}


def test_a_level_without_an_adaptive_attack_is_marked() -> None:
    """ig-masked adapts to pruning, not to noise: the noise level has no adaptive attack; neither has prune when
    the registry does not know ig-masked (a plugin not installed here counts as non-adaptive)."""
    specs = [_cell(level, "ig-masked", seed, psnr=30.0, threat="defence known") for seed in (0, 1, 2)
             for level in ("none", NOISE, "prune p=0.5")]
    records, cells = _tables(specs)
    rows = _rows(defence_blocks(records, cells, MASKED)[0])
    assert NO_ADAPTIVE in rows[NOISE]["verdict"] and rows[NOISE]["worst adaptive attack"] == "–"
    assert NO_ADAPTIVE not in rows["prune p=0.5"]["verdict"] and NO_ADAPTIVE not in rows["none"]["verdict"]
    unknown = _rows(defence_blocks(records, cells, {})[0])
    assert NO_ADAPTIVE in unknown["prune p=0.5"]["verdict"]
    assert unknown["prune p=0.5"]["worst non-adaptive attack"] == "ig-masked"


def _accuracy_specs(leak: dict[str, float], accuracy: dict[str, list[float]]) -> list[dict[str, Any]]:
    """ig at each level, 3 seeds, PSNR `leak[level]` on every image, one victim per seed."""
    return [_cell(level, "ig", seed, psnr=leak[level], accuracy=accuracy[level][seed]) for level in leak
            for seed in (0, 1, 2)]


def test_levels_rank_on_the_privacy_utility_front() -> None:
    """noise σ=0.5 leaks least but sits at chance (CIFAR-10: 10 %): unusable, ranked after every usable level.
    noise σ=0.1 leaks less than σ=0.01 but costs 10 pp more beyond the interval: a tie. σ=0.01 costs 1 pp within
    the interval and leaks less than none: above it. Old code: σ=0.5 ranked first, σ=0.1 above σ=0.01."""
    leak = {"none": 40.0, NOISE: 25.0, "noise σ=0.1": 15.0, "noise σ=0.5": 5.0}
    accuracy = {"none": [0.40, 0.41, 0.39], NOISE: [0.39, 0.40, 0.38], "noise σ=0.1": [0.30, 0.31, 0.29],
                "noise σ=0.5": [0.10, 0.11, 0.12]}
    records, cells = _tables(_accuracy_specs(leak, accuracy))
    [table] = defence_blocks(records, cells, MASKED)
    rows = _rows(table)
    assert [row[1] for row in table.rows] == ["noise σ=0.1", NOISE, "none", "noise σ=0.5"]
    assert [rows[level]["rank"] for level in ("noise σ=0.1", NOISE, "none", "noise σ=0.5")] == ["1", "1", "2", "3"]
    assert "unusable" in rows["noise σ=0.5"]["verdict"]
    cost, interval = rows["noise σ=0.1"]["accuracy cost (pp) [95 % CI]"].split(" ", 1)
    low, high = (float(x) for x in interval.strip("[]").split(", "))
    assert cost == "10.0" and 5 < low < 10 < high  # Welch over 3 victims each side
    [board] = defence_ranking(records, cells, None, MASKED)
    assert [(row[0].text, row[1].text) for row in board.rows] == [
        ("1", "noise σ=0.1"), ("1", NOISE), ("2", "none"), ("3", "noise σ=0.5")]


def test_a_level_leaking_as_much_as_no_defence_never_ranks_above_it() -> None:
    """prune leaks exactly what the undefended level leaks, on victims 2.5 pp more accurate; noise leaks less at a
    1 pp cost within the interval. Interval ties are not transitive: noise dominates none but not prune (prune
    is cheaper beyond the interval), so the old code ranked prune first beside noise and none second. Now a
    level that does not leak less than none never ranks above the undefended level."""
    leak = {"none": 40.0, NOISE: 25.0, "prune p=0.5": 40.0}
    accuracy = {"none": [0.40, 0.41, 0.39], NOISE: [0.39, 0.40, 0.38], "prune p=0.5": [0.425, 0.42, 0.43]}
    records, cells = _tables(_accuracy_specs(leak, accuracy))
    [table] = defence_blocks(records, cells, MASKED)
    rows = _rows(table)
    assert [rows[level]["rank"] for level in (NOISE, "none", "prune p=0.5")] == ["1", "2", "2"]


def test_leakage_differences_within_the_seed_spread_are_ties() -> None:
    """prune's ig PSNR varies 10 dB over seeds around 22; noise's is 20 dB: within the spread, so neither leaks
    less, and at equal cost they share a rank; at one seed each (no spread) noise ranks above."""
    specs = [_cell("none", "ig", s, psnr=40.0, accuracy=0.4) for s in (0, 1, 2)]
    specs += [_cell(NOISE, "ig", s, psnr=20.0, accuracy=0.4) for s in (0, 1, 2)]
    specs += [_cell("prune p=0.5", "ig", s, psnr=p, accuracy=0.4) for s, p in zip((0, 1, 2), (12.0, 22.0, 32.0),
                                                                                   strict=True)]
    records, cells = _tables(specs)
    rows = _rows(defence_blocks(records, cells, MASKED)[0])
    assert rows[NOISE]["rank"] == rows["prune p=0.5"]["rank"] == "1" and rows["none"]["rank"] == "2"
    one = cells[cells["seed"] == 1]
    rows = _rows(defence_blocks(records[records["cell_id"].isin(one["cell_id"])], one, MASKED)[0])
    assert (rows[NOISE]["rank"], rows["prune p=0.5"]["rank"]) == ("1", "2")


def test_the_accuracy_cost_interval_is_welchs() -> None:
    diff, low, high = welch_interval(np.array([0.40, 0.41, 0.39]), np.array([0.30, 0.31, 0.29]))
    assert round(diff, 6) == 0.1 and round(low, 4) == 0.0773 and round(high, 4) == 0.1227  # t(0.975, 4) = 2.776
    assert np.isnan(welch_interval(np.array([0.4]), np.array([0.3, 0.31]))[1])  # one victim: no interval
    records, cells = _tables(_accuracy_specs({"none": 40.0, NOISE: 30.0},
                                             {"none": [0.40, 0.41, 0.39], NOISE: [0.40, 0.40, 0.40]}))
    none, noise = verdicts(records, verdict_levels(cells), MASKED)
    assert costs_more(noise, none) is False and costs_more(none, noise) is False


def test_the_registered_attacks_say_which_defences_they_adapt_to() -> None:
    """What `leakbench report` and `leaderboard` pass the boards: the shipped masked attacks adapt to the
    zeroing defences, the plain ones to none (left out)."""
    from leakbench.attacks.adaptive import ZEROING
    from leakbench.citation import registered_adaptations

    found = registered_adaptations()
    assert found["ig-masked"] == found["dlg-masked"] == frozenset(ZEROING) | {"secagg"} >= MASKED["ig-masked"]
    assert found["spear-demix"] == {"mixup"}


def test_the_batch_attacks_are_aware_of_secure_aggregation_by_construction() -> None:
    """Under an honest server secagg's aggregate is one batch of K·b: the plain batch attacks are its defence-aware
    attacks (`Attack.aware_of`), so a secagg level they ran against with the defence known is not marked; their
    `adapts_to` stays empty, so a suite with `adaptive_only` still runs them at every level."""
    from leakbench.attacks import attack_class
    from leakbench.citation import registered_adaptations

    found = registered_adaptations()
    for name in ("spear", "spear-guided", "cpa", "ig", "dlg"):
        assert "secagg" in found[name] and not attack_class(name).adapts_to
    assert "secagg" not in found["spear-demix"] and "secagg" not in found["spear-unmix"]
    level = "secagg K=4"
    specs = [_cell(level, attack, seed, psnr=14.0, threat="defence known") for seed in (0, 1, 2)
             for attack in ("spear", "ig")]
    records, cells = _tables(specs)
    rows = _rows(defence_blocks(records, cells, found)[0])
    assert NO_ADAPTIVE not in rows[level]["verdict"]
    assert NO_ADAPTIVE in _rows(defence_blocks(records, cells, MASKED)[0])[level]["verdict"]


def test_every_compared_value_of_a_tied_pair_shows_its_seed_spread() -> None:
    """prune p=0.1's ig re-identifies every image on two seeds of three and none on the third (67 % ± 58), noise's
    one image of four on two seeds (17 % ± 14): within the spread, a tie on reid, exact % (0 ± 0) and PSNR
    (20.0 ± 0.0); both boards print each spread. Old code: '67' bare (a value or spread past 60 was taken for a
    PSNR past the cap) and '0', '20.0' bare (a spread of 0 left out), as prune p=0.1's '62' without '± 53' on the
    paper/defences board. prune p=0.9's PSNR median is exact on two seeds and 20 dB on one: no spread in dB, its
    range."""
    specs = [_cell("none", "ig", s, exact=1.0, psnr=np.inf, reid=1.0) for s in (0, 1, 2)]
    specs += [_cell("prune p=0.1", "ig", s, reid=r) for s, r in zip((0, 1, 2), (1.0, 1.0, 0.0), strict=True)]
    specs += [_cell(NOISE, "ig", s, reid=r) for s, r in zip((0, 1, 2), (0.0, 0.25, 0.25), strict=True)]
    specs += [_cell("prune p=0.9", "ig", s, exact=x, psnr=np.inf if x else 20.0, reid=1.0)
              for s, x in zip((0, 1, 2), (1.0, 1.0, 0.0), strict=True)]
    records, cells = _tables(specs)
    rows = _rows(defence_blocks(records, cells, MASKED)[0])
    prune, noise = rows["prune p=0.1"], rows[NOISE]
    assert prune["rank"] == noise["rank"] == "1" and rows["none"]["rank"] != "1"
    assert (prune["worst non-adaptive reid %"], noise["worst non-adaptive reid %"]) == ("67 ± 58", "17 ± 14")
    assert prune["worst non-adaptive exact %"] == noise["worst non-adaptive exact %"] == "0 ± 0"
    assert prune["worst non-adaptive PSNR med. (dB)"] == noise["worst non-adaptive PSNR med. (dB)"] == "20.0 ± 0.0"
    assert rows["prune p=0.9"]["worst non-adaptive PSNR med. (dB)"] == "exact (20.0–exact)"
    assert rows["prune p=0.9"]["worst non-adaptive exact %"] == "67 ± 58"
    [board] = defence_ranking(records, cells, None, MASKED)  # the leaderboard (HTML and Markdown): the same entries
    shown = {row[1].text: [e.text for e in row] for row in board.rows}
    assert "67 ± 58" in shown["prune p=0.1"] and "17 ± 14" in shown[NOISE]


def test_a_failed_seed_is_shown_and_never_counted_as_no_leakage() -> None:
    """prune's ig answered on one seed of three (15 dB, 0 % exact), noise's on all three (20 dB ± 0.5). Old code:
    the one answered seed had no spread and prune ranked above noise, the failed seeds unseen. Now the board
    says 'answered on 1 of 3 seeds' and prune may not leak less than noise: its failed seeds could have been
    exact, so the two tie, and for the same reason it may not leak less than the undefended level either: it
    ranks with 'none' (`protects`); noise, measured on every seed, ranks above both."""
    specs = [_cell("none", "ig", s, exact=1.0, psnr=np.inf) for s in (0, 1, 2)]
    specs += [_cell("prune p=0.5", "ig", s, psnr=15.0, status="ok" if s == 0 else "failed") for s in (0, 1, 2)]
    specs += [_cell(NOISE, "ig", s, psnr=p) for s, p in zip((0, 1, 2), (19.5, 20.0, 20.5), strict=True)]
    records, cells = _tables(specs)
    rows = _rows(defence_blocks(records, cells, MASKED)[0])
    prune, noise = rows["prune p=0.5"], rows[NOISE]
    assert prune["worst non-adaptive attack"] == "ig (answered on 1 of 3 seeds)"
    assert prune["worst non-adaptive exact %"] == "0"  # one answered seed: no spread
    assert noise["rank"] == "1" and prune["rank"] == rows["none"]["rank"] == "2"
    # two answered seeds of three: value and spread over those two, the third never read as 0
    two = _tables([{**s, "status": "ok"} if s["level"] == "prune p=0.5" and s["seed"] == 1 else s
                   for s in specs])
    prune = _rows(defence_blocks(*two, MASKED)[0])["prune p=0.5"]
    assert prune["worst non-adaptive attack"] == "ig (answered on 2 of 3 seeds)"
    assert prune["worst non-adaptive PSNR med. (dB)"] == "15.0 ± 0.0"


def test_a_threat_every_cell_shares_is_said_once_not_in_each_label() -> None:
    """paper/defences: every cell's attacker knows the defence. The labels (defence levels, headline, per-setting
    tables, figure ticks: all from `with_model`'s client) leave 'defence known' out and the page says it once;
    where cells differ in it, the labels keep it. Old code: 'none · defence known', 'prune p=0.5 · defence
    known', … in every view (only the verdict boards stripped it)."""
    from leakbench.reporting.aggregate import shared_note
    from leakbench.reporting.findings import headline_table, settings
    from leakbench.reporting.order import defence_levels
    from leakbench.reporting.report import pivot_blocks

    known = "defence known"
    specs = [_cell(level, "ig", seed, psnr=20.0, threat=known) for seed in (0, 1, 2)
             for level in ("none", NOISE, "prune p=0.5")]
    records, raw = _tables(specs, labelled=False)
    cells = with_model(raw)
    assert set(defence_levels(cells)) == {"none", NOISE, "prune p=0.5"}
    assert shared_note(raw) == shared_note(cells) == [
        "Every cell: threat model 'defence known' — said here once, left out of every label below."]
    shown = [str(row[0]) for row in headline_table(settings(records, cells)).rows]
    shown += [block.title for block in pivot_blocks(records, raw) if isinstance(block, Table)]
    assert shown and not any(known in text for text in shown)
    assert {row[1] for row in defence_blocks(records, cells, MASKED)[0].rows} == {"none", NOISE, "prune p=0.5"}
    # the cells differ in it: the labels keep it apart, and no line says it
    mixed = _tables([{**s, "threat": "default"} if s["level"] == "none" else s for s in specs], labelled=False)[1]
    assert set(defence_levels(with_model(mixed))) == {"none", f"{NOISE} · {known}", f"prune p=0.5 · {known}"}
    assert shared_note(mixed) == []
    assert all(known in c for c in with_model(raw, keep_shared=True)["client"])


def test_the_verdict_figure_plots_each_level_at_its_worst_attack_adaptive_included(tmp_path: Any) -> None:
    """prune's plain ig leaks little (reid 25 %) but ig-masked, told the defence, re-identifies every image:
    the verdict point of prune is ig-masked's 100 %, adaptive, at prune's accuracy cost; a level at init (no
    accuracy) has no point. Old code: no verdict points, and the report's figures showed each attack alone."""
    from leakbench.reporting.defences import verdict_points
    from leakbench.reporting.figures import verdict_figure

    known = "defence known"
    accuracy = {"none": [0.40, 0.41, 0.39], "prune p=0.5": [0.36, 0.37, 0.35]}
    specs = [_cell(level, attack, seed, psnr=20.0, reid=reid, threat=threat, accuracy=accuracy[level][seed])
             for seed in (0, 1, 2) for level, attack, reid, threat in (
                 ("none", "ig", 1.0, "default"), ("prune p=0.5", "ig", 0.25, "default"),
                 ("prune p=0.5", "ig-masked", 1.0, known))]
    records, cells = _tables(specs)
    points = verdict_points(records, cells, MASKED).set_index("level")
    assert set(points.index) == {"none", "prune p=0.5"}
    prune = points.loc["prune p=0.5"]
    assert (prune["attack"], bool(prune["adaptive"]), prune["leakage_pct"], prune["measure"]) == \
        ("ig-masked", True, 100.0, "reid")
    assert round(prune["cost_pp"], 6) == 4.0 and prune["cost_low_pp"] < 4.0 < prune["cost_high_pp"]
    assert not prune["marked"] and points.loc["none", "cost_pp"] == 0.0
    at_init = _tables([{**s, "accuracy": float("nan")} for s in specs])
    assert verdict_points(*at_init, MASKED).empty
    path = verdict_figure(points.reset_index(), tmp_path / "verdict.png", "title")
    assert path.stat().st_size > 0
