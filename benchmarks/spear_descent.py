"""Row-space descent's speed and hit rate on a stopped search: seconds per start, and how many starts end on a
missing sample (and how many distinct ones), for the descent the attack runs (SciPy's L-BFGS-B, `descent.descend`)
and for the torch L-BFGS it replaced (strong Wolfe line search, autograd; kept here only as the baseline).

    PYTHONPATH=. python benchmarks/spear_tail.py --dataset cifar10 --data-root ../shared/data/cifar10 --b 100 \\
        --seed 0 --train-epochs 20 --cell-seconds 900 --max-seconds 60 --param max_draws=10000000000 --dump /tmp/c.pt
    PYTHONPATH=. python benchmarks/spear_descent.py /tmp/c.pt --starts 48
    PYTHONPATH=. python benchmarks/spear_descent.py /tmp/c.pt --starts 400 --guide --no-torch

The dump holds the search's state, the problem and the true rows (`spear_tail.py --dump`); the starts are the ones
`RowSpaceDescent` would draw (`descent.random_starts`, generator seed 0), or with --guide the ones `GuideDescent` would
take: the dumped guide's estimates of the samples it has not matched (`descent.guide_starts`), beside as many random
ones. A start "ends on" a missing sample when its
row is within 1e-3 (relative) of a true row the search has not found. Ground truth is read here, never by the attack.

    PYTHONPATH=. python benchmarks/spear_descent.py --unit [--data-root ../shared/data]

--unit needs no dump: it prints the figures SPEAR's unit tests asserted exactly before issue 42 and now bound (they
depend on the CPU's floating-point kernels; compare them across machines here, not in the tests): on the tests' layer
problem (`tests/spear_helpers.layer_problem`, embedded b = 12, 4 samples found) the descent's hits and distinct
samples from 16 and 32 starts and what the acceptance keeps (tests/test_spear_descent.py), the sure directions' fits
(tests/test_spear_frontier.py), the guide descent's found samples, the draws at which the guided last-chunk cell
completes (tests/test_spear_guided.py), and with --data-root the samples 1,000 draws find at TinyImageNet b = 16
(tests/test_spear.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from leakbench.attacks.spear.deflation import null_basis
from leakbench.attacks.spear.descent import AffineRowSpace, affine_row_space, descend, guide_starts, random_starts
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import project_out_next
from leakbench.attacks.spear.guided import Guide, match_guides
from leakbench.attacks.spear.rowspace import row_space


def torch_descend(problem: LayerProblem, space: AffineRowSpace, starts: torch.Tensor, iterations: int) -> torch.Tensor:
    """The ninth session's descent: torch's L-BFGS (strong Wolfe, no early stop) on the same misfit, one start at a
    time, the gradient from autograd."""
    B, offset, Z = space
    AB = problem.A @ B

    def misfit(v: torch.Tensor) -> torch.Tensor:
        a = torch.relu((offset + v @ Z.T) @ AB.T + problem.bias)
        r = project_out_next(problem, a.T).T
        return ((r.norm(dim=1) / a.norm(dim=1).clamp_min(1e-300)) ** 2).sum()

    ends = []
    for v0 in starts:
        v = v0[None].clone().requires_grad_(True)
        opt = torch.optim.LBFGS([v], lr=1, max_iter=iterations, line_search_fn="strong_wolfe", tolerance_grad=0.0,
                                tolerance_change=0.0)

        def closure(v: torch.Tensor = v, opt: torch.optim.LBFGS = opt) -> torch.Tensor:
            opt.zero_grad()
            f = misfit(v)
            f.backward()
            return f

        with torch.enable_grad():
            opt.step(closure)
        ends.append(offset + v.detach()[0] @ Z.T)
    return torch.stack(ends) @ B.T


def guide_rows(problem: LayerProblem, guide: Guide) -> torch.Tensor:
    """The guide's estimates of the rows c (g, b): `Guide.rows`, or, for a dump made before guides kept them, solved
    back from the margins (ẑ = margin·‖A_r‖ = A c + bias, least squares)."""
    if guide.rows is not None:
        return guide.rows
    z = guide.margin.to(problem.A) * problem.A.norm(dim=1)
    return torch.linalg.lstsq(problem.A, (z - problem.bias).T).solution.T


def measure(name: str, run: Callable[[], torch.Tensor], missing: torch.Tensor, count: int) -> None:
    start = time.perf_counter()
    c = run()
    seconds = time.perf_counter() - start
    off = (torch.cdist(c, missing) / missing.norm(dim=1)[None]).min(dim=1)
    hit = off.values < 1e-3
    print(f"{name:<22} {seconds / count * 1e3:8.1f} ms a start; {int(hit.sum())} of {count} starts end on a missing "
          f"sample, {len(set(off.indices[hit].tolist()))} distinct")


def unit_descent(problem: LayerProblem, C: torch.Tensor, count: int, true_row: float) -> None:
    """The descent of `test_descent_ends_on_missing_samples` (4 of 12 found) from `count` random starts (seed 0): how
    many end on a missing sample and how many distinct ones, within 1e-6 (the bound before issue 42) and within
    `true_row`, and how many new samples the acceptance keeps from the patterns they end on (all of them true?)."""
    from leakbench.attacks.spear.candidates import zero_tolerance
    from leakbench.attacks.spear.fit import fit_samples
    from leakbench.attacks.spear.last_column import missing_row_space
    from leakbench.attacks.spear.rowspace import patterns_in_row_space
    from leakbench.attacks.spear.samples import SampleState

    N = null_basis(C[:4], problem.b)
    space = affine_row_space(problem, missing_row_space(problem, C[:4], N).basis)
    c = descend(problem, space, random_starts(space, C[:4], count, torch.Generator().manual_seed(0)), 300)
    off = (torch.cdist(c, C) / C.norm(dim=1)[None]).min(dim=1)
    for bound in (1e-6, true_row):
        hit = (off.values < bound) & (off.indices >= 4)
        print(f"descent, {count} starts, within {bound:.0e}: {int(hit.sum())} end on a missing sample, "
              f"{len(set(off.indices[hit].tolist()))} distinct {sorted(set(off.indices[hit].tolist()))}")
    known = fit_samples(problem, C[:4] @ problem.A.T + problem.bias <= 0, residual_tol=1e-4).residual
    state = SampleState(samples=C[:4].clone(), residuals=known.clone())
    patterns_in_row_space(problem, N, (c @ problem.A.T + problem.bias > 0).to(c.dtype),
                          zero_tolerance(problem, 1e-5, 10.0), state, 1e-4)
    kept = (torch.cdist(state.samples, C) / C.norm(dim=1)[None]).min(dim=1).values
    on, away = off.values[off.values < true_row], off.values[off.values >= true_row]
    print(f"descent, {count} starts, acceptance: {state.found - 4} new samples kept, "
          f"{int((kept < true_row).sum()) - 4} of them true; worst end on a row {float(on.max()):.1e} off, nearest "
          f"end on none {float(away.min()) if away.numel() else float('nan'):.1e} off")


def unit_sure_directions(true_row: float) -> None:
    """`test_sure_directions_take_a_dimension_from_the_other_fits`: each missing sample's fit from its column, with the
    found columns alone and with 4 sure directions: passes (consistent, residual ≤ 1e-4), conditioning, residual and
    how far off its true row."""
    from spear_helpers import layer_problem

    from leakbench.attacks.spear.candidates import zero_tolerance
    from leakbench.attacks.spear.last_column import missing_row_space, samples_from_directions

    problem, X = layer_problem(12, 24, 0)
    C = X @ problem.R.T
    Q = torch.linalg.inv(C)
    columns = (Q / Q.norm(dim=0)).T
    N = null_basis(C[:4], 12)
    for sure in (0, 4):
        fit = samples_from_directions(problem, missing_row_space(problem, C[:4], N, columns[4:4 + sure]), columns[4:],
                                      zero_tolerance(problem, 1e-5, 10.0), cond_floor=1e-2)
        ok = fit.consistent & (fit.residual <= 1e-4)
        off = (fit.c - C[4:]).norm(dim=1) / C[4:].norm(dim=1)
        print(f"sure directions {sure}: passing {[4 + i for i in ok.nonzero().flatten().tolist()]}; worst passing fit "
              f"{float(off[ok].max()):.1e} off (bound {true_row:.0e}); per sample 4–11 conditioning "
              f"{' '.join(f'{v:.1e}' for v in fit.cond.tolist())}, off {' '.join(f'{v:.0e}' for v in off.tolist())}")


def unit_guide_descent() -> None:
    """`test_guide_descent_finds_samples_from_a_rough_guide_each_estimate_once`: samples found at b = 64 from a guide
    20 % off, and the worst of them off its true row."""
    from spear_helpers import layer_problem

    from leakbench.attacks.spear.candidates import zero_tolerance
    from leakbench.attacks.spear.descent import GuideDescent
    from leakbench.attacks.spear.guided import make_guide
    from leakbench.attacks.spear.samples import SampleState
    from leakbench.attacks.spear.scheduler import Search

    problem, X = layer_problem(64, 256, 0)
    C = X @ problem.R.T
    noise = torch.randn(X.shape, generator=torch.Generator().manual_seed(1), dtype=X.dtype)
    source = GuideDescent(make_guide(problem, X + 0.2 * noise * X.norm(dim=1, keepdim=True) /
                                     noise.norm(dim=1, keepdim=True), 1.0))
    state = SampleState(samples=C[:0].clone())
    search = Search(problem, zero_tolerance(problem, 1e-5, 10.0), None, torch.Generator(), 1e-4,  # type: ignore[arg-type]
                    state)
    source.turn(search, 1)
    off = (torch.cdist(state.samples, C) / C.norm(dim=1)[None]).min(dim=1).values
    print(f"guide descent, b = 64: {state.found} found from {source.starts} starts, worst {float(off.max()):.1e} off")


def unit_cells(data_root: str | None) -> None:
    """The two cells whose counts the tests asserted: the draws at which embedded b = 8, layer 3 spear-guided (attack
    seed 0) completes, and (with a data root) the samples spear verifies in 1,000 draws at TinyImageNet b = 16."""
    from dataclasses import replace

    from leakbench.cell.spec import CellSpec
    from leakbench.harness.cell import attack_job, run_cell
    from leakbench.harness.job import attack_cell
    from leakbench.harness.victim import prepare

    spec = CellSpec(attack="spear-guided", dataset="embedded", batch_size=8, seed=0, layer=3,
                    hyperparameters={"max_draws": 2_000_000})
    _, _, update = prepare(spec)
    output = attack_cell(replace(attack_job(spec), seed=0), update)
    print(f"spear-guided embedded b = 8 layer 3: {output.reconstruction.status} after "
          f"{output.reconstruction.stats.get('draws')} draws")
    if data_root is not None:
        s = run_cell(CellSpec(attack="spear", dataset="tinyimagenet", batch_size=16, seed=0, data_root=data_root,
                              hyperparameters={"max_draws": 1000})).summary
        print(f"spear TinyImageNet b = 16, 1,000 draws: {s['reason']}")


def unit(data_root: str | None) -> None:
    """Every figure of --unit (the module docstring), with the kernels' identity first."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' layer problem
    from spear_helpers import TRUE_ROW, layer_problem

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.cpu.get_cpu_capability()}")
    problem, X = layer_problem(12, 48, 0)
    C = X @ problem.R.T
    for count in (16, 32):
        unit_descent(problem, C, count, TRUE_ROW)
    unit_sure_directions(TRUE_ROW)
    unit_guide_descent()
    unit_cells(data_root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", nargs="?", help="a `spear_tail.py --dump` file")
    parser.add_argument("--starts", type=int, default=48)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch L-BFGS baseline")
    parser.add_argument("--guide", action="store_true", help="starts from the guide's estimates (GuideDescent)")
    parser.add_argument("--unit", action="store_true", help="the unit tests' figures (no dump; see above)")
    parser.add_argument("--data-root", default=None, help="with --unit: holds tiny-imagenet-200/")
    args = parser.parse_args()
    if args.unit:
        unit(args.data_root)
        return
    if args.dump is None:
        print("spear_descent.py: give a `spear_tail.py --dump` file, or --unit", file=sys.stderr)
        sys.exit(2)
    dump = torch.load(args.dump, weights_only=False)
    if args.guide and dump.get("guide") is None:
        print(f"spear_descent.py: {args.dump} holds no guide (dump a spear-guided run of spear_tail.py)",
              file=sys.stderr)
        sys.exit(2)
    problem, state, C, tol = dump["problem"], dump["state"], dump["C_true"], dump["tol"]
    found = (torch.cdist(C, state.samples) / C.norm(dim=1)[:, None]).min(dim=1).values < 1e-4
    missing = C[~found]
    space = affine_row_space(problem, row_space(problem, state, null_basis(state.samples, problem.b), tol).basis)
    starts = random_starts(space, state.samples, args.starts, torch.Generator().manual_seed(0))
    print(f"{state.found} of {problem.b} found, {missing.shape[0]} missing; row space of dimension {space.B.shape[1]}; "
          f"{args.starts} starts, {args.iterations} iterations")
    if args.guide:
        guide = dump["guide"]
        match_guides(guide, problem, state.samples)
        rows = guide_rows(problem, guide)[guide.open][:args.starts]
        from_guide = guide_starts(problem, space, rows)
        measure("SciPy L-BFGS-B, guide", lambda: descend(problem, space, from_guide, args.iterations), missing,
                from_guide.shape[0])
        starts = starts[:from_guide.shape[0]]
    measure("SciPy L-BFGS-B", lambda: descend(problem, space, starts, args.iterations), missing, starts.shape[0])
    if not args.no_torch:
        measure("torch L-BFGS (before)", lambda: torch_descend(problem, space, starts, args.iterations), missing,
                args.starts)


if __name__ == "__main__":
    main()
