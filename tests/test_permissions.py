"""Result and report files honour the umask (issue 22): leakbench writes through temporary folders and files
(`mkdtemp`, `mkstemp`: owner-only 0700/0600), and what it renames into place must carry the mode a plain
`open`/`mkdir` would give, so a colleague or a web server can read the results and the report's images."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakbench.records.folders import current_umask, honour_umask

MINI = 'name = "mini"\ndataset = "embedded"\nattacks = ["spear"]\nbatch_sizes = [2]\nwidth = 64\ndepth = 3\n'


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(*roots: Path) -> dict[Path, int]:
    """Permission bits of every folder and file under `roots`."""
    return {p: stat.S_IMODE(p.stat().st_mode) for root in roots for p in root.rglob("*")}


def test_honour_umask_gives_what_open_and_mkdir_give(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        folder = honour_umask(Path(tempfile.mkdtemp(dir=tmp_path)))
        fd, name = tempfile.mkstemp(dir=tmp_path)
        os.close(fd)
        (tmp_path / "plain").mkdir()
        (tmp_path / "plain.txt").write_text("x")
        assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o750
        assert stat.S_IMODE(honour_umask(Path(name)).stat().st_mode) == 0o640
        assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o640
    finally:
        os.umask(old)


@pytest.mark.slow
def test_run_and_report_files_are_readable_by_others_under_umask_022(tmp_path: Path, umask_022: None) -> None:
    from leakbench.cli import main

    (tmp_path / "mini.toml").write_text(MINI)
    code = main(["run", str(tmp_path / "mini.toml"), "--out", str(tmp_path / "res"),
                 "--reports", str(tmp_path / "rep")])
    assert code == 0
    modes = _modes(tmp_path / "res", tmp_path / "rep")
    wrong = {str(p): oct(mode) for p, mode in modes.items() if mode != (0o755 if p.is_dir() else 0o644)}
    assert any(p.suffix == ".png" for p in modes) and any(p.parent.name == "cells" for p in modes)
    assert not wrong, wrong
