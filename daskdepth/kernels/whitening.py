"""Covariance matrices and whitening maps (NumPy only).

Every rank decision on a covariance is made here, in correlation scale (so
that features of very different scales are treated alike):

* :data:`SUBSPACE_RTOL` decides the principal subspace of the data (AI-IRW's
  whitening, the MCD's coordinates);
* :data:`EXACT_FIT_RTOL` decides an exact fit inside the MCD's C-steps
  (rounding level, as scikit-learn's ``pinvh``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

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
#: deviations to that many significant bits (see :func:`canonical_covariance`).
CANONICAL_BITS = 36


#: Eigenvalues of the correlation matrix below ``SUBSPACE_RTOL * d`` are treated as
#: zero.  The threshold is absolute in correlation units (unit diagonal; the largest
#: eigenvalue lies in [1, d]) because the rounding above is: it moves an entry by at
#: most ``2**-37`` and so an eigenvalue by at most ``d * 2**-37 ~ 7.3e-12 d``, which
#: this exceeds 13-fold.  (A threshold relative to the largest eigenvalue, as before,
#: declared full-rank ill-conditioned covariances, e.g. of ``A X`` with a
#: condition number of ``A`` of 1e4 and 20 features, singular.)
SUBSPACE_RTOL = 1e-10


def _nonnull(vals: np.ndarray, d: int) -> np.ndarray:
    """Which eigenvalues of a correlation matrix of ``d`` features are not zero."""
    return vals > SUBSPACE_RTOL * d


def sample_covariance(n: int, scatter: np.ndarray) -> np.ndarray:
    """Unbiased sample covariance from a centred scatter matrix."""
    cov = scatter / max(n - 1, 1)
    return (cov + cov.T) / 2


def canonical_covariance(covariance: np.ndarray) -> np.ndarray:
    """``covariance`` rounded in correlation scale, so chunking noise cannot move it.

    Chunked moment merges differ in the last bits from one chunking to another;
    whitening can amplify that, and a depth counts ranks, so a flipped near-tie
    would show.  Rounding correlations to ``2**-36`` and standard deviations to 36
    significant bits (a relative change below 1e-10) gives the same matrix for
    every chunking except when a value lies within ~1e-16 of a rounding point.
    """
    cov = np.asarray(covariance, dtype=np.float64)
    if not np.isfinite(cov).all():
        return cov
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    safe = np.where(sd > 0, sd, 1.0)
    corr = np.clip(cov / np.outer(safe, safe), -1.0, 1.0)
    step = 2.0 ** -CANONICAL_BITS
    corr = np.round(corr / step) * step
    mant, expo = np.frexp(sd)
    sd = np.ldexp(np.round(mant / step) * step, expo)
    out = corr * np.outer(sd, sd)
    return (out + out.T) / 2


def whitening(covariance: np.ndarray) -> tuple[np.ndarray, int]:
    """``W`` (d x r) with ``W W^T`` the pseudo-inverse of ``covariance`` and its rank ``r``.

    Computed in correlation scale, ``covariance = S C S`` with ``S`` the standard
    deviations: ``W = S^-1 E_r diag(lambda_r)^{-1/2}`` with the leading eigenpairs
    of ``C``.  Projecting a centred point on ``W u`` measures it in standard
    deviations of the principal subspace and ignores directions of zero variance
    (constant features, or features that are combinations of others).
    """
    cov = np.asarray(covariance, dtype=np.float64)
    d = cov.shape[0]
    if not np.isfinite(cov).all():
        raise ValueError(
            "the covariance of the reference data overflows float64: the values are too large "
            "in scale (squares above 1e308); rescale the features, e.g. divide them by a "
            "common factor"
        )
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    live = sd > 0
    if not live.any():
        raise ValueError(
            "the covariance of the reference data is zero: every feature is constant, so "
            "there is no direction along which to rank points; check the input"
        )
    vals, vecs, keep = _scaled_eigh(cov[np.ix_(live, live)], sd[live], d)
    if live.all() and keep.all():
        w = vecs / np.sqrt(vals) / sd[:, None]
        return w[:, ::-1].copy(), d
    # Singular: the null space in input coordinates is spanned by the constant
    # features and S^-1 times the null eigenvectors of the correlation matrix.
    # Whitening within its orthogonal complement Q gives W W^T = covariance^+ and
    # directions orthogonal to the null space, as the principal-subspace recipe says.
    null = [np.eye(d)[:, k] for k in np.flatnonzero(~live)]
    for u in vecs[:, ~keep].T:
        v = np.zeros(d)
        v[live] = u / sd[live]
        null.append(v)
    q = scipy.linalg.null_space(np.array(null))
    sub = q.T @ cov @ q
    sub_sd = np.sqrt(np.clip(np.diag(sub), 0, None))
    vals, vecs, _ = _scaled_eigh(sub, np.where(sub_sd > 0, sub_sd, 1.0), d)
    w = q @ (vecs / np.sqrt(np.clip(vals, np.finfo(float).tiny, None)) / sub_sd[:, None])
    return w[:, ::-1].copy(), int(q.shape[1])


def _scaled_eigh(cov: np.ndarray, sd: np.ndarray,
                 d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenpairs of the correlation matrix ``cov / (sd sd^T)`` and which are non-null."""
    corr = cov / np.outer(sd, sd)
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    return vals, vecs, _nonnull(vals, d)


def principal_subspace(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Coordinates of the affine subspace the data span: ``(basis, back)`` or None.

    ``z = (x - mean) @ basis`` and ``x = mean + back @ z`` for rows in it.  Full
    rank data keep their own coordinates (identity maps, so that a feature
    constant over the MCD support keeps exactly zero variance); otherwise
    constant features are dropped and the rest is reduced to the leading
    eigenvectors of the correlation matrix.  None when every feature is constant.
    """
    d = cov.shape[0]
    var = np.diag(cov)
    live = (var > 0) & np.isfinite(var)
    if not live.any():
        return None
    sd = np.sqrt(var[live])
    corr = cov[np.ix_(live, live)] / np.outer(sd, sd)
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    keep = _nonnull(vals, d)
    if live.all() and keep.all():
        return np.eye(d), np.eye(d)
    e = vecs[:, keep][:, ::-1]
    basis = np.zeros((d, e.shape[1]))
    back = np.zeros((d, e.shape[1]))
    basis[live] = e / sd[:, None]
    back[live] = e * sd[:, None]
    return basis, back
