"""The drift test's pass: mid-rank counts of new depths among the reference depths.

One task per row chunk of the (lazy) depths counts, with ``searchsorted``
against the sorted reference depths, how many reference depths lie below each
new depth (:func:`daskdepth.summary.drift.twice_rank_sums`); the chunks' integer
sums add up exactly.  The depths are those of the scoring map, so the new rows
are read once.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from dask.delayed import delayed

from ..summary.drift import twice_rank_sums

__all__ = ["rank_sums"]


def rank_sums(depth: da.Array, reference: np.ndarray) -> da.Array:
    """Lazy ``[2 * sum of mid-rank counts, finite new depths]`` (int64, shape (2,)).

    ``depth`` is a 1-D dask array of new depths, ``reference`` the sorted finite
    reference depths (:func:`daskdepth.summary.drift.reference_depths`).

    Examples
    --------
    >>> d = da.from_array(np.array([0.2, 0.3, 0.05, 0.4]), chunks=2)
    >>> rank_sums(d, np.array([0.1, 0.2, 0.3])).compute().tolist()
    [14, 4]
    """
    # One graph key for the reference depths (up to 512 KiB), shared by every task.
    counts = depth.map_blocks(twice_rank_sums, delayed(reference, pure=True), new_axis=1,
                              chunks=((1,) * depth.numblocks[0], (2,)), dtype=np.int64)
    return counts.sum(axis=0, dtype=np.int64)
