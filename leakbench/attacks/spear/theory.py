"""SPEAR's cost and failure probability in b (batch size) and m (layer width), in closed form.

Model: each of the b samples is inactive on z_i of the m neurons. A draw takes b−1 rows uniformly
without replacement; it isolates sample i (its kernel is column i of Q) iff all rows are among
sample i's zeros: probability π(z_i) = C(z_i, b−1) / C(m, b−1). Under the usual idealisation
z_i ~ Binomial(m, ½) independently, E[C(z, k)] = C(m, k)·2^−k, so the mean hit probability is
exactly 2^−(b−1) and plain SPEAR needs about 2^(b−1)·H_b draws (coupon collector).

Deflation (leakbench's search, docs/notebook/spear.md): with k samples known a draw needs only b−k−1 rows,
and the last sample is free. `expected_draws` evaluates either search for given z_i; the
`*_binomial` versions average over z ~ Binomial(m, p) by Monte Carlo with a fixed seed.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, special, stats


def hit_probability(z: np.ndarray, m: int, rows: int) -> np.ndarray:
    """π = C(z, rows) / C(m, rows): a uniform `rows`-subset of m neurons lies in z zeros."""
    z = np.asarray(z, dtype=float)
    logp = (special.gammaln(z + 1) - special.gammaln(z - rows + 1)
            - special.gammaln(m + 1) + special.gammaln(m - rows + 1))
    return np.where(z >= rows, np.exp(logp), 0.0)


def coupon_draws(p: np.ndarray) -> float:
    """Expected draws until every sample has been hit once, sample i with probability p_i per draw.

    Poissonised coupon collector: E = ∫₀^∞ 1 − Π_i (1 − e^{−p_i t}) dt (exact as p_i → 0).
    Infinite if some p_i = 0.
    """
    p = np.asarray(p, dtype=float)
    if (p <= 0).any():
        return float("inf")
    scale = 1.0 / p.min()
    f = lambda s: 1.0 - np.prod(-np.expm1(-p * s * scale))  # noqa: E731 — integrand in units of 1/p_min
    value, _ = integrate.quad(f, 0, np.inf, limit=200)
    return float(value * scale)


def expected_draws(z: np.ndarray, m: int, *, deflation: bool = True, rng: np.random.Generator | None = None,
                   orders: int = 200) -> float:
    """Expected draws for samples with zero counts `z` among m live neurons.

    Plain SPEAR: coupon collector over π(z_i) with b−1 rows. Deflation: stage k (k samples known)
    lasts 1/Σ_{remaining} π_i^(k) draws with b−k−1 rows, the next sample found being i with
    probability ∝ π_i^(k); the last sample is free. The random order is averaged over `orders`
    simulated runs.
    """
    z = np.asarray(z, dtype=float)
    b = z.size
    if not deflation:
        return coupon_draws(hit_probability(z, m, b - 1))
    rng = rng or np.random.default_rng(0)
    totals = []
    for _ in range(orders):
        remaining = np.ones(b, dtype=bool)
        total = 0.0
        for k in range(b - 1):
            p = hit_probability(z[remaining], m, b - k - 1)
            if p.sum() <= 0:
                return float("inf")
            total += 1.0 / -np.expm1(np.log1p(-np.minimum(p, 1.0)).sum())
            found = rng.choice(np.flatnonzero(remaining), p=p / p.sum())
            remaining[found] = False
        totals.append(total)
    return float(np.mean(totals))


def expected_draws_binomial(b: int, m: int, *, p_zero: float = 0.5, deflation: bool = True,
                            batches: int = 64, seed: int = 0) -> float:
    """`expected_draws` averaged over batches with z_i ~ Binomial(m, p_zero) (median over batches)."""
    rng = np.random.default_rng(seed)
    values = [expected_draws(rng.binomial(m, p_zero, size=b), m, deflation=deflation, rng=rng, orders=20)
              for _ in range(batches)]
    return float(np.median(values))


def plain_draws_approx(b: int) -> float:
    """The idealised plain-SPEAR count 2^(b−1)·H_b (mean hit probability 2^−(b−1), coupon collector)."""
    return float(2.0 ** (b - 1) * np.sum(1.0 / np.arange(1, b + 1)))


def failure_bound(b: int, m: int, *, p_zero: float = 0.5, deflation: bool = False) -> float:
    """Upper bound on P(the batch is not identifiable by draws), z_i ~ Binomial(m, p_zero).

    Plain SPEAR needs z_i ≥ b−1 for every sample: P ≤ b·P(Bin(m, p) < b−1) (union bound).
    With deflation the samples can be found in decreasing order of z, the j-th smallest needing
    only j−1 zeros and the smallest none (it is free): it fails only if, for some j ≥ 2, b−j+1
    samples have fewer than j−1 zeros: P ≤ Σ_{j≥2} C(b, b−j+1)·P(Bin(m, p) < j−1)^(b−j+1).
    """
    def cdf(k: int) -> float:
        """P(Bin(m, p_zero) < k)."""
        return float(stats.binom.cdf(k - 1, m, p_zero)) if k > 0 else 0.0

    if not deflation:
        return float(min(1.0, b * cdf(b - 1)))
    total = sum(special.comb(b, b - j + 1) * cdf(j - 1) ** (b - j + 1) for j in range(2, b + 1))
    return float(min(1.0, total))
