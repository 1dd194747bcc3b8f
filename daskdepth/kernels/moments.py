"""Moments of rows: counts, means and scatter matrices, and their exact merges (NumPy/Numba).

Moments are :class:`Moments` records ``(count, mean, scatter)``; the count may
be fractional (a weighted share of tied rows, see :func:`support_moments`).
Merges use the Chan et al. pairwise update, which is numerically stable.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._jit import kernel


def chunk_moments(x: np.ndarray, finite: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and centred scatter matrix of the finite rows of a chunk.

    Rows are shifted by the first finite row before summing so that a large
    common offset does not cost precision (two passes within the chunk).
    """
    d = x.shape[1]
    xv = x if finite.all() else x[finite]
    n = xv.shape[0]
    if n == 0:
        return 0, np.zeros(d), np.zeros((d, d))
    y = xv - xv[0]
    mu = y.mean(axis=0)
    z = y - mu
    return n, xv[0] + mu, z.T @ z


@kernel
def column_sums_dd(x, finite):
    """Column sums of the finite rows as double-double ``(2, d)``: ``hi`` and ``lo``.

    Compensated (Neumaier) summation: the pair carries about 106 bits, so the
    rounded sum ``hi + lo`` does not depend on how rows were chunked.
    """
    d = x.shape[1]
    hi = np.zeros(d)
    lo = np.zeros(d)
    for i in range(x.shape[0]):
        if not finite[i]:
            continue
        for k in range(d):
            a = hi[k]
            b = x[i, k]
            t = a + b
            if abs(a) >= abs(b):
                lo[k] += (a - t) + b
            else:
                lo[k] += (b - t) + a
            hi[k] = t
    out = np.empty((2, d))
    for k in range(d):
        t = hi[k] + lo[k]
        out[1, k] = lo[k] - (t - hi[k])
        out[0, k] = t
    return out


def add_dd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of two double-double arrays ``(2, d)`` (TwoSum of the high parts)."""
    t = a[0] + b[0]
    bv = t - a[0]
    err = (a[0] - (t - bv)) + (b[0] - bv) + a[1] + b[1]
    hi = t + err
    return np.stack([hi, err - (hi - t)])


def merge_moments(a, b):
    """Chan et al. pairwise merge of (count, mean, scatter) triples."""
    na, ma, sa = a
    nb, mb, sb = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    mean = ma + delta * (nb / n)
    scatter = sa + sb + np.outer(delta, delta) * (na * nb / n)
    return n, mean, scatter


class Moments(NamedTuple):
    """Count (possibly fractional: a weighted share of tied rows), mean and centred scatter."""

    count: float
    mean: np.ndarray
    scatter: np.ndarray


def moments_of(x: np.ndarray, mask: np.ndarray | None = None) -> Moments:
    """Count, mean and scatter of the rows of ``x`` (selected by ``mask``)."""
    x = np.asarray(x, dtype=np.float64)
    if mask is None:
        mask = np.ones(x.shape[0], dtype=bool)
    n, mean, scatter = chunk_moments(x, mask)
    return Moments(float(n), mean, scatter)


def merge_weighted(a: Moments, b: Moments, weight: float = 1.0) -> Moments:
    """Moments of the union of ``a`` and ``b``, each row of ``b`` counted ``weight`` times."""
    if weight != 1.0:
        b = Moments(b.count * weight, b.mean, b.scatter * weight)
    n, mean, scatter = merge_moments(a, b)
    return Moments(float(n), mean, scatter)


def empty_moments(d: int) -> Moments:
    """The moments of no rows."""
    return Moments(0.0, np.zeros(d), np.zeros((d, d)))


def support_moments(x: np.ndarray, d2: np.ndarray, h: int, base: Moments | None = None,
                    offset: int = 0) -> tuple[Moments, float]:
    """Moments of the ``h - offset`` rows of ``x`` with smallest ``d2``, added to ``base``.

    Rows tied at the threshold share the remaining weight equally.  Returns the
    moments and the threshold (the ``(h - offset)``-th smallest value).
    """
    r = h - offset
    t = float(np.partition(d2, r - 1)[r - 1])
    less = d2 < t
    eq = d2 == t
    out = base if base is not None else empty_moments(x.shape[1])
    out = merge_weighted(out, moments_of(x, less))
    n_less = int(less.sum())
    if n_less < r:
        out = merge_weighted(out, moments_of(x, eq), (r - n_less) / int(eq.sum()))
    return out, t
