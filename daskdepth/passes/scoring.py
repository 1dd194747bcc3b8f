"""The scoring map: depth of every row, one task per row chunk."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..errors import nan_rows_message
from ..runtime.client import broadcast
from ..runtime.keys import key_name


def _score_chunk(x: np.ndarray, summary: Any, statistic: str, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        start = block_info[0]["array-location"][0][0] if block_info else 0
        bad = np.flatnonzero(~valid)
        raise ValueError(nan_rows_message(bad.size, start + bad, "a chunk of the input"))
    return getattr(summary, statistic)(x, valid)


def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: str = "depth") -> da.Array:
    """Lazy ``statistic`` of every row of ``x``: one task per row chunk.

    ``summary`` is a fitted summary (:class:`~daskdepth.summary.depth.DepthSummary`,
    :class:`~daskdepth.summary.mass.MassSummary`) and ``statistic`` the name of
    its method ``(x, valid) -> values`` that scores a chunk: ``'depth'`` (the
    mean over directions) or ``'min_depth'`` (their minimum, the halfspace
    depth) for a ``DepthSummary``.
    """
    if not callable(getattr(summary, statistic, None)):
        raise ValueError(f"a {type(summary).__name__} has no statistic {statistic!r}")
    ref = broadcast(summary, key_name("summary", token))
    return x.map_blocks(
        _score_chunk, ref, statistic, raise_nan, drop_axis=1, dtype=np.float64,
        meta=np.empty((0,), dtype=np.float64), name=key_name("score", token),
    )
