"""Covariance estimates and the whitening map of the principal subspace (NumPy only)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Eigenvalues below ``RANK_RTOL * d * largest`` are treated as zero.
RANK_RTOL = 1e3 * np.finfo(np.float64).eps


def sample_covariance(n: int, scatter: np.ndarray) -> np.ndarray:
    """Unbiased sample covariance from a centred scatter matrix."""
    cov = scatter / max(n - 1, 1)
    return (cov + cov.T) / 2


def whitening(covariance: np.ndarray) -> tuple[np.ndarray, int]:
    """``W`` (d x r) with ``W W^T`` the pseudo-inverse of ``covariance`` and its rank ``r``.

    ``W = E_r diag(lambda_r)^{-1/2}`` with the leading eigenpairs; projecting a
    centred point on ``W u`` measures it in standard deviations of the principal
    subspace and ignores directions of zero variance.
    """
    cov = np.asarray(covariance, dtype=np.float64)
    d = cov.shape[0]
    if not np.isfinite(cov).all():
        raise ValueError(
            "the covariance of the reference data overflows float64: the values are too large "
            "in scale (squares above 1e308); rescale the features, e.g. divide them by a "
            "common factor"
        )
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
    top = vals.max(initial=0.0)
    if not np.isfinite(top) or top <= 0:
        raise ValueError(
            "the covariance of the reference data is zero: every feature is constant, so "
            "there is no direction along which to rank points; check the input"
        )
    keep = vals > RANK_RTOL * d * top
    w = vecs[:, keep] / np.sqrt(vals[keep])
    return w[:, ::-1].copy(), int(keep.sum())


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
