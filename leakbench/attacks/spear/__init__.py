"""SPEAR (Dimitrov et al., NeurIPS 2024) and leakbench's additions, one named function per step.

Four registered attacks. `spear-paper` is SPEAR as published — the attacked layer's gradient only, no
next-layer fit, no deflation — in `search.search_columns`. `spear` is leakbench's deflated search
(`scheduler.search_samples`; it runs the column search, with the LP check and the closed-form last
column, when the next layer's gradient has rank below b: the stats' `mode` says which ran).
`spear-guided` and `spear-dl` are the deflated search with more proposal sources in front of SPEAR's
own (scheduler.py has the source lists). `spear-approx` and `spear-masked` (adaptive.py) are leakbench's adaptive
forms of spear-paper, not published: a noise-aware column search answering with its best whole batch, unverified,
under noise / DP / quantisation, and low-rank completion of the entries a known pruning or Soteria defence zeroed.

Paper step → function (both searches use the same step functions where the step is shared):

    factorise   drop dead rows, G = L R (top-b SVD), noise estimate   factors.factorize
    sample      kernel of random (b−1)-row submatrices of L           sampling.draw_directions
    filter      zero tolerance                                        candidates.zero_tolerance
                enough zeros (b−1 + extra)                            sampling.count_zeros, candidates.min_zeros
                new zero pattern                                      candidates.new_patterns
                exact zero set, unique kernel, not known yet          candidates.refine, candidates.is_new
                (the column search's chain of the above)              search.consider
    select      greedy: sparsest first, linearly independent          select.select_independent
                                                                      (search.select_columns; completion.try_directions)
                second greedy stage: swaps raising sparsity matching  select.improve_by_swaps, sparsity_matching
    scale       s from dL/db = L Q̂ s                                  solve.column_scales
    solve       X = Q⁻¹ R and the ReLU check                          solve.solve_batch

Leakbench addition → function:

    LP check of a candidate's ReLU pattern (column search)  candidates.pattern_margin
    closed-form last column (column search)                 last_column.last_column_candidates
    next-layer fit (x = Rᵀc through dL/dW_next, c·u = 1)    fit.fit_once_normal, fit.fit_samples
                                                            (factors.next_layer_basis)
    samples under the rounding, or that the next layer      factors.visible_rank, next_visible_rank
    does not show (under 10× its rounding and 1e-6·σ_1)     (factors.next_floor)
    while weak here: not searched, reported
    one loop, proposal sources asked in order               scheduler.Scheduler, scheduler.search_samples
                                                            (scheduler.shares_turn: the one sharing rule)
    deflation (search in the null space of the found c)     deflation.null_basis, reduced_rows, draw_patterns
                                                            (scheduler.ZeroDraws)
    row-norm weighted draws                                 scheduler.ZeroDraws
    two-sided draws for deep layers                         active.find_batch_span, active.draw_active
                                                            (scheduler.TwoSided)
    acceptance of fitted samples                            deflation.accept_patterns, acceptance.accept_fits,
                                                            keep_samples
    found, banned and set-aside samples                     samples.SampleState, ban_sample, lift_bans
    closed-form last sample(s)                              last_column.complete_last_sample, complete_samples
                                                            (completion.complete_batch, try_directions)
    samples from remembered directions, others missing      last_column.samples_from_directions, known_columns
                                                            (completion.try_directions)
    fits in the missing row space (past b/10 found)         last_column.missing_row_space, fit_in_row_space
                                                            (rowspace.fits_in_row_space, row_space)
    missing columns known for sure shrink it (b ≥ 64)       last_column.sure_directions, clean_kernels
                                                            (rowspace.sure_remembered)
    rank-deficient draws split in their kernel (b ≥ 64)     sampling.kernel_directions, split_kernels
                                                            (deflation.draw_patterns)
    outlying fits set aside, the batch completed from them  acceptance.outlying_fits, set_aside,
                                                            completion.try_outliers
    joint refinement of a failed batch                      joint.refine_batch (completion.verify_batch)
    verification without ground truth, set aside and retry  solve.solve_from_samples, completion.complete_batch
    a weak closed-form last sample: no ban, the search stops  completion.weak_last_sample (state.stop_reason)
    guides (another attack's reconstruction)                guided.make_guide, guided.GuidePool
    fit cache (each pattern fitted once)                    fit.FitCache
    residual guides (FastICA on the deflated factor)        residual.ResidualGuides
    guide-pattern fits (fit each guide's whole pattern)     guided.fit_guide_patterns, guided.PatternFits
    row-space descent from the guide's estimates            descent.guide_starts, descent.GuideDescent
    row-space descent (L-BFGS on the next-layer misfit)     descent.descend, descent.RowSpaceDescent
                                                            (rowspace.patterns_in_row_space)
    dictionary-learning proposals (spear-dl)                dl.propose, dl.DLTrims
    budget and progress bar (both searches)                 state.out_of_budget, state.search_bar
    theory: expected draws, failure bound                   theory.expected_draws, theory.failure_bound

Knobs: every field of `attack.SearchBudget`, `SpearConfig` and their subclasses is documented once, in
its docstring; the numbers no one varies (tolerances, thresholds, schedules) are one object,
`tolerances.TOLERANCES`, each field documented there (the measurements behind them:
docs/notebook/spear-measurements.md). State: `search.ColumnState.columns` holds unit columns of Q (column search),
`samples.SampleState.samples` rows of C = Q⁻¹ (deflated search); counters common to both are in
`state.SearchState`.

The deflated search by mechanism: deflation.py (the deflated space and its draws), samples.py (its state),
acceptance.py (which fits are kept), rowspace.py (fits in the missing samples' row space), completion.py (the
batch's completion and verification), scheduler.py (which proposal source runs when).
"""

from leakbench.attacks.registry import register_attack
from leakbench.attacks.spear.adaptive import SpearApproxAttack, SpearMaskedAttack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig, SpearPaperAttack, SpearPaperConfig
from leakbench.attacks.spear.dl_attack import SpearDLAttack, SpearDLConfig
from leakbench.attacks.spear.guided_attack import GuidedSpearAttack, GuidedSpearConfig

register_attack(SpearAttack)
register_attack(SpearPaperAttack)
register_attack(GuidedSpearAttack)
register_attack(SpearDLAttack)
register_attack(SpearApproxAttack)
register_attack(SpearMaskedAttack)

__all__ = ["GuidedSpearAttack", "GuidedSpearConfig", "SpearApproxAttack", "SpearAttack", "SpearConfig",
           "SpearDLAttack", "SpearDLConfig", "SpearMaskedAttack", "SpearPaperAttack", "SpearPaperConfig"]
