"""Are two run folders' records the same? Byte for byte for records.parquet, value for value for
cells.parquet with its wall-clock columns aside (issue 23: records before and after a refactor).

    leakbench run default --out /tmp/before    # on the old commit
    leakbench run default --out /tmp/after     # on the new one
    python benchmarks/records_identity.py /tmp/before/default /tmp/after/default

Prints each table's SHA-256 and whether they match; exits 1 when they differ. `--added COL ...` names
columns the new commit adds on purpose (issue 43's re-identification: reid_rank reid_top1 reid_n
reid_distance): both tables are then compared value for value without them, and each added column must be
one `after` has and `before` lacks.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import pandas as pd

TIMING = ["seconds", "attack_stats"]


def digest(path: Path, drop: list[str] | None = None) -> str:
    """SHA-256 of a file's bytes, or (with `drop`) of the table's CSV text without those columns."""
    if drop is None:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    frame = pd.read_parquet(path)
    return hashlib.sha256(frame.drop(columns=[c for c in drop if c in frame]).to_csv().encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--added", nargs="+", default=[], metavar="COL", help="columns only `after` has")
    args = parser.parse_args(argv)
    same = True
    for table, drop in (("records.parquet", args.added or None), ("cells.parquet", TIMING + args.added)):
        if args.added:
            old, new = (set(pd.read_parquet(folder / table).columns) for folder in (args.before, args.after))
            added = [c for c in args.added if c in new - old]
            print(f"{table}: added {', '.join(added) or 'none'}")
        a, b = digest(args.before / table, drop), digest(args.after / table, drop)
        what = "bytes" if drop is None else f"values without {', '.join(drop)}"
        print(f"{table} ({what}): {a} {b} {'same' if a == b else 'DIFFERENT'}")
        same &= a == b
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
