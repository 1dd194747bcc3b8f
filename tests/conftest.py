"""Shared fixtures and helpers for the daskdepth test suite."""

from __future__ import annotations

import os
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from daskdepth.runtime.client import TASK_PROFILER, profiler_can_deadlock

settings.register_profile(
    "daskdepth",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("daskdepth")

if profiler_can_deadlock():
    # distributed's task profiler can stop a process on Python 3.11 for good, with the
    # GIL held (so not even pytest-timeout can end the test): off in this process's
    # clusters and in the worker processes the tests start (the environment).
    dask.config.set({TASK_PROFILER: False})
    os.environ["DASK_" + TASK_PROFILER.upper().replace(".", "__").replace("-", "_")] = "False"

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


def planted_outliers(n: int, d: int, feature: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian reference rows, and 200 Gaussian rows moved +8 sigma along ``feature``."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(0.5, 3.0, d)
    reference = rng.normal(size=(n, d)) * scales
    outliers = rng.normal(size=(200, d)) * scales
    outliers[:, feature] += 8.0 * scales[feature]
    return reference, outliers


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


#: The shared ODDS data sets (``.npz`` with ``X`` and ``y``), where present: ``shared/``
#: beside the checkout (as CI lays it out), else the development machines' copy.
ODDS = next((str(p) for p in (Path(__file__).resolve().parents[2] / "shared/data/odds",
                               Path("/work/shared/data/odds")) if p.is_dir()),
            "/work/shared/data/odds")
HAS_ODDS = os.path.exists(f"{ODDS}/musk.npz") and os.path.exists(f"{ODDS}/satimage-2.npz")


def mapped_data_set(name: str, cond: float) -> tuple[np.ndarray, np.ndarray]:
    """A data set ``X`` and its image ``X A + b``, ``A`` with singular values log-spaced to
    ``cond``: ``'breast_cancer'`` (scikit-learn's) or an ODDS set (``'satimage-2'``, ``'musk'``).

    Both are numerically full rank (singular-value ratio of the centred rows below
    ``1 / (sqrt(n) eps)``) for ``cond`` up to 1e8.
    """
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer  # only the tests that map it need it

        x = load_breast_cancer().data
    else:
        x = np.load(f"{ODDS}/{name}.npz")["X"].astype(np.float64)
    d = x.shape[1]
    rng = np.random.default_rng(1)
    u = np.linalg.qr(rng.normal(size=(d, d)))[0]
    v = np.linalg.qr(rng.normal(size=(d, d)))[0]
    y = x @ (u @ np.diag(np.logspace(0, np.log10(cond), d)) @ v) + rng.normal(size=d) * 10
    s = np.linalg.svd(y - y.mean(axis=0), compute_uv=False)
    assert s[0] / s[-1] < 1 / (np.sqrt(y.shape[0]) * np.finfo(float).eps)
    return x, y


#: Test modules that start process clusters, subprocesses or notebook kernels: left out of the
#: quick subset for the inner loop, ``python -m pytest -m "not slow and not heavy"``.
HEAVY_MODULES = frozenset({
    "test_cluster", "test_tls", "test_notebooks", "test_setup", "test_scaleout", "test_shards",
    "test_placement", "test_schedulers", "test_deploy", "test_cli", "test_store_files",
    "test_docs",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in HEAVY_MODULES:
            item.add_marker(pytest.mark.heavy)
