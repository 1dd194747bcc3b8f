"""The scoring map: depth of every row.

Under a local scheduler: one task per row chunk, reading the whole summary
(one graph key shared by reference).  On a cluster the summary is sharded by
direction block (:mod:`daskdepth.runtime.shards`): each row chunk is prepared
once (centred, duplicates merged), scored by one task per shard (the blocks one
worker holds, where they are), and the shards' partial sums are added per row
chunk.  Every tabulated score is a multiple of 1/2 rows, so the partial sums
are exact and add up to the same bits in any order
(:func:`daskdepth.summary.blocks.sums_are_exact`); beyond that range the shards
are visited in block order, each adding into the running sum, as the
single-process path does.  Either way the depths are the bits of
:meth:`DepthSummary.depth <daskdepth.summary.depth.DepthSummary.depth>`.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import HighLevelGraph

from ..errors import nan_rows_message
from ..runtime.client import active_client
from ..runtime.graph import row_blocks, tree_reduce
from ..runtime.keys import key_name
from ..runtime.shards import graph_ref, hold, on_worker, shards
from ..summary.blocks import is_handle, sums_are_exact
from ..summary.depth import DepthSummary
from ..summary.rows import Rows, prepare_rows


def _valid_rows(x: np.ndarray, raise_nan: bool, start: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        bad = np.flatnonzero(~valid)
        raise ValueError(nan_rows_message(bad.size, start + bad, "a chunk of the input"))
    return x, valid


def _score_chunk(x: np.ndarray, summary: DepthSummary, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    start = block_info[0]["array-location"][0][0] if block_info else 0
    x, valid = _valid_rows(x, raise_nan, start)
    return summary.depth(x, valid)


def _with_blocks(summary: DepthSummary, *blocks: Any) -> DepthSummary:
    return DepthSummary(summary.location, summary.directions, list(blocks), summary.n)


def _local_summary(summary: DepthSummary, token: str) -> Any:
    """The summary as one graph key; blocks held elsewhere are loaded once, by their own keys."""
    if not any(is_handle(b) for b in summary.blocks):
        return delayed(summary, name=key_name("summary", token), traverse=False)
    shell = DepthSummary(summary.location, summary.directions, [], summary.n)
    loaded = [graph_ref(b, key_name("load", token, i)) for i, b in enumerate(summary.blocks)]
    return delayed(_with_blocks, pure=True)(delayed(shell, traverse=False), *loaded,
                                            dask_key_name=key_name("summary", token))


def _prepare_chunk(x: np.ndarray, location: np.ndarray, raise_nan: bool, start: int) -> Rows:
    x, valid = _valid_rows(x, raise_nan, start)
    return prepare_rows(x, location, valid)


def _score_shard(rows: Rows, directions: np.ndarray, total: np.ndarray | None,
                 *blocks: Any) -> np.ndarray:
    """``total`` (or zeros) plus the tabulated scores of the shard's blocks, in block order."""
    out = np.zeros(rows.x.shape[0]) if total is None else total.copy()
    for b in blocks:
        b.score_into(rows.x, np.ascontiguousarray(directions[b.j0:b.j1]), rows.valid, out)
    return out


def _add(*parts: np.ndarray) -> np.ndarray:
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def _finish(rows: Rows, total: np.ndarray, scale: int) -> np.ndarray:
    # Divided as DepthSummary.depth divides: the same bits.
    return rows.expand(total / scale)


def _score_sharded(x: da.Array, summary: DepthSummary, raise_nan: bool, token: str) -> da.Array:
    """Per row chunk: prepare, score against each shard where it is, add, expand."""
    futures = hold(summary.blocks, key_name("load", token))
    m, n = summary.directions.shape[0], summary.n
    exact = sums_are_exact(m, n)
    groups = shards(futures, keep_order=not exact)
    directions = delayed(summary.directions, name=key_name("summary", token, "directions"),
                         traverse=False)
    chunks, starts = row_blocks(x)
    name = key_name("score", token)
    finals: list[Delayed] = []
    for i, (chunk, start) in enumerate(zip(chunks, starts, strict=True)):
        rows = delayed(_prepare_chunk, pure=True)(
            chunk, summary.location, raise_nan, start,
            dask_key_name=(key_name("deduplicate", token, "score"), i))
        total: Any = None
        parts = []
        for g, (worker, group) in enumerate(groups):
            with on_worker(worker):  # each shard's task runs where its blocks are
                # Exact partial sums start from zero and are added in a tree;
                # otherwise each shard adds into the running sum, in block order.
                total = delayed(_score_shard, pure=True)(
                    rows, directions, None if exact else total, *[futures[b] for b in group],
                    dask_key_name=(key_name("score", token, "shard"), i, g))
                parts.append(total)
        if exact:
            total = tree_reduce(parts, _add, key_name("merge", token, "score", i))
        finals.append(delayed(_finish, pure=True)(rows, total, n * m, dask_key_name=(name, i)))
    graph = HighLevelGraph.merge(*[f.dask for f in finals])
    return da.Array(graph, name, chunks=(x.chunks[0],), dtype=np.float64,
                    meta=np.empty((0,), dtype=np.float64))


def score_array(x: da.Array, summary: DepthSummary, *, raise_nan: bool, token: str) -> da.Array:
    """Lazy depth of every row of ``x``, a dask array with the row chunks of ``x``.

    Under a local scheduler, one task per row chunk with the whole summary; on
    a cluster, per row chunk one task per shard of the summary (see the module
    docstring).  The same bits either way.
    """
    if active_client() is None or not summary.blocks or x.shape[0] == 0:
        ref = _local_summary(summary, token)
        return x.map_blocks(
            _score_chunk, ref, raise_nan, drop_axis=1, dtype=np.float64,
            meta=np.empty((0,), dtype=np.float64), name=key_name("score", token),
        )
    return _score_sharded(x, summary, raise_nan, token)
