"""The leaderboard (issue 25): one threat model per table, one metric and unit per column, numeric
click-to-sort on data-sort values, paper links, and an attack evaluated through `api.evaluate` ranked in
the same table as the shipped attacks whose cells match."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from grey_attack import GreyAttack

from leakbench import api
from leakbench.attacks import ATTACKS
from leakbench.citation import Papers, registered_papers
from leakbench.fl.transform import TRANSFORMS
from leakbench.harness.suite import find_suite, load_suite
from leakbench.records.cell_state import STATES
from leakbench.reporting.board_page import Board, Column, Entry, Section, html_page
from leakbench.reporting.leaderboard import write_leaderboard
from leakbench.reporting.trust import ATTACK_CODE

TINY = """name = "board-tiny"
dataset = "embedded"
attacks = ["spear", "cpa"]
batch_sizes = [1, 2]
layers = [1]
width = 32
depth = 3
dp = ["none", { sigma = 1e-2, clip = 1.0, delta = 1e-5, q = 0.01, steps = 1 }]
"""


class BoardGreyAttack(GreyAttack):
    name = "board-grey"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny suite run with two shipped attacks, the same suite evaluated for `BoardGreyAttack` through
    `api.evaluate`, and the leaderboard of both runs (its folder)."""
    root = tmp_path_factory.mktemp("board")
    (root / "tiny.toml").write_text(TINY)
    api.run(root / "tiny.toml", out=root / "res", reports=root / "rep")
    api.evaluate(BoardGreyAttack, root / "tiny.toml", out=root / "res")
    write_leaderboard(root / "res", root / "board", registered_papers())
    return root / "board"


def _sections(markdown: str) -> dict[str, str]:
    """The leaderboard's Markdown tables by title."""
    return {part.split("\n", 1)[0]: part for part in markdown.split("\n## ")[1:]}


def _rows(section: str) -> list[list[str]]:
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


@pytest.mark.slow
def test_an_evaluated_attack_is_ranked_beside_the_shipped_ones(board: Path) -> None:
    """Two runs (board-tiny and board-tiny--board-grey) with matching settings: one table per threat model
    (layer 1 × DP level), each holding the three attacks, never a table of the grey attack alone."""
    tables = {t: s for t, s in _sections((board / "leaderboard.md").read_text()).items()
              if t.startswith("Attacks per threat model")}
    assert len(tables) == 2, list(tables)  # no DP, DP σ=0.01: one table each, both runs in it
    for title, section in tables.items():
        names = {re.sub(r"\[(.*?)\]\(.*?\)", r"\1", row[1]) for row in _rows(section)[1:]}
        assert names == {"spear", "cpa", "board-grey"}, (title, names)
        assert "from runs board-tiny, board-tiny--board-grey" in section
    undefended = next(s for t, s in tables.items() if t.endswith("defence: none"))
    ranks = {re.sub(r"\[(.*?)\]\(.*?\)", r"\1", row[1]): row[0] for row in _rows(undefended)[1:]}
    assert ranks["spear"] == "1" and ranks["board-grey"] == "3"  # spear is exact at b = 1, 2 here


@pytest.mark.slow
def test_one_metric_and_one_unit_per_column(board: Path) -> None:
    """Every numeric column of every table holds numbers of its header's unit only: no '%' or 'dB' in an
    entry (the unit is in the header), 'exact' only under PSNR; the defence boards add a seed spread after
    a leakage ('9.1 ± 0.6') and the 95 % interval after a cost ('5.0 [-2.6, 12.7]'), in the same unit."""
    page = (board / "leaderboard.md").read_text()
    checked = 0
    for section in _sections(page).values():
        rows = _rows(section)
        if not rows:  # the text-only section "How to read these tables"
            continue
        header = rows[0]
        for i, name in enumerate(header):
            if name in ("budget", "defence", "verdict", "attacks answered", ATTACK_CODE) or name.endswith("attack"):
                continue
            for row in rows[2:]:
                value = re.sub(r"\[(.*?)\]\(.*?\)", r"\1", row[i])
                # the defence boards: a seed spread (same unit) after a leakage, an interval after a cost
                value = re.sub(r" ± [\d.]+$| \[−?-?[\d.]+, −?-?[\d.]+\]$| \(1 victim\)$", "", value)
                assert "%" not in value and "dB" not in value, (name, value)
                assert re.fullmatch(r"−?-?\d+(\.\d+)?(e[-+]\d+)?|–", value) or (
                    value in ("exact", "≥ 60") and "PSNR" in name) or (
                    value in STATES and ("PSNR" in name or "exact" in name)), (name, value)  # a failed entry's state
                checked += 1
    assert checked >= 40  # 2 tables × 3 attacks × 8 numeric columns, less the rows' names
    attacks = next(s for t, s in _sections(page).items() if t.startswith("Attacks per threat model"))
    assert sum(h.startswith("exact %") for h in _rows(attacks)[0]) == 2  # b = 1, 2


@pytest.mark.slow
def test_shipped_attacks_and_defences_link_their_papers(board: Path) -> None:
    page = (board / "leaderboard.html").read_text()
    for attack in ("spear", "cpa"):
        paper = ATTACKS.entry(attack).factory().paper
        assert paper is not None and f'<a href="{paper.url}">{attack}</a>' in page
    assert ">board-grey</td>" in page  # no paper: the bare name
    dp = TRANSFORMS.entry("dp").factory().paper
    assert dp is not None and f'<a href="{dp.url}">{html.escape(dp.short)}</a>' in page


def test_every_shipped_attack_and_defence_names_a_paper() -> None:
    papers = registered_papers()  # what `leakbench leaderboard` hands the tables
    for registry, found in ((ATTACKS, papers.attacks), (TRANSFORMS, papers.defences)):
        for name in registry.names():
            if registry.entry(name).factory().__module__.startswith("leakbench."):
                assert name in found and found[name].url.startswith("https://"), name
    assert Papers().attacks == {}  # without papers handed over, names stand bare


def _sort_page() -> str:
    entries = [Entry("12.5", 12.5), Entry("exact", float("inf")), Entry("–"), Entry("9.8", 9.8), Entry("100.0", 100.0)]
    rows = [[Entry(str(i)), Entry(f"a{i}"), e] for i, e in enumerate(entries)]
    columns = [Column("rank"), Column("attack", numeric=False), Column("PSNR median (dB)", "b=1")]
    return html_page("t", [], [Section("s", [], [Board("b", columns, rows)])])


def test_numeric_columns_carry_their_sort_value() -> None:
    """The sort value is a data-sort attribute, not the text: exact is +Infinity, a missing value empty."""
    page = _sort_page()
    cells = re.findall(r'<td data-sort="([^"]*)"[^>]*>([^<]*)</td>', page)
    assert ("Infinity", "exact") in cells and ("", "–") in cells and ("100.0", "100.0") in cells
    assert 'data-col="2" data-num="1"' in page and "dataset.sort" in page


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_a_click_sorts_numbers_numerically_with_exact_on_top(tmp_path: Path) -> None:
    """In a real browser: one click on the PSNR header sorts exact, 100.0, 12.5, 9.8 (text order would
    put 9.8 above 12.5 and 100.0), the missing value last."""
    click = "<script>document.querySelector('th[data-col=\"2\"]').click()</script></body>"
    page = _sort_page().replace("</body>", click)
    (tmp_path / "p.html").write_text(page)
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          (tmp_path / "p.html").as_uri()], capture_output=True, text=True, timeout=60).stdout
    order = re.findall(r'<td data-sort="[^"]*"[^>]*>([^<]*)</td></tr>', dom)  # the last column's entries
    assert order == ["exact", "100.0", "12.5", "9.8", "–"], order


def test_the_nightly_suite_runs_every_spear_variant() -> None:
    """The nightly leaderboard shows the two strongest attacks, each with the draw budget spear has."""
    suite = load_suite(find_suite("nightly"))
    attacks = {c.attack for c in suite.cells}
    assert {"spear", "spear-guided", "spear-dl"} <= attacks
    draws = {c.attack: c.hyperparameters.get("max_draws") for c in suite.cells if c.attack.startswith("spear")}
    assert draws["spear-guided"] == draws["spear-dl"] == draws["spear"]


def test_defences_ranked_on_their_worst_attack_and_accuracy_cost() -> None:
    """The leaderboard's "Defences ranked" holds the report's verdicts: DP, noise and the undefended level on
    the front, pruning dominated by noise; no attack adapts to these levels (marked); the worst attack of each
    level and the accuracy cost beside; DP's paper linked."""
    from test_defence_board import DP_LEVEL, _tables

    from leakbench.citation import registered_adaptations
    from leakbench.reporting.defences import NO_ADAPTIVE, defence_ranking

    records, cells = _tables()
    [board] = defence_ranking(records, cells, registered_papers(), registered_adaptations())
    assert board.title == "cifar10 · FC-6 w200 trained 2 ep · b=4"
    assert [c.label for c in board.columns[:5]] == ["rank", "defence", "verdict", "accuracy test %",
                                                    "accuracy cost (pp) [95 % CI]"]
    rows = [[e.text for e in row] for row in board.rows]
    assert [r[1] for r in rows] == [DP_LEVEL, "noise σ=0.01", "none", "prune keep=0.5"]  # ε with its q and T
    assert rows[0] == ["1", DP_LEVEL, NO_ADAPTIVE, "20.0", "20.0 (1 victim)",
                       "ig", "0", "12.0", "0.500", "–", "–", "–", "–", "2/2"]
    assert rows[3][:2] == ["2", "prune keep=0.5"] and rows[3][5:8] == ["spear", "50", "30.0"]
    assert rows[2][5:8] == ["spear", "100", "exact"] and board.rows[2][7].sort == float("inf")
    assert board.rows[0][1].href == "https://arxiv.org/abs/1607.00133"  # DP-SGD's paper


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_the_page_fits_a_1400_pixel_window(board: Path, tmp_path: Path) -> None:
    """No horizontal scrolling at 1,400 px: neither the page nor any table's box is wider than the window."""
    measure = ("<script>document.title='W'+Math.max(document.documentElement.scrollWidth,...[...document"
               ".querySelectorAll('.box')].map(b=>b.getBoundingClientRect().left+b.scrollWidth))"
               "</script></body>")
    (tmp_path / "p.html").write_text((board / "leaderboard.html").read_text().replace("</body>", measure))
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                          "--dump-dom", (tmp_path / "p.html").as_uri()], capture_output=True, text=True,
                         timeout=60).stdout
    width = int(re.search(r"<title>W(\d+)", dom).group(1))
    assert width <= 1400, width
