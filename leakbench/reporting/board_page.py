"""The leaderboard's tables and page: one metric and one unit per column, numeric click-to-sort, paper links.

A `Board` is a titled table whose columns are `Column`s (a metric with its unit, e.g. 'exact %', and the
setting it is measured at, e.g. 'b=4'); each body cell is an `Entry`: its text, the number it sorts by
(`sort`; None sorts last either way) and an optional link. The HTML page groups the columns of one metric
under one header cell, fits a 1,400-pixel window (long names and notes wrap; a table too wide for the
window scrolls inside its own box, never the page) and sorts a table by a click on a column header, on
the entries' `data-sort` numbers (exact PSNR is +Infinity: above any finite value), not their text. The
Markdown page is the same tables through `render.markdown`, one header cell per column ('exact % b=4').
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from leakbench.core.citation import Citation
from leakbench.reporting.render import Cell, Link, Table, markdown, md_escape, md_paragraph


@dataclass(frozen=True)
class Column:
    """One column: `metric` with its unit ('exact %', 'PSNR median (dB)') and the `setting` it is measured
    at ('b=4'; '' for a column of its own, such as 'rank' or 'attack'). `numeric`: sorted as numbers."""

    metric: str
    setting: str = ""
    numeric: bool = True

    @property
    def label(self) -> str:
        return f"{self.metric} {self.setting}".strip()


@dataclass(frozen=True)
class Entry:
    """One body cell: `text` as shown, `sort` the number it sorts by (None: no value, last either way),
    `href` a link (a paper, a comparison grid, an anchor of this page), `hint` a tooltip, `colour` a swatch."""

    text: str
    sort: float | None = None
    href: str | None = None
    hint: str = ""
    colour: str = ""
    """'#rrggbb': a swatch before the text (an attack's colour, the same as in the report's figures)."""


@dataclass
class Board:
    """A titled table of the leaderboard with notes under it; `papers` are linked after the title,
    `anchor` is the id other tables link to."""

    title: str
    columns: list[Column]
    rows: list[list[Entry]]
    notes: list[str] = field(default_factory=list)
    papers: list[tuple[str, Citation]] = field(default_factory=list)
    anchor: str = ""


@dataclass
class Section:
    """A heading with a paragraph and its boards (the page's views: defence ranking, attack tables)."""

    title: str
    intro: list[str]
    boards: list[Board]
    anchor: str = ""
    contents: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    """Navigation lines: a label and its (text, '#anchor') links."""


def anchor(*parts: object) -> str:
    """An HTML id from `parts` (letters, digits and '-' only; the same parts give the same id)."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", str(p).lower()).strip("-") for p in parts)


def number(value: float, digits: int, unit: str = "") -> Entry:
    """A number shown to `digits` decimals, sorted by the value rounded the same way (so that sorting
    never separates entries that read alike); NaN: '–', sorted last."""
    if math.isnan(value):
        return Entry("–")
    if math.isinf(value):
        return Entry("∞" if value > 0 else "−∞", value)
    return Entry(f"{value:.{digits}f}{unit}", round(value, digits))


def text(value: str, href: str | None = None, hint: str = "") -> Entry:
    """A text entry (sorted by its text)."""
    return Entry(value, None, href, hint)


def paper_entry(shown: str, paper: Citation | None, colour: str = "") -> Entry:
    """A name linked to its paper (the citation as tooltip); a bare name when there is none."""
    return Entry(shown, None, paper.url if paper else None, paper.short if paper else "", colour)


def markdown_page(title: str, intro: list[str], sections: list[Section]) -> str:
    """The page as Markdown (`render.markdown`): each board a `render.Table` titled 'SECTION: BOARD', one
    header cell per column, a section's intro under its first table (a section without tables: its own
    heading and paragraphs, at the end), papers listed under the notes."""
    tables: list[Table] = []
    text_only: list[str] = []
    for section in sections:
        if not section.boards:
            text_only += [f"## {md_escape(section.title)}", *(md_paragraph(p) for p in section.intro)]
        for i, board in enumerate(section.boards):
            notes = [*(section.intro if i == 0 else []), *board.notes]
            if board.papers:
                notes.append("Papers: " + "; ".join(f"{name}: {c.short} ({c.url})" for name, c in board.papers))
            tables.append(Table(f"{section.title}: {board.title}", [c.label for c in board.columns],
                                [[_md_cell(e) for e in row] for row in board.rows], notes))
    return markdown(title, intro, list(tables)) + "".join(f"\n{line}\n" for line in text_only)


def _md_cell(entry: Entry) -> Cell:
    return Link(entry.text, entry.href) if entry.href else entry.text


STYLE = (
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1320px;"
    "padding:1em 1.5em;color:#222}h1{font-size:1.6em;margin:.3em 0}h2{font-size:1.3em;margin:1.6em 0 .3em;"
    "border-bottom:2px solid #ddd}h3{font-size:1.05em;margin:1.4em 0 .2em}p{margin:.35em 0;max-width:90em}"
    ".box{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:.4em 0 .3em;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:2px 7px;text-align:right;white-space:nowrap}"
    "th{background:#f0f0f0;font-weight:600;vertical-align:bottom}th.group{text-align:center;background:#e4e8ef}"
    "th[data-col]{cursor:pointer}th[data-col]:hover{background:#dde4f0}td.name,th.name{text-align:left}"
    "td.wrap,td.name{white-space:normal;min-width:6em;max-width:15em;text-align:left}.lead{font-size:13px;color:#444}"
    "tbody tr:nth-child(even){background:#fafafa}a{color:#1a55a5;text-decoration:none}"
    "a:hover{text-decoration:underline}"
    ".note{color:#555;font-size:12.5px}.papers{color:#555;font-size:12.5px;margin-top:0}.nav{font-size:13px}"
    ".nav b{display:inline-block;min-width:16em;font-weight:600}.nav b.view{min-width:0}"
    ".sw{display:inline-block;width:.75em;height:.75em;margin-right:.35em;border-radius:2px;vertical-align:-.05em}")

SORT_SCRIPT = (
    "<script>document.querySelectorAll('table.board').forEach(t=>t.querySelectorAll('th[data-col]').forEach(th=>{"
    "th.title='click to sort';th.onclick=()=>{const i=+th.dataset.col,num=th.dataset.num==='1',b=t.tBodies[0],"
    "d=th.dataset.dir=(th.dataset.dir||(num?'up':'down'))==='up'?'down':'up',s=d==='up'?1:-1,"
    "key=r=>{const c=r.cells[i];if(!num)return c.textContent;const v=c.dataset.sort;"
    "return v===undefined||v===''?null:parseFloat(v)};"
    "[...b.rows].sort((x,y)=>{const p=key(x),q=key(y);if(p===null||q===null)return (p===null)-(q===null);"
    "return s*(num?(p===q?0:p<q?-1:1):String(p).localeCompare(String(q)))}).forEach(r=>b.appendChild(r))}}))"
    "</script>")
"""Click a header to sort its table: numeric columns on the entries' data-sort values (largest first on the
first click; an entry without one last either way), text columns alphabetically. Offline, no library."""


def html_page(title: str, intro: list[str], sections: list[Section], *, nav: bool = False) -> str:
    """The page as one HTML document (no external files); `nav`: a line of links to the sections under the
    intro (each with its number of tables)."""
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{e(title)}</title>",
             f"<style>{STYLE}</style>", "</head><body>", f"<h1>{e(title)}</h1>", *[f"<p>{e(p)}</p>" for p in intro]]
    if nav:
        parts.append('<p class="nav"><b class="view">Views:</b> ' + " · ".join(
            f'<a href="#{e(s.anchor)}">{e(s.title)}</a>' + (f" ({len(s.boards)} tables)" if s.boards else "")
            for s in sections if s.anchor) + "</p>")
    for section in sections:
        parts.append(f'<h2 id="{e(section.anchor)}">{e(section.title)}</h2>' if section.anchor
                     else f"<h2>{e(section.title)}</h2>")
        parts += [f'<p class="lead">{e(p)}</p>' for p in section.intro]
        for label, links in section.contents:
            parts.append(f'<p class="nav"><b>{e(label)}</b> ' + " · ".join(
                f'<a href="{e(href)}">{e(name)}</a>' for name, href in links) + "</p>")
        parts += [_html_board(board) for board in section.boards]
    parts += [SORT_SCRIPT, "</body></html>"]
    return "\n".join(parts) + "\n"


def _html_board(board: Board) -> str:
    e = html.escape
    head = f'<h3 id="{e(board.anchor)}">{e(board.title)}</h3>' if board.anchor else f"<h3>{e(board.title)}</h3>"
    out = [head]
    if board.papers:
        out.append('<p class="papers">Paper: ' + "; ".join(
            f'{e(name)} — <a href="{e(c.url)}">{e(c.short)}</a>' for name, c in board.papers) + "</p>")
    out += ['<div class="box"><table class="board"><thead>', *_header_rows(board.columns), "</thead><tbody>"]
    for row in board.rows:
        cells = enumerate(zip(row, board.columns, strict=True))
        out.append("<tr>" + "".join(_html_entry(entry, column, i) for i, (entry, column) in cells) + "</tr>")
    out.append("</tbody></table></div>")
    out += [f'<p class="note">{e(n)}</p>' for n in board.notes]
    return "\n".join(out)


def _header_rows(columns: Sequence[Column]) -> list[str]:
    """One header row when no column has a setting; else two: metrics (spanning their settings) above
    settings. Every sortable header cell names its body column (`data-col`)."""
    e = html.escape
    grouped = any(c.setting for c in columns)

    def sortable(i: int, c: Column, label: str, extra: str = "") -> str:
        cls = ' class="name"' if not c.numeric else ""
        return f'<th{cls}{extra} data-col="{i}" data-num="{int(c.numeric)}">{e(label)}</th>'
    if not grouped:
        return ["<tr>" + "".join(sortable(i, c, c.metric) for i, c in enumerate(columns)) + "</tr>"]
    top, bottom, i = [], [], 0
    while i < len(columns):
        c = columns[i]
        if not c.setting:
            top.append(sortable(i, c, c.metric, ' rowspan="2"'))
            i += 1
            continue
        span = 1
        while i + span < len(columns) and columns[i + span].metric == c.metric and columns[i + span].setting:
            span += 1
        top.append(f'<th class="group" colspan="{span}">{e(c.metric)}</th>')
        bottom += [sortable(j, columns[j], columns[j].setting) for j in range(i, i + span)]
        i += span
    return ["<tr>" + "".join(top) + "</tr>", "<tr>" + "".join(bottom) + "</tr>"]


def _html_entry(entry: Entry, column: Column, index: int) -> str:
    e = html.escape
    attrs = ""
    if column.numeric:
        attrs += f' data-sort="{_sort_text(entry.sort)}"'
    else:
        attrs += ' class="wrap"' if index > 1 else ' class="name"'
    if entry.hint:
        attrs += f' title="{e(entry.hint)}"'
    body = f'<a href="{e(entry.href)}">{e(entry.text)}</a>' if entry.href else e(entry.text)
    swatch = f'<span class="sw" style="background:{e(entry.colour)}"></span>' if entry.colour else ""
    return f"<td{attrs}>{swatch}{body}</td>"


def _sort_text(value: float | None) -> str:
    """A sort value as JavaScript's parseFloat reads it ('' for none; ±Infinity spelt so)."""
    if value is None or math.isnan(value):
        return ""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))
