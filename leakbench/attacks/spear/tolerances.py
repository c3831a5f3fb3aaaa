"""The SPEAR family's fixed numbers: every tolerance, threshold and schedule constant that is not a hyperparameter.

The knobs users vary stay in each attack's Config (`leakbench show attack spear`); the numbers here were never
run away from their defaults in any suite, test or quoted measurement. They live in one documented object so
that a reader finds every number the search depends on in one place, and a benchmark can try another value
(`dataclasses.replace(TOLERANCES, ...)` passed where a function takes `tolerances`; steps without the run's
settings read `TOLERANCES` itself). Each field's docstring says what it bounds and where it is read; the
measurements behind the values are in docs/notebook/spear-measurements.md, under the field's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerances:
    """Zero tests, fits, acceptance, completion and schedules of the SPEAR family (all routes and variants)."""

    # --- zero tests and the candidate filter (candidates.py, sampling.py, search.py, deflation.py)
    zero_tol: float = 1e-5
    """Relative floor under which |Ln_r·q| counts as zero (the gradient's rounding): candidates.zero_tolerance."""
    noise_factor: float = 10.0
    """Multiple of the estimated gradient noise added to the zero tolerance (candidates.zero_tolerance)."""
    sample_tol_factor: float = 10.0
    """How much looser the zero test of raw drawn directions is than the exact one, before refinement."""
    min_extra_zeros: int = 3
    """Zeros a candidate needs beyond the b − 1 forced ones (candidates.extra_zeros; last_column.clean_kernels)."""
    min_zero_fraction: float = 0.0
    """The same as a fraction of the live neurons; the larger of the two counts (candidates.extra_zeros)."""
    max_new_per_chunk: int = 256
    """New zero patterns refined per chunk at most (candidates.new_patterns); 4× this bounds a chunk's directions
    before one per direction is kept (deflation.draw_patterns)."""
    unique_gap: float = 1e-5
    """A zero set's kernel is one-dimensional when σ_{b−1} > unique_gap·σ_1 there (candidates.unique_kernel): a
    column of the column search, a direction the deflated search remembers, a fit's own zero set."""
    deficient: float = 1e-6
    """A draw whose LU pivots (or singular values) fall below deficient × the largest has a kernel of dimension ≥ 2
    (sampling.kernel_directions, split_kernels)."""
    independent_rtol: float = 1e-9
    """The column search keeps a column unless it is this close to dependent on those kept (search.select_columns):
    true columns of Q = C⁻¹ can be ill-conditioned."""
    select_rtol: float = 1e-3
    """The same test where the deflated search picks fits set aside or remembered directions to complete the batch
    (completion.try_outliers, direction_pool) and the sure directions (last_column.sure_directions)."""
    same_direction: float = 1e-6
    """Two unit directions within this (1 − |cos|) are one (candidates.is_new, samples.remember_directions,
    last_column.samples_from_directions); a unit direction lies in a subspace when its projection there has norm
    above 1 − same_direction (rowspace.inside_directions)."""
    live_rows: float = 10.0
    """A row of L N is live (drawn and counted) when its norm is above live_rows × its zero tolerance × |L_r|; below,
    its neuron was active only for samples already found (deflation.reduced_rows)."""

    # --- the layer's noise and visible samples (factors.py, joint.py)
    dead_row: float = 1e-9
    """A neuron whose gradient row (with its bias entry) has norm under dead_row × the largest is dead: dropped before
    the factorisation (factors.factorize)."""
    next_rank_tol: float = 1e-6
    """The next layer's gradient shows a sample when its singular value there is above next_rank_tol·σ_1, or above
    visible_gap × its rounding when that is lower (factors.next_floor)."""
    noise_multiple: float = 30.0
    """Relative slack of every exactness check under gradient noise: noise_multiple × the noise estimate
    (factors.LayerProblem.slack)."""
    visible_gap: float = 10.0
    """A sample whose singular value is within this factor of the first discarded one (the rounding) is not visible
    (factors.visible_rank, next_floor)."""
    rounding_noise: float = 1e-6
    """σ_{b+1}/σ_1 at or below this is the gradient's rounding, not added noise (factors.visible_rank,
    next_visible_rank)."""
    weak_sample: float = 1e-5
    """σ_{r+1}/σ_1 at or below this: the samples past r are weak enough in this layer to count as its noise
    (factors.next_visible_rank)."""

    # --- next-layer fits and their acceptance (fit.py, acceptance.py, samples.py)
    residual_tol: float = 1e-4
    """Largest relative residual of a candidate's next-layer fit for it to count as a sample (with the noise
    slack: max(residual_tol, slack))."""
    cond_floor: float = 1e-2
    """Fits with σ_min/σ_max under this are refused (fit.fit_samples) or, when kept, judged as outliers by their
    residual scaled by cond_floor / conditioning (acceptance.keep_samples)."""
    low_cond_floor: float = 5e-3
    """The floor for a fit whose residual is in line with those of the samples found (acceptance.keep_samples)."""
    noise_cond_floor: float = 5e-4
    """The floor for a fit whose residual is at the gradient's noise level, `LayerProblem.slack`, with a column in its
    zero set (acceptance.noise_level_fits): the search fits every pattern down to it."""
    doubt: float = 0.1
    """Zero rows above this fraction of their tolerance are doubtful: free in the first fit round of spear-dl's
    patterns, and in the second-chance refit of a failed unique pattern (deflation.accept_patterns)."""
    outlier_ratio: float = 20.0
    """A fit whose residual is above this multiple of the found samples' median residual is an outlier
    (acceptance.outlying_fits): set aside, not deflated with."""
    outlier_min_found: int = 8
    """Fits are judged against the found samples' residuals once at least this many are found (acceptance.keep_samples;
    guided.PatternFits pauses from there)."""
    same_sample: float = 1e-2
    """A fit within this distance (relative) of a known sample is that sample again (samples.nearest_known)."""
    fit_rounds: int = 3
    """Fits of a drawn pattern in all, each refitted with the fitted sample's own pattern (fit.fit_samples,
    acceptance.accept_fits)."""
    same_known: float = 1e-6
    """A row within this distance (relative) of a known one is that row (fit.same_samples; guided.match_guides: a
    guide's own sample)."""
    fit_rank_tol: float = 1e-10
    """The next layer's basis restricted to a fit's held rows keeps the directions above fit_rank_tol × its largest
    singular value (fit.fit_once_normal, with free rows)."""
    same_banned: float = 1e-5
    """A fit within this distance (relative) of a banned sample is that sample: refused while banned
    (acceptance.keep_samples), a second strike when banned again (samples.ban_sample)."""
    ban_lifetime: int = 2
    """A sample banned for the n-th time is refused until the search has added n × ban_lifetime new samples
    (samples.ban_sample)."""

    # --- completion and verification (completion.py, joint.py)
    relu_margin: float = 1e-9
    """Verification: a pre-activation below −relu_margin·max|Z| (−max(relu_margin, slack)·max|Z| under noise) with a
    non-zero gradient is a ReLU violation (solve.solve_batch, solve_from_samples)."""
    scale_tol: float = 1e-3
    """Verification: the bias gradient recomputed from the batch must match dL/db within max(scale_tol, slack)
    (relative; solve.solve_from_samples)."""
    scale_nonzero: float = 1e-12
    """The column search's scales s (g = L Q̂ s) must all be above scale_nonzero × the largest (solve.column_scales)."""
    weak_share: float = 0.05
    """A closed-form last sample whose gradient column is below this fraction of the median one is too weak to
    verify: no found sample is banned for its failure, and the search stops (completion.weak_last_sample)."""
    last_determined: float = 1e-3
    """In the closed-form last sample, a column q_i counts as fixed by sample i's zeros when L q_j on those zeros has
    norm above last_determined × |L q_j| (last_column.complete_last_sample)."""
    joint_max_b: int = 32
    """Largest batch refined jointly after a failed verification (completion.verify_batch; joint.refine_batch's least
    squares has b² unknowns)."""
    joint_floor_multiple: float = 5.0
    """A sample whose next-layer residual is under joint_floor_multiple × the noise estimate keeps its next-layer weight
    in the joint refinement (joint.refine_batch)."""

    # --- the missing samples' row space (rowspace.py, last_column.py)
    row_space_from: float = 0.1
    """From this fraction of the batch found (and b ≥ row_space_from_b), a drawn pattern with a unique kernel whose
    fit over all b failed is fitted again in the missing samples' row space (deflation.accept_patterns)."""
    row_space_from_b: int = 64
    """The smallest batch with row-space fits, and whose row space also excludes the sure remembered directions
    (rowspace.fits_in_row_space)."""
    row_space_rounds: int = 5
    """Fits of a pattern in the row space in all, each refitted with the fitted sample's own pattern
    (last_column.samples_from_directions, rowspace.patterns_in_row_space)."""
    row_space_spare: int = 3
    """A row-space fit under cond_floor counts only with at least this many active rows beyond its unknowns
    (last_column.fit_in_row_space)."""
    column_cond: float = 1e-6
    """A found sample's column bounds the row space only when its zero rows fix it: σ_min/σ_max of their system above
    this (last_column.determined_columns)."""
    column_kernel: float = 1e-3
    """A remembered direction is a missing column for sure only if its exact zero set has a clean kernel,
    σ_b ≤ column_kernel·σ_{b−1}, on at least b − 1 + min_extra_zeros rows (last_column.clean_kernels)."""
    column_inside: float = 0.98
    """... and no more than this fraction of its zeros lie inside another remembered direction's larger zero set
    (last_column.sure_directions)."""

    max_zero_fraction: float = 0.9
    """With the LP check (leakbench's), a candidate zero on more than this fraction of the live rows is refused: on
    lt-mlp (float32) near-null directions of L, dominated by samples the victim already classifies with p ≈ 1 (their
    dL/dZ ≈ 0), are below the zero tolerance on ≈ 98 % of rows; the LP refused them only through the rows below."""
    lp_zero_factor: float = 1e-2
    """The LP check (candidates.pattern_margin) constrains to z ≤ 0 only the zero rows at most this fraction of the zero
    tolerance: where the tolerance is set by the noise estimate (lt-mlp's float32 update: pre-activations ≈ 20), an
    active neuron with a small gradient falls below it (1.6 % of active entries at width 1000, b = 64), and the LP
    then refused true samples; true zeros sit at ≤ 1e-3 of the tolerance (99.9 %). Rows between are unconstrained."""
    next_weight_tol: float = 1e-4
    """A column passes the next-layer weight check (next_weight.py, leakbench's) when its relative residual against
    the next layer's weight is at most this (or the noise slack). Measured on FC-2 (docs/reference/attacks.md)."""
    next_weight_spare: int = 10
    """The check runs only on columns with more than m2 + this many non-zero rows (m2: the next layer's width)."""

    # --- the deflated search's schedules (deflation.py, scheduler.py)
    one_per_direction_from_b: int = 64
    """From this b, of a chunk's drawn directions within direction_cos of one another only the sparsest is kept
    (deflation.draw_patterns)."""
    direction_cos: float = 1e-2
    """Directions closer than this (1 − |cos|) are one direction (candidates.one_per_direction)."""
    split_from_b: int = 64
    """From this b, with at most split_max_missing samples missing, rank-deficient draws are drawn again inside their
    kernel (deflation.draw_patterns, sampling.split_kernels) ..."""
    split_max_missing: int = 32
    """... with at most this many samples missing ..."""
    split_max_draws: int = 64
    """... at most this many draws a chunk ..."""
    split_tries: int = 8
    """... and this many draws in each one's kernel."""
    weight_floor: float = 1e-6
    """Row-norm weighted draws weigh row r by max(|L_r N| / max, weight_floor)^−power (scheduler.ZeroDraws.weights)."""
    zero_route_tail: int = 4
    """With at most this many samples missing, two-sided draws share the turns with zero draws (sampler "auto",
    scheduler.TwoSided)."""

    # --- two-sided draws for deep layers (active.py)
    span_max_resid: float = 1e-2
    """Neurons active for the whole batch fit the batch-span regression better than this (relative residual) ...
    (active.find_batch_span)"""
    span_min_gap: float = 10.0
    """... below a gap of at least this factor in the sorted residuals, with at least b + 4 of them."""
    active_zero_tol: float = 1e-4
    """A two-sided draw's kernel direction must make its side's equation vanish to this on at least b + 2 informative
    neurons (active.draw_active) ..."""
    active_rel_tol: float = 1e-3
    """... and its sample is kept when V a matches ReLU(A c + bias) within active_rel_tol of its scale ..."""
    active_slack: float = 0.02
    """... on all but this fraction of the neurons."""

    # --- guides (spear-guided: guided.py, residual.py, descent.py)
    pool_start: float = 1.5
    """Each guide draws its rows among its pool_start × (rows needed) most confidently inactive neurons at first."""
    pool_growth: float = 1.25
    """A guide's pool grows by this factor after every turn in which it is not matched to a found sample."""
    guide_ica_work: int = 160_000_000
    """CPA's guide runs at most this many FastICA iterations × b² (at most its own max_iter, 1,000): its budget in
    work, so that the guide, and the record, do not depend on the machine's speed. An iteration costs ∝ b²·pixels
    (≈ 1.5 s at b = 800 on 64 × 64 × 3 images, one core): b ≤ 400 keeps 1,000 iterations, b = 500 gets 640 (it
    converges in 161), b = 800 250 (≈ 380 s; measured: benchmarks/guide_budget.py) ..."""
    guide_time_share: float = 0.5
    """... and at most this share of `max_seconds` (a safety cap on its clock, attacks/ica.py; a guide it stops
    records `guide_timed_out`); the search gets the rest (guided_attack.bounded_guide_options)."""
    guide_share_after: int = 2
    """After this many guided turns in a row without a sample, the guide pool shares its turns (guided.GuidePool)."""
    residual_after: int = 2
    """Once the guide in use went this many guided turns without a new sample ..."""
    residual_max_missing: int = 48
    """... and at most this many samples are missing, follow a residual guide (FastICA on the deflated factor;
    residual.ResidualGuides) ..."""
    residual_from_b: int = 96
    """... for b ≥ residual_from_b only."""
    pattern_fit_rounds: int = 10
    """Fits of each guide's whole predicted pattern, each refitted with its own pattern (guided.fit_guide_patterns)
    ..."""
    pattern_fit_from_b: int = 64
    """... from this b on, in the search's first turn; the descent from the guide's estimates (descent.GuideDescent)
    from the same b."""
    ica_tol: float = 1e-4
    """FastICA's convergence tolerance for the residual guides (residual.residual_directions)."""
    descent_starts: int = 16
    """Random starts of a row-space descent turn (descent.RowSpaceDescent)."""
    descent_iterations: int = 300
    """L-BFGS iterations per start (descent.descend)."""
    descent_from_b: int = 48
    """The fewest visible samples the row-space descent takes turns for (factors.visible_rank, next_visible_rank)."""
    guide_descent_starts: int = 64
    """The guide's estimates descended from in one turn of descent.GuideDescent (each once)."""

    # --- dictionary learning (spear-dl: dl.py)
    dl_start_keep: float = 0.9
    """The shrinking trim starts from this fraction of the live rows."""
    dl_min_remaining: int = 10
    """Below this many missing samples, SPEAR's own draws finish the batch."""
    dl_share_below: int = 16
    """With at most this many samples missing, a round of proposals that found nothing lets SPEAR's draws have every
    other turn (dl.DLTrims)."""

    # --- the approximate column search under noise (spear-approx, spear-masked: adaptive.py)
    approx_zero_sigmas: float = 3.0
    """An entry L_r·q counts as zero when |L_r·q| ≤ this × the noise std on L's entries (candidates.noise_std):
    absolute, on L's unnormalised rows, where the noise is the same for every row (adaptive.refine_noisy)."""
    approx_rounds: int = 8
    """Rounds of the noise-aware refinement (zero set, then the smallest singular vector of L on it)."""
    approx_per_chunk: int = 64
    """Drawn directions with the most zeros that one chunk refines (adaptive.noisy_column_search)."""
    approx_zero_fraction: float = 0.3
    """A refined direction is a column when at least this fraction of the live neurons are zero there (true columns:
    about half; refined draws of no sample: ≤ a quarter, measured on CIFAR-10 FC-6 w400 b = 8 at σ = 1e-5)."""
    approx_same: float = 1e-2
    """Two refined columns within this (1 − |cos|) are one; the one with more zeros is kept."""
    approx_patience: int = 4
    """Chunks in a row that change no column before the approximate search selects its batch (b columns kept)."""


TOLERANCES = Tolerances()
"""The values every SPEAR-family attack runs with."""
