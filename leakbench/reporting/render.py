"""Tables and documents as Markdown and as HTML from one list of blocks (deterministic output)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Link:
    """A table cell whose text links to `href` (a path relative to the document)."""

    text: str
    href: str

    def __str__(self) -> str:
        return self.text


Cell = str | Link


@dataclass
class Table:
    """A titled table with notes under it."""

    title: str
    header: list[str]
    rows: Sequence[Sequence[Cell]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Images:
    """A titled list of images (paths relative to the document) with captions."""

    title: str
    items: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Text:
    """A titled block of prose: paragraphs, then a bulleted list (either may be empty)."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    """A titled group of blocks; `collapsed` folds it in the HTML (`<details>`) so a long tail of detail tables
    does not push what matters down the page."""

    title: str
    blocks: list[Block]
    collapsed: bool = False
    notes: list[str] = field(default_factory=list)


Block = Table | Images | Text | Section


def markdown(title: str, intro: list[str], blocks: list[Block]) -> str:
    """The document as Markdown; every string is text, escaped like the HTML is (suite names,
    hyperparameters and failure reasons come from users and attacks, and must not become markup)."""
    e = md_escape
    lines = [f"# {e(title)}", "", *(md_paragraph(p) for p in intro), ""]
    for block in blocks:
        lines += _md_block(block, 2)
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_block(block: Block, level: int) -> list[str]:
    e = md_escape
    lines = [f"{'#' * level} {e(block.title)}", ""]
    if isinstance(block, Table):
        lines += [*markdown_table(block), ""]
    elif isinstance(block, Images):
        for path, caption in block.items:
            lines += [f"![{e(caption)}]({_md_url(path)})", "", md_paragraph(caption), ""]
    elif isinstance(block, Text):
        lines += [line for p in block.paragraphs for line in (md_paragraph(p), "")]
        lines += [*(f"- {e(b)}" for b in block.bullets), ""] if block.bullets else []
    else:
        lines += [line for inner in block.blocks for line in _md_block(inner, level + 1)]
    lines += [*(md_paragraph(n) for n in block.notes), ""] if block.notes else []
    return lines


def markdown_table(table: Table) -> list[str]:
    """The lines of `table`'s Markdown table (header, rule, rows; no title, no notes)."""
    return [_md_row(table.header), "|" + "---|" * len(table.header), *(_md_row(row) for row in table.rows)]


_MD_SPECIAL = "\\`*_{}[]<>|~&#!$"
"""ASCII punctuation that can start or end Markdown (or inline HTML) anywhere in a line; each is
backslash-escaped (CommonMark lets any ASCII punctuation be escaped so)."""
_MD_TABLE = str.maketrans({c: "\\" + c for c in _MD_SPECIAL})
_MD_LINE_START = re.compile(r"^(\s*)(?:([-+=])|(\d+)([.)]))")


def md_escape(text: object) -> str:
    """`text` as literal Markdown text on one line: special characters escaped, line breaks as spaces."""
    return " ".join(str(text).split("\n")).replace("\r", " ").translate(_MD_TABLE)


def md_paragraph(text: object) -> str:
    """`md_escape`, and a leading list or heading marker (`-`, `+`, `1.`, …) made literal."""
    return _MD_LINE_START.sub(
        lambda m: m.group(1) + (f"\\{m.group(2)}" if m.group(2) else f"{m.group(3)}\\{m.group(4)}"), md_escape(text))


def _md_url(path: str) -> str:
    """An image path as a link destination: characters that would end or break it percent-encoded."""
    return "".join(f"%{ord(c):02X}" if c in " ()<>\\\n\r\t" else c for c in str(path))


SORT_SCRIPT = (
    "<script>document.querySelectorAll('table.sortable').forEach(t=>t.querySelectorAll('th').forEach((th,i)=>{"
    "th.title='click to sort';th.style.cursor='pointer';th.onclick=()=>{const rows=[...t.rows].slice(1),"
    "up=th.dataset.up=th.dataset.up==='1'?'0':'1',key=r=>{const x=r.cells[i].textContent,n=parseFloat(x);"
    "return isNaN(n)?x:n};rows.sort((a,b)=>{const p=key(a),q=key(b),c=typeof p==='number'&&typeof q==='number'"
    "?p-q:String(p).localeCompare(String(q));return up==='1'?c:-c});rows.forEach(r=>t.tBodies[0].appendChild(r))}"
    "}))</script>")
"""Click a column header to sort the table by it (numbers numerically); works offline, no library."""


STYLE = ("<style>body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right;white-space:nowrap}"
         "th{background:#eee;white-space:normal;vertical-align:bottom}"
         "td.prose{white-space:normal;min-width:9em;max-width:24em;text-align:left}"
         "td:first-child,th:first-child{text-align:left}img{max-width:100%}.scroll{overflow-x:auto}"
         "h1,h2,h3,figcaption{overflow-wrap:anywhere}details>summary{cursor:pointer}"
         "details>summary>h2{display:inline}ul.findings li{margin:.3em 0}</style>")
"""The page's style: tables scroll sideways inside their own box instead of widening the page; titles and long
cells (`PROSE`) wrap."""


def html_document(title: str, intro: list[str], blocks: list[Block], *, sortable: bool = False,
                  image_src: Callable[[str], str] | None = None) -> str:
    """The blocks as one HTML page; `sortable` makes every table sortable by a click on a header;
    `image_src(path)`, when given, is what an image's `src` becomes (a data: URI for a self-contained page)."""
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
             STYLE, "</head><body>", f"<h1>{e(title)}</h1>", *[f"<p>{e(p)}</p>" for p in intro if p]]
    for block in blocks:
        parts += _html_block(block, 2, sortable, image_src or (lambda path: path))
    parts += [SORT_SCRIPT] if sortable else []
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_block(block: Block, level: int, sortable: bool, src: Callable[[str], str]) -> list[str]:
    e = html.escape
    heading = f"<h{level}>{e(block.title)}</h{level}>"
    if isinstance(block, Section):
        inner = [line for b in block.blocks for line in _html_block(b, level + 1, sortable, src)]
        notes = [f"<p>{e(n)}</p>" for n in block.notes if n]
        if block.collapsed:
            return [f"<details><summary>{heading}</summary>", *notes, *inner, "</details>"]
        return [heading, *notes, *inner]
    parts = [heading]
    if isinstance(block, Table):
        parts.append('<div class="scroll">' + ('<table class="sortable"><tr>' if sortable else "<table><tr>")
                     + "".join(f"<th>{e(h)}</th>" for h in block.header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td{_td_class(c)}>{_html_cell(c)}</td>" for c in row) + "</tr>"
                  for row in block.rows]
        parts.append("</table></div>")
    elif isinstance(block, Images):
        parts += [f'<figure><img src="{e(src(path))}" alt="{e(cap)}"><figcaption>{e(cap)}</figcaption></figure>'
                  for path, cap in block.items]
    else:
        parts += [f"<p>{e(p)}</p>" for p in block.paragraphs if p]
        parts += (['<ul class="findings">', *(f"<li>{e(b)}</li>" for b in block.bullets), "</ul>"]
                  if block.bullets else [])
    parts += [f"<p>{e(n)}</p>" for n in block.notes if n]
    return parts


PROSE = 30
"""A table cell longer than this many characters (a verdict, a long level label) wraps within its column
(`td.prose`); shorter ones, numbers above all, stay on one line."""


def _td_class(cell: Cell) -> str:
    return ' class="prose"' if len(cell.text if isinstance(cell, Link) else str(cell)) > PROSE else ""


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href)}">{html.escape(cell.text)}</a>'
    return html.escape(str(cell))


def _md_row(cells: Sequence[Cell]) -> str:
    return "| " + " | ".join(_md_cell(c) for c in cells) + " |"


def _md_cell(cell: Cell) -> str:
    text = md_escape(cell)
    return f"[{text}]({_md_url(cell.href)})" if isinstance(cell, Link) else text
