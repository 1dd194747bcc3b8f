"""The ``covariance=`` parameter: which estimator, and its location and covariance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from ..kernels.shrinkage import oas_shrunk
from ..kernels.whitening import sample_covariance
from .mcd import mcd
from .shrinkage import ledoit_wolf


def resolve_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray,
                       d: int, *, x: Any = None, seed: int = 0,
                       token: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Location and covariance for the ``covariance=`` parameter.

    ``n``, ``mean`` and ``scatter`` are the one-pass moments of the finite rows
    of ``x`` (a dask array with one column chunk); estimators that need more
    passes over the rows (robust ones) use ``x`` and ``seed`` (drawn on the
    client from ``random_state``).  ``'mcd'``, ``'ledoit-wolf'`` and ``'oas'``
    (and :class:`MCDSpec`) are computed by :mod:`daskdepth.covariance.mcd` and
    :mod:`daskdepth.covariance.shrinkage`.
    """
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
                      x: da.Array | None, seed: int,
                      token: str) -> tuple[np.ndarray, np.ndarray]:
    """Location and covariance for ``covariance='mcd' | 'ledoit-wolf' | 'oas'``."""
    if isinstance(spec, MCDSpec) or spec == "mcd":
        frac = spec.support_fraction if isinstance(spec, MCDSpec) else None
        res = mcd(_need(x, "mcd"), n, mean, scatter, seed=seed, token=token,
                  support_fraction=frac)
        return res.location, res.covariance
    if spec == "ledoit-wolf":
        return mean, ledoit_wolf(_need(x, "ledoit-wolf"), n, mean, scatter, token=token)[0]
    if spec == "oas":
        return mean, oas_shrunk(n, scatter)[0]
    raise ValueError(
        f"covariance must be one of {', '.join(repr(m) for m in COVARIANCE_METHODS)} or a "
        f"(d, d) array, got {spec!r}"
    )


def _need(x: da.Array | None, what: str) -> da.Array:
    if x is None:  # pragma: no cover - fit_depth always passes the data
        raise ValueError(f"covariance={what!r} needs the data rows")
    return x
