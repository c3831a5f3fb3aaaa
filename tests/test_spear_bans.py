"""Issue 26: a sample banned after a failed completion is refused for a while, not for good."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.acceptance import keep_samples
from leakbench.attacks.spear.samples import SampleState, ban_sample
from leakbench.attacks.spear.tolerances import TOLERANCES


def _state(k: int, b: int = 8, seed: int = 0) -> tuple[SampleState, torch.Tensor]:
    """A search state holding k of b random samples, and 2b more samples to offer it."""
    rows = torch.randn(3 * b, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return SampleState(samples=rows[:k].clone(), residuals=torch.full((k,), 1e-8, dtype=torch.float64)), rows


def _offer(state: SampleState, c: torch.Tensor) -> None:
    keep_samples(state, c[None], torch.tensor([1e-7], dtype=c.dtype), torch.tensor([True]))


def _holds(state: SampleState, c: torch.Tensor) -> bool:
    return bool(((state.samples - c).norm(dim=1) <= 1e-12 * c.norm()).any())


def test_a_banned_sample_comes_back_once_the_found_set_has_changed() -> None:
    """A true sample banned after a completion that failed (e.g. for a false batch-mate) is refused while
    the found set stays as it was, and re-admitted, with its residual, once the search has added
    `Tolerances.ban_lifetime` new samples; the old permanent ban kept it out for good."""
    state, rows = _state(5)
    true = rows[2].clone()
    ban_sample(state, 2)
    assert state.samples.shape[0] == 4 and not _holds(state, true)
    _offer(state, true)  # found again at once: still refused
    assert not _holds(state, true) and state.admitted == 0
    for n in range(TOLERANCES.ban_lifetime):
        assert not _holds(state, true)
        _offer(state, rows[10 + n])
    assert state.admitted == TOLERANCES.ban_lifetime and _holds(state, true)
    assert state.samples.shape[0] == 4 + TOLERANCES.ban_lifetime + 1
    assert float(state.residuals[-1]) == 1e-8  # its own residual, not a new fit's
    assert int(state.ban_until[0]) == -1


def test_a_sample_banned_again_waits_longer() -> None:
    """The n-th ban of the same sample lasts n × `Tolerances.ban_lifetime` new samples (a false sample that keeps
    failing the completion comes back ever more rarely); a near-copy replacing a known sample is no new one."""
    state, rows = _state(5)
    bad = rows[0].clone()
    ban_sample(state, 0)
    for n in range(TOLERANCES.ban_lifetime):
        _offer(state, rows[10 + n])
    assert _holds(state, bad)
    ban_sample(state, int(((state.samples - bad).norm(dim=1)).argmin()))
    assert state.banned.shape[0] == 1 and int(state.ban_strikes[0]) == 2
    _offer(state, rows[12] * (1 + 1e-4))
    _offer(state, rows[12])  # a near-copy of the sample just added: replaces it, admits nothing
    assert state.admitted == TOLERANCES.ban_lifetime + 1
    for n in range(2 * TOLERANCES.ban_lifetime - 1):
        assert not _holds(state, bad)
        _offer(state, rows[13 + n])
    assert _holds(state, bad)
