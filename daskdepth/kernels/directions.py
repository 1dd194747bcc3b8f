"""Random projection directions, drawn on the client from ``random_state`` (NumPy)."""

from __future__ import annotations

import numpy as np


def uniform_sphere(rng: np.random.RandomState, m: int, r: int) -> np.ndarray:
    """``m`` independent directions uniform on the unit sphere of R^r."""
    u = rng.standard_normal((m, r))
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    while (norms == 0).any():  # pragma: no cover - probability zero
        bad = (norms == 0).ravel()
        u[bad] = rng.standard_normal((int(bad.sum()), r))
        norms = np.linalg.norm(u, axis=1, keepdims=True)
    return u / norms


def draw_directions(rng: np.random.RandomState, m: int, d: int,
                    whitening: np.ndarray | None) -> np.ndarray:
    """Directions ``v_j`` (m x d) in input coordinates.

    IRW (``whitening=None``): ``v_j`` uniform on the sphere.  AI-IRW:
    ``v_j = W u_j`` with ``u_j`` uniform on the sphere of the principal
    subspace, so that ``<x - mu, v_j>`` has unit variance under the fitted
    covariance.
    """
    if whitening is None:
        return uniform_sphere(rng, m, d)
    u = uniform_sphere(rng, m, whitening.shape[1])
    return np.ascontiguousarray(u @ whitening.T)
