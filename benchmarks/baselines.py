"""The strongest plain NumPy computation of the exact tie-aware depth, for the benchmarks.

For reference rows ``X``, directions ``v_j`` and each row ``x`` of ``X``, the depth is
``(1/m) sum_j min(#{i: <X_i, v_j> <= <x, v_j>}, #{i: <X_i, v_j> >= <x, v_j>}) / n``, the
definition daskdepth computes.  A careful NumPy user computes it in sample with one ``argsort``
per direction and one sweep over the runs of tied values; that is what the benchmarks compare
with.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Values per block of directions: each array of a block stays around 32 MiB.
BLOCK_VALUES = 1 << 22


def tie_sweep_counts(proj: np.ndarray) -> np.ndarray:
    """``min(#{<= x}, #{>= x})`` of every value of each row of ``proj`` within its row.

    One ``argsort`` per row, then one sweep over the runs of equal values: a value in the run
    that occupies sorted positions ``[a, b)`` has ``b`` values at or below it and ``n - a`` at
    or above it.

    >>> tie_sweep_counts(np.array([[3.0, 1.0, 3.0, 2.0]])).tolist()
    [[2, 1, 2, 2]]
    """
    k, n = proj.shape
    order = np.argsort(proj, axis=1)
    ordered = np.take_along_axis(proj, order, axis=1)
    starts = np.ones((k, n), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones((k, n), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    position = np.arange(n)
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=1)
    after = np.minimum.accumulate(np.where(ends, position + 1, n)[:, ::-1], axis=1)[:, ::-1]
    counts = np.empty((k, n), dtype=np.int64)
    np.put_along_axis(counts, order, np.minimum(after, n - first), axis=1)
    return counts


def numpy_sweep(x: np.ndarray, location: np.ndarray, directions: np.ndarray,
                threads: int) -> np.ndarray:
    """Exact depth of every row of ``x`` among the rows of ``x``, for these directions.

    One matrix product (BLAS, its own threads), then :func:`tie_sweep_counts` on blocks of
    directions, the blocks spread over ``threads`` threads (NumPy's sort releases the GIL).
    The counts are integers, summed exactly and divided once.

    >>> x = np.array([[0.0], [1.0], [1.0], [3.0]])
    >>> numpy_sweep(x, np.zeros(1), np.ones((2, 1)), threads=2).tolist()
    [0.25, 0.75, 0.75, 0.25]
    """
    proj = directions @ (x - location).T  # (m, n): one direction per row
    n, m = x.shape[0], directions.shape[0]
    block = max(1, min(256, BLOCK_VALUES // n))

    def block_total(start: int) -> np.ndarray:
        return tie_sweep_counts(proj[start:start + block]).sum(axis=0)

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(block_total, range(0, m, block)))
    return total / (n * m)
