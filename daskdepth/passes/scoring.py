"""The scoring map: depth of every row, one task per row chunk."""

from __future__ import annotations

from typing import Any, Literal, overload

import dask.array as da
import numpy as np

from ..errors import nan_rows_message
from ..runtime.client import broadcast
from ..runtime.keys import key_name


def _valid_rows(x: np.ndarray, raise_nan: bool, block_info: dict | None) -> np.ndarray:
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        start = block_info[0]["array-location"][0][0] if block_info else 0
        bad = np.flatnonzero(~valid)
        if start != start:  # NaN: a dask DataFrame's partition of unknown position
            raise ValueError(nan_rows_message(bad.size, bad, "a partition of the input "
                                              "(rows counted within it)"))
        raise ValueError(nan_rows_message(bad.size, start + bad, "a chunk of the input"))
    return valid


def _score_chunk(x: np.ndarray, summary: Any, statistic: str, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return getattr(summary, statistic)(x, _valid_rows(x, raise_nan, block_info))


def _score_std_chunk(x: np.ndarray, summary: Any, raise_nan: bool,
                     block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    depth, std = summary.depth_and_std(x, _valid_rows(x, raise_nan, block_info))
    return np.column_stack([depth, std])


@overload
def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: str = ..., std: Literal[False] = ...) -> da.Array: ...
@overload
def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: str = ..., std: Literal[True]) -> tuple[da.Array, da.Array]: ...


def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: str = "depth",
                std: bool = False) -> da.Array | tuple[da.Array, da.Array]:
    """Lazy ``statistic`` of every row of ``x``: one task per row chunk.

    ``summary`` is a fitted summary (:class:`~daskdepth.summary.depth.DepthSummary`,
    :class:`~daskdepth.summary.mass.MassSummary`) and ``statistic`` the name of
    its method ``(x, valid) -> values`` that scores a chunk: ``'depth'`` (the
    mean over directions) or ``'min_depth'`` (their minimum, the halfspace
    depth) for a ``DepthSummary``.  With ``std``, also the depth's Monte Carlo
    standard error over the directions
    (:meth:`daskdepth.summary.depth.DepthSummary.depth_and_std`): each task
    scores its chunk once into ``(rows, 2)``, and the two columns are returned
    as lazy arrays with the row chunks of ``x``.
    """
    if std and statistic != "depth":
        raise ValueError(f"standard errors are defined for the mean over directions, not for "
                         f"{statistic!r}")
    if not callable(getattr(summary, "depth_and_std" if std else statistic, None)):
        raise ValueError(f"a {type(summary).__name__} has no statistic {statistic!r}"
                         + (" with standard errors" if std else ""))
    ref = broadcast(summary, key_name("share", token))
    if not std:
        return x.map_blocks(
            _score_chunk, ref, statistic, raise_nan, drop_axis=1, dtype=np.float64,
            meta=np.empty((0,), dtype=np.float64), name=key_name("score", token),
        )
    both = x.map_blocks(
        _score_std_chunk, ref, raise_nan, chunks=(x.chunks[0], (2,)), dtype=np.float64,
        meta=np.empty((0, 0), dtype=np.float64), name=key_name("score", token, "std"),
    )
    return both[:, 0], both[:, 1]
