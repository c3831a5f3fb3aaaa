"""The SPEAR family's fixed numbers: tolerances and schedule constants that are not hyperparameters.

Seventeen of these were user-facing knobs until issue 26, and none had ever been run away from its default in
any suite, test, benchmark or quoted measurement (the knobs users do vary stay in each attack's Config:
`leakbench show attack spear`); the others are thresholds issue 26's later sessions added, each with the
measurement behind it. They live here, in one documented object, so that a reader finds every
number the search depends on in one place, and a benchmark can still try another value
(`dataclasses.replace(TOLERANCES, ...)` passed where a function takes `tolerances`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerances:
    """Zero tests, acceptance and schedules of the SPEAR family (all routes and variants).

    Zero tests and candidate filter (candidates.py, sampling.py):
        zero_tol: relative floor under which |Ln_r·q| counts as zero (rounding of the gradient).
        noise_factor: multiple of the estimated gradient noise added to the zero tolerance.
        sample_tol_factor: looser tolerance for raw sampled directions, before refinement.
        min_extra_zeros / min_zero_fraction: a candidate needs b−1 zeros plus the larger of these (a
            count, and a fraction of the live neurons) before it is examined.
        max_new_per_chunk: at most this many new zero patterns are refined per chunk.
        unique_gap: a zero set must have a 1-D kernel, σ_{b−1} > unique_gap·σ_1 there: a column of the
            column search (spear-paper, candidates.refine) and a direction the deflated search remembers
            (deflation.accept_patterns; it was 1e-3 there until the trained victims, whose true columns
            measure σ_{b−1}/σ_1 ≈ 5e-4 with σ_b/σ_1 ≈ 1e-8 on CIFAR-10 FC-6 width 400 after 5 epochs).
    Acceptance (fit.py, deflation.py):
        residual_tol: largest relative residual of a candidate's next-layer fit for it to count as a sample.
    Guides (spear-guided: guided.py, residual.py, guided.py):
        pool_start: each guide draws its rows among its pool_start·(rows needed) most confidently
            inactive neurons at first; pool_growth: the pool grows by this factor after every turn in
            which the guide is not matched to a found sample.
        residual_after / residual_max_missing / residual_from_b: once the guide in use went
            residual_after guided turns without a new sample, and at most residual_max_missing samples
            are missing, follow a residual guide (FastICA on the deflated factor); only for b ≥
            residual_from_b.
        pattern_fit_rounds / pattern_fit_from_b: for b ≥ pattern_fit_from_b, the search's first turn fits
            a sample to each guide's whole predicted pattern, refitting pattern_fit_rounds times, until the found
            samples give a reference (deflation.OUTLIER_MIN_FOUND); the descent from the guide's estimates
            (descent.GuideDescent) follows, from the same b, and the fits go on with the guides still open after it.
        Both were 128 until the trained victims (FC-6 width 400 trained 5 epochs, seed 0, 120 s,
        `benchmarks/spear_tail.py --tolerance`, before deflation.noise_level_fits had its column test):
        TinyImageNet b = 100 finds 32 of 100 with neither, 89 with
        pattern fits, 31 with residual guides, and all 100 in 46 s with both; CIFAR-10 b = 64 finds 61 of 64
        with neither or pattern fits alone, and 52 with residual guides (their FastICA guides replace CPA's
        too early there), hence the two thresholds.
    Row-space fits (deflation.fits_in_row_space):
        row_space_from / row_space_from_b: for b ≥ row_space_from_b, once this fraction of the batch is found, a
            drawn pattern with a unique kernel whose fit over all b unknowns failed is fitted again in the missing
            samples' row space (b − found unknowns); measured with the ground truth on a trained victim, that fits
            1.6–8× as many true patterns as the fit over all b from 10 % of the batch found on
            (deflation.fits_in_row_space). Plain SPEAR at b = 20 gains nothing from it and paid 7.6 % more search
            time (median over seeds 0–9, `benchmarks/spear_regression.py`), hence the size threshold. The fits it
            rescued on TinyImageNet 5 epochs, b = 100 had all failed over all b at conditioning 1.2e-2 … 3.1e-2,
            not under the floor.
        row_space_rounds: each row-space fit of a direction's pattern is repeated with the fitted sample's own
            pattern this many times in all (last_column.samples_from_directions). Measured with the ground truth
            (`benchmarks/spear_tail.py --dump`, then the fits by hand): on TinyImageNet FC-6 width 400 trained 20
            epochs, b = 100, the suite's cell stopped at 98 of 100 with the missing samples' directions remembered;
            one fit of a remembered direction's pattern (|cos| > 1 − 1e-7 to the true column) left residual 0.17 and the
            sample 62 % off, 3 rounds 1e-5 off, 5 rounds 9.3e-6 off at residual 2.5e-6 (stable). On CIFAR-10 trained 5
            epochs, b = 100 with 15 found, the true patterns of 29 of the 84 missing samples fit in the row space; with
            1 % or 3 % of the neurons nearest the boundary flipped none fit in one round and 29 in five.
        row_space_spare: a row-space fit under fit.COND_FLOOR counts only with at least this many active rows beyond its
            unknowns (last_column.fit_in_row_space): with none left over any pattern fits and its residual says nothing.
            Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 64, seed 0, the suite cell): a true pattern with 59
            active rows for 59 unknowns fitted at residual 9.9e-8 (the found samples' median 2.6e-7) and conditioning
            1.5e-3, 1.1e-3 off; deflating with it stalled the search at 47 of 64. Of 60 true patterns fitted in the row
            space under the floor (CIFAR-10 b = 100, `benchmarks/spear_tail.py --dump`), the two with no row left over
            were 7.9e-5 and 1.1e-3 off, those with 2 … 7 rows left over 3e-6 … 1.4e-5 off.
        column_cond: a found sample's column (last_column.known_columns) bounds the row space only when its zero
            rows fix it, σ_min/σ_max of their system above this (last_column.determined_columns). Measured: on a
            trained victim the undetermined ones sit at 1e-20 and the others at ≥ 6e-6, exact to 1e-10; at 7.7e-9
            a column was 1.7 % off (tests/test_spear_frontier.py).
        column_kernel / column_inside: a remembered direction is a missing column for sure (last_column.sure_directions)
            when its exact zero set has a clean kernel, σ_b ≤ column_kernel·σ_{b−1}, and no more than column_inside of
            its zeros lie inside another remembered direction's larger zero set; every other sample's row-space fit is
            then orthogonal to it. Measured (CIFAR-10 FC-6 width 400 trained 5 epochs, b = 100, seed 0, 15 found, 53
            remembered directions): the 20 true columns among them measure σ_b/σ_{b−1} ≤ 1e-4 and ≤ 93 % of their zeros
            inside another's; 25 mixtures 1e-2 … 0.4 off a true column have 99.2–99.7 % inside it; 8 near-copies of one
            column (2e-4 … 5e-2 off) measure σ_b/σ_{b−1} ≥ 1e-2. With the 20 as sure directions, their own samples fit
            at residuals 7e-8 … 1.3e-6 (conditioning 2.3e-3 … 1.6e-2) and 47 of the 84 missing true patterns fit in the
            row space, where 29 did without them.
        The clean kernel needs at least b − 1 + min_extra_zeros zero rows (last_column.clean_kernels): on b − 1 rows
            every direction has a kernel; at 45 found on that CIFAR-10 cell, 14 near-copies of one column with 98–99
            zero rows passed the σ test, and the two taken as sure left 2 of the 54 missing true patterns fitting.
    Row-space descent (descent.py, a source of spear-guided's, once a sample is found):
        descent_starts / descent_iterations: random starts a turn, and L-BFGS iterations per start. Measured (CIFAR-10
            FC-6 width 400 trained 5 epochs, b = 100, seed 0, the suite cell stopped at 45 found): 16 starts a turn
            took it to 89 found in 11 turns (35 s), all true; one start cost 0.1–0.5 s there with torch's L-BFGS and
            costs 7–10 ms with SciPy's L-BFGS-B and the misfit's gradient in closed form (descent.descend).
        guide_descent_starts: the guide's estimates descended from in one turn of descent.GuideDescent (each once;
            a turn is then a few seconds at width 1000, b = 400, so the loop checks its budget and tries the batch's
            completion between turns).
        descent_from_b: the fewest visible samples (factors.visible_rank, next_visible_rank) it takes turns for: the
            trained CIFAR-10 20-epoch batch of 64 showed 58 (60 since factors.next_floor).
    One pattern per direction (deflation.draw_patterns, one_per_direction):
        one_per_direction_from_b / direction_cos: for b ≥ one_per_direction_from_b, of a chunk's drawn directions
            within direction_cos (1 − |cos|) of one another only the sparsest is kept, before the chunk's 256
            sparsest new patterns are chosen. Measured (TinyImageNet FC-6 width 400 trained 20 epochs, b = 100,
            `benchmarks/spear_tail.py --turns`): one weak sample (predicted at p = 0.998, its gradient column 5e-4 of
            the median one) lies near the kernel of every row, so 99 % of the draws returned a direction within 1e-2
            of its column, each with another loose pattern of 300–390 zeros — sparser than the true samples' ≈ 200 —
            and they filled every chunk's patterns: the search stopped at 84 of 100; with one per direction it found
            98 in 26 s. Dropping every draw near a remembered direction instead (a column whose fit had failed)
            found 98 too, but stalled the frontier at width 400, b = 160, seed 2 at 158 of 160, where the last
            columns' draws were those directions.
    A weak last sample (deflation.complete_batch, weak_last_sample):
        weak_share: a closed-form last sample whose gradient column is below this fraction of the median one is too
            weak to verify: no found sample is banned for its failure, and the search stops. Measured (TinyImageNet
            FC-6 width 400 trained 20 epochs, b = 100, `benchmarks/spear_tail.py`): 1.5e-2 for the weak one's closed
            form (its true share 6.1e-4), ≥ 0.19 for every other sample of the batch.
    Split kernels (deflation.draw_patterns, sampling.split_kernels):
        split_from_b / split_max_missing: for b ≥ split_from_b, with at most split_max_missing samples missing,
            rank-deficient draws are drawn again inside their kernel: split_tries draws each, at most
            split_max_draws per chunk. Below b = 64 plain SPEAR at b = 20 found its batches with the same draws and
            paid 9 % more search time (median over seeds 0–9, `benchmarks/spear_regression.py`).
    Dictionary learning (spear-dl: dl.py):
        dl_start_keep: the shrinking trim starts from this fraction of the live rows.
        dl_min_remaining: below this many missing samples, SPEAR's own draws finish the batch.
    """

    zero_tol: float = 1e-5
    noise_factor: float = 10.0
    sample_tol_factor: float = 10.0
    min_extra_zeros: int = 3
    min_zero_fraction: float = 0.0
    max_new_per_chunk: int = 256
    unique_gap: float = 1e-5
    residual_tol: float = 1e-4
    pool_start: float = 1.5
    pool_growth: float = 1.25
    residual_after: int = 2
    residual_max_missing: int = 48
    residual_from_b: int = 96
    pattern_fit_rounds: int = 10
    pattern_fit_from_b: int = 64
    row_space_from: float = 0.1
    row_space_from_b: int = 64
    row_space_rounds: int = 5
    row_space_spare: int = 3
    column_cond: float = 1e-6
    column_kernel: float = 1e-3
    column_inside: float = 0.98
    one_per_direction_from_b: int = 64
    direction_cos: float = 1e-2
    weak_share: float = 0.05
    split_from_b: int = 64
    split_max_missing: int = 32
    split_max_draws: int = 64
    split_tries: int = 8
    descent_starts: int = 16
    descent_iterations: int = 300
    descent_from_b: int = 48
    guide_descent_starts: int = 64
    dl_start_keep: float = 0.9
    dl_min_remaining: int = 10


TOLERANCES = Tolerances()
"""The values every SPEAR-family attack runs with."""
