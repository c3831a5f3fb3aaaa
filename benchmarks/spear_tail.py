"""Why guided SPEAR's last samples are not found: per missing sample, what each route would need.

    PYTHONPATH=. python benchmarks/spear_tail.py --data-root ../shared/data --width 400 --b 150 \
        --seed 2 --max-seconds 600

Runs `spear-guided` on one cell (TinyImageNet FC-6, layer 1; at init unless --train-epochs) with the
attack seed the harness derives from the cell id, and keeps the search's final state. Then, with the
ground truth (read here, never by the attack), for every true sample that is not among the found ones it prints:

* zeros: the sample's inactive neurons among the rows still live in the deflated space, against
  the b−k−1 rows a zero draw needs (a draw can isolate it only if zeros ≥ need);
* fit: the next-layer fit of its true ReLU pattern (`fit.fit_samples`, as the search runs it):
  relative residual (inf = ill-conditioned, σ_min < 1e-2 σ_max) and whether it is accepted;
* fit_cond: σ_min/σ_max of that fit's system (the search refuses < 1e-2);
* direction: whether the sample's column direction (null vector of the other b−1 true rows) is
  among the directions the search remembered (`try_directions` completes the batch from them).

Before those, how far the batch's inputs lie from the factor's span: one 1e-4 off it or more cannot be found exactly
(a weak sample that the factorisation's rank leaves partly outside).

It also prints the found samples that are not true samples (near-copies, mixtures), if any; with ≥ 2 missing,
the remembered directions against the missing columns and what completing or fitting from them gives
(`directions_report`); (--trace-bans) every failed completion as it happens: true and false samples in the found
set, the closed-form last sample's distance to the missing true one, and whether the banned sample was a true one;
and (--turns) the samples found after each turn, with the source that took it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from leakbench.attacks import create_attack
from leakbench.attacks.spear import acceptance, completion, guided_attack, rowspace, scheduler
from leakbench.attacks.spear import attack as spear_attack
from leakbench.attacks.spear.candidates import zero_tolerance
from leakbench.attacks.spear.completion import direction_pool, verify_batch
from leakbench.attacks.spear.deflation import null_basis, reduced_rows
from leakbench.attacks.spear.fit import fit_samples
from leakbench.attacks.spear.joint import next_layer_residuals
from leakbench.attacks.spear.last_column import complete_last_sample, complete_samples, samples_from_directions
from leakbench.attacks.spear.tolerances import TOLERANCES
from leakbench.cell.spec import CellSpec
from leakbench.harness.victim import prepare


def is_true(C_true: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Whether each row of c (k × b) is one of the true rows (relative distance < 1e-4)."""
    if c.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool)
    return (torch.cdist(c, C_true) / C_true.norm(dim=1)[None]).amin(dim=1) < 1e-4


def trace_bans(model, batch) -> None:
    """Print, with the ground truth, every failed completion of `completion.complete_batch` and its ban."""
    original = completion.complete_batch

    def complete(problem, state, tol, residual_tol):
        C_true = true_rows(problem, model, batch)
        before, residuals = state.samples.clone(), state.residuals.clone()
        solution = original(problem, state, tol, residual_tol)
        if solution.ok:
            return solution
        true = is_true(C_true, before)
        missing = C_true[~is_true(before, C_true)] if before.shape[0] else C_true
        kept = before[torch.argsort(residuals)][: problem.b - 1]  # the b−1 samples complete_batch completed
        last = complete_last_sample(problem, kept, tol)[-1]
        off = float((missing - last).norm(dim=1).min() / missing.norm(dim=1).min()) if len(missing) else float("nan")
        dropped = before[~is_true(state.samples, before)] if state.samples.shape[0] else before  # banned or cut
        print(f"  failed completion: found {before.shape[0]} (true {int(true.sum())}, not true {int((~true).sum())}); "
              f"violations {solution.violations}; closed-form last sample off the nearest missing one by {off:.1e}; "
              f"dropped {dropped.shape[0]} (banned, or past b−1), true among them "
              f"{int(is_true(C_true, dropped).sum())}; "
              f"draws {state.draws}", flush=True)
        return solution

    completion.complete_batch = scheduler.complete_batch = complete
    keep = acceptance.keep_samples

    def keep_traced(state, c, residual, consistent, cond=None, *args, **kwargs):
        before = state.samples.clone()
        sound = keep(state, c, residual, consistent, cond, *args, **kwargs)
        new = state.samples[~is_true(before, state.samples)] if before.shape[0] else state.samples
        if new.shape[0] and not bool(is_true(C_true(), new).all()):
            false = sound & ~is_true(C_true(), c)
            print(f"  a false sample kept: found {state.samples.shape[0]} after it; draws {state.draws}; "
                  f"residuals of the false fits {[f'{float(r):.1e}' for r in residual[false]]}, conditioning "
                  f"{[f'{float(x):.1e}' for x in cond[false]] if cond is not None else 'not given'}", flush=True)
        return sound

    truth: dict[str, torch.Tensor] = {}

    def C_true() -> torch.Tensor:
        return truth["C"]

    acceptance.keep_samples = rowspace.keep_samples = keep_traced
    original_search = spear_attack.search_samples

    def search(problem, *args, **kwargs):
        truth["C"] = true_rows(problem, model, batch)
        return original_search(problem, *args, **kwargs)

    spear_attack.search_samples = search


kept_guide: dict = {}


def keep_guide() -> None:
    """Keep the guide spear-guided makes (for --dump)."""
    original = guided_attack.make_guide

    def make(*args, **kwargs):
        kept_guide["guide"] = original(*args, **kwargs)
        return kept_guide["guide"]

    guided_attack.make_guide = make


def trace_turns() -> None:
    """Print, after every turn that found samples (or every 50th), the seconds, the source, samples found and draws."""
    original = scheduler.Scheduler.turn
    start = time.perf_counter()
    seen = {"found": 0, "turns": 0}

    def turn(self, search):
        name = original(self, search)
        seen["turns"] += 1
        found = search.state.found
        if found != seen["found"] or seen["turns"] % 50 == 0:
            print(f"  {time.perf_counter() - start:7.1f} s  turn {seen['turns']:5d}  {name:<14} found {found:4d}  "
                  f"draws {search.state.draws}  set aside {search.state.outliers.shape[0]}", flush=True)
            seen["found"] = found
        return name

    scheduler.Scheduler.turn = turn


def override_tolerances(values: dict) -> None:
    """Run every deflated SPEAR search of this process (spear, spear-guided, spear-dl) with these
    `tolerances.Tolerances` fields replaced: in the settings each search is given, and in the shared
    `TOLERANCES` object the steps without settings read (a what-if probe: the frozen object is changed in place;
    default arguments bound at import, such as fit.fit_samples's `cond_floor`, keep their values)."""
    for name, value in values.items():
        object.__setattr__(TOLERANCES, name, value)
    original = spear_attack.DeflatedSpear._settings

    def settings(self, problem):
        base = original(self, problem)
        return dataclasses.replace(base, tolerances=dataclasses.replace(base.tolerances, **values))

    spear_attack.DeflatedSpear._settings = settings


def run_keeping_state(update, seed: int, params: dict):
    """Run spear-guided and return (reconstruction, final SampleState, LayerProblem)."""
    kept = {}
    original = spear_attack.search_samples

    def search(problem, *args, **kwargs):
        state, solution = original(problem, *args, **kwargs)
        kept["state"], kept["problem"] = state, problem
        return state, solution

    spear_attack.search_samples = search
    try:
        rec = create_attack("spear-guided", **params).reconstruct(update, seed=seed)
    finally:
        spear_attack.search_samples = original
    if "state" not in kept:
        raise SystemExit(f"the search did not run: {rec.status}: {rec.reason}")
    return rec, kept["state"], kept["problem"]


def true_rows(problem, model, batch) -> torch.Tensor:
    """The true rows c_i of C (b × b): x_i = Rᵀ c_i for the batch's layer-1 inputs (the b best represented
    when the factor leaves samples at the gradient's noise level out)."""
    with torch.no_grad():
        X = model.layer_inputs(batch.images, 1).flatten(1).double()
    C = X @ problem.R.T
    if C.shape[0] > problem.b:  # samples at the gradient's noise level (factors.visible_rank): not in R's span
        off = (X - C @ problem.R).norm(dim=1) / X.norm(dim=1)
        C = C[off.argsort()[: problem.b].sort().values]
    return C


def span_report(problem, model, batch) -> None:
    """How far each input of the batch lies from the factor's span (R's rows): a sample 1e-4 off it cannot be found
    exactly by any route (measured: the trained CIFAR-10 victim's weak samples, 2e-4 … 0.7 off, were the missing
    ones)."""
    with torch.no_grad():
        X = model.layer_inputs(batch.images, 1).flatten(1).double()
    off = ((X - X @ problem.R.T @ problem.R).norm(dim=1) / X.norm(dim=1)).sort().values
    print(f"inputs off the span of the rank-{problem.b} factor (relative): {int((off < 1e-4).sum())} of {off.numel()} "
          f"within 1e-4; "
          f"the largest {min(16, off.numel())}: {[f'{float(o):.0e}' for o in off[-16:]]}")


def fit_condition(problem, zero: torch.Tensor) -> float:
    """σ_min/σ_max of the next-layer fit's system for one pattern (fit.fit_once_normal's test)."""
    from leakbench.attacks.spear.fit import bias_direction, project_out_next
    active = (~zero).to(problem.A.dtype)
    PA = project_out_next(problem, active[:, None] * problem.A)
    u = bias_direction(problem)
    weight = problem.A.norm(dim=1).mean() / u.norm()
    S = torch.linalg.svdvals(torch.cat([PA, weight * u[None]]))
    return float(S[-1] / S[0])


def report(problem, state, C_true: torch.Tensor, tol: torch.Tensor, residual_tol: float) -> None:
    b = problem.b
    found = state.samples
    dist = torch.cdist(C_true, found) if found.shape[0] else torch.full((b, 1), float("inf"), dtype=C_true.dtype)
    rel = dist / C_true.norm(dim=1, keepdim=True)
    hit = rel.amin(dim=1) < 1e-4
    missing = torch.nonzero(~hit).flatten().tolist()
    false = (rel.amin(dim=0) >= 1e-4).sum() if found.shape[0] else 0
    print(f"found {found.shape[0]} of {b}; true among them {int(hit.sum())}; not true {int(false)}; "
          f"missing {len(missing)}; remembered directions {state.directions.shape[0]}; retries {state.retries}")
    if found.shape[0]:
        err = rel.amin(dim=0).sort().values
        print(f"found samples off the nearest true one (relative): median {float(err.median()):.1e}, "
              f"largest five {[f'{float(e):.1e}' for e in err[-5:]]}")
        if problem.P_next is not None:
            res = next_layer_residuals(problem, found)
            print(f"their next-layer residuals: median {float(res.median()):.1e}, largest five "
                  f"{[f'{float(r):.1e}' for r in res.sort().values[-5:]]} (of the true rows: "
                  f"largest {float(next_layer_residuals(problem, C_true).max()):.1e})")
    if state.outliers.shape[0]:
        off = (torch.cdist(state.outliers, C_true) / C_true.norm(dim=1)).min(dim=1)
        print(f"set aside as outliers (acceptance.set_aside): {state.outliers.shape[0]}; off the nearest true sample "
              f"{[f'{float(e):.1e}' for e in off.values]} (samples {off.indices.tolist()}), residuals "
              f"{[f'{float(r):.1e}' for r in state.outlier_residuals]}")
    for i in torch.nonzero(rel.amin(dim=0) >= 1e-4).flatten().tolist() if found.shape[0] else []:
        near = int(rel[:, i].argmin())
        residual = f"{float(state.residuals[i]):.2e}" if i < state.residuals.shape[0] else "none (completed)"
        print(f"  not true: found row {i} (in the order kept), residual {residual}, "
              f"{float(rel[near, i]):.1e} off true sample {near} (relative), which is "
              f"{'found too' if bool(hit[near]) else 'missing'}")
    N = null_basis(C_true[hit], b)
    _, _, live = reduced_rows(problem, N, tol)
    need = N.shape[1] - 1
    Q_true = torch.linalg.inv(C_true)
    for j in missing:
        z = C_true[j] @ problem.A.T + problem.bias
        zero = z <= 0
        fit = fit_samples(problem, zero[None], residual_tol=residual_tol, rounds=3)
        q = Q_true[:, j] / Q_true[:, j].norm()
        known_dir = bool(((state.directions @ q).abs() > 1 - 1e-6).any()) if state.directions.shape[0] else False
        print(f"  sample {j:3d}: zeros {int((zero & live).sum()):4d} of {int(live.sum())} live (need {need}); "
              f"all zeros {int(zero.sum())}; fit residual {float(fit.residual[0]):.2e} "
              f"accepted {bool(fit.consistent[0])}; fit_cond {fit_condition(problem, zero):.2e}; "
              f"direction remembered {known_dir}; min |z|/max {float(z.abs().min() / z.abs().max()):.1e}")
        column_pattern(problem, q, zero, tol, residual_tol)


def column_pattern(problem, q: torch.Tensor, zero: torch.Tensor, tol: torch.Tensor, residual_tol: float) -> None:
    """What the search reads from a missing sample's true column q: the zero rows |Ln q| ≤ tol against the true
    inactive ones (`zero`), and the next-layer fit of that pattern, with its doubtful rows free and without."""
    ratio = (problem.Ln @ q).abs() / tol
    read = ratio <= 1
    false, missed = read & ~zero, zero & ~read
    worst = f"{float(ratio[false].max()):.1e}" if bool(false.any()) else "-"
    fits = [fit_samples(problem, read[None], residual_tol=residual_tol, free=free, rounds=3)
            for free in (None, read & (ratio > TOLERANCES.doubt))]
    print(f"      its column's zero rows: {int(read.sum())}, of them active {int(false.sum())} (largest |Ln q|/tol "
          f"{worst}), inactive rows not read as zero {int(missed.sum())}; fit of that pattern: residual "
          f"{float(fits[0].residual[0]):.1e} accepted {bool(fits[0].consistent[0])}, with rows above "
          f"{TOLERANCES.doubt}× tol free: residual {float(fits[1].residual[0]):.1e} "
          f"accepted {bool(fits[1].consistent[0])}")
    if bool(false.any()):
        print(f"      |Ln q|/tol: inactive rows up to {float(ratio[zero].max()):.1e}, active rows read as zero from "
              f"{float(ratio[false].min()):.1e}")


def completion_report(problem, state, C_true: torch.Tensor, missing: torch.Tensor, chosen: torch.Tensor, name: str,
                      tol: torch.Tensor, residual_tol: float) -> None:
    """Completing the batch from the directions `chosen` (one per missing sample): whether it verifies and how far
    each completed sample is from the nearest missing one."""
    try:
        completed = complete_samples(problem, state.samples, chosen.T)
    except torch.linalg.LinAlgError:
        print(f"  completion from the {name} directions: singular (the directions are not independent)")
        return
    k = chosen.shape[0]
    _, solution = verify_batch(problem, completed, tol, residual_tol)
    off = torch.cdist(completed[-k:], C_true[missing]).amin(dim=1) / C_true[missing].norm(dim=1).min()
    print(f"  completion from the {name} directions: verifies {solution.ok} ({solution.violations} ReLU "
          f"violations); completed samples off the nearest missing one {[f'{float(o):.1e}' for o in off]}")


def directions_report(problem, state, C_true: torch.Tensor, tol: torch.Tensor, residual_tol: float) -> None:
    """With ≥ 2 samples missing: the remembered directions inside the null space against the missing true columns,
    the ones `try_directions` would pick, and what completing the batch from them, from the nearest ones and from
    the true columns gives (verification, distance of each completed sample to the nearest missing one), and the
    row-space fits of each direction (`last_column.samples_from_directions`)."""
    found = is_true(state.samples, C_true)
    missing = torch.nonzero(~found).flatten()
    k = problem.b - state.samples.shape[0]
    N = null_basis(state.samples, problem.b)
    inside, _, picked = direction_pool(problem, state, N, tol)
    if k < 2 or missing.numel() != k or inside.shape[0] == 0:
        return
    Q = torch.linalg.inv(C_true)[:, missing]
    columns = (Q / Q.norm(dim=0)).T
    cos = (inside @ columns.T).abs()
    print(f"directions: {inside.shape[0]} remembered inside the null space; nearest to each missing column |cos| "
          f"{[f'{float(c):.7f}' for c in cos.max(dim=0).values]}; try_directions picks {picked.tolist()}, their "
          f"nearest missing column {cos[picked].argmax(dim=1).tolist()} at |cos| "
          f"{[f'{float(c):.7f}' for c in cos[picked].max(dim=1).values]}")
    for name, chosen in (("picked", inside[picked]), ("nearest", inside[cos.argmax(dim=0)]), ("true", columns)):
        if chosen.shape[0] == k:
            completion_report(problem, state, C_true, missing, chosen, name, tol, residual_tol)
        fit = samples_from_directions(problem, rowspace.row_space(problem, state, N, tol), chosen, tol)
        off = torch.cdist(fit.c, C_true[missing]).amin(dim=1) / C_true[missing].norm(dim=1).min()
        print(f"  row-space fits of the {name} directions: residual {[f'{float(r):.1e}' for r in fit.residual]}, "
              f"conditioning {[f'{float(r):.1e}' for r in fit.cond]}, stable {fit.consistent.tolist()}, "
              f"off {[f'{float(o):.1e}' for o in off]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--dataset", default="tinyimagenet", help="tinyimagenet or cifar10 (--data-root DIR/cifar10)")
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--b", type=int, default=150)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--train-epochs", type=int, default=0,
                        help="victim trained this many epochs (paper/victims' recipe)")
    parser.add_argument("--param", action="append", default=[],
                        help="KEY=VALUE hyperparameter of spear-guided (JSON value)")
    parser.add_argument("--tolerance", action="append", default=[],
                        help="KEY=VALUE what-if probe: a field of tolerances.Tolerances (JSON value)")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--cell-seconds", type=float, default=None,
                        help="max_seconds in the cell id, and so the attack seed (default: --max-seconds): a suite "
                             "cell's search, stopped after --max-seconds")
    parser.add_argument("--dump", default=None,
                        help="torch.save the final search state, the problem, the true rows and the zero tolerance "
                             "to this file (for what-if probes on the tail)")
    parser.add_argument("--trace-bans", action="store_true",
                        help="print every failed completion with the ground truth (true/false samples, the ban)")
    parser.add_argument("--turns", action="store_true",
                        help="print the samples found after each turn that found some (and every 50th turn)")
    parser.add_argument("--span-only", action="store_true",
                        help="factorise the cell's update as the attack does and print only how far the batch's inputs "
                             "lie from the factor's span (what any route could find exactly); no search")
    parser.add_argument("--cond-floor", type=float, default=None,
                        help="what-if probe: the next-layer fit's conditioning floor, for every fit "
                             "(Tolerances.cond_floor, low_cond_floor and noise_cond_floor where the search reads them)")
    args = parser.parse_args()
    if args.cond_floor is not None:
        override_tolerances({"cond_floor": args.cond_floor, "low_cond_floor": args.cond_floor,
                             "noise_cond_floor": args.cond_floor})
    if args.tolerance:
        override_tolerances({k: json.loads(v) for k, _, v in (p.partition("=") for p in args.tolerance)})
    spec = CellSpec(attack="spear-guided", dataset=args.dataset, batch_size=args.b, seed=args.seed,
                    width=args.width, depth=6, layer=1, data_root=args.data_root, train_epochs=args.train_epochs)
    batch, model, update = prepare(spec)
    if args.span_only:
        span_report(create_attack("spear-guided").layer_problem(update), model, batch)
        return
    if args.trace_bans:
        trace_bans(model, batch)
    if args.turns:
        trace_turns()
    if args.dump:
        keep_guide()
    params = {"max_seconds": args.max_seconds,
              **{k: json.loads(v) for k, _, v in (p.partition("=") for p in args.param)}}
    # the id (and so the attack seed) a suite cell would have
    spec = dataclasses.replace(spec, hyperparameters={**params, "max_seconds": args.cell_seconds or args.max_seconds})
    start = time.perf_counter()
    from leakbench.cell.seeds import attack_seed
    from leakbench.cell.spec import cell_id
    rec, state, problem = run_keeping_state(update, attack_seed(cell_id(spec)), params)
    print(f"status {rec.status} in {time.perf_counter() - start:.0f} s: {rec.reason or 'exact?'}")
    print({k: v for k, v in rec.stats.items() if isinstance(v, (int, float, str, bool))})
    tol = zero_tolerance(problem, TOLERANCES.zero_tol, TOLERANCES.noise_factor)
    C_true = true_rows(problem, model, batch)
    if args.dump:
        torch.save({"problem": problem, "state": state, "C_true": C_true, "tol": tol, "guide": kept_guide.get("guide")},
                   args.dump)
    span_report(problem, model, batch)
    report(problem, state, C_true, tol, TOLERANCES.residual_tol)
    directions_report(problem, state, C_true, tol, TOLERANCES.residual_tol)


if __name__ == "__main__":
    main()
