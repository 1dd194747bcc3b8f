"""Covariance estimates and the whitening map of the principal subspace (NumPy only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

#: Correlations are rounded to multiples of ``2**-CANONICAL_BITS`` and standard
#: deviations to that many significant bits (see :func:`canonical_covariance`).
CANONICAL_BITS = 36
#: Eigenvalues of the correlation matrix below ``RANK_RTOL * d`` times the largest
#: are treated as zero: well above the rounding above, far below any direction a
#: depth could resolve.
RANK_RTOL = 1e-9


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
    return vals, vecs, vals > RANK_RTOL * d * vals.max()


def resolve_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray,
                       d: int, *, x: Any = None, seed: int = 0,
                       token: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Location and covariance for the ``covariance=`` parameter.

    ``n``, ``mean`` and ``scatter`` are the one-pass moments of the finite rows
    of ``x`` (a dask array with one column chunk); estimators that need more
    passes over the rows (robust ones) use ``x`` and ``seed`` (drawn on the
    client from ``random_state``).  ``'mcd'``, ``'ledoit-wolf'`` and ``'oas'``
    (and :class:`daskdepth._robust.MCDSpec`) are computed by
    :mod:`daskdepth._robust`.
    """
    from ._robust import MCDSpec, robust_covariance  # imports this module

    if isinstance(spec, str):
        if spec == "sample":
            return mean, sample_covariance(n, scatter)
        # 'mcd', 'ledoit-wolf', 'oas'; any other string raises a ValueError
        return robust_covariance(spec, n, mean, scatter, x=x, seed=seed, token=token)
    if isinstance(spec, MCDSpec):  # covariance='mcd' with a support_fraction
        return robust_covariance(spec, n, mean, scatter, x=x, seed=seed, token=token)
    cov = np.asarray(spec, dtype=np.float64)
    if cov.shape != (d, d):
        raise ValueError(f"a precomputed covariance must have shape ({d}, {d}) to match the "
                         f"{d} features, got {cov.shape}")
    if not np.isfinite(cov).all() or not np.allclose(cov, cov.T, rtol=1e-10, atol=0):
        raise ValueError("a precomputed covariance must be finite and symmetric")
    return mean, (cov + cov.T) / 2
