"""The trust model in the tables (`records.trust`): third-party attacks marked verified or unverified, and
cells pairing a third-party defence with a third-party attack kept out of every ranking, listed apart.

The leaderboard and the report rank `ranked` cells only; `unranked_table` lists the others, one row per
threat model, defence level, attack and batch size, with the reason under it.
"""

from __future__ import annotations

import pandas as pd

from leakbench.records.trust import PAIRING_REASON, SHIPPED, pairings, third_party, trusted_columns, verification
from leakbench.reporting.board_page import Column, Entry, number, text
from leakbench.reporting.defences import psnr_entry
from leakbench.reporting.leakage import leakage_stats
from leakbench.reporting.order import level_sorter

UNRANKED_TITLE = "Not ranked: a third-party defence with a third-party attack"
UNRANKED_NOTE = (f"{PAIRING_REASON} (docs/reference/sandbox.md, 'Trust model'). Its cells are kept out of every "
                 "ranking and listed here only.")
ATTACK_CODE = "attack code"
"""The leaderboard column that marks a third-party attack verified or unverified (only in tables holding one)."""


def ranked(records: pd.DataFrame, cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The records and cells that may be ranked: every cell but those `trust.pairings` marks."""
    kept = cells[~pairings(cells)]
    return records[records["cell_id"].isin(set(kept["cell_id"]))], kept


def attack_code(cells: pd.DataFrame) -> str:
    """One attack's cells' mark: 'shipped', or its origin and whether its images verify it ('plugin:
    unverified (public images: the attack could embed them)')."""
    columns = trusted_columns(cells)
    origins = sorted(set(columns["attack_origin"]))
    if not any(third_party(o) for o in origins):
        return SHIPPED
    return f"{' / '.join(origins)}: {verification(columns['images'])}"


def has_third_party(cells: pd.DataFrame) -> bool:
    """Whether any of `cells` ran a third-party attack."""
    return bool(trusted_columns(cells)["attack_origin"].map(third_party).any())


UNRANKED_COLUMNS = [Column("threat model", numeric=False), Column("defence", numeric=False),
                    Column("attack", numeric=False), Column(ATTACK_CODE, numeric=False), Column("b"),
                    Column("exact %"), Column("PSNR median (dB)"), Column("n"), Column("failures")]


def unranked_rows(records: pd.DataFrame, cells: pd.DataFrame) -> list[list[Entry]]:
    """One row per threat model, defence level, attack and batch size of the paired cells (`cells` carries the
    `model` and `level` columns of `aggregate.with_model` and `order.defence_levels`), in `order.level_sorter`
    order."""
    paired = cells[pairings(cells)]
    rows = []
    by = ["dataset", "model", "layer", "level", "attack", "batch_size"]
    order = level_sorter(paired)
    for key, sub in sorted(paired.groupby(by, sort=True), key=lambda g: order(g[0])):
        dataset, model, layer, level, attack, _ = key
        b = int(sub["batch_size"].iloc[0])
        s = leakage_stats(records[records["cell_id"].isin(set(sub["cell_id"]))], sub)
        rows.append([text(f"{dataset} · {model} · layer {layer}"), text(str(level)), text(str(attack)),
                     text(attack_code(sub)), Entry(str(b), b), number(s["exact_pct"], 0), psnr_entry(s),
                     Entry(str(s["n"]), s["n"]), Entry(str(s["failures"]), s["failures"])])
    return rows
