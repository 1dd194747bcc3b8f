"""The scoring map: depth of every row, one task per row chunk."""

from __future__ import annotations

import dask.array as da
import numpy as np

from ..errors import nan_rows_message
from ..runtime.client import broadcast
from ..runtime.keys import key_name
from ..summary.depth import DepthSummary


def _score_chunk(x: np.ndarray, summary: DepthSummary, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        start = block_info[0]["array-location"][0][0] if block_info else 0
        bad = np.flatnonzero(~valid)
        raise ValueError(nan_rows_message(bad.size, start + bad, "a chunk of the input"))
    return summary.depth(x, valid)


def score_array(x: da.Array, summary: DepthSummary, *, raise_nan: bool, token: str) -> da.Array:
    """Lazy depth of every row of ``x``: one task per row chunk."""
    ref = broadcast(summary, key_name("summary", token))
    return x.map_blocks(
        _score_chunk, ref, raise_nan, drop_axis=1, dtype=np.float64,
        meta=np.empty((0,), dtype=np.float64), name=key_name("score", token),
    )
