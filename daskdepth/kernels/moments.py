"""Moments of rows: counts, means and scatter matrices, and their exact merges (NumPy/Numba).

Moments are :class:`Moments` records ``(count, mean, scatter)``; the count may
be fractional (a weighted share of tied rows, see :func:`support_moments`).
Merges use the Chan et al. pairwise update, which is numerically stable, with
means carried as double-doubles so that a large common offset costs no precision.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._jit import kernel


class Moments(NamedTuple):
    """Count (possibly fractional: a weighted share of tied rows), mean and centred scatter.

    ``mean_lo`` is the low part of the mean as a double-double (``mean +
    mean_lo``; None means zero): merges use it so that a large offset costs no
    precision (see :func:`merge_moments`).
    """

    count: float
    mean: np.ndarray
    scatter: np.ndarray
    mean_lo: np.ndarray | None = None


def chunk_moments(x: np.ndarray, finite: np.ndarray) -> Moments:
    """Count, mean (double-double) and centred scatter matrix of the finite rows of a chunk.

    Rows are shifted by a reference close to their mean before summing: with a
    large common offset the shifted values are exact (Sterbenz: rows within a
    factor of 2 of the reference), so the scatter keeps the precision of the
    spread, not of the offset.  The mean is the reference plus the mean shift,
    kept exactly as ``mean + mean_lo``.
    """
    d = x.shape[1]
    xv = x if finite.all() else x[finite]
    n = xv.shape[0]
    if n == 0:
        return Moments(0, np.zeros(d), np.zeros((d, d)), np.zeros(d))
    # Values near the top of float64 overflow sums and squares: handled here (another
    # reference row) and by the fit (a mean or covariance that is not finite is refused or
    # reported), so NumPy's own overflow warnings would only repeat it from inside.
    with np.errstate(over="ignore", invalid="ignore"):
        # The rounded mean, not the first row: an outlying first row would round the others.
        ref = xv.mean(axis=0)
        if not np.isfinite(ref).all():  # the sum overflows: any row will do
            ref = xv[0].copy()
        y = xv - ref
        mu = y.mean(axis=0)
        z = y - mu
        mean, lo = two_sum(ref, mu)
        return Moments(n, mean, z.T @ z, lo)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(a + b)`` and the rounding error ``e``, so that ``a + b = s + e`` exactly.

    Knuth's TwoSum, elementwise; ``e`` is 0 where ``s`` is not finite.
    """
    s = a + b
    bv = s - a
    e = (a - (s - bv)) + (b - bv)
    return s, np.where(np.isfinite(e), e, 0.0)


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


def merge_moments(a: Moments, b: Moments) -> Moments:
    """Chan et al. pairwise merge of two :class:`Moments`, means carried as double-doubles.

    The difference of the means is what the merge amplifies: the high parts are
    subtracted exactly (TwoSum) and the low parts added, so that a common offset
    far above the spread (timestamps, projected coordinates) does not round the
    between-chunk term, and the merged scatter keeps the precision of one chunk's.
    """
    if a.count == 0:
        return b
    if b.count == 0:
        return a
    n = a.count + b.count
    a_lo = a.mean_lo if a.mean_lo is not None else 0.0
    b_lo = b.mean_lo if b.mean_lo is not None else 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # as in chunk_moments
        hi, lo = two_sum(b.mean, -a.mean)
        delta = hi + (lo + (b_lo - a_lo))
        mean, err = two_sum(a.mean, delta * (b.count / n))
        low = a_lo + err
        top = mean + low
        scatter = a.scatter + b.scatter + np.outer(delta, delta) * (a.count * b.count / n)
        return Moments(n, top, scatter, np.where(np.isfinite(top), low - (top - mean), 0.0))


def moments_of(x: np.ndarray, mask: np.ndarray | None = None) -> Moments:
    """Count, mean and scatter of the rows of ``x`` (selected by ``mask``)."""
    x = np.asarray(x, dtype=np.float64)
    if mask is None:
        mask = np.ones(x.shape[0], dtype=bool)
    m = chunk_moments(x, mask)
    return m._replace(count=float(m.count))


def merge_weighted(a: Moments, b: Moments, weight: float = 1.0) -> Moments:
    """Moments of the union of ``a`` and ``b``, each row of ``b`` counted ``weight`` times."""
    if weight != 1.0:
        b = b._replace(count=b.count * weight, scatter=b.scatter * weight)
    m = merge_moments(a, b)
    return m._replace(count=float(m.count))


def empty_moments(d: int) -> Moments:
    """The moments of no rows."""
    return Moments(0.0, np.zeros(d), np.zeros((d, d)), np.zeros(d))


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


def chunk_factor(x: np.ndarray, location: np.ndarray,
                 keep: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Count and ``R`` factor (d x d) of the finite rows of a chunk minus ``location``.

    ``R`` is upper triangular with a non-negative diagonal and ``R^T R`` is the
    scatter of the rows about ``location``; unlike the scatter, it has the
    condition number of the centred rows, not its square.  ``keep`` selects
    rows among the finite ones.  Merge with :func:`merge_factors`.

    Examples
    --------
    >>> x = np.array([[1.0, 2.0], [3.0, 1.0], [2.0, 3.0], [np.nan, 0.0]])
    >>> n, r = chunk_factor(x, np.array([2.0, 2.0]))
    >>> n, bool(np.allclose(r.T @ r, [[2.0, -1.0], [-1.0, 2.0]]))
    (3.0, True)
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[1]
    rows = np.isfinite(x).all(axis=1)
    if keep is not None:
        rows[rows] = keep
    z = x[rows] - location
    return float(z.shape[0]), _square_factor(z, d)


def merge_factors(*parts: tuple[float, np.ndarray]) -> tuple[float, np.ndarray]:
    """Count and ``R`` of the union of rows: the ``R`` of the stacked ``R`` factors.

    (The rows of a chunk and its ``R`` have the same scatter about a common
    location, so a QR of the stacked factors is a QR of all the rows.)
    """
    if len(parts) == 1:
        return parts[0]
    return (float(sum(p[0] for p in parts)),
            _square_factor(np.vstack([p[1] for p in parts]), parts[0][1].shape[1]))


def _square_factor(z: np.ndarray, d: int) -> np.ndarray:
    """``R`` (d x d, zero rows below the rank of a short ``z``) with a non-negative diagonal."""
    out = np.zeros((d, d))
    if z.shape[0]:
        r = np.linalg.qr(z, mode="r")
        out[:r.shape[0]] = r
    sign = np.where(np.diag(out) < 0, -1.0, 1.0)
    return out * sign[:, None]
