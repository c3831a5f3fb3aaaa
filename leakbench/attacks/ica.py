"""scikit-learn's FastICA (parallel, logcosh, unit-variance whitening), optionally under a wall-clock bound.

scikit-learn's FastICA has no time bound: CPA's guide inside spear-guided at width 2000, b = 800 (24,192 × 2,000
derivative rows) takes ≈ 1.4 s an iteration and reached `max_iter` = 1,000 without converging, 1,462–1,633 s on a
900 s budget. With `max_seconds` (leakbench's addition; 0 runs scikit-learn's estimator exactly as CPA always has)
the data is whitened once, as scikit-learn whitens it (centred, projected on the top principal axes, scaled to
unit variance; `whiten_solver` "eigh" is the faster, on the features' Gram matrix), and scikit-learn's own FastICA
iterates on the whitened data (`whiten=False`) in chunks, each warm-started (`w_init`) where the last stopped,
with the clock read between chunks. A warm start from the last chunk's orthogonal unmixing repeats no step, so
an unbounded chunked run is the same iteration as one call (tests/test_ica.py compares it with scikit-learn's).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import linalg

FIRST_CHUNK = 5
"""Iterations of the first chunk, which measures the seconds one iteration takes."""
MAX_CHUNK = 50
"""The most iterations between two reads of the clock."""


@dataclass(frozen=True)
class Unmixing:
    """FastICA's answer on data X (samples × features): sources = components @ (x − mean) for a row x of X.

    iterations: FastICA iterations run; converged: its tolerance was met; timed_out: the bound stopped it first.
    """

    components: np.ndarray
    mixing: np.ndarray
    mean: np.ndarray
    iterations: int
    converged: bool
    timed_out: bool = False


def fastica(X: np.ndarray, n_components: int, *, seed: int, max_iter: int, tol: float, max_seconds: float = 0.0,
            whiten_solver: str = "svd") -> Unmixing:
    """FastICA of X (samples × features) into `n_components` sources; `max_seconds` > 0 bounds its wall clock.

    The bound counts the whitening, and at least FIRST_CHUNK iterations always run (so that an answer exists).
    """
    if max_seconds <= 0 and whiten_solver == "svd":
        return _as_estimator(X, n_components, seed, max_iter, tol)
    deadline = time.perf_counter() + (max_seconds if max_seconds > 0 else math.inf)
    XT = X.T.astype(np.float64, copy=True)
    mean = XT.mean(axis=1)
    XT -= mean[:, None]
    K = whitening(XT, n_components, whiten_solver)
    X1 = (K @ XT) * np.sqrt(XT.shape[1])
    W = np.random.RandomState(seed).normal(size=(n_components, n_components))  # scikit-learn's own w_init draw
    W, iterations, converged = _iterate(X1, W, max_iter, tol, deadline)
    S = W @ K @ XT
    W = W / S.std(axis=1, keepdims=True)  # unit-variance sources, as scikit-learn scales them
    components = W @ K
    return Unmixing(components, linalg.pinv(components, check_finite=False), mean, iterations, converged,
                    timed_out=not converged and iterations < max_iter)


def whitening(XT: np.ndarray, n_components: int, solver: str) -> np.ndarray:
    """scikit-learn FastICA's whitening matrix K (n_components × features) of centred XT (features × samples)."""
    if solver == "eigh":
        d, u = linalg.eigh(XT @ XT.T)
        order = np.argsort(d)[::-1]
        d = np.sqrt(np.maximum(d, np.finfo(d.dtype).eps * 10))[order]
        u = u[:, order]
    elif solver == "svd":
        u, d = linalg.svd(XT, full_matrices=False, check_finite=False)[:2]
    else:
        raise ValueError(f"whiten_solver must be 'svd' or 'eigh', got {solver!r}")
    u *= np.sign(u[0])
    K: np.ndarray = (u / d).T[:n_components]
    return K


def _iterate(X1: np.ndarray, W: np.ndarray, max_iter: int, tol: float, deadline: float
             ) -> tuple[np.ndarray, int, bool]:
    """scikit-learn's parallel FastICA on whitened X1 (components × samples) from W, in chunks until it
    converges, runs `max_iter` iterations, or the next chunk's first iteration would pass `deadline`."""
    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    done, per_iteration = 0, 0.0
    while done < max_iter:
        left = deadline - time.perf_counter()
        if done and left < per_iteration:
            break
        chunk = FIRST_CHUNK if not done else int(min(MAX_CHUNK, max(1.0, left / per_iteration)))
        chunk = min(chunk, max_iter - done)
        start = time.perf_counter()
        ica = FastICA(whiten=False, fun="logcosh", max_iter=chunk, tol=tol, w_init=W)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ica.fit(X1.T)
        W, done = ica.components_, done + int(ica.n_iter_)
        per_iteration = (time.perf_counter() - start) / max(int(ica.n_iter_), 1)
        if not any(issubclass(w.category, ConvergenceWarning) for w in caught):
            return W, done, True
    return W, done, False


def _as_estimator(X: np.ndarray, n_components: int, seed: int, max_iter: int, tol: float) -> Unmixing:
    """scikit-learn's FastICA estimator, unbounded, exactly as CPA has always called it."""
    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    ica = FastICA(n_components=n_components, whiten="unit-variance", fun="logcosh", random_state=seed,
                  max_iter=max_iter, tol=tol)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ica.fit(X)
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    n_iter = int(ica.n_iter_)
    return Unmixing(ica.components_, ica.mixing_, ica.mean_, n_iter, not warned and n_iter < max_iter)
