"""Covariance matrices and whitening maps (NumPy only).

Every rank decision on a covariance is made here, in correlation scale (so
that features of very different scales are treated alike):

* :func:`rank_split` decides the principal subspace of the data (AI-IRW's
  whitening, the MCD's coordinates): the directions whose variance exceeds what
  rounding explains (:func:`noise_floor`), an affine-invariant test up to rounding;
* :func:`factor_split` decides it again from the ``R`` factor of the centred
  rows where the covariance's test drops a direction (:func:`factor_whitening`,
  :func:`factor_subspace`): ``R`` has the data's condition number, the
  covariance its square;
* :data:`EXACT_FIT_RTOL` decides an exact fit inside the MCD's C-steps
  (rounding level, as scikit-learn's ``pinvh``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg

from ..errors import OVERFLOW_MESSAGE, ZeroCovarianceError, rounding_rank_message

#: Eigenvalues of a correlation matrix below ``EXACT_FIT_RTOL * p`` times the largest
#: count as zero in the C-steps (an exact fit): rounding level, as ``pinvh``.
EXACT_FIT_RTOL = 1e-12


def whiten(cov: np.ndarray) -> tuple[np.ndarray, float]:
    """Pseudo-inverse square root ``W`` (p x p) of ``cov`` and its log-determinant.

    Computed in correlation scale (so that features of very different scales
    are treated alike): ``cov = S C S``, ``W = S^-1 E diag(lambda)^-1/2`` over
    the eigenpairs of ``C`` above ``EXACT_FIT_RTOL * p * largest`` (other columns
    of ``W`` are zero), so ``W W^T`` is the pseudo-inverse of ``cov`` on its
    principal subspace, as scikit-learn's ``pinvh``.  The log-determinant is
    ``-inf`` when any eigenvalue is dropped or a feature has zero variance
    (an exact fit).
    """
    w, logdet = whiten_batch(np.asarray(cov, dtype=np.float64)[None])
    return w[0], float(logdet[0])


def whiten_batch(covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`whiten` of a stack of covariance matrices (K, p, p)."""
    covs = (covs + np.swapaxes(covs, 1, 2)) / 2
    p = covs.shape[-1]
    var = np.diagonal(covs, axis1=1, axis2=2)
    live = (var > 0) & np.isfinite(var)
    sd = np.where(live, np.sqrt(np.where(live, var, 1.0)), 1.0)
    both = live[:, :, None] & live[:, None, :]
    corr = np.where(both, covs / (sd[:, :, None] * sd[:, None, :]), 0.0)
    fast = _whiten_cholesky(corr, live, sd)
    if fast is not None:
        return fast
    vals, vecs = np.linalg.eigh(corr)
    top = vals[:, -1:]
    keep = (vals > EXACT_FIT_RTOL * p * top) & (top > 0)
    safe = np.where(keep, vals, 1.0)
    w = vecs * np.where(keep, 1.0 / np.sqrt(safe), 0.0)[:, None, :]
    w = np.where(live[:, :, None], w / sd[:, :, None], 0.0)
    logdet = np.where(keep.all(axis=1), np.log(safe).sum(axis=1) + 2 * np.log(sd).sum(axis=1),
                      -np.inf)
    return w, logdet


def _whiten_cholesky(corr: np.ndarray, live: np.ndarray, sd: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`whiten_batch` by Cholesky factors, when they show every eigenvalue is kept.

    With ``C = L L^T``, ``W = L^-T`` whitens as the eigenvectors do (distances
    are the same; only the rotation differs), and ``lambda_min(C) >=
    1 / ||L^-1||_F^2`` certifies that no eigenvalue falls below the rank
    threshold (the largest is at most ``trace(C) = p``).  Ten times cheaper
    than ``eigh``; returns None (use ``eigh``) if any matrix fails the test.
    """
    p = corr.shape[-1]
    if not live.all():
        return None
    try:
        chol = np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:
        return None
    inv = np.linalg.inv(chol)
    norm2 = np.einsum("kij,kij->k", inv, inv)
    if not np.all(np.isfinite(norm2) & (1.0 / norm2 > EXACT_FIT_RTOL * p * p)):
        return None
    w = np.swapaxes(inv, 1, 2) / sd[:, :, None]
    logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1) + 2 * np.log(sd).sum(
        axis=1)
    return w, logdet


#: Correlations are rounded to multiples of ``2**-CANONICAL_BITS`` and standard
#: deviations to that many significant bits (see :func:`canonical_covariance`),
#: unless the covariance is so ill-conditioned that this would move its smallest
#: eigenvalue (see :func:`canonical_bits`).
CANONICAL_BITS = 36


#: The rounding may move the smallest kept eigenvalue of the correlation matrix
#: by at most ``2**-CANONICAL_MARGIN`` of itself (see :func:`canonical_bits`).
CANONICAL_MARGIN = 20


#: Arithmetic noise of a computed correlation matrix, in units of ``d * eps``:
#: the summation errors of chunked scatter sums, with a margin, and the backward
#: error of the eigensolver.
ARITH_FLOOR = 64


#: Rounding of the stored values, in units of ``eps`` times their magnitude
#: (``|mean| + sd``): a combination of features computed in floating point holds
#: only up to that, so with a large offset its residual variance is far above ``eps``.
VALUE_FLOOR = 4


#: Error of the centre a covariance was computed about, in units of ``eps`` times
#: ``|mean|``: a mean of ``n`` float64 values (``np.cov``, a user's covariance) is
#: off by up to about ``log2(n)`` of them, which adds ``e e^T`` to the covariance
#: (``|e|`` that error), far above the rounding of the values for data far from
#: the origin (found: 5.5 for 400 rows at 10^6 +- 10^-3, so a combination of two
#: features kept rank 2).  The package's own moments are centred exactly.
CENTRE_FLOOR = 16


def sample_covariance(n: int, scatter: np.ndarray) -> np.ndarray:
    """Unbiased sample covariance from a centred scatter matrix."""
    cov = scatter / max(n - 1, 1)
    return (cov + cov.T) / 2


def canonical_covariance(covariance: np.ndarray, bits: int = CANONICAL_BITS) -> np.ndarray:
    """``covariance`` rounded in correlation scale, so chunking noise cannot move it.

    Chunked moment merges differ in the last bits from one chunking to another;
    whitening can amplify that, and a depth counts ranks, so a flipped near-tie
    would show.  Rounding correlations to ``2**-bits`` and standard deviations to
    ``bits`` significant bits (a relative change below 1e-10 for 36 bits) gives
    the same matrix for every chunking except when a value lies within its noise
    (about 1e-15) of a rounding point.
    """
    cov = np.asarray(covariance, dtype=np.float64)
    if not np.isfinite(cov).all():
        return cov
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    safe = np.where(sd > 0, sd, 1.0)
    corr = np.clip(cov / np.outer(safe, safe), -1.0, 1.0)
    step = 2.0 ** -bits
    corr = np.round(corr / step) * step
    mant, expo = np.frexp(sd)
    sd = np.ldexp(np.round(mant / step) * step, expo)
    out = corr * np.outer(sd, sd)
    return (out + out.T) / 2


def noise_floor(sd: np.ndarray, location: np.ndarray, d: int) -> np.ndarray:
    """Variance of each feature that rounding alone explains, in correlation scale.

    ``d * (ARITH_FLOOR * eps + ((VALUE_FLOOR * (|location| + sd) + CENTRE_FLOOR * |location|)
    * eps / sd)^2)``: the arithmetic noise of a computed correlation matrix, the
    rounding of values of that magnitude and the error of the mean the
    covariance was centred on (an offset far above the spread makes them large).
    A direction whose variance is within this floor cannot be told from an
    exact linear relation between features.
    """
    eps = np.finfo(np.float64).eps
    with np.errstate(over="ignore"):
        rel = (VALUE_FLOOR * (np.abs(location) + sd) + CENTRE_FLOOR * np.abs(location)) * eps / sd
        return d * (ARITH_FLOOR * eps + rel * rel)


class RankSplit(NamedTuple):
    """Generalized eigenpairs of ``(C, diag(floor))``: values, vectors, which are kept.

    ``C v = g diag(floor) v``: a direction ``v`` (correlation coordinates) whose
    variance is at most its noise floor (``g <= 1``) is null.  Only rounding
    enters this test, so it is as affine invariant as floating point allows: a
    full-rank covariance keeps its rank however ill-conditioned, until rounding
    hides a direction.
    """

    values: np.ndarray
    vectors: np.ndarray
    keep: np.ndarray


def rank_split(corr: np.ndarray, floor: np.ndarray) -> RankSplit:
    """:class:`RankSplit` of the correlation matrix ``corr`` over the noise ``floor``."""
    r = 1.0 / np.sqrt(floor)
    m = corr * np.outer(r, r)
    vals, vecs = np.linalg.eigh((m + m.T) / 2)
    return RankSplit(vals, vecs * r[:, None], vals > 1.0)


def canonical_bits(smallest: float, d: int) -> int:
    """Bits of :func:`canonical_covariance` that keep the smallest kept eigenvalue.

    Rounding every entry by up to half a step moves an eigenvalue of the
    correlation matrix by up to ``d`` half-steps; the step is at most
    ``2**-CANONICAL_MARGIN * smallest / d``, and at most ``2**-CANONICAL_BITS``.
    Below a smallest eigenvalue of about ``d * 2**-17`` the step shrinks with it,
    and chunking noise (about 1e-15) may then move the rounded matrix: an
    ill-conditioned covariance is whitened accurately, reproducibly only to
    about 1e-16 times its condition number.
    """
    if not np.isfinite(smallest) or smallest <= 0:
        return CANONICAL_BITS
    need = CANONICAL_MARGIN - 1 - np.log2(smallest / d)
    return int(max(CANONICAL_BITS, np.ceil(need)))


def _rounding_message(sd: np.ndarray, location: np.ndarray) -> str:
    """:func:`~daskdepth.errors.rounding_rank_message` for the feature whose spread is
    smallest against its magnitude (rank 0: every direction is within rounding)."""
    live = np.flatnonzero(sd > 0)
    k = live[np.argmax(np.abs(location[live]) / sd[live])]
    return rounding_rank_message(float(location[k]), float(sd[k]))


def _complement(live: np.ndarray, sd: np.ndarray, split: RankSplit) -> np.ndarray:
    """Orthonormal basis of the complement of the null space, in input coordinates.

    The null space is spanned by the constant features (not ``live``) and
    ``S^-1`` times the null directions of ``split`` (correlation coordinates).
    """
    d = live.size
    null = [np.eye(d)[:, k] for k in np.flatnonzero(~live)]
    for u in split.vectors[:, ~split.keep].T:
        v = np.zeros(d)
        v[live] = u / sd[live]
        null.append(v)
    return scipy.linalg.null_space(np.array(null))


def _live_split(cov: np.ndarray, location: np.ndarray, d: int,
                extra: float = 0.0) -> tuple[np.ndarray, np.ndarray, RankSplit, np.ndarray]:
    """Standard deviations, live features, their correlation and its :class:`RankSplit`.

    ``extra`` is added to the noise floor (the rounding of a canonical matrix).
    """
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    live = sd > 0
    corr = cov[np.ix_(live, live)] / np.outer(sd[live], sd[live])
    floor = noise_floor(sd[live], location[live], d) + extra
    return sd, live, rank_split(corr, floor), corr


def whitening(covariance: np.ndarray,
              location: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """``W`` (d x r) with ``W W^T`` the pseudo-inverse of ``covariance`` and its rank ``r``.

    Computed in correlation scale, ``covariance = S C S`` with ``S`` the standard
    deviations: ``W = S^-1 E_r diag(lambda_r)^{-1/2}`` with the leading eigenpairs
    of ``C``.  Projecting a centred point on ``W u`` measures it in standard
    deviations of the principal subspace and ignores directions of zero variance
    (constant features, or features that are combinations of others).

    The rank counts the directions whose variance exceeds what rounding explains
    (:func:`noise_floor`; ``location``, the data's centre, raises it for data far
    from the origin), not a condition-number threshold, so a full-rank but
    ill-conditioned covariance keeps its rank.  ``W`` comes from
    :func:`canonical_covariance` of ``covariance`` with :func:`canonical_bits`
    for its smallest kept eigenvalue, so that chunking noise does not move it.
    """
    cov = np.asarray(covariance, dtype=np.float64)
    d = cov.shape[0]
    if not np.isfinite(cov).all():
        raise ValueError(OVERFLOW_MESSAGE)
    if not (np.diag(cov) > 0).any():
        raise ZeroCovarianceError(
            "the covariance of the reference data is zero: every feature is constant, so "
            "there is no direction along which to rank points; check the input"
        )
    loc = np.zeros(d) if location is None else np.asarray(location, dtype=np.float64)
    # The rank, and so the rounding step, from the matrix as computed; then the
    # whitening from the rounded matrix, with the rounding added to the floor.
    sd, live, split, _ = _live_split(cov, loc, d)
    if not split.keep.any():
        raise ValueError(_rounding_message(sd, loc))
    floor = noise_floor(sd[live], loc[live], d)
    smallest = float(split.values[split.keep].min() * floor.min())
    bits = canonical_bits(smallest, d)
    cov = canonical_covariance(cov, bits)
    sd, live, split, corr = _live_split(cov, loc, d, d * 2.0 ** -bits)
    if live.all() and split.keep.all():
        vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
        w = vecs / np.sqrt(np.clip(vals, np.finfo(float).tiny, None)) / sd[:, None]
        return w[:, ::-1].copy(), d
    # Singular: the null space in input coordinates is spanned by the constant
    # features and S^-1 times the null directions of the correlation matrix.
    # Whitening within its orthogonal complement Q gives W W^T = covariance^+ and
    # directions orthogonal to the null space, as the principal-subspace recipe says.
    q = _complement(live, sd, split)
    sub = q.T @ cov @ q
    sub_sd = np.sqrt(np.clip(np.diag(sub), 0, None))
    corr = sub / np.outer(np.where(sub_sd > 0, sub_sd, 1.0), np.where(sub_sd > 0, sub_sd, 1.0))
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    w = q @ (vecs / np.sqrt(np.clip(vals, np.finfo(float).tiny, None)) / sub_sd[:, None])
    return w[:, ::-1].copy(), int(q.shape[1])


def covariance_keeps_rank(covariance: np.ndarray, location: np.ndarray | None = None) -> bool:
    """Whether the rank test of :func:`whitening` keeps every direction of the varying features.

    When it does not, the covariance cannot tell a direction of tiny variance from
    a null one (its condition number is the square of the data's): the caller
    decides from the rows' ``R`` factor instead (:func:`factor_whitening`).

    Examples
    --------
    >>> covariance_keeps_rank(np.diag([1.0, 1e-6, 0.0]))
    True
    >>> covariance_keeps_rank(np.array([[1.0, 1.0], [1.0, 1.0 + 1e-14]]))
    False
    """
    cov = np.asarray(covariance, dtype=np.float64)
    d = cov.shape[0]
    if not np.isfinite(cov).all() or not (np.diag(cov) > 0).any():
        return True  # whitening() says what is wrong
    loc = np.zeros(d) if location is None else np.asarray(location, dtype=np.float64)
    return bool(_live_split(cov, loc, d)[2].keep.all())


def principal_subspace(cov: np.ndarray,
                       location: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Coordinates of the affine subspace the data span: ``(basis, back)`` or None.

    ``z = (x - mean) @ basis`` and ``x = mean + back @ z`` for rows in it.  Full
    rank data keep their own coordinates (identity maps, so that a feature
    constant over the MCD support keeps exactly zero variance); otherwise
    constant features are dropped and the rest is reduced to the directions
    above the noise floor of :func:`rank_split` (the rank test of
    :func:`whitening`, ``location`` the data's centre).  None when every feature
    is constant.
    """
    d = cov.shape[0]
    var = np.diag(cov)
    if not ((var > 0) & np.isfinite(var)).any():
        return None
    loc = np.zeros(d) if location is None else np.asarray(location, dtype=np.float64)
    sd, live, split, corr = _live_split(cov, loc, d)
    if live.all() and split.keep.all():
        return np.eye(d), np.eye(d)
    if not split.keep.any():
        raise ValueError(_rounding_message(sd, loc))
    # The rows satisfy v^T c = 0 (c in correlation scale) for each null direction
    # v: an orthonormal basis of that complement.
    null = split.vectors[:, ~split.keep]
    e = scipy.linalg.null_space(null.T) if null.shape[1] else np.eye(int(live.sum()))
    basis = np.zeros((d, e.shape[1]))
    back = np.zeros((d, e.shape[1]))
    basis[live] = e / sd[live, None]
    back[live] = e * sd[live, None]
    return basis, back


# --------------------------------------------------------------------------- from the R factor

#: Arithmetic noise of a computed ``R`` factor of the centred rows in correlation
#: scale, in units of ``sqrt(d) * eps``: the columnwise backward error of Householder
#: QR and its merges, and of the arithmetic that made an exact relation.  Measured:
#: a feature computed as a combination of the others (20,000 rows in 1 to 207
#: chunks, d from 3 to 166) leaves a smallest singular value below 1.6; relations
#: mixed by a sum of products whose terms cancel (the rank tests' maps) up to 27;
#: chunkings differ by below 10 eps per entry (breast cancer, Satimage-2, Musk under
#: maps of condition up to 1e8).
FACTOR_FLOOR = 64


def factor_floor(sd: np.ndarray, location: np.ndarray, d: int) -> np.ndarray:
    """Standard deviation of each feature that rounding alone explains, in correlation scale.

    ``sqrt(d) * (FACTOR_FLOOR * eps + VALUE_FLOOR * eps * (|location| + sd) / sd)``:
    the noise of a computed ``R`` factor and the rounding of values of that
    magnitude, as :func:`noise_floor` in standard deviations rather than
    variances.  Only the arithmetic term differs: it is ``eps``, not ``sqrt(eps)``,
    since ``R`` is computed from the rows, not from their squares.
    """
    eps = np.finfo(np.float64).eps
    with np.errstate(over="ignore"):
        rel = VALUE_FLOOR * eps * (np.abs(location) + sd) / sd
    return np.sqrt(d) * (FACTOR_FLOOR * eps + rel)


def factor_split(rt: np.ndarray, floor: np.ndarray) -> RankSplit:
    """:class:`RankSplit` of the correlation matrix ``rt^T rt`` over the noise ``floor``.

    ``rt`` (columns of unit norm) is an ``R`` factor of the correlation matrix and
    ``floor`` is in standard deviations (:func:`factor_floor`): the singular
    values of ``rt diag(1 / floor)``, squared, are the generalized eigenvalues of
    :func:`rank_split` with the variance floor ``floor**2``, computed without
    squaring the condition number.
    """
    r = 1.0 / floor
    _, s, vt = np.linalg.svd(rt * r, full_matrices=False)  # rt has at least as many rows
    vals = (s * s)[::-1]  # ascending, as eigh's
    return RankSplit(vals, vt[::-1].T * r[:, None], vals > 1.0)


def factor_whitening(r: np.ndarray, scale: float,
                     location: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """:func:`whitening` of the covariance ``scale * R^T R``, decided and computed from ``R``.

    ``R`` (d x d) is the factor of the centred rows (the factor pass), whose
    condition number is the data's, not its square: the rank counts the
    directions whose standard deviation exceeds :func:`factor_floor`, so data
    whose singular values span up to about ``1 / (sqrt(d) * (FACTOR_FLOOR + VALUE_FLOOR) * eps)``
    (in correlation scale) keep their rank.  ``R`` scaled to unit columns is
    rounded to ``2**-bits`` with :func:`canonical_bits` of its smallest kept
    singular value (and the standard deviations to ``bits`` significant bits),
    as :func:`canonical_covariance` does, so that chunking noise does not move
    the result; ``W`` is made of the right singular vectors of that matrix (the
    eigenvectors of the correlation matrix) over its singular values, as
    :func:`whitening` is of the eigenpairs.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(500, 3)) @ np.diag([1.0, 1e-9, 1e9])
    >>> r = np.linalg.qr(x - x.mean(axis=0), mode="r")
    >>> w, rank = factor_whitening(r, 1 / 499, x.mean(axis=0))
    >>> rank, bool(np.allclose(w.T @ np.cov(x.T) @ w, np.eye(3)))
    (3, True)
    """
    r = np.asarray(r, dtype=np.float64)
    d = r.shape[1]
    if not np.isfinite(r).all():
        raise ValueError(OVERFLOW_MESSAGE)
    loc = np.zeros(d) if location is None else np.asarray(location, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->j", r, r))
    live = norms > 0
    if not live.any():
        raise ZeroCovarianceError(
            "the covariance of the reference data is zero: every feature is constant, so "
            "there is no direction along which to rank points; check the input"
        )
    sd = norms * np.sqrt(scale)
    floor = factor_floor(sd[live], loc[live], d)
    split = factor_split(r[:, live] / norms[live], floor)
    if not split.keep.any():
        raise ValueError(_rounding_message(sd, loc))
    bits = canonical_bits(float(np.sqrt(split.values[split.keep].min()) * floor.min()), d)
    step = 2.0 ** -bits
    rt = np.round(r[:, live] / norms[live] / step) * step
    mant, expo = np.frexp(sd)
    sd = np.ldexp(np.round(mant / step) * step, expo)
    # Rounding moves a singular value by at most d half-steps: added to the floor.
    split = factor_split(rt, floor + d * step / 2)
    if live.all() and split.keep.all():
        _, s, vt = np.linalg.svd(rt)
        return (vt.T / s) / sd[:, None], d
    q = _complement(live, sd, split)
    # Whitening within the complement Q: the singular vectors of R Q, in its correlation scale.
    rq = (rt * sd[live]) @ q[live]
    sub_sd = np.sqrt(np.einsum("ij,ij->j", rq, rq))
    _, s, vt = np.linalg.svd(rq / sub_sd)
    return q @ ((vt.T / s) / sub_sd[:, None]), int(q.shape[1])


def factor_subspace(r: np.ndarray, scale: float,
                    location: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`principal_subspace` of the covariance ``scale * R^T R``, from ``R``: whitened.

    ``basis`` is :func:`factor_whitening`'s ``W`` and ``back = scale R^T R W``, so
    that ``z = (x - mean) @ basis`` has the identity covariance (well conditioned,
    however ill-conditioned the data) and ``x = mean + back @ z`` for rows in
    the subspace (both to the relative accuracy of the canonical rounding, 2**-20).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(300, 2)) @ np.array([[1.0, 1.0], [0.0, 1e-9]])
    >>> r = np.linalg.qr(x - x.mean(axis=0), mode="r")
    >>> basis, back = factor_subspace(r, 1 / 299, x.mean(axis=0))
    >>> z = (x - x.mean(axis=0)) @ basis
    >>> bool(np.abs(np.cov(z.T) - np.eye(2)).max() < 1e-5)
    True
    >>> bool(np.abs(z @ back.T + x.mean(axis=0) - x).max() < 1e-5)
    True
    """
    w, _ = factor_whitening(r, scale, location)
    return w, scale * (r.T @ (r @ w))
