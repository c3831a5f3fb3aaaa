"""FastICA under a wall-clock bound (attacks/ica.py): the chunks iterate as scikit-learn does; the bound stops them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from leakbench.attacks.ica import FIRST_CHUNK, fastica, whitening


def _mixtures(seed: int = 0, samples: int = 4000, sources: int = 6, features: int = 20, gaussian: bool = False
              ) -> np.ndarray:
    """Mixtures of Laplace sources (FastICA separates them), or of Gaussian ones (it cannot: it never converges)."""
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(samples, sources)) if gaussian else rng.laplace(size=(samples, sources))
    return S @ rng.normal(size=(sources, features)) + 0.05 * rng.normal(size=(samples, features))


@pytest.mark.parametrize("solver", ["svd", "eigh"])
def test_whitening_is_scikit_learns(solver: str) -> None:
    from sklearn.decomposition import FastICA

    X = _mixtures()
    ica = FastICA(n_components=6, whiten="unit-variance", whiten_solver=solver, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ica.fit(X)
    XT = (X - X.mean(axis=0)).T
    assert np.allclose(whitening(XT, 6, solver), ica.whitening_, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("solver", ["svd", "eigh"])
def test_an_unbounded_chunked_run_is_scikit_learns_estimator(solver: str) -> None:
    """Chunks warm-started from the last unmixing repeat no step: same iterations, same unmixing (a run that needs
    more than one chunk)."""
    X = _mixtures()
    plain = fastica(X, 6, seed=3, max_iter=500, tol=1e-9)
    chunked = fastica(X, 6, seed=3, max_iter=500, tol=1e-9, max_seconds=1e9, whiten_solver=solver)
    assert plain.iterations > FIRST_CHUNK and plain.converged and chunked.converged
    assert abs(chunked.iterations - plain.iterations) <= 1
    assert np.allclose(chunked.components, plain.components, rtol=1e-6, atol=1e-9 * np.abs(plain.components).max())
    assert np.allclose(chunked.mean, plain.mean) and not chunked.timed_out


def test_the_bound_stops_the_iteration_after_the_first_chunk() -> None:
    """A bound already spent by the whitening leaves the first chunk only, reported as timed out, not converged."""
    X = _mixtures()
    bounded = fastica(X, 6, seed=3, max_iter=500, tol=1e-15, max_seconds=1e-9, whiten_solver="eigh")
    assert bounded.iterations == FIRST_CHUNK and bounded.timed_out and not bounded.converged
    assert np.isfinite(bounded.components).all() and bounded.components.shape == (6, 20)


def test_the_iteration_cap_is_not_a_time_out() -> None:
    bounded = fastica(_mixtures(), 6, seed=3, max_iter=7, tol=1e-15, max_seconds=1e9)
    assert bounded.iterations == 7 and not bounded.converged and not bounded.timed_out


def test_the_bound_is_read_between_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a clock that advances 1 s per read, a 10 s bound ends a run that never converges within a few chunks,
    long before max_iter."""
    from types import SimpleNamespace

    import leakbench.attacks.ica as ica

    now = iter(range(10**6))
    monkeypatch.setattr(ica, "time", SimpleNamespace(perf_counter=lambda: float(next(now))))
    bounded = fastica(_mixtures(gaussian=True), 6, seed=3, max_iter=10**5, tol=1e-15, max_seconds=10.0,
                      whiten_solver="eigh")
    assert bounded.timed_out and FIRST_CHUNK <= bounded.iterations < 10 * 100


def test_an_unknown_solver_is_refused() -> None:
    with pytest.raises(ValueError, match="whiten_solver"):
        whitening(np.ones((3, 10)), 2, "qr")
