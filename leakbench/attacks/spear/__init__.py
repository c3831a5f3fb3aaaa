"""SPEAR (Dimitrov et al., NeurIPS 2024) and leakbench's additions, one named function per step.

Two routes (`SpearConfig.route`). `route=paper` is SPEAR as published — the attacked layer's
gradient only, no next-layer fit, no deflation — in `search.search_columns`. The default route is
leakbench's deflated search, `deflation.search_samples` (it runs the paper's search instead when
the next layer's gradient has rank below b; the stats' `route` and `mode` say which ran).
spear-guided and spear-dl only change where the deflated search's candidates come from.

Paper step → function (both routes use the same step functions where the step is shared):

    factorise   drop dead rows, G = L R (top-b SVD), noise estimate   factors.factorize
    sample      kernel of random (b−1)-row submatrices of L           sampling.draw_directions
    filter      zero tolerance                                        candidates.zero_tolerance
                enough zeros (b−1 + extra)                            sampling.count_zeros, candidates.min_zeros
                new zero pattern                                      candidates.new_patterns
                exact zero set, unique kernel, not known yet          candidates.refine, candidates.is_new
                (the paper route's chain of the above)                search.consider
    select      greedy: sparsest first, linearly independent          select.select_independent
                                                                      (search.select_columns; deflation.try_directions)
    scale       s from dL/db = L Q̂ s                                  solve.column_scales
    solve       X = Q⁻¹ R and the ReLU check                          solve.solve_batch

Leakbench addition → function:

    LP check of a candidate's ReLU pattern (paper route)    candidates.pattern_margin
    closed-form last column (paper route, last_column)      last_column.last_column_candidates
    next-layer fit (x = Rᵀc through dL/dW_next, c·u = 1)    fit.fit_samples (factors.next_layer_basis)
    deflation (search in the null space of the found c)     deflation.null_basis, reduced_rows, draw_patterns,
                                                            zero_chunk
    row-norm weighted draws                                 deflation.row_weights
    two-sided draws for deep layers                         active.find_batch_span, active.draw_active
                                                            (deflation.use_active, active_chunk)
    acceptance of fitted samples                            deflation.accept_patterns, accept_fits
    closed-form last sample(s)                              last_column.complete_last_sample, complete_samples
                                                            (deflation.complete_batch, try_directions)
    samples from remembered directions, others missing      last_column.samples_from_directions, known_columns
                                                            (deflation.try_directions)
    joint refinement of a failed batch                      joint.refine_batch (deflation.verify_batch)
    verification without ground truth, ban and retry        solve.solve_from_samples, deflation.complete_batch
    guides (another attack's reconstruction)                guided.make_guide, guided.guided_chunk
    normal-equation fits and fit cache (spear-guided)       fastfit.fit_once_normal, fastfit.FitCache
    residual guides (FastICA on the deflated factor)        residual.ResidualGuides
    guide-pattern fits (fit each guide's whole pattern)     guide_fits.fit_guide_patterns
    dictionary-learning proposals (spear-dl)                dl.propose, dl.dl_chunk
    budget and progress bar (both routes)                   state.out_of_budget, state.search_bar
    theory: expected draws, failure bound                   theory.expected_draws, theory.failure_bound

Knobs: every field of `SpearConfig` (and its subclasses' fields) is documented once, in its
docstring; `attack.ROUTE_ONLY` lists the knobs one route alone reads, and `attack.check_route_knobs`
refuses such a knob set away from its default on the other route (a ConfigError naming both).
State: `search.ColumnState.columns` holds unit columns of Q (paper route), `deflation.SampleState
.samples` rows of C = Q⁻¹ (deflated route); counters common to both are in `state.SearchState`.
"""

from leakbench.attacks import register_attack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig
from leakbench.attacks.spear.dl_attack import SpearDLAttack, SpearDLConfig
from leakbench.attacks.spear.guided_attack import GuidedSpearAttack, GuidedSpearConfig

register_attack(SpearAttack)
register_attack(GuidedSpearAttack)
register_attack(SpearDLAttack)

__all__ = ["GuidedSpearAttack", "GuidedSpearConfig", "SpearAttack", "SpearConfig", "SpearDLAttack",
           "SpearDLConfig"]
