"""Keyed pseudo-random numbers: a row's draw depends on (seed, global row index) only.

A Bernoulli row sample drawn with :func:`row_uniforms` is the same however
the rows are chunked.  Pure NumPy/Numba, no Dask.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel


@kernel
def splitmix64(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(
        0xFFFFFFFFFFFFFFFF
    )
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(
        0xFFFFFFFFFFFFFFFF
    )
    return z ^ (z >> np.uint64(31))


@kernel
def row_uniforms(row_start, nrows, seed):
    """Uniform numbers in [0, 1) keyed on (seed, global row index).

    Keyed on the global index, not on the chunk, so a Bernoulli sample drawn
    with them is the same however the rows are chunked.
    """
    out = np.empty(nrows, dtype=np.float64)
    s = splitmix64(np.uint64(seed))
    for i in range(nrows):
        h = splitmix64(s ^ np.uint64(row_start + i))
        out[i] = (h >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return out


def keyed_sample(row_start: int, nrows: int, seed: int, p: float) -> np.ndarray:
    """Rows kept by a Bernoulli(``p``) sample keyed on (``seed``, global row index).

    The one row sampler of the package: the same rows are drawn however the
    data are chunked, because each row's draw depends only on its global index.

    Examples
    --------
    >>> keep = keyed_sample(0, 10_000, seed=1, p=0.25)
    >>> bool((keep == keyed_sample(0, 10_000, 1, 0.25)).all()), 2300 < int(keep.sum()) < 2700
    (True, True)
    >>> bool((keyed_sample(5_000, 5_000, 1, 0.25) == keep[5_000:]).all())
    True
    """
    if p >= 1.0:
        return np.ones(nrows, dtype=bool)
    return row_uniforms(row_start, nrows, seed) < p
