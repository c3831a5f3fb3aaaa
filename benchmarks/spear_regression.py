"""SPEAR regression check: the same cells on two checkouts, interleaved, each run in its own process.

    PYTHONPATH=. python benchmarks/spear_regression.py --data-root ../shared/data \
        --checkouts new=.,old=/work/wt/old --batch-sizes 20,25 --seeds 0-9 --max-seconds 300

For each (b, seed) the checkouts run one after the other (order alternating with the seed), each in a
fresh subprocess with PYTHONPATH set to that checkout, so import paths never mix. One run builds the
cell with `leakbench.harness.cell.prepare(spec)` and calls `create_attack(attack, ...).reconstruct(update,
seed=seed)` directly (no attack worker, no scoring overhead in the timing); seconds are the
reconstruct call only. Exactness is the harness's own `score` (image space at layer 1).
Victim: FC-6 width 200 at init, layer 1, TinyImageNet val (docs/notebook/spear.md's b = 20 setting).
Prints one line per run and per-(b, checkout) medians; optional CSV.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parse_range(text: str) -> list[int]:
    """"0-9" or "1,2,4" → list of ints."""
    if "-" in text and "," not in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(v) for v in text.split(",")]


def parse_params(pairs: list[str]) -> dict:
    """["route=paper", "last_column=false"] → {"route": "paper", "last_column": False} (JSON values, else text)."""
    params = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


EXTRA_STATS = ("samples_found", "guide_seconds", "search_seconds", "guided_draws", "guides_matched",
               "residual_guides", "residual_guided_draws", "fits_skipped", "fits_or_lp_checks",
               "pattern_fit_found", "pattern_fit_seconds", "retries")
"""Attack stats printed with each run when present (guided SPEAR's, issue 16)."""


def one_run(args: argparse.Namespace) -> int:
    """Worker: one cell with whatever `leakbench` is on PYTHONPATH; prints one JSON line."""
    import leakbench
    from leakbench.attacks import create_attack
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.scoring import score
    from leakbench.harness.victim import prepare

    spec = CellSpec(attack=args.attack, dataset=args.dataset, batch_size=args.b, seed=args.seed, width=args.width,
                    depth=args.depth, layer=1, data_root=args.data_root)
    batch, model, update = prepare(spec)
    params = {"max_seconds": args.max_seconds, "device": "cpu", **parse_params(args.param)}
    if args.max_draws:
        params["max_draws"] = args.max_draws
    attack = create_attack(args.attack, **params)
    load_start = list(os.getloadavg())
    start = time.perf_counter()
    recon = attack.reconstruct(update, seed=args.seed)
    seconds = time.perf_counter() - start
    records, _ = score(recon, batch, model, None)
    print(json.dumps({"leakbench": str(Path(leakbench.__file__).resolve().parent.parent), "b": args.b,
                      "seed": args.seed, "status": recon.status, "reason": recon.reason,
                      "exact_fraction": float(records["exact"].astype(bool).mean()), "seconds": seconds,
                      "draws": int(recon.stats.get("draws", 0)),
                      "samples_found": int(recon.stats.get("samples_found", 0)), "load_start": load_start,
                      "load_end": list(os.getloadavg()),
                      "stats": {k: v for k, v in recon.stats.items() if k in EXTRA_STATS}}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkouts", default="new=.", help="name=path,... (paths of repository roots)")
    parser.add_argument("--attack", default="spear")
    parser.add_argument("--dataset", default="tinyimagenet")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--batch-sizes", default="20,25")
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--max-draws", type=int, default=0, help="0: the attack's default")
    parser.add_argument("--param", action="append", default=[], help="KEY=VALUE hyperparameter of the attack "
                        "(repeatable), e.g. --param route=paper")
    parser.add_argument("--out", type=Path, default=None, help="CSV of every run")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--b", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return one_run(args)
    data_root = str(Path(args.data_root).resolve()) if args.data_root else None
    checkouts = [(name, str(Path(path).resolve())) for name, path in
                 (item.split("=", 1) for item in args.checkouts.split(","))]
    rows = []
    for b in parse_range(args.batch_sizes):
        for seed in parse_range(args.seeds):
            order = checkouts if seed % 2 == 0 else checkouts[::-1]
            for name, path in order:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--one", "--attack", args.attack,
                       "--dataset", args.dataset, "--width", str(args.width), "--depth", str(args.depth),
                       "--max-seconds", str(args.max_seconds), "--max-draws", str(args.max_draws),
                       "--b", str(b), "--seed", str(seed), *(f"--param={p}" for p in args.param)]
                if data_root:
                    cmd += ["--data-root", data_root]
                env = dict(os.environ, PYTHONPATH=path)
                done = subprocess.run(cmd, env=env, cwd=path, capture_output=True, text=True)
                if done.returncode != 0:
                    print(done.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"{name} b={b} seed={seed} exited {done.returncode}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                if row["leakbench"] != path:
                    raise SystemExit(f"{name}: imported leakbench from {row['leakbench']}, not {path}")
                row["checkout"] = name
                rows.append(row)
                print(f"{name:4s} b={b:3d} seed={seed:2d} {row['status']:6s} exact={row['exact_fraction']:.2f} "
                      f"{row['seconds']:8.2f} s draws={row['draws']} found={row['samples_found']} "
                      f"load {row['load_start'][0]:.1f}→{row['load_end'][0]:.1f} {row['stats']}", flush=True)
    print("\nb   checkout  n  ok  exact%  median_s  max_s  median_draws")
    for b in parse_range(args.batch_sizes):
        for name, _ in checkouts:
            sel = [r for r in rows if r["b"] == b and r["checkout"] == name]
            ok = sum(r["status"] == "ok" for r in sel)
            exact = 100 * statistics.mean(r["exact_fraction"] for r in sel)
            print(f"{b:<3d} {name:8s} {len(sel):2d} {ok:3d} {exact:7.1f}"
                  f" {statistics.median(r['seconds'] for r in sel):9.2f} {max(r['seconds'] for r in sel):6.1f}"
                  f" {statistics.median(r['draws'] for r in sel):13.0f}")
    if args.out:
        import csv
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
