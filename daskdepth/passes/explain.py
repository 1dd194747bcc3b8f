"""The explanation map: every row's least-deep directions and feature contributions.

Built as the scoring map is (:mod:`daskdepth.passes.scoring`): under a local
scheduler one task per row chunk reading the whole summary (one graph key).
On a cluster, a summary small enough to copy is copied to every worker and
each row chunk is explained on the worker that holds or reads it; a larger
one is sharded by direction block, each row chunk prepared once, its
least-deep slots found by one task per shard where the shard's blocks are,
and the shards' slots merged (exact in any order,
:func:`daskdepth.kernels.top.merge_top`).  Every row's values come from the
same arithmetic (:func:`daskdepth.summary.explain.explain_packed`), so they
are the same bits for any chunking, scheduler or number of workers.  A
projection depth's summary (two numbers per direction) is always copied.
Keys are ``daskdepth-why-<token>``.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ..kernels.top import merge_top
from ..runtime.client import active_client
from ..runtime.graph import tree_reduce
from ..runtime.keys import key_name
from ..runtime.placement import on_worker, placed, row_groups, shards
from ..runtime.plan import scored_by_shard
from ..runtime.reads import ChunkRead, chunk_reads, gate, passed
from ..runtime.shards import hold, local_copies, token_after
from ..summary.depth import DepthSummary
from ..summary.explain import block_top, explain_packed, explain_summary, inverse_scales
from ..summary.projection import ProjectionSummary
from ..summary.rows import Rows, prepare_rows
from .scoring import _check_rows, _local_summary, _starts

#: The summaries that explain (a projection depth's is never sharded).
Explained = DepthSummary | ProjectionSummary


def explain_chunk(x: np.ndarray, summary: Explained, scales: np.ndarray,
                  k: int, valid: np.ndarray) -> np.ndarray:
    """``(rows, 3 k + d)``: directions, depths, sides and contributions, side by side."""
    return explain_summary(summary, x, valid, scales, k)


def _explain_read(chunk: Any, summary: Explained, scales: np.ndarray, k: int,
                  raise_nan: bool, start: float) -> np.ndarray:
    """A row chunk (read here if it is a :class:`ChunkRead`) explained with the whole summary."""
    x = np.asarray(chunk() if isinstance(chunk, ChunkRead) else chunk, dtype=np.float64)
    return explain_chunk(x, summary, scales, k, _check_rows(x, raise_nan, start))


def _explain_block(x: np.ndarray, summary: Explained, scales: np.ndarray, k: int,
                   raise_nan: bool, block_info: dict | None = None) -> np.ndarray:
    start = block_info[0]["array-location"][0][0] if block_info else 0
    return _explain_read(x, summary, scales, k, raise_nan, start)


# --------------------------------------------------------------------------- sharded


def _prepare(chunk: Any, shell: DepthSummary, raise_nan: bool, start: float,
             *gate: int) -> Rows:
    """A row chunk centred and its duplicates merged (read here, in its turn, if a read)."""
    x = np.asarray(chunk() if isinstance(chunk, ChunkRead) else chunk, dtype=np.float64)
    return prepare_rows(x, shell.location, _check_rows(x, raise_nan, start))


def _shard_top(rows: Rows, directions: np.ndarray, inv: np.ndarray, k: int,
               *blocks: Any) -> tuple[np.ndarray, ...]:
    return block_top(rows, directions, inv, k, list(blocks))


def _merge(*parts: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    out = tuple(a.copy() for a in parts[0])
    for p in parts[1:]:
        merge_top(*out, *p)
    return out


def _finish(rows: Rows, slots: tuple[np.ndarray, ...], shell: DepthSummary,
            scales: np.ndarray, k: int) -> np.ndarray:
    return explain_packed(rows, slots, shell.n, shell.directions, scales, k)


def _explain_sharded(x: da.Array, summary: DepthSummary, scales: np.ndarray, k: int,
                     raise_nan: bool, token: str, width: int) -> da.Array:
    """Per row chunk: prepare, find its slots on each shard where it is, merge, finish."""
    futures = hold(summary.blocks, key_name("load", token))
    token = token_after(token, futures)  # blocks sent anew by hold(): keys of their own
    groups = shards(futures, keep_order=False)
    inv = inverse_scales(scales, summary.directions.shape[0])
    directions = delayed(summary.directions, name=key_name("share", token, "directions"),
                         traverse=False)
    shell = delayed(DepthSummary(summary.location, summary.directions, [], summary.n),
                    name=key_name("share", token, "shell"), traverse=False)
    reads = chunk_reads(x)
    chunks = reads or list(x.to_delayed(optimize_graph=False).ravel())
    name = key_name("why", token)
    finals: list[Delayed] = []
    tokens: list[list[Delayed]] = []
    for i, (chunk, start) in enumerate(zip(chunks, _starts(x.chunks[0]), strict=True)):
        after = gate(tokens, i) if reads is not None else ()
        rows = delayed(_prepare, pure=True)(chunk, shell, raise_nan, start, *after,
                                            dask_key_name=(key_name("dedup", token, "why"), i))
        parts = []
        for g, (worker, group) in enumerate(groups):
            with on_worker(worker):
                parts.append(delayed(_shard_top, pure=True)(
                    rows, directions, inv, k, *[futures[b] for b in group],
                    dask_key_name=(key_name("why", token, "shard"), i, g)))
        merged = tree_reduce(parts, _merge, key_name("merge", token, "why", i))
        finals.append(delayed(_finish, pure=True)(rows, merged, shell, scales, k,
                                                  dask_key_name=(name, i, 0)))
        if reads is not None:
            tokens.append([delayed(passed, pure=True)(
                finals[-1], dask_key_name=(key_name("gate", token, "why"), i))])
    graph = HighLevelGraph.merge(*[f.dask for f in finals])
    graph = HighLevelGraph({**graph.layers, name: MaterializedLayer({})},
                           {**graph.dependencies, name: set(graph.layers)})
    return placed(da.Array(graph, name, chunks=(x.chunks[0], (width,)), dtype=np.float64,
                           meta=np.empty((0, 0), dtype=np.float64)))


# --------------------------------------------------------------------------- entry point


def explain_array(x: da.Array, summary: Explained, scales: np.ndarray,
                  k: int, *, raise_nan: bool, token: str) -> da.Array:
    """Lazy ``(rows, 3 k + d)`` explanations of the rows of ``x``, with its row chunks.

    Columns ``0 .. k - 1`` hold the least-deep directions (-1 where a row is
    not scored), ``k .. 2k - 1`` their univariate depths, ``2k .. 3k - 1``
    the sides and the last ``d`` the features' contributions
    (:func:`daskdepth.summary.explain.explain_packed`).  ``scales`` are the
    directions' spreads (:func:`daskdepth.summary.explain.direction_scales`).
    """
    if not isinstance(summary, (DepthSummary, ProjectionSummary)):
        raise TypeError(f"a {type(summary).__name__} has no per-direction depths to explain")
    client = active_client()
    width = 3 * k + summary.directions.shape[1]
    meta = np.empty((0, 0), dtype=np.float64)
    if scored_by_shard(summary, x.shape[0]):
        return _explain_sharded(x, summary, scales, k, raise_nan, token, width)
    ref, token = _local_summary(summary, token)
    name = key_name("why", token)
    reads = chunk_reads(x) if client is not None else None
    rows = (row_groups(x, gated=reads is not None)
            if client is not None and not np.isnan(x.shape[0]) and x.shape[0] else None)
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
