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

#: Directions per task of the thread pool.
BLOCK = 64


def tie_sweep_counts(values: np.ndarray) -> np.ndarray:
    """``min(#{<= x}, #{>= x})`` of every value ``x`` of ``values`` among ``values``.

    One ``argsort``, then one sweep over the runs of equal values: a value in the run that
    occupies sorted positions ``[a, b)`` has ``b`` values at or below it and ``n - a`` at or
    above it.

    >>> tie_sweep_counts(np.array([3.0, 1.0, 3.0, 2.0])).tolist()
    [2, 1, 2, 2]
    """
    n = values.shape[0]
    order = np.argsort(values)
    ordered = values[order]
    starts_run = np.empty(n, dtype=bool)
    starts_run[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
    starts = np.flatnonzero(starts_run)
    ends = np.append(starts[1:], n)
    run = np.cumsum(starts_run) - 1
    counts = np.empty(n, dtype=np.int64)
    counts[order] = np.minimum(ends[run], n - starts[run])
    return counts


def numpy_sweep(x: np.ndarray, location: np.ndarray, directions: np.ndarray,
                threads: int) -> np.ndarray:
    """Exact depth of every row of ``x`` among the rows of ``x``, for these directions.

    One matrix product (BLAS, its own threads), then :func:`tie_sweep_counts` per direction,
    blocks of directions spread over ``threads`` threads (NumPy's sort releases the GIL).
    The counts are integers, summed exactly and divided once.

    >>> x = np.array([[0.0], [1.0], [1.0], [3.0]])
    >>> numpy_sweep(x, np.zeros(1), np.ones((2, 1)), threads=2).tolist()
    [0.25, 0.75, 0.75, 0.25]
    """
    proj = directions @ (x - location).T  # (m, n): one direction per row
    n, m = x.shape[0], directions.shape[0]

    def block_total(start: int) -> np.ndarray:
        total = np.zeros(n, dtype=np.int64)
        for values in proj[start:start + BLOCK]:
            total += tie_sweep_counts(values)
        return total

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(block_total, range(0, m, BLOCK)))
    return total / (n * m)


def product_and_sort(x: np.ndarray, location: np.ndarray, directions: np.ndarray,
                     threads: int) -> None:
    """The matrix product and a sort of each direction's projections, and nothing else.

    No depth comes out: its time is a floor for any exact computation that sorts the
    projections (the sweep and the counts come on top).

    >>> product_and_sort(np.eye(2), np.zeros(2), np.ones((3, 2)), threads=2)
    """
    proj = directions @ (x - location).T

    def sort_block(start: int) -> None:
        np.sort(proj[start:start + BLOCK], axis=1)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(sort_block, range(0, directions.shape[0], BLOCK)))
