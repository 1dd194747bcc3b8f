"""The ``covariance=`` parameter: which estimator, and its location and covariance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from ..kernels.fastmcd import REWEIGHT_QUANTILE, consistency_factor
from ..kernels.frame import Support
from ..kernels.shrinkage import oas_shrunk
from ..kernels.whitening import sample_covariance
from .mcd import mcd
from .shrinkage import ledoit_wolf


@dataclass(frozen=True)
class RowCovariance:
    """How a covariance is made from rows: ``factor * scatter / (count - ddof) + ridge * I``.

    ``scatter`` and ``count`` are those of the finite rows, or of the rows in
    ``support``.  The invariant frame recomputes the covariance this way in
    whitened coordinates, where rounding costs nothing
    (:mod:`daskdepth.fitting.frame`).
    """

    factor: float = 1.0
    ddof: int = 0
    ridge: float = 0.0
    support: Support | None = None


@dataclass(frozen=True)
class CovarianceFit:
    """The ``covariance=`` estimate: location, covariance and, when known, its rows' recipe.

    ``rows`` is None for a precomputed covariance (and for an MCD that kept its
    raw estimate).
    """

    location: np.ndarray
    covariance: np.ndarray
    rows: RowCovariance | None


def resolve_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray,
                       d: int, *, x: Any = None, seed: int = 0,
                       token: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Location and covariance for the ``covariance=`` parameter.

    :func:`fit_covariance` with the location and covariance only.
    """
    fit = fit_covariance(spec, n, mean, scatter, d, x=x, seed=seed, token=token)
    return fit.location, fit.covariance


def fit_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray,
                   d: int, *, x: Any = None, seed: int = 0, token: str = "",
                   equivariant: bool = False) -> CovarianceFit:
    """Location, covariance and their rows' recipe for the ``covariance=`` parameter.

    ``equivariant`` makes the MCD's deterministic start affine equivariant (see
    :func:`daskdepth.covariance.mcd.mcd`); the other estimates do not change.

    ``n``, ``mean`` and ``scatter`` are the one-pass moments of the finite rows
    of ``x`` (a dask array with one column chunk); estimators that need more
    passes over the rows (robust ones) use ``x`` and ``seed`` (drawn on the
    client from ``random_state``).  ``'mcd'``, ``'ledoit-wolf'`` and ``'oas'``
    (and :class:`MCDSpec`) are computed by :mod:`daskdepth.covariance.mcd` and
    :mod:`daskdepth.covariance.shrinkage`.
    """
    if isinstance(spec, str):
        if spec == "sample":
            return CovarianceFit(mean, sample_covariance(n, scatter), RowCovariance(ddof=1))
        # 'mcd', 'ledoit-wolf', 'oas'; any other string raises a ValueError
        return robust_covariance(spec, n, mean, scatter, x=x, seed=seed, token=token,
                                 equivariant=equivariant)
    if isinstance(spec, MCDSpec):  # covariance='mcd' with a support_fraction
        return robust_covariance(spec, n, mean, scatter, x=x, seed=seed, token=token,
                                 equivariant=equivariant)
    cov = np.asarray(spec, dtype=np.float64)
    if cov.shape != (d, d):
        raise ValueError(f"a precomputed covariance must have shape ({d}, {d}) to match the "
                         f"{d} features, got {cov.shape}")
    if not np.isfinite(cov).all() or not np.allclose(cov, cov.T, rtol=1e-10, atol=0):
        raise ValueError("a precomputed covariance must be finite and symmetric")
    cov = (cov + cov.T) / 2
    eig = np.linalg.eigvalsh(cov)
    if eig[0] < -PSD_RTOL * max(abs(eig[-1]), abs(eig[0])):
        raise ValueError(
            f"a precomputed covariance must be positive semi-definite, but its smallest "
            f"eigenvalue is {eig[0]:.3g} (largest {eig[-1]:.3g}); pass a covariance matrix, "
            "e.g. np.cov(X, rowvar=False), or one of the estimates by name")
    return CovarianceFit(mean, cov, None)


#: Relative size of a negative eigenvalue of a precomputed covariance still taken for
#: rounding noise (a covariance computed in float64 may have such eigenvalues).
PSD_RTOL = 1e-10


#: The accepted values of ``covariance=`` besides a precomputed matrix.
COVARIANCE_METHODS = ("sample", "mcd", "ledoit-wolf", "oas")


@dataclass(frozen=True)
class MCDSpec:
    """``covariance='mcd'`` with a ``support_fraction`` (None: scikit-learn's default)."""

    support_fraction: float | None = None


def covariance_spec(covariance: object, support_fraction: Any = None) -> object:
    """What an estimator passes to the fit: ``covariance`` or an :class:`MCDSpec`."""
    if support_fraction is not None and isinstance(covariance, str) and covariance == "mcd":
        return MCDSpec(support_fraction)
    return covariance


def robust_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray, *,
                      x: da.Array | None, seed: int, token: str,
                      equivariant: bool = False) -> CovarianceFit:
    """Location and covariance for ``covariance='mcd' | 'ledoit-wolf' | 'oas'``."""
    if isinstance(spec, MCDSpec) or spec == "mcd":
        frac = spec.support_fraction if isinstance(spec, MCDSpec) else None
        res = mcd(_need(x, "mcd"), n, mean, scatter, seed=seed, token=token,
                  support_fraction=frac, equivariant=equivariant)
        p = res.support.whitening.shape[1] if res.support is not None else 0
        rows = (RowCovariance(consistency_factor(p, REWEIGHT_QUANTILE), 0, 0.0, res.support)
                if res.support is not None else None)
        return CovarianceFit(res.location, res.covariance, rows)
    if spec in ("ledoit-wolf", "oas"):
        if spec == "ledoit-wolf":
            cov, shrinkage = ledoit_wolf(_need(x, "ledoit-wolf"), n, mean, scatter, token=token)
        else:
            cov, shrinkage = oas_shrunk(n, scatter)
        # (1 - s) * scatter / n + s * mu * I, mu the mean variance (scikit-learn's formulas)
        mu = float(np.trace(scatter)) / (n * scatter.shape[0])
        return CovarianceFit(mean, cov, RowCovariance(1.0 - shrinkage, 0, shrinkage * mu))
    raise ValueError(
        f"covariance must be one of {', '.join(repr(m) for m in COVARIANCE_METHODS)} or a "
        f"(d, d) array, got {spec!r}"
    )


def _need(x: da.Array | None, what: str) -> da.Array:
    if x is None:  # pragma: no cover - fit_depth always passes the data
        raise ValueError(f"covariance={what!r} needs the data rows")
    return x
