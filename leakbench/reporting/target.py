"""Where a suite's report goes, and what of an earlier one leakbench may replace there.

A report is `REPORTS/SUITE.md`, `REPORTS/SUITE.html` and the folder `REPORTS/SUITE/` (figures,
grids and `report.json`, a marker listing every file leakbench wrote there). An existing folder is
replaced only when it holds nothing but the files its marker lists (a report written before
markers: nothing but `figures/*.png` and `grids/*.png`); existing pages only when they are
leakbench's. Anything else is refused with one line before any work is done.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from leakbench.core.errors import ConfigError
from leakbench.records.folders import TEMP_MARKER, check_owned

MARKER = "report.json"
MARKER_KIND = "leakbench report"
SUBFOLDERS = ("figures", "grids")
LEGACY_FILE = re.compile(r"(figures|grids)/[A-Za-z0-9][A-Za-z0-9._-]*\.png")
PAGE_HEADS = {".md": "# leakbench suite ", ".html": "<title>leakbench suite "}
"""What the first lines of a page leakbench wrote hold."""
LEADERBOARD_PAGES = {"leaderboard.md": "# leakbench leaderboard", "leaderboard.html": "<title>leakbench leaderboard",
                     "leaderboard-timing.md": "# leakbench leaderboard"}
"""The pages `leakbench leaderboard` writes into a reports folder, and what the first lines of each hold."""
RESERVED_NAMES = frozenset(Path(page).stem for page in LEADERBOARD_PAGES)
"""Suite names whose report pages would be the leaderboard's (`leaderboard`, `leaderboard-timing`)."""


def check_report_target(reports: Path, suite: str) -> None:
    """Raise one line when writing `suite`'s report under `reports` would replace files leakbench did not
    write, or the leaderboard's pages (a suite named like them)."""
    if suite in RESERVED_NAMES:
        raise ConfigError(f"suite name {suite!r} is reserved: its report would replace the leaderboard's pages in "
                          "--reports; rename the suite")
    for suffix, head in PAGE_HEADS.items():
        check_page(reports / f"{suite}{suffix}", head)
    check_owned(reports / suite, foreign_report_entries)


def check_leaderboard_target(reports: Path) -> None:
    """Raise one line when a leaderboard page under `reports` exists and was not written by leakbench."""
    for name, head in LEADERBOARD_PAGES.items():
        check_page(reports / name, head)


def check_page(page: Path, head: str) -> None:
    """Raise one line when `page` exists and its first lines do not hold `head` (not leakbench's page)."""
    if os.path.lexists(page) and head not in _head(page):
        raise ConfigError(f"{page} exists and was not written by leakbench; leakbench replaces only its own "
                          "output: move it away or choose another --reports")


def foreign_report_entries(folder: Path) -> list[str]:
    """Paths under a report folder that leakbench did not write (relative; [] when the folder is absent)."""
    if not os.path.lexists(folder):
        return []
    if folder.is_symlink() or not folder.is_dir():
        return [folder.name]
    listed = _listed(folder)

    def ours(path: Path) -> bool:
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            return False
        if path.is_dir():
            return rel in SUBFOLDERS
        return rel in listed if listed is not None else bool(LEGACY_FILE.fullmatch(rel))

    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not ours(p))


def write_marker(folder: Path, suite: str) -> None:
    """List every file now under `folder` in its marker (call once the report's files are written)."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != TEMP_MARKER)
    marker = {"leakbench": MARKER_KIND, "suite": suite, "files": [*files, MARKER]}
    (folder / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _listed(folder: Path) -> set[str] | None:
    """The files a report folder's marker lists, or None when it has no marker of leakbench's."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(marker, dict) or marker.get("leakbench") != MARKER_KIND
            or not isinstance(marker.get("files"), list)):
        return None
    return {f for f in marker["files"] if isinstance(f, str)}


def _head(page: Path) -> str:
    try:
        with page.open(encoding="utf-8", errors="replace") as handle:
            return handle.read(4096)
    except OSError:  # a folder or an unreadable file named like a page: not leakbench's
        return ""
