"""Tables and documents as Markdown and as HTML from one list of blocks (deterministic output)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Table:
    """A titled table with notes under it."""

    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Images:
    """A titled list of images (paths relative to the document) with captions."""

    title: str
    items: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)


Block = Table | Images


def markdown(title: str, intro: list[str], blocks: list[Block]) -> str:
    lines = [f"# {title}", "", *intro, ""]
    for block in blocks:
        lines += [f"## {block.title}", ""]
        if isinstance(block, Table):
            lines += [_md_row(block.header), "|" + "---|" * len(block.header)]
            lines += [_md_row(row) for row in block.rows]
            lines.append("")
        else:
            for path, caption in block.items:
                lines += [f"![{caption}]({path})", "", caption, ""]
        lines += [*block.notes, ""] if block.notes else []
    return "\n".join(lines).rstrip("\n") + "\n"


def html_document(title: str, intro: list[str], blocks: list[Block]) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}th{background:#eee}"
             "td:first-child,th:first-child{text-align:left}img{max-width:100%}</style>",
             "</head><body>", f"<h1>{e(title)}</h1>", *[f"<p>{e(p)}</p>" for p in intro if p]]
    for block in blocks:
        parts.append(f"<h2>{e(block.title)}</h2>")
        if isinstance(block, Table):
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in block.header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in block.rows]
            parts.append("</table>")
        else:
            parts += [f'<figure><img src="{e(path)}" alt="{e(cap)}"><figcaption>{e(cap)}</figcaption></figure>'
                      for path, cap in block.items]
        parts += [f"<p>{e(n)}</p>" for n in block.notes if n]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
