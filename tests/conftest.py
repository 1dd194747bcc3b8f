"""Shared fixtures and helpers for the daskdepth test suite."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "daskdepth",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("daskdepth")

#: Largest number of finite rows handled by the in-memory exact path.
IN_MEMORY_ROWS = 1 << 16
#: Row count that forces the distributed histogram path (> IN_MEMORY_ROWS).
DISTRIBUTED_ROWS = 70_000


def chunked(x: np.ndarray, rows: int | tuple[int, ...]) -> da.Array:
    """``x`` as a dask array with the given row chunks and one column chunk."""
    x = np.asarray(x)
    if isinstance(rows, tuple):
        assert sum(rows) == x.shape[0]
        return da.from_array(x, chunks=(rows, (x.shape[1],)))
    return da.from_array(x, chunks=(rows, x.shape[1]))


def gaussian_data(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Correlated Gaussian rows (no ties with probability one)."""
    rng = np.random.default_rng(seed)
    mix = np.eye(d) + 0.5 * rng.normal(size=(d, d))
    return rng.normal(size=(n, d)) @ mix.T + rng.normal(size=d)


def cauchy_data(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Independent standard Cauchy features: very heavy tails."""
    return np.random.default_rng(seed).standard_cauchy(size=(n, d))


def tie_data(n: int, d: int, seed: int = 0, levels: int = 4) -> np.ndarray:
    """Integer rows with heavy ties; a quarter of the rows duplicate earlier rows."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, levels, size=(n, d)).astype(np.float64)
    # A second coordinate scale so that projections are not all on one lattice.
    x[:, 0] *= 3.0
    dup = rng.choice(n, size=n // 4, replace=False)
    x[dup] = x[rng.integers(0, n // 8, size=dup.size)]
    return x


@pytest.fixture
def gaussian() -> np.ndarray:
    return gaussian_data(1500, 3, seed=1)


@pytest.fixture
def ties() -> np.ndarray:
    return tie_data(1500, 3, seed=2)


@pytest.fixture
def cauchy() -> np.ndarray:
    return cauchy_data(1500, 3, seed=3)


@pytest.fixture
def make_chunked():
    """The :func:`chunked` helper as a fixture."""
    return chunked
