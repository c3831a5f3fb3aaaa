"""The attack worker's operating-system sandbox: Landlock for the file system, seccomp for the rest.

`apply(policy)` is called once inside a fresh attack worker, after it imported torch and leakbench
and before it reads a job or runs any attack or plugin code. From then on the kernel, not Python,
refuses:

- **files** (Landlock, `landlock` on PyPI): the worker may read only the Python runtime, the
  installed packages, the system's shared libraries and the Python modules and packages of the
  user's own import path, *minus* every hidden path (the data locations, the run's output folders,
  every other Python installation's packages); it may write only its own scratch folder. Nothing
  else — a results folder, a report, `/proc/<harness>/mem`, a wheel cache holding a copy of the
  data — can be opened, by Python or by native code, by path or by `openat` on a directory
  descriptor. (Folders on the import path, and folders that hold a hidden one, may be listed, so
  file *names* below them can be seen; no content.) Landlock also refuses ptrace of any process
  outside the sandbox.
- **everything else** (seccomp, `pyseccomp` over the system's libseccomp): no new process (fork,
  vfork, exec, clone without CLONE_THREAD, clone3), no other process's memory (ptrace,
  process_vm_readv/writev, pidfd_getfd, kcmp), no signal to another process, no socket (no network,
  no abstract Unix socket), no mount, namespace, BPF, perf, io_uring, keyring, module or file-handle
  (open_by_handle_at) call, no System V IPC or POSIX message queue, no resource limit, priority,
  CPU or I/O priority set on another process (`SELF_ONLY`), no change of the death signal, no
  TIOCSTI or TIOCLINUX (their 32-bit commands compared on the low 32 bits, as the kernel reads them).
  Its own /proc/<pid> is the one /proc entry the worker may read.

`level()` says what this kernel and install can give: `landlock+seccomp`, or `python-guard only`
with the reason. Records carry it (`isolation`), and reports mark rows that were not isolated.
"""

from __future__ import annotations

import errno
import glob
import os
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache

from leakbench.records.schema import FULL, GUARD_ONLY  # the isolation levels records store

LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
"""Where the dynamic linker finds the system's shared libraries (read-only in the sandbox)."""
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/sys/devices/system/cpu", "/proc/cpuinfo")
"""Read-only system files the runtime consults (the CPU's features and count, the linker's cache).
The worker's own /proc/<pid> is added by `apply`, in the worker (`own_proc`): rules prepared in the
fork server must not name the fork server's."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
GPU_DEVICES = "/dev/nvidia*"
"""NVIDIA device nodes (read, write, ioctl) for `device=cuda` attacks; with GPU_FILES read-only.
Not yet measured on a GPU machine."""
GPU_FILES = ("/proc/driver/nvidia", "/sys/bus/pci", "/sys/devices")


@dataclass(frozen=True)
class Policy:
    """What the worker may reach.

    `runtime`: trees readable whole (the interpreter, site-packages, shared libraries);
    `modules`: folders of the import path outside those, of which only Python modules and packages
    are readable (a checkout's `leakbench/` and `tests/*.py`, not its `results/`);
    `hidden`: never readable, wherever it lies; `scratch`: the worker's one writable folder.
    """

    runtime: tuple[str, ...]
    modules: tuple[str, ...]
    hidden: tuple[str, ...]
    scratch: str


def policy(search_path: list[str], hidden: list[str], scratch: str) -> Policy:
    """The policy for a worker that imports from `search_path` and must not reach `hidden`."""
    runtime = _runtime_trees()
    search_path = [os.path.realpath(p) for p in search_path if p]
    inside = [p for p in search_path if any(_within(p, t) for t in runtime)]
    modules = tuple(p for p in dict.fromkeys(search_path) if p not in inside and os.path.isdir(p))
    other_packages = [p for p in _package_dirs(runtime) if not any(_within(q, p) for q in search_path)]
    hide = tuple(dict.fromkeys(os.path.realpath(h) for h in [*hidden, *other_packages]))
    return Policy(runtime, modules, hide, scratch)


SWITCH = "LEAKBENCH_SANDBOX"
"""Set to `off` to run attack workers under the Python guard alone (recorded so; for comparisons)."""


def level() -> tuple[str, str]:
    """(the isolation level this process gives its attack workers, why it is not the full one or '')."""
    return _probe(os.environ.get(SWITCH, ""))


@lru_cache(maxsize=4)
def _probe(switch: str) -> tuple[str, str]:
    """`level()` for the value `switch` of LEAKBENCH_SANDBOX (the kernel is probed once)."""
    if switch == "off":
        return GUARD_ONLY, f"the sandbox is turned off ({SWITCH}=off)"
    try:
        import landlock
        import pyseccomp  # noqa: F401 — loads libseccomp.so.2
    except (ImportError, OSError) as exc:
        return GUARD_ONLY, f"the sandbox libraries cannot be loaded ({type(exc).__name__}: {exc})"
    if not sys.platform.startswith("linux"):
        return GUARD_ONLY, "the sandbox needs Linux (Landlock and seccomp)"
    try:
        abi = landlock.landlock_abi_version()
    except OSError as exc:
        return GUARD_ONLY, f"this kernel has no Landlock ({exc.strerror})"
    return (FULL, "") if abi >= 1 else (GUARD_ONLY, "this kernel has no Landlock")


def isolation_level() -> str:
    """What records say kept an attack run now from the batch: FULL, or GUARD_ONLY with the reason."""
    name, why = level()
    return name if not why else f"{name} ({why})"


def warn_unless_sandboxed() -> None:
    """One warning line when attacks will run under the Python guard alone (`run` says it once)."""
    import warnings

    from leakbench.core.errors import LeakbenchWarning

    name, why = level()
    if why:
        warnings.warn(LeakbenchWarning(f"attacks run under the {name} ({why}): not an operating-system "
                                       "sandbox; records, reports and the leaderboard mark these cells "
                                       "'not isolated'"), stacklevel=2)


def apply(rules: Policy) -> str:
    """Sandbox this process (it must have one thread); the level reached, or raise OSError."""
    import landlock  # noqa: F401 — both load before the sandbox: pyseccomp looks its library up with ldconfig
    import pyseccomp  # noqa: F401

    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise OSError(errno.EBUSY, f"the sandbox must be applied before any thread starts ({threads} running)")
    _landlock(rules)
    _seccomp()
    return FULL


def own_proc() -> str:
    """This process's own /proc entry, /proc/<pid> (what /proc/self resolves to here, now)."""
    return f"/proc/{os.getpid()}"


# --------------------------------------------------------------------------- Landlock


def _landlock(rules: Policy) -> None:
    """Restrict the file system to `rules` (irreversible; inherited by threads started later)."""
    from landlock import FSAccess, Ruleset

    ruleset = Ruleset()
    for path, access in read_rules(rules):
        ruleset.allow(path, rules=access)
    ruleset.allow(own_proc(), rules=FSAccess.READ_FILE | FSAccess.READ_DIR)  # its own, never its parent's
    ruleset.allow(rules.scratch)
    ruleset.apply()


_PREPARED: list[tuple[Policy, tuple[tuple[str, int], ...]]] = []
"""Read rules worked out ahead (`prepare`, in the fork server): its children inherit them."""


def prepare(rules: Policy) -> None:
    """Work out the read rules of `rules` now, so that a process forked later reuses them."""
    _PREPARED[:] = [(rules, _read_rules(rules))]


def read_rules(rules: Policy) -> tuple[tuple[str, int], ...]:
    """(path, Landlock access) pairs that let the worker read what `rules` allow. Rules prepared for
    the same trees are reused when every path hidden now and not then lies apart from all of them:
    no rule is at or above it, none below it (so none of its files is reachable)."""
    for base, found in _PREPARED:
        extra = set(rules.hidden) - set(base.hidden)
        if (base.runtime, base.modules) == (rules.runtime, rules.modules) and not any(
                _within(h, path) or _within(path, h) for h in extra for path, _ in found):
            return found
    return _read_rules(rules)


def _read_rules(rules: Policy) -> tuple[tuple[str, int], ...]:
    from landlock import FSAccess

    read_file = int(FSAccess.READ_FILE | FSAccess.EXECUTE)
    read_dir = read_file | int(FSAccess.READ_DIR)
    found: list[tuple[str, int]] = []
    hidden = rules.hidden
    for tree in [*rules.runtime, *[p for p in SYSTEM_FILES if os.path.exists(p)]]:
        _allow(found, tree, hidden, read_dir, read_file)
    for folder in rules.modules:
        found.append((folder, int(FSAccess.READ_DIR)))  # imports list it; names only, not contents
        for entry in _module_entries(folder):
            _allow(found, entry, hidden, read_dir, read_file, inside=folder)
    found += [(d, int(FSAccess.READ_FILE | FSAccess.WRITE_FILE)) for d in DEVICES if os.path.exists(d)]
    gpu = glob.glob(GPU_DEVICES)
    found += [(d, int(FSAccess.all_file() & ~FSAccess.EXECUTE)) for d in gpu]
    for tree in GPU_FILES if gpu else ():
        _allow(found, tree, hidden, read_dir, read_file)
    return tuple(found)


def _allow(found: list[tuple[str, int]], path: str, hidden: tuple[str, ...], read_dir: int, read_file: int,
           inside: str = "") -> None:
    """Allow reading `path` except the hidden paths inside it: a folder that holds one is opened up
    entry by entry, skipping the hidden ones (Landlock only ever allows), and may itself be listed
    (imports list package folders; a hidden folder's file names can then be listed, never read).
    `hidden` are resolved paths. A symbolic link is followed only when it stays `inside` that
    folder (resolved; '' for the trees given whole, whose own path may be a link): entries of a
    folder opened up one by one stay inside it, as they do under a rule for the whole folder
    (Landlock checks the resolved path), so a link in a plugin folder opens nothing outside it."""
    from landlock import FSAccess

    real = os.path.realpath(path)
    if any(_within(real, h) for h in hidden) or not os.path.exists(real):
        return
    if inside and not _within(real, os.path.realpath(inside)):
        return
    if os.path.isdir(real) and any(_within(h, real) for h in hidden):
        found.append((real, int(FSAccess.READ_DIR)))  # names only, not contents
        for entry in os.scandir(real):
            _allow(found, entry.path, hidden, read_dir, read_file, inside=real)
    else:
        found.append((real, read_dir if os.path.isdir(real) else read_file))


def _module_entries(folder: str) -> list[str]:
    """What Python reads in a user's import-path folder: its modules, its packages (a folder with
    Python files at its top: regular or namespace packages, with whatever else they hold: package
    data is readable) and distribution metadata (entry points), not its other files and folders (a
    checkout's results, reports, data), and nothing a symbolic link in it leads to outside it."""
    entries = []
    real = os.path.realpath(folder)
    for entry in os.scandir(folder):
        if not _within(os.path.realpath(entry.path), real):
            continue
        if entry.is_dir() and (entry.name.endswith((".dist-info", ".egg-info")) or _holds_python(entry.path)):
            entries.append(entry.path)
        elif entry.is_file() and entry.name.endswith((".py", ".pth", ".so")):
            entries.append(entry.path)
    return entries


def _holds_python(folder: str) -> bool:
    try:
        return any(name.endswith(".py") for name in os.listdir(folder))
    except OSError:
        return False


def _runtime_trees() -> tuple[str, ...]:
    """The interpreter's standard library, this environment's packages and the shared libraries."""
    paths = sysconfig.get_paths()
    trees = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    trees += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    trees += [os.path.dirname(os.path.realpath(sys.executable)), sysconfig.get_config_var("LIBDIR") or ""]
    trees += LIBRARY_DIRS
    return tuple(dict.fromkeys(os.path.realpath(t) for t in trees if t and os.path.isdir(t)))


def _package_dirs(trees: tuple[str, ...]) -> list[str]:
    """Every site-packages / dist-packages folder in or just below `trees` (other Pythons' packages
    may hold a dataset's files; the worker's own are re-allowed by the import path)."""
    found: list[str] = []
    for tree in trees:
        for pattern in ("site-packages", "dist-packages", "python3*/site-packages", "python3*/dist-packages",
                        "lib/python3*/site-packages"):
            found += glob.glob(os.path.join(tree, pattern))
    return [os.path.realpath(p) for p in found]


def _within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies below it (both absolute and resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------- seccomp

DENIED = (
    # new processes
    "fork", "vfork", "execve", "execveat",
    # other processes: memory, descriptors, signals
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    "kcmp", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "process_madvise", "move_pages", "migrate_pages",
    # network and Unix sockets
    "socket", "socketpair",
    # memory and messages shared with other processes that no path names (Landlock cannot see them)
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "ipc", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr",
    # the file system's other doors, namespaces, kernel interfaces
    "open_by_handle_at", "name_to_handle_at", "mount", "umount2", "pivot_root", "chroot", "unshare",
    "setns", "fsopen", "fsmount", "move_mount", "open_tree", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "acct", "syslog", "ioperm", "iopl", "fanotify_init", "quotactl", "mknod", "mknodat",
)
"""System calls that fail with EPERM in the sandbox."""
CLONE_THREAD = 0x00010000
INT = 0xFFFFFFFF
"""The low 32 bits: the kernel reads an `int` or `unsigned int` argument (an ioctl's command, a
prctl option) from them alone, so a rule that refuses one value compares them alone (a value with
high bits set would pass a comparison of all 64)."""
TIOCSTI = 0x5412
"""Push a byte into a terminal's input (typing into the user's shell)."""
TIOCLINUX = 0x541C
"""The Linux console's commands (select and paste, among others)."""
DENIED_IOCTLS = (TIOCSTI, TIOCLINUX)
PR_SET_PDEATHSIG = 1
"""The worker's death signal, set by the fork server (`isolation.die_with_parent`): never changed."""
SELF_ONLY: dict[str, dict[int, int]] = {
    "prlimit64": {0: 0}, "setpriority": {0: 0, 1: 0}, "sched_setaffinity": {0: 0}, "sched_setscheduler": {0: 0},
    "sched_setparam": {0: 0}, "sched_setattr": {0: 0}, "ioprio_set": {0: 1, 1: 0}}
"""Calls that act on any process the user owns, and the values their arguments must have to act on
this process alone: pid 0 (this process), setpriority's `which` PRIO_PROCESS (0), ioprio_set's
IOPRIO_WHO_PROCESS (1). Any other value is refused, a pid written out too (the worker's own, or one
of its threads' ids: libseccomp compares an argument once per rule, so "0 or own" cannot be said)."""


def _seccomp() -> None:
    """Load the filter: DENIED fail with EPERM; clone only for threads; clone3 is ENOSYS (the C
    library then falls back to clone); kill and tgkill only to this process; SELF_ONLY calls only
    on this process; no terminal ioctl of DENIED_IOCTLS and no change of the death signal, whatever
    the high 32 bits of those arguments hold."""
    import pyseccomp as sc

    own = os.getpid()
    rules = sc.SyscallFilter(defaction=sc.ALLOW)
    refuse = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            rules.add_rule(refuse, name)
        except OSError:  # a call this architecture does not have
            continue
    rules.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(refuse, "kill", sc.Arg(0, sc.NE, own))
    rules.add_rule(refuse, "tgkill", sc.Arg(0, sc.NE, own))
    for name, arguments in SELF_ONLY.items():
        for i, value in arguments.items():  # one rule each: refused when any of them differs
            rules.add_rule(refuse, name, sc.Arg(i, sc.NE, value))
    for command in DENIED_IOCTLS:
        rules.add_rule(refuse, "ioctl", sc.Arg(1, sc.MASKED_EQ, INT, command))
    rules.add_rule(refuse, "prctl", sc.Arg(0, sc.MASKED_EQ, INT, PR_SET_PDEATHSIG))
    rules.load()
