"""SPEAR theory (leakbench.attacks.spear.theory) against brute force and simulation."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from scipy import stats

from leakbench.attacks.spear import theory


def test_hit_probability_counts_subsets():
    m, rows = 9, 3
    zeros = set(range(5))
    hits = sum(set(s) <= zeros for s in itertools.combinations(range(m), rows))
    assert theory.hit_probability(np.array([5]), m, rows)[0] == pytest.approx(hits / comb(m, rows))
    assert theory.hit_probability(np.array([2]), m, rows)[0] == 0.0


def test_mean_hit_probability_under_binomial_is_two_to_minus_rows():
    m, rows = 40, 7
    z = np.arange(m + 1)
    mean = (stats.binom.pmf(z, m, 0.5) * theory.hit_probability(z, m, rows)).sum()
    assert mean == pytest.approx(2.0 ** -rows, rel=1e-9)


def test_coupon_draws_equal_probabilities_is_harmonic():
    b, p = 10, 1e-4
    assert theory.coupon_draws(np.full(b, p)) == pytest.approx(np.sum(1 / np.arange(1, b + 1)) / p, rel=1e-3)
    assert theory.coupon_draws(np.array([1e-3, 0.0])) == float("inf")


def simulate_draws(z: np.ndarray, m: int, deflation: bool, rng: np.random.Generator) -> int:
    """Brute-force simulation of the search on abstract zero sets (no linear algebra)."""
    b = z.size
    zero_sets = [set(rng.choice(m, size=int(k), replace=False)) for k in z]
    remaining, draws = set(range(b)), 0
    while len(remaining) > (1 if deflation else 0):
        rows = b - 1 - (b - len(remaining) if deflation else 0)
        draw = set(rng.choice(m, size=rows, replace=False))
        draws += 1
        hit = [i for i in remaining if draw <= zero_sets[i]]
        if hit:
            remaining.discard(hit[0])
    return draws


@pytest.mark.slow
@pytest.mark.parametrize("deflation", [False, True])
def test_expected_draws_matches_simulation(deflation):
    rng = np.random.default_rng(0)
    m, z = 40, np.array([26, 24, 22, 21, 20])
    simulated = np.mean([simulate_draws(z, m, deflation, rng) for _ in range(1500)])
    assert theory.expected_draws(z, m, deflation=deflation, orders=400) == pytest.approx(simulated, rel=0.1)


def test_deflation_needs_fewer_draws_and_fails_less():
    assert theory.expected_draws_binomial(12, 200, deflation=True, batches=8) < \
        theory.expected_draws_binomial(12, 200, deflation=False, batches=8)
    assert theory.plain_draws_approx(20) == pytest.approx(2 ** 19 * sum(1 / k for k in range(1, 21)))


@pytest.mark.parametrize(("deflation", "m"), [(False, 14), (True, 7)])
def test_failure_bound_is_above_simulated_failure_rate(deflation, m):
    rng = np.random.default_rng(1)
    b = 8
    z = rng.binomial(m, 0.5, size=(20000, b))
    if deflation:
        need = np.arange(b) - 1  # j-th smallest (0-based j) needs j−1 zeros; the smallest none
        fails = (np.sort(z, axis=1) < need).any(axis=1)
    else:
        fails = (z < b - 1).any(axis=1)
    assert 0 < fails.mean() <= theory.failure_bound(b, m, deflation=deflation)


def test_top_svd_randomized_path_matches_exact_svd_and_is_deterministic():
    import torch

    from leakbench.attacks.spear.factors import top_svd

    gen = torch.Generator().manual_seed(0)
    left = torch.randn(600, 5, generator=gen, dtype=torch.float64)
    M = left @ torch.randn(5, 700, generator=gen, dtype=torch.float64)
    M += 1e-9 * torch.randn(600, 700, generator=gen, dtype=torch.float64)
    U, S, Vh = top_svd(M, 5)
    exact = torch.linalg.svdvals(M)
    assert U.shape[1] < 600  # the randomized path ran
    assert torch.allclose(S[:5], exact[:5], rtol=1e-12)
    assert float(S[5] / S[0]) == pytest.approx(float(exact[5] / exact[0]), rel=0.5)  # noise level, roughly
    assert torch.allclose((U[:, :5] * S[:5]) @ Vh[:5], M, atol=1e-7)
    U2, S2, _ = top_svd(M, 5)
    assert torch.equal(S, S2) and torch.equal(U, U2)
