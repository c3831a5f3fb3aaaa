"""Profile one guided SPEAR cell (leakbench addition, issue 16): cProfile of the reconstruct call.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/spear_profile.py --data-root ../shared/data \
        --width 2000 --b 150 --seed 0 --max-seconds 600 --out reports/prof/w2000-b150.prof

Prints the status, samples found, seconds, draws, the attack's stats and the top functions by
cumulative and own time (TinyImageNet val, FC-6 at init, layer 1).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attack", default="spear-guided")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--width", type=int, default=2000)
    parser.add_argument("--b", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--max-draws", type=int, default=10_000_000_000)
    parser.add_argument("--option", action="append", default=[], help="key=json value, an attack option")
    parser.add_argument("--out", type=Path, default=None, help="pstats file")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)

    from leakbench.attacks import create_attack
    from leakbench.cell.spec import CellSpec
    from leakbench.harness.scoring import score
    from leakbench.harness.victim import prepare

    spec = CellSpec(attack=args.attack, dataset="tinyimagenet", batch_size=args.b, seed=args.seed, width=args.width,
                    depth=6, layer=1, data_root=args.data_root)
    batch, model, update = prepare(spec)
    params = {"max_seconds": args.max_seconds, "device": "cpu", "max_draws": args.max_draws}
    for item in args.option:
        key, value = item.split("=", 1)
        params[key] = json.loads(value)
    attack = create_attack(args.attack, **params)
    print("load before:", os.getloadavg(), flush=True)
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    recon = attack.reconstruct(update, seed=args.seed)
    prof.disable()
    seconds = time.perf_counter() - start
    print("load after:", os.getloadavg())
    records, _ = score(recon, batch, model, None)
    stats = {k: v for k, v in recon.stats.items() if isinstance(v, (int, float, str, bool))}
    print(json.dumps({"status": recon.status, "reason": recon.reason,
                      "exact_fraction": float(records["exact"].astype(bool).mean()), "seconds": seconds,
                      "stats": stats}, default=str))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(args.out))
    ps = pstats.Stats(prof, stream=sys.stdout)
    ps.sort_stats("cumulative").print_stats(args.top)
    ps.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
