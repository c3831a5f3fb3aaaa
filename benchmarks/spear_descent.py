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
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

from leakbench.attacks.spear.deflation import null_basis, row_space
from leakbench.attacks.spear.descent import AffineRowSpace, affine_row_space, descend, guide_starts, random_starts
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import project_out_next
from leakbench.attacks.spear.guided import Guide, match_guides


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", help="a `spear_tail.py --dump` file")
    parser.add_argument("--starts", type=int, default=48)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch L-BFGS baseline")
    parser.add_argument("--guide", action="store_true", help="starts from the guide's estimates (GuideDescent)")
    args = parser.parse_args()
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
