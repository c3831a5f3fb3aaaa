"""Issue 26: a next-layer fit far above the found samples' residuals is not used for deflation."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.deflation import OUTLIER_MIN_FOUND, OUTLIER_RATIO, SampleState, keep_samples, outlying_fits


def _state(k: int, b: int = 16) -> tuple[SampleState, torch.Tensor]:
    """k found samples of b with residuals around 2e-7 (as on the trained CIFAR-10 victim), and more rows."""
    rows = torch.randn(2 * b, b, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    residuals = torch.linspace(1.5e-7, 3e-7, k, dtype=torch.float64)
    return SampleState(samples=rows[:k].clone(), residuals=residuals), rows


def _offer(state: SampleState, c: torch.Tensor, residual: float) -> bool:
    sound = keep_samples(state, c[None], torch.tensor([residual], dtype=c.dtype), torch.tensor([True]))
    return bool(sound[0])


def test_a_fit_far_above_the_found_residuals_is_not_kept() -> None:
    """The measured case: residual 4.6e-5 (within the acceptance tolerance 1e-4) among found samples at
    2e-7 is refused, a fit at the found samples' level is kept."""
    state, rows = _state(OUTLIER_MIN_FOUND + 4)
    assert not _offer(state, rows[20], 4.6e-5)
    assert state.found == OUTLIER_MIN_FOUND + 4
    assert _offer(state, rows[21], 3e-7)
    assert state.found == OUTLIER_MIN_FOUND + 5 and bool((state.samples[-1] == rows[21]).all())


def test_the_bar_follows_the_found_samples_median() -> None:
    """Under gradient noise every residual is larger: the bar moves with the median, not a fixed number."""
    state, _ = _state(OUTLIER_MIN_FOUND)
    median = float(state.residuals.median())
    below, above = 0.9 * OUTLIER_RATIO * median, 1.1 * OUTLIER_RATIO * median
    assert outlying_fits(state, torch.tensor([below, above], dtype=torch.float64)).tolist() == [False, True]
    state.residuals = state.residuals * 1e3
    assert outlying_fits(state, torch.tensor([above], dtype=torch.float64)).tolist() == [False]


def test_the_first_samples_are_not_judged() -> None:
    """With fewer than OUTLIER_MIN_FOUND samples found there is no reference: every consistent fit is kept."""
    state, rows = _state(OUTLIER_MIN_FOUND - 1)
    assert _offer(state, rows[20], 4.6e-5)
    assert state.found == OUTLIER_MIN_FOUND


def test_an_ill_conditioned_fit_needs_a_reference() -> None:
    """A fit between LOW_COND_FLOOR and COND_FLOOR (conditioning 9.5e-3 in the measured case, 1.6e-6 off) is
    kept once the found samples give a reference and its residual is in line with theirs; before that, or
    with an outlying residual, it is refused like any fit under the floor."""
    cond = torch.tensor([9.5e-3], dtype=torch.float64)
    early, rows = _state(OUTLIER_MIN_FOUND - 1)
    assert not bool(keep_samples(early, rows[20][None], torch.tensor([3e-7], dtype=torch.float64),
                                 torch.tensor([True]), cond)[0])
    late, rows = _state(OUTLIER_MIN_FOUND + 2)
    assert not bool(keep_samples(late, rows[20][None], torch.tensor([4.6e-5], dtype=torch.float64),
                                 torch.tensor([True]), cond)[0])
    assert bool(keep_samples(late, rows[21][None], torch.tensor([3e-7], dtype=torch.float64),
                             torch.tensor([True]), cond)[0])
    assert late.found == OUTLIER_MIN_FOUND + 3
