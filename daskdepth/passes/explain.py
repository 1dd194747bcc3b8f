"""The explanation map: every row's least-deep directions and feature contributions.

Built as the scoring map is (:mod:`daskdepth.passes.scoring`): under a local
scheduler one task per row chunk reading the whole summary (one graph key);
on a cluster the summary is copied to every worker (a sharded one is loaded
first) and each row chunk is explained on the worker that holds or reads it.
Every task computes its rows with the same arithmetic, row by row
(:func:`explain_chunk`), so the values are the same bits for any chunking,
scheduler or number of workers.  Keys are ``daskdepth-score-<token>-explain``:
explaining is scoring that keeps the per-direction values.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ..runtime.client import active_client
from ..runtime.keys import key_name
from ..runtime.reads import ChunkRead, chunk_reads
from ..runtime.shards import local_copies, on_worker, row_groups
from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from ..summary.explain import contributions, least_deep
from .scoring import _check_rows, _local_summary, _starts


def explain_chunk(x: np.ndarray, summary: DepthSummary, scales: np.ndarray, k: int,
                  valid: np.ndarray) -> np.ndarray:
    """``(rows, 3 k + d)``: directions, depths, sides and contributions, side by side.

    One float64 array, so that a chunk's task has one result; direction
    indices and sides are exact in float64.
    """
    top = least_deep(summary, x, k, valid, scales)
    xc = np.subtract(x, summary.location)
    contrib = contributions(xc, summary.directions, scales, top)
    return np.concatenate([top.direction.astype(np.float64), top.depth,
                           top.side.astype(np.float64), contrib], axis=1)


def _explain_read(chunk: Any, summary: DepthSummary, scales: np.ndarray, k: int,
                  raise_nan: bool, start: float) -> np.ndarray:
    """A row chunk (read here if it is a :class:`ChunkRead`) explained with the whole summary."""
    x = np.asarray(chunk() if isinstance(chunk, ChunkRead) else chunk, dtype=np.float64)
    return explain_chunk(x, summary, scales, k, _check_rows(x, raise_nan, start))


def _explain_block(x: np.ndarray, summary: DepthSummary, scales: np.ndarray, k: int,
                   raise_nan: bool, block_info: dict | None = None) -> np.ndarray:
    start = block_info[0]["array-location"][0][0] if block_info else 0
    return _explain_read(x, summary, scales, k, raise_nan, start)


def _loaded(summary: DepthSummary) -> DepthSummary:
    """The summary with every block in this process (blocks held elsewhere loaded)."""
    if not any(is_handle(b) for b in summary.blocks):
        return summary
    blocks = [b.load() if is_handle(b) else b for b in summary.blocks]
    return DepthSummary(summary.location, summary.directions, blocks, summary.n)


def explain_array(x: da.Array, summary: DepthSummary, scales: np.ndarray, k: int, *,
                  raise_nan: bool, token: str) -> da.Array:
    """Lazy ``(rows, 3 k + d)`` explanations of the rows of ``x``, with its row chunks.

    Columns ``0 .. k - 1`` hold the least-deep directions (-1 where a row is
    not scored), ``k .. 2k - 1`` their univariate depths, ``2k .. 3k - 1``
    the sides and the last ``d`` the features' contributions
    (:func:`explain_chunk`).  ``scales`` are the directions' spreads
    (:func:`daskdepth.summary.explain.direction_scales`).
    """
    if not isinstance(summary, DepthSummary):
        raise TypeError(f"a {type(summary).__name__} has no per-direction depths to explain")
    client = active_client()
    if client is not None:
        # Copied to every worker whole: blocks held on workers are gathered once.
        summary = _loaded(summary)
    width = 3 * k + summary.directions.shape[1]
    name = key_name("score", token, "explain")
    ref = _local_summary(summary, token)
    reads = chunk_reads(x) if client is not None else None
    rows = (row_groups(x, gated=reads is not None)
            if client is not None and not np.isnan(x.shape[0]) and x.shape[0] else None)
    meta = np.empty((0, 0), dtype=np.float64)
    if not rows:
        return x.map_blocks(_explain_block, ref, scales, k, raise_nan,
                            chunks=(x.chunks[0], (width,)), dtype=np.float64, meta=meta,
                            name=name)
    # As the scoring map's copied path: each task reads its worker's own copy and runs
    # where its chunk is.
    local = local_copies([ref], [g.worker for g in rows], key_name("share", token, "at"))
    owner = {i: g.worker for g in rows for i in g.chunks}
    chunks = reads or list(x.to_delayed(optimize_graph=False).ravel())
    finals = []
    for i, (chunk, start) in enumerate(zip(chunks, _starts(x.chunks[0]), strict=True)):
        with on_worker(owner[i]):
            finals.append(delayed(_explain_read, pure=True)(
                chunk, local[owner[i]][0], scales, k, raise_nan, start,
                dask_key_name=(name, i, 0)))
    merged = HighLevelGraph.merge(*[f.dask for f in finals])
    graph = HighLevelGraph({**merged.layers, name: MaterializedLayer({})},
                           {**merged.dependencies, name: set(merged.layers)})
    return da.Array(graph, name, chunks=(x.chunks[0], (width,)), dtype=np.float64, meta=meta)
