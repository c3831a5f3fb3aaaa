"""How the next-layer fits of a cell's true ReLU patterns compare with those of false patterns, at every conditioning.

    PYTHONPATH=. python benchmarks/spear_true_fits.py --data-root ../shared/data --b 100 --train-epochs 5

Builds the cell (TinyImageNet or CIFAR-10, FC-6, layer 1, seed 0; trained with paper/victims' recipe when
--train-epochs > 0) and, with the ground truth (read here, never by the attack):

* fits every true sample's pattern with no conditioning floor (`fit.fit_samples`, cond_floor 0) and prints the
  quantiles of conditioning, residual and distance to the true sample, and the least-conditioned fits;
* draws --chunks × 2,000 uniform zero draws in the full space, refines them to exact zero sets as the search does,
  fits those patterns the same way and prints, per conditioning band, the residuals of the true and false fits.

The figures behind `acceptance.noise_level_fits` and `Tolerances.noise_cond_floor` (docs/notebook/spear.md, "Trained
victims at b = 100").

--row-space: with a random part of the true samples taken as found (30, 50, 70, 90 %), how many of the missing
samples' true patterns fit (σ_min/σ_max ≥ 1e-2, residual ≤ residual_tol) over all b unknowns and in the missing
samples' row space (`last_column.missing_row_space`, `fit_in_row_space`): the figures behind
`rowspace.fits_in_row_space` and `Tolerances.row_space_from`.

--tail-draws K: with K random true samples missing (the others found), 20 draws of b'−1 rows among each missing
sample's live zero rows (b' = K): how many draws leave a kernel of dimension ≥ 2 (`sampling.kernel_directions`),
and how many of those `sampling.split_kernels` turns into that sample's column or another missing one's.
"""

from __future__ import annotations

import argparse

import torch
from spear_tail import true_rows  # the script's folder is on sys.path

from leakbench.attacks import create_attack
from leakbench.attacks.spear.candidates import refine, zero_masks, zero_tolerance
from leakbench.attacks.spear.deflation import null_basis, reduced_rows
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.fit import fit_samples
from leakbench.attacks.spear.last_column import complement, fit_in_row_space, known_columns, missing_row_space
from leakbench.attacks.spear.sampling import count_zeros, draw_directions, kernel_directions, split_kernels
from leakbench.attacks.spear.tolerances import TOLERANCES
from leakbench.cell.spec import CellSpec
from leakbench.harness.victim import prepare

QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


def quantiles(x: torch.Tensor) -> str:
    q = x.quantile(torch.tensor(QUANTILES, dtype=x.dtype))
    return " ".join(f"{float(v):.1e}" for v in q)


def drawn_patterns(problem: LayerProblem, chunks: int, seed: int) -> torch.Tensor:
    """Distinct exact zero sets (k, m) of uniform zero draws with enough zeros (`candidates.refine`)."""
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    loose = tol * TOLERANCES.sample_tol_factor
    gen = torch.Generator().manual_seed(seed)
    found = []
    for _ in range(chunks):
        y = draw_directions(problem.Ln, problem.b, 2000, gen)
        y = y[torch.isfinite(y).all(dim=1)]
        y = y[count_zeros(problem.Ln, y, loose) >= problem.b - 1 + TOLERANCES.min_extra_zeros]
        if y.shape[0]:
            _, exact, _ = refine(problem.Ln, zero_masks(problem.Ln, y, loose), tol, TOLERANCES.unique_gap)
            found.append(exact)
    if not found:
        return torch.zeros(0, problem.m, dtype=torch.bool)
    return torch.unique(torch.cat(found), dim=0)


def row_space_fits(problem: LayerProblem, C: torch.Tensor, gen: torch.Generator) -> None:
    """Missing true patterns that fit over all b and in the row space, for found fractions 30 … 90 % (--row-space)."""
    b = problem.b
    zero = (C @ problem.A.T + problem.bias) <= 0
    full = fit_samples(problem, zero, residual_tol=TOLERANCES.residual_tol)
    full_ok = full.residual <= TOLERANCES.residual_tol  # inf under Tolerances.cond_floor
    for frac in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9):
        perm = torch.randperm(b, generator=gen)
        known, missing = perm[: int(frac * b)], perm[int(frac * b):]
        N = null_basis(C[known], b)
        estimated = known_columns(problem, C[known], N)
        true = torch.linalg.inv(C)[:, known]
        angle = 1 - ((estimated * true).sum(0) / (estimated.norm(dim=0) * true.norm(dim=0))).abs()
        fits = []
        for B in (missing_row_space(problem, C[known], N).basis, complement(true)):
            fit = fit_in_row_space(problem, (~zero[missing]).to(C.dtype), B)
            ok = fit.consistent & (fit.residual <= TOLERANCES.residual_tol)
            off = (fit.c - C[missing]).norm(dim=1) / C[missing].norm(dim=1)
            fits.append(f"{int(ok.sum())} (largest error {float(off[ok].max()) if bool(ok.any()) else 0:.1e})")
        print(f"  {known.numel()} found, {missing.numel()} missing: {int(full_ok[missing].sum())} fit over all b; "
              f"in the row space {fits[0]}, from the true columns {fits[1]}; known columns' 1 − |cos| "
              f"{quantiles(angle)}")


def tail_draws(problem: LayerProblem, C: torch.Tensor, k: int, gen: torch.Generator) -> None:
    """Kernels of dimension ≥ 2 among draws from each missing sample's zero rows, and what splitting finds."""
    b = problem.b
    missing = torch.randperm(b, generator=gen)[:k]
    known = torch.tensor([i for i in range(b) if i not in set(missing.tolist())], dtype=torch.long)
    N = null_basis(C[known], b)
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    LNn, tol_r, live = reduced_rows(problem, N, tol)
    columns = torch.linalg.inv(C)[:, missing].T @ N  # the missing columns in the reduced space (k, k)
    columns = columns / columns.norm(dim=1, keepdim=True)
    draws = deficient_count = split_hits = 0
    for j in missing.tolist():
        rows = torch.nonzero(((C[j] @ problem.A.T + problem.bias) <= 0) & live).flatten()
        if rows.numel() < k - 1:
            continue
        idx = torch.stack([rows[torch.randperm(rows.numel(), generator=gen)[: k - 1]] for _ in range(20)])
        _, deficient = kernel_directions(LNn, idx)
        draws += 20
        deficient_count += int(deficient.sum())
        for row in idx[deficient]:
            split = split_kernels(LNn, row[None], tol_r, gen, tries=8)
            split_hits += int(bool(((split @ columns.T).abs() > 1 - 1e-6).any())) if split.shape[0] else 0
    print(f"  {k} missing: {deficient_count} of {draws} draws among a missing sample's zero rows leave a kernel of "
          f"dimension ≥ 2; splitting turns {split_hits} of those into a missing sample's column")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--dataset", default="tinyimagenet", help="tinyimagenet or cifar10 (--data-root DIR/cifar10)")
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--b", type=int, default=100)
    parser.add_argument("--train-epochs", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=20, help="chunks of 2,000 zero draws for the false patterns")
    parser.add_argument("--row-space", action="store_true", help="fits over all b vs in the missing samples' row space")
    parser.add_argument("--tail-draws", type=int, default=0, metavar="K",
                        help="kernel dimensions of draws with K samples missing, and what splitting finds")
    args = parser.parse_args()
    spec = CellSpec(attack="spear-guided", dataset=args.dataset, batch_size=args.b, seed=0, width=args.width,
                    depth=6, layer=1, data_root=args.data_root, train_epochs=args.train_epochs)
    batch, model, update = prepare(spec)
    problem = create_attack("spear-guided").layer_problem(update)
    if problem.P_next is None:
        raise SystemExit("the next layer's gradient has rank below b: no next-layer fits to compare")
    C = true_rows(problem, model, batch)  # the samples the gradient shows (factors.visible_rank)
    print(f"b {problem.b} (visible) of {args.b}; noise σ_(b+1)/σ_1 {problem.noise:.1e}; slack {problem.slack:.1e}")
    if args.row_space or args.tail_draws:
        if args.row_space:
            row_space_fits(problem, C, torch.Generator().manual_seed(0))
        if args.tail_draws:
            tail_draws(problem, C, args.tail_draws, torch.Generator().manual_seed(0))
        return
    true = fit_samples(problem, (C @ problem.A.T + problem.bias) <= 0, residual_tol=TOLERANCES.residual_tol,
                       cond_floor=0.0)
    off = (true.c - C).norm(dim=1) / C.norm(dim=1)
    fitted = true.residual < 0.1
    print(f"true patterns: {int(fitted.sum())} of {C.shape[0]} fit (residual < 0.1), the others are singular or off")
    print(f"  quantiles {QUANTILES}: conditioning {quantiles(true.cond[fitted])}")
    print(f"  residual {quantiles(true.residual[fitted])}; off {quantiles(off[fitted])}")
    for i in torch.argsort(torch.where(fitted, true.cond, torch.inf))[:5].tolist():
        print(f"  least conditioned: sample {i} cond {float(true.cond[i]):.1e} residual {float(true.residual[i]):.1e} "
              f"off {float(off[i]):.1e}")
    patterns = drawn_patterns(problem, args.chunks, seed=0)
    drawn = fit_samples(problem, patterns, residual_tol=TOLERANCES.residual_tol, cond_floor=0.0)
    is_true = (torch.cdist(drawn.c, C) / C.norm(dim=1)[None]).amin(dim=1) < 1e-4
    print(f"drawn patterns: {patterns.shape[0]} distinct, {int(is_true.sum())} of them true samples")
    for lo, hi in ((1e-2, 1.0), (5e-3, 1e-2), (2e-3, 5e-3), (5e-4, 2e-3), (0.0, 5e-4)):
        band = (drawn.cond >= lo) & (drawn.cond < hi)
        for name, mask in (("true", band & is_true), ("false", band & ~is_true)):
            if bool(mask.any()):
                r = drawn.residual[mask]
                print(f"  conditioning [{lo:.0e}, {hi:.0e}) {name}: {int(mask.sum())} fits, residual "
                      f"min {float(r.min()):.1e} median {float(r.median()):.1e}")


if __name__ == "__main__":
    main()
