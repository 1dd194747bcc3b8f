"""Shrinkage covariance formulas (Ledoit-Wolf, OAS) from one-pass moments (NumPy)."""

from __future__ import annotations

import numpy as np


def fourth_moment_chunk(x: np.ndarray, mean: np.ndarray) -> float:
    """Sum over the finite rows of ``||x_i - mean||^4``."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    xc = x[finite] - mean
    r2 = np.einsum("ij,ij->i", xc, xc)
    return float(r2 @ r2)


def ledoit_wolf_shrunk(n: int, scatter: np.ndarray, fourth: float) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf shrunk covariance from the moments (scikit-learn's formula).

    ``fourth`` is ``sum_i ||x_i - mean||^4``, which is the sum of the entries
    of ``X2^T X2`` (``X2`` the squared centred rows) used by
    ``sklearn.covariance.ledoit_wolf_shrinkage``.
    """
    d = scatter.shape[0]
    emp = scatter / n
    if d == 1:
        return emp.copy(), 0.0
    trace = np.diag(scatter) / n
    mu = trace.sum() / d
    delta_ = float(np.sum(scatter ** 2)) / n ** 2
    beta = 1.0 / (d * n) * (fourth / n - delta_)
    delta = (delta_ - 2.0 * mu * trace.sum() + d * mu ** 2) / d
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 or delta == 0 else beta / delta
    cov = (1.0 - shrinkage) * emp
    cov.flat[::d + 1] += shrinkage * mu
    return cov, float(shrinkage)


def oas_shrunk(n: int, scatter: np.ndarray) -> tuple[np.ndarray, float]:
    """Oracle Approximating Shrinkage covariance (scikit-learn's formula)."""
    d = scatter.shape[0]
    emp = scatter / n
    if d == 1:
        return emp.copy(), 0.0
    alpha = float(np.mean(emp ** 2))
    mu = float(np.trace(emp)) / d
    num = alpha + mu ** 2
    den = (n + 1) * (alpha - mu ** 2 / d)
    shrinkage = 1.0 if den == 0 else min(num / den, 1.0)
    cov = (1.0 - shrinkage) * emp
    cov.flat[::d + 1] += shrinkage * mu
    return cov, float(shrinkage)
