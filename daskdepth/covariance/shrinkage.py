"""Shrinkage covariances over all rows: one more pass for Ledoit-Wolf's fourth moment."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from ..kernels.shrinkage import fourth_moment_chunk, ledoit_wolf_shrunk
from ..runtime.client import phase
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name
from .mcd import _add


def ledoit_wolf(x: da.Array, n: int, mean: np.ndarray, scatter: np.ndarray, *,
                token: str) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf covariance and shrinkage: one pass for ``sum ||x - mean||^4``."""
    if mean.shape[0] == 1:
        return ledoit_wolf_shrunk(n, scatter, 0.0)
    blocks, _ = row_blocks(x)
    total = reduce_chunks(blocks, fourth_moment_chunk, _add,
                          key=(key_name("gauge", token),),
                          merge_key=key_name("merge", token, "shrinkage"), args=(mean,))
    with phase("shrinkage"):
        (fourth,) = dask.compute(total)
    return ledoit_wolf_shrunk(n, scatter, fourth)
