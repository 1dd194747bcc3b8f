"""The scoring map: depth of every row.

Under a local scheduler: one task per row chunk, reading the whole summary
(one graph key shared by reference).  On a cluster, a summary small enough
(:func:`daskdepth.runtime.memory.shard_summary`) is copied to every worker and
each row chunk is scored by one task on the worker that holds it (persisted)
or reads it (a cheap read of its own), from that worker's own copy; a larger
depth summary is sharded by direction block
(:mod:`daskdepth.runtime.shards`): each row chunk is
prepared once (centred, duplicates merged; read in its turn, see
:mod:`daskdepth.runtime.reads`), scored by one task per shard (the blocks one
worker holds, where they are), and the shards' partial results are combined
per row chunk.  Every tabulated score is a multiple of 1/2 rows, so
partial sums are exact and add up to the same bits in any order
(:func:`daskdepth.summary.blocks.sums_are_exact`); beyond that range the shards
are visited in block order, each adding into the running sum, as the
single-process path does.  Minima (the halfspace depth) combine exactly in any
order.  Either way the values are the bits of :meth:`DepthSummary.depth
<daskdepth.summary.depth.DepthSummary.depth>` (``min_depth``, ``depth_and_std``).
Other summaries (:class:`~daskdepth.summary.mass.MassSummary`) are broadcast
whole.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, overload

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ..errors import nan_rows_message
from ..runtime.client import active_client, broadcast
from ..runtime.graph import tree_reduce
from ..runtime.keys import key_name
from ..runtime.placement import RowGroup, chunk_owners, on_worker, placed, row_groups
from ..runtime.plan import scored_by_shard
from ..runtime.reads import ChunkRead, chunk_reads, gate, passed
from ..runtime.replicas import replicate
from ..runtime.shards import graph_ref, hold, local_copies, share, token_after
from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from ..summary.rows import Rows, prepare_rows
from ..summary.statistics import MEAN, MEAN_STD, Statistic


def _check_rows(x: np.ndarray, raise_nan: bool, start: float) -> np.ndarray:
    """The finite rows of ``x``; with ``raise_nan`` an error naming the others.

    ``start`` is the chunk's first global row, NaN for a dask DataFrame's
    partition of unknown position.
    """
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        bad = np.flatnonzero(~valid)
        if start != start:  # NaN: a dask DataFrame's partition of unknown position
            raise ValueError(nan_rows_message(bad.size, bad, "a partition of the input "
                                              "(rows counted within it)"))
        raise ValueError(nan_rows_message(bad.size, int(start) + bad, "a chunk of the input"))
    return valid


def _valid_rows(x: np.ndarray, raise_nan: bool, block_info: dict | None) -> np.ndarray:
    start = block_info[0]["array-location"][0][0] if block_info else 0
    return _check_rows(x, raise_nan, start)


def _score_chunk(x: np.ndarray, summary: Any, statistic: Statistic, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return statistic.score(summary, x, _valid_rows(x, raise_nan, block_info))


def _with_blocks(summary: DepthSummary, *blocks: Any) -> DepthSummary:
    return DepthSummary(summary.location, summary.directions, list(blocks), summary.n)


def _loaded(summary: DepthSummary) -> DepthSummary:
    """The summary with every block in this process (blocks held elsewhere loaded)."""
    if not any(is_handle(b) for b in summary.blocks):
        return summary
    return _with_blocks(summary, *[b.load() if is_handle(b) else b for b in summary.blocks])


def _local_summary(summary: Any, token: str) -> tuple[Any, str]:
    """The summary as one graph key, and the token of the tasks that read it.

    Under a local scheduler; blocks held elsewhere are loaded once, by their
    own keys, and other summaries than a :class:`DepthSummary` are broadcast
    (:func:`daskdepth.runtime.client.broadcast`); the token is ``token``.  On
    a cluster the summary is sent once as a task of its own
    (:func:`daskdepth.runtime.shards.share`), not scattered: the workers'
    copies are keys computed from it, so a copy lost with its worker is made
    again.  Its key is new at every call, and so are the keys of the tasks
    that read it: the token returned
    (:func:`~daskdepth.runtime.shards.token_after` says why).
    """
    name = key_name("share", token)
    if active_client() is not None:  # a key of the graph: a lost worker's copy is made again
        ref = share(_loaded(summary) if isinstance(summary, DepthSummary) else summary, name)
        return ref, token_after(token, [ref])
    if not isinstance(summary, DepthSummary):
        return broadcast(summary, name), token
    if not any(is_handle(b) for b in summary.blocks):
        return delayed(summary, name=name, traverse=False), token
    shell = DepthSummary(summary.location, summary.directions, [], summary.n)
    loaded = [graph_ref(b, key_name("load", token, i)) for i, b in enumerate(summary.blocks)]
    return delayed(_with_blocks, pure=True)(delayed(shell, traverse=False), *loaded,
                                            dask_key_name=name), token


# --------------------------------------------------------------------------- sharded


def _prepare_chunk(x: np.ndarray, shell: DepthSummary, raise_nan: bool, start: float) -> Rows:
    x = np.asarray(x, dtype=np.float64)
    return prepare_rows(x, shell.location, _check_rows(x, raise_nan, start))


def _prepare_read(read: ChunkRead, shell: DepthSummary, raise_nan: bool, start: float,
                  *gate: int) -> Rows:
    """A row chunk read here, in its turn (``gate``, see :mod:`daskdepth.runtime.reads`)."""
    return _prepare_chunk(read(), shell, raise_nan, start)


def _score_shard(rows: Rows, directions: np.ndarray, statistic: Statistic, running: Any,
                 *blocks: Any) -> Any:
    """``running`` (or the empty start) with the shard's blocks scored in, in block order.

    The statistic's block methods are those the summary's own methods call, so
    the arithmetic is the same.
    """
    start = statistic.start(rows.x.shape[0]) if running is None else running
    return statistic.add_blocks(rows.x, directions, rows.valid, start, blocks)


def _combine(statistic: Statistic, *parts: Any) -> Any:
    """Partial results of shards combined (sums added, minima lowered: exact, any order)."""
    return statistic.combine(*parts)


def _finish(rows: Rows, part: Any, statistic: Statistic, summary: DepthSummary) -> np.ndarray:
    """Per-row values from the combined partial results, divided as the summary divides."""
    return statistic.finish(summary, part, rows.expand)


def _starts(chunks: tuple[float, ...]) -> list[float]:
    """First global row of each row chunk (NaN after a chunk of unknown length)."""
    return np.concatenate([[0.0], np.cumsum(np.asarray(chunks, dtype=np.float64))[:-1]]).tolist()


def _score_sharded(x: da.Array, summary: DepthSummary, statistic: Statistic,
                   raise_nan: bool, token: str) -> da.Array:
    """Per row chunk: prepare, score against each shard where it is, combine, finish.

    Each chunk is prepared and finished on the worker where it is, and scored
    by the shards of that worker's replica group only
    (:mod:`daskdepth.runtime.replicas`).
    """
    futures = hold(summary.blocks, key_name("load", token))
    token = token_after(token, futures)  # blocks sent anew by hold(): keys of their own
    m, n = summary.directions.shape[0], summary.n
    exact = statistic.exact_in_any_order(m, n)
    copies = replicate(summary.blocks, futures, summary.nbytes, key_name("load", token, "copy"),
                       keep_order=not exact)
    owners = chunk_owners(x, sorted(copies.groups.group_of)) or [None] * x.numblocks[0]
    directions = delayed(summary.directions, name=key_name("share", token, "directions"),
                         traverse=False)
    # Preparing and finishing need only the centring, n, m and the arithmetic: a summary
    # without blocks, as a key of its own (so that a chunk's task and its preparation,
    # with two inputs, are not fused into a task named after both).
    shell = delayed(DepthSummary(summary.location, summary.directions, [], n),
                    name=key_name("share", token, "shell"), traverse=False)
    # Each chunk is read in its turn when its read is cheap and its own: once chunk
    # i - READ_AHEAD is scored, so a worker whose shard lags holds no more chunks.
    reads = chunk_reads(x)
    chunks = reads or list(x.to_delayed(optimize_graph=False).ravel())
    std = statistic.name == MEAN_STD.name
    name = key_name("score", token, "std") if std else key_name("score", token)
    finals: list[Delayed] = []
    tokens: list[list[Delayed]] = []
    for i, (chunk, start) in enumerate(zip(chunks, _starts(x.chunks[0]), strict=True)):
        home = owners[i]
        group = copies.group(home) if home is not None else 0
        with on_worker(home):  # prepared where the chunk is
            if reads is None:
                rows = delayed(_prepare_chunk, pure=True)(
                    chunk, shell, raise_nan, start,
                    dask_key_name=(key_name("dedup", token, "score"), i))
            else:
                rows = delayed(_prepare_read, pure=True)(
                    chunk, shell, raise_nan, start,
                    *gate(tokens, i),
                    dask_key_name=(key_name("dedup", token, "score"), i))
        running: Any = None
        parts = []
        for s, (worker, blocks) in enumerate(copies.shards[group]):
            with on_worker(worker):  # each shard's task runs where its blocks are
                # Exact partial results start empty and are combined in a tree;
                # otherwise each shard adds into the running sum, in block order.
                running = delayed(_score_shard, pure=True)(
                    rows, directions, statistic, None if exact else running,
                    *[copies.futures[group][b] for b in blocks],
                    dask_key_name=(key_name("score", token, "shard"), i, s))
                parts.append(running)
        key = (name, i, 0) if std else (name, i)  # the array's block (i[, 0])
        with on_worker(home):  # combined and finished where the chunk is
            if exact:
                running = tree_reduce(parts, partial(_combine, statistic),
                                      key_name("merge", token, "score", i))
            finals.append(delayed(_finish, pure=True)(rows, running, statistic, shell,
                                                      dask_key_name=key))
            if reads is not None:
                tokens.append([delayed(passed, pure=True)(
                    finals[-1], dask_key_name=(key_name("gate", token, "score"), i))])
    # The tasks keep their layers (and the shard tasks their worker annotations); a
    # layer named as the array, depending on them all, is what later operations on
    # the array (such as writing it) refer to.
    merged = HighLevelGraph.merge(*[f.dask for f in finals])
    layers = {**merged.layers, name: MaterializedLayer({})}
    dependencies = {**merged.dependencies, name: set(merged.layers)}
    graph = HighLevelGraph(layers, dependencies)
    if std:
        return da.Array(graph, name, chunks=(x.chunks[0], (2,)), dtype=np.float64,
                        meta=np.empty((0, 0), dtype=np.float64))
    return da.Array(graph, name, chunks=(x.chunks[0],), dtype=np.float64,
                    meta=np.empty((0,), dtype=np.float64))


# --------------------------------------------------------------------------- copied


def _score_read(chunk: Any, summary: Any, statistic: Statistic, raise_nan: bool,
                start: float) -> np.ndarray:
    """A row chunk (read here if it is a :class:`ChunkRead`) scored with the whole summary."""
    x = np.asarray(chunk() if isinstance(chunk, ChunkRead) else chunk, dtype=np.float64)
    return statistic.score(summary, x, _check_rows(x, raise_nan, start))


def _score_where_rows_are(x: da.Array, ref: Any, statistic: Statistic, raise_nan: bool,
                          token: str,
                          rows: list[RowGroup], reads: list[ChunkRead] | None) -> da.Array:
    """A summary copied to every worker, each row chunk scored on the worker that holds it.

    Dask would place a chunk's task by its inputs' bytes, and the summary
    outweighs a chunk: until every worker holds a copy (dask's memory manager
    drops the extra replicas of a broadcast object in the meantime), chunks
    would travel to the summary.  Here each task reads its worker's own key of
    the summary (:func:`~daskdepth.runtime.shards.local_copies`) and runs where
    its chunk is (a persisted chunk's worker, or where it is read: ``reads``).
    The same function of the same values as the map over the chunks: the same bits.
    """
    local = local_copies([ref], [g.worker for g in rows], key_name("share", token, "at"))
    owner = {i: g.worker for g in rows for i in g.chunks}
    chunks = reads or list(x.to_delayed(optimize_graph=False).ravel())
    std = statistic.name == MEAN_STD.name
    name = key_name("score", token, "std") if std else key_name("score", token)
    finals = []
    for i, (chunk, start) in enumerate(zip(chunks, _starts(x.chunks[0]), strict=True)):
        with on_worker(owner[i]):
            finals.append(delayed(_score_read, pure=True)(
                chunk, local[owner[i]][0], statistic, raise_nan, start,
                dask_key_name=(name, i, 0) if std else (name, i)))
    merged = HighLevelGraph.merge(*[f.dask for f in finals])
    graph = HighLevelGraph({**merged.layers, name: MaterializedLayer({})},
                           {**merged.dependencies, name: set(merged.layers)})
    if std:
        return da.Array(graph, name, chunks=(x.chunks[0], (2,)), dtype=np.float64,
                        meta=np.empty((0, 0), dtype=np.float64))
    return da.Array(graph, name, chunks=(x.chunks[0],), dtype=np.float64,
                    meta=np.empty((0,), dtype=np.float64))


# --------------------------------------------------------------------------- entry point


@overload
def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: Statistic = ..., std: Literal[False] = ...) -> da.Array: ...
@overload
def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: Statistic = ..., std: Literal[True]) -> tuple[da.Array, da.Array]: ...


def score_array(x: da.Array, summary: Any, *, raise_nan: bool, token: str,
                statistic: Statistic = MEAN,
                std: bool = False) -> da.Array | tuple[da.Array, da.Array]:
    """Lazy ``statistic`` of every row of ``x``, with the row chunks of ``x``.

    ``summary`` is a fitted summary (:class:`~daskdepth.summary.depth.DepthSummary`,
    :class:`~daskdepth.summary.mass.MassSummary`, ...) and ``statistic`` the
    :class:`~daskdepth.summary.statistics.Statistic` that scores a chunk with it:
    :data:`~daskdepth.summary.statistics.MEAN` (the mean over directions) or
    :data:`~daskdepth.summary.statistics.MIN` (their minimum, the halfspace
    depth) for a ``DepthSummary``, :data:`~daskdepth.summary.statistics.WHOLE`
    for a summary scored by its own ``depth``.  With ``std``, also the depth's
    Monte Carlo standard error over the directions
    (:meth:`daskdepth.summary.depth.DepthSummary.depth_and_std`): each row
    chunk is scored once into ``(rows, 2)``, and the two columns are returned
    as lazy arrays with the row chunks of ``x``.

    Under a local scheduler, one task per row chunk with the whole summary; on
    a cluster, a depth summary is scored per row chunk by one task per shard
    (see the module docstring).  The same bits either way.
    """
    if std and not statistic.has_std:
        raise ValueError(f"standard errors are defined for the mean over directions, not for "
                         f"{statistic.name!r}")
    if std:
        statistic = MEAN_STD
    # On a cluster, a depth summary too large to copy to every worker (or one whose
    # fit left it sharded there) is scored where its blocks are; a smaller one is
    # copied to every worker, and rows are scored where they are.
    if scored_by_shard(summary, x.shape[0]):
        out = _score_sharded(x, summary, statistic, raise_nan, token)
        # Computed directly, the arrays keep their shard tasks on the shards' workers.
        return (placed(out[:, 0]), placed(out[:, 1])) if std else placed(out)
    ref, token = _local_summary(summary, token)
    reads = chunk_reads(x) if active_client() is not None else None
    rows = (row_groups(x, gated=reads is not None)
            if active_client() is not None and not np.isnan(x.shape[0]) and x.shape[0] else None)
    if rows:  # rows scored where they are, each worker reading its own copy
        # Computed directly, the arrays keep each task on its chunk's worker: a fused
        # graph loses the placement, and an idle worker would steal tasks, fetching
        # the chunk and another worker's copy of the summary (writes make them plain).
        out = _score_where_rows_are(x, ref, statistic, raise_nan, token,
                                    rows, reads)
        return (placed(out[:, 0]), placed(out[:, 1])) if std else placed(out)
    if not std:
        return x.map_blocks(
            _score_chunk, ref, statistic, raise_nan, drop_axis=1, dtype=np.float64,
            meta=np.empty((0,), dtype=np.float64), name=key_name("score", token),
        )
    both = x.map_blocks(
        _score_chunk, ref, statistic, raise_nan, chunks=(x.chunks[0], (2,)), dtype=np.float64,
        meta=np.empty((0, 0), dtype=np.float64), name=key_name("score", token, "std"),
    )
    return both[:, 0], both[:, 1]
