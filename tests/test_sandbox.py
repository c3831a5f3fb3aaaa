"""The attack worker's sandbox (issue 22): which paths its Landlock rules open, and what the kernel
refuses once a process has applied it (a child process of the test applies it to itself)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leakbench.harness import sandbox
from leakbench.harness.sandbox import FULL, level, policy


def _tree(root: Path) -> None:
    for path in ("pkg/__init__.py", "pkg/data/secret.png", "pkg/mod.py", "other/x.txt", "top.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x")


def test_a_hidden_folder_inside_an_allowed_tree_is_never_readable(tmp_path: Path) -> None:
    _tree(tmp_path)
    found: list[tuple[str, int]] = []
    hidden = (str(tmp_path / "pkg" / "data"),)
    sandbox._allow(found, str(tmp_path), hidden, read_dir=13, read_file=5)
    rules = dict(found)
    read = {p for p, r in rules.items() if r & 4}  # READ_FILE
    assert str(tmp_path / "pkg" / "mod.py") in read and str(tmp_path / "other") in read
    assert not any(p == hidden[0] or p.startswith(hidden[0] + os.sep) for p in rules)
    assert not any(hidden[0].startswith(p + os.sep) for p in read)  # no readable ancestor of the hidden folder
    assert rules[str(tmp_path)] == sandbox_read_dir()  # the folder above it: listing only


def test_prepared_rules_are_reused_only_when_the_new_hidden_paths_lie_apart(tmp_path: Path) -> None:
    _tree(tmp_path / "tree")
    base = sandbox.Policy((str(tmp_path / "tree"),), (), (), "")
    sandbox.prepare(base)
    try:
        apart = sandbox.Policy(base.runtime, (), (str(tmp_path / "data"),), "")
        assert sandbox.read_rules(apart) is sandbox._PREPARED[0][1]
        inside = sandbox.Policy(base.runtime, (), (str(tmp_path / "tree" / "other"),), "")
        rules = dict(sandbox.read_rules(inside))
        assert str(tmp_path / "tree") not in rules or not rules[str(tmp_path / "tree")] & 4
        assert not any(p.startswith(str(tmp_path / "tree" / "other")) for p in rules)
    finally:
        sandbox._PREPARED.clear()


def sandbox_read_dir() -> int:
    from landlock import FSAccess

    return int(FSAccess.READ_DIR)


def test_a_users_import_folder_gives_only_its_modules_and_packages(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "plugin-1.0.dist-info").mkdir()
    rules = policy([str(tmp_path)], [], str(tmp_path / "scratch"))
    assert str(tmp_path) in rules.modules
    found = sorted(Path(p).name for p in sandbox._module_entries(str(tmp_path)))
    assert found == ["pkg", "plugin-1.0.dist-info", "top.py"]


def test_other_pythons_packages_are_hidden(tmp_path: Path) -> None:
    rules = policy(sys.path, [str(tmp_path)], str(tmp_path))
    assert os.path.realpath(str(tmp_path)) in rules.hidden
    assert not any(h in (os.path.realpath(p) for p in sys.path) for h in rules.hidden if "packages" in h)


PROBE = r"""
import ctypes, os, socket, sys, tempfile
from leakbench.harness.sandbox import apply, policy
secret, scratch = sys.argv[1], tempfile.mkdtemp()
apply(policy(sys.path, [os.path.dirname(secret)], scratch))
out = {}
def probe(name, fn):
    try:
        fn(); out[name] = "allowed"
    except OSError as exc:
        out[name] = exc.errno
probe("read secret", lambda: open(secret, "rb").read())
probe("read /etc/passwd", lambda: open("/etc/passwd", "rb").read())
probe("write scratch", lambda: open(os.path.join(scratch, "x"), "w").write("x"))
probe("fork", os.fork)
probe("socket", socket.socket)
probe("parent environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
probe("signal parent", lambda: os.kill(os.getppid(), 0))
print(out)
"""


@pytest.mark.slow
@pytest.mark.skipif(level()[0] != FULL, reason=f"this kernel or install cannot sandbox: {level()[1]}")
def test_the_kernel_refuses_what_the_policy_does_not_allow(tmp_path: Path) -> None:
    secret = tmp_path / "private" / "x.png"
    secret.parent.mkdir()
    secret.write_bytes(b"private")
    proc = subprocess.run([sys.executable, "-c", PROBE, str(secret)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = eval(proc.stdout.strip().splitlines()[-1])  # our own probe's dict
    assert out["write scratch"] == "allowed"
    assert out["read secret"] == out["read /etc/passwd"] == out["parent environ"] == 13  # EACCES: Landlock
    assert out["fork"] == out["socket"] == out["signal parent"] == 1  # EPERM: seccomp
