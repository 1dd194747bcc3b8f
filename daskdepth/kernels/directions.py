"""Random projection directions, drawn on the client from ``random_state`` (NumPy)."""

from __future__ import annotations

import numpy as np


def uniform_sphere(rng: np.random.RandomState, m: int, r: int) -> np.ndarray:
    """``m`` independent directions uniform on the unit sphere of R^r (``r >= 1``).

    Examples
    --------
    >>> uniform_sphere(np.random.RandomState(0), 2, 0)
    Traceback (most recent call last):
    ...
    ValueError: no directions on the sphere of R^0: the principal subspace is empty
    """
    if r < 1:  # a zero-length row never gets a nonzero norm: refuse, do not redraw
        raise ValueError(f"no directions on the sphere of R^{r}: the principal subspace is "
                         "empty")
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


def direction_spread(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                     directions: np.ndarray) -> np.ndarray:
    """Standard deviation (``ddof=1``) over ``directions`` of each point's depth contribution.

    The contribution of direction ``j`` is ``min(#{p_i <= q_j}, #{p_i >= q_j}) / n``
    with ``p_i`` the reference rows' and ``q_j`` the point's centred projections
    (exact, from sorted projections): the depth is the mean of these over the
    directions, so its Monte Carlo standard error with ``m`` directions is
    this spread divided by ``sqrt(m)``.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(400, 2))
    >>> v = uniform_sphere(np.random.RandomState(0), 50, 2)
    >>> s = direction_spread(x, x[:3], x.mean(axis=0), v)
    >>> s.shape, bool(((s > 0) & (s < 0.25)).all())
    ((3,), True)
    """
    pr = np.sort((reference - location) @ directions.T, axis=0)
    pq = (points - location) @ directions.T
    n = pr.shape[0]
    c = np.empty_like(pq)
    for j in range(pr.shape[1]):
        le = np.searchsorted(pr[:, j], pq[:, j], side="right")
        ge = n - np.searchsorted(pr[:, j], pq[:, j], side="left")
        c[:, j] = np.minimum(le, ge) / n
    return c.std(axis=1, ddof=1) if c.shape[1] > 1 else np.zeros(c.shape[0])


def directions_for_std(spread: float, target: float, lowest: int, highest: int) -> int:
    """Fewest directions ``m`` with ``spread / sqrt(m) <= target``, within ``[lowest, highest]``.

    Examples
    --------
    >>> directions_for_std(0.15, 0.005, 10, 100_000)
    900
    """
    want = int(np.ceil((spread / target) ** 2 * (1 - 1e-12)))
    return int(min(max(want, lowest), highest))
