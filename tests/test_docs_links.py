"""The reading path holds together (issue 25): every relative Markdown link in README.md and docs/ leads to
a file that exists (and, with a `#fragment`, to a heading of that page), and every `docs/...` path the
code, suites, benchmarks, Makefile and docs mention by name exists (tests open the pages they read and
fail on their own).
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO_ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](image)
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*\.(?:md|toml|png|csv)\b")


def _pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def _outside_code_blocks(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"(?m)^#{1,6} (.+)$", _outside_code_blocks(page.read_text()))
    return {_anchor(h) for h in headings}


def _broken_links(page: Path, root: Path = REPO_ROOT) -> list[str]:
    broken = []
    for match in LINK.finditer(_outside_code_blocks(page.read_text())):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: — not checked (no network in tests)
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_link_in_the_docs_leads_somewhere() -> None:
    broken = [line for page in _pages() for line in _broken_links(page)]
    assert not broken, "\n".join(broken)


def _mentioning_files() -> list[Path]:
    roots = [REPO_ROOT / name for name in ("leakbench", "benchmarks", "examples", ".ci", ".github")]
    suffixes = {".py", ".toml", ".md", ".yml", ""}
    files = [p for root in roots for p in root.rglob("*") if p.is_file() and p.suffix in suffixes]
    files += [REPO_ROOT / "Makefile", *_pages(), REPO_ROOT / "docs" / "claims.toml"]
    return [p for p in files if "__pycache__" not in p.parts]


def test_every_docs_path_named_anywhere_exists() -> None:
    missing = []
    for path in _mentioning_files():
        for name in set(DOCS_PATH.findall(path.read_text(errors="replace"))):
            if not (REPO_ROOT / name).exists():
                missing.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert not missing, "\n".join(sorted(missing))


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading\n")
    page.write_text("[ok](there.md) [ok](there.md#a-heading) [web](https://x.org/y)\n"
                    "[gone](missing.md) [bad anchor](there.md#nope)\n```\n[in code](ignored.md)\n```\n")
    found = [line.split(": ", 1)[1] for line in _broken_links(page, tmp_path)]
    assert found == ["missing.md (no such file)", "there.md#nope (no such heading)"]

