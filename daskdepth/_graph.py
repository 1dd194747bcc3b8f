"""Dask graph construction: the data passes of fitting and the scoring map.

Every key is named ``daskdepth-<verb>-<token>`` (``moments``, ``merge``,
``pilot``, ``deduplicate``, ``histogram``, ``finish``, ``refine``, ``split``,
``score``), so the dashboard's task stream and progress bars say which phase a
cluster is in.  Pure computations live in
:mod:`daskdepth._kernels` and :mod:`daskdepth._summary`; this module only
wires them together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from . import _kernels as K
from ._rows import Rows, prepare_rows
from ._summary import BlockSummary, DepthSummary, LeafStats

#: How many offending row indices an error message lists.
MAX_BAD_ROWS = 5

_LOCAL_SCHEDULERS = {"threads", "threading", "sync", "synchronous", "single-threaded",
                     "processes", "multiprocessing"}


# --------------------------------------------------------------------------- helpers


def active_client() -> Any | None:
    """The distributed Client that will run computations, if any."""
    if dask.config.get("scheduler", None) in _LOCAL_SCHEDULERS:
        return None
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Group the tasks submitted inside under the span ``("daskdepth", name)``."""
    try:
        from distributed import span
    except ImportError:  # pragma: no cover
        yield
        return
    with span("daskdepth", name):
        yield


def broadcast(obj: Any, name: str) -> Any:
    """Make a large read-only object available to every task that needs it.

    On a distributed cluster it is scattered once to every worker; otherwise it
    becomes a single graph key, shared by reference by the local schedulers.
    """
    client = active_client()
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, name=name, traverse=False)


def _split_every() -> int:
    value = dask.config.get("split_every", None)
    if isinstance(value, dict) or not value:
        return 4
    return max(2, int(value))


def tree_reduce(parts: Sequence[Delayed], combine: Callable[..., Any], name: str,
                split_every: int | None = None) -> Delayed:
    """Reduce ``parts`` left to right in a tree of ``combine`` calls."""
    k = split_every or _split_every()
    parts = list(parts)
    level = 0
    while len(parts) > 1:
        parts = [
            delayed(combine, pure=True)(*parts[i:i + k], dask_key_name=(name, level, j))
            for j, i in enumerate(range(0, len(parts), k))
        ]
        level += 1
    return parts[0]


def reduce_chunks(chunks: Sequence[Delayed], chunk_fn: Callable[..., Any],
                  merge_fn: Callable[..., Any], *, key: tuple, merge_key: str,
                  args: Sequence[Any] = (), starts: Sequence[int] | None = None) -> Delayed:
    """One ``chunk_fn`` task per row chunk, reduced in a tree of ``merge_fn`` calls.

    Task ``i`` computes ``chunk_fn(chunks[i], *args)``, or with ``starts``
    ``chunk_fn(chunks[i], starts[i], *args)`` (the chunk's first global row),
    under the key ``(*key, i)``.
    """
    parts = [
        delayed(chunk_fn, pure=True)(c, *(() if starts is None else (starts[i],)), *args,
                                     dask_key_name=(*key, i))
        for i, c in enumerate(chunks)
    ]
    return tree_reduce(parts, merge_fn, merge_key)


def row_blocks(x: da.Array) -> tuple[list[Delayed], list[int]]:
    """One Delayed per row chunk of a 2-D array with a single column chunk."""
    blocks = list(x.to_delayed().ravel())
    starts = np.concatenate([[0], np.cumsum(x.chunks[0])[:-1]]).astype(int).tolist()
    return blocks, starts


# --------------------------------------------------------------------------- moments pass


@dataclass
class ChunkSummary:
    """Moments of the finite rows, non-finite rows and a Bernoulli row sample."""

    n: int
    mean: np.ndarray
    scatter: np.ndarray
    n_bad: int
    bad_rows: np.ndarray
    sample: np.ndarray
    total: np.ndarray  # column sums as double-double (2, d)

    @property
    def exact_mean(self) -> np.ndarray:
        """Mean from the compensated sums: the same bits however the rows are chunked."""
        return (self.total[0] + self.total[1]) / max(self.n, 1)


def _moments_chunk(x: np.ndarray, row_start: int, seed: int, p: float) -> ChunkSummary:
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    n, mean, scatter = K.chunk_moments(x, finite)
    bad = np.flatnonzero(~finite)
    keep = finite
    if p < 1.0:
        keep = finite & (K.row_uniforms(row_start, x.shape[0], seed) < p)
    return ChunkSummary(n, mean, scatter, int(bad.size), row_start + bad[:MAX_BAD_ROWS],
                        x[keep], K.column_sums_dd(x, finite))


def _moments_merge(*parts: ChunkSummary) -> ChunkSummary:
    out = parts[0]
    for b in parts[1:]:
        n, mean, scatter = K.merge_moments((out.n, out.mean, out.scatter),
                                           (b.n, b.mean, b.scatter))
        out = ChunkSummary(
            n, mean, scatter, out.n_bad + b.n_bad,
            np.concatenate([out.bad_rows, b.bad_rows])[:MAX_BAD_ROWS],
            np.concatenate([out.sample, b.sample]), K.add_dd(out.total, b.total),
        )
    return out


def moments_pass(x: da.Array, *, seed: int, sample_size: int, token: str) -> ChunkSummary:
    """One pass: count, mean, scatter, non-finite rows and a row sample."""
    p = min(1.0, sample_size / max(1, x.shape[0]))
    blocks, starts = row_blocks(x)
    out = reduce_chunks(blocks, _moments_chunk, _moments_merge,
                        key=(f"daskdepth-moments-{token}",), merge_key=f"daskdepth-merge-{token}",
                        args=(seed, p), starts=starts)
    with phase("moments"):
        (result,) = dask.compute(out)
    return result


# --------------------------------------------------------------------------- histogram passes


def _rows_chunk(x: np.ndarray, location: np.ndarray) -> Rows:
    return prepare_rows(x, location, keep_inverse=False)


def _histogram_chunk(rows: Rows, tree: BlockSummary, v: np.ndarray) -> LeafStats:
    return tree.accumulate(rows, v, LeafStats.empty(tree.n_leaves, tree.mb))


def _stats_merge(*parts: LeafStats) -> LeafStats:
    return LeafStats.merged(list(parts))


def _collect_chunk(rows: Rows, tree: BlockSummary, v: np.ndarray, wanted: np.ndarray,
                   wanted_rows: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # The chunk's share of the wanted values, with room for fluctuations.
    expected = int(1.25 * wanted_rows * rows.n_rows / max(n, 1)) + 1024
    return tree.collect(rows, v, wanted, expected)


def _collect_merge(*parts: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))


def _block_pass(x: da.Array, location: np.ndarray, directions: np.ndarray,
                blocks: Sequence[tuple[int, int, Any]], chunk_fn: Callable[..., Any],
                merge_fn: Callable[..., Any], extra: Sequence[Sequence[Any]] | None, token: str,
                verb: str) -> list[Delayed]:
    """One task per (row chunk, direction block), reduced over row chunks per block.

    ``blocks`` holds ``(j0, j1, tree)`` where ``tree`` is a :class:`BlockSummary`,
    a Delayed one built by earlier tasks of the same graph, or a scattered Future.
    Each row chunk is centred and its duplicate rows merged once, by a task
    that every direction block's task of that chunk reads.
    """
    chunks, _ = row_blocks(x)
    row_parts = [
        delayed(_rows_chunk, pure=True)(c, location,
                                        dask_key_name=(f"daskdepth-deduplicate-{token}", i))
        for i, c in enumerate(chunks)
    ]
    outs = []
    for b, (j0, j1, tree) in enumerate(blocks):
        # Summaries are broadcast once; Delayed ones and Futures are already references.
        ref = (broadcast(tree, f"daskdepth-tree-{token}-{b}")
               if isinstance(tree, BlockSummary) else tree)
        v = np.ascontiguousarray(directions[j0:j1])
        more = tuple(extra[b]) if extra is not None else ()
        outs.append(reduce_chunks(row_parts, chunk_fn, merge_fn,
                                  key=(f"daskdepth-{verb}-{token}", b),
                                  merge_key=f"daskdepth-merge-{token}-{b}",
                                  args=(ref, v, *more)))
    return outs


def histogram_graph(x: da.Array, location: np.ndarray, directions: np.ndarray,
                    blocks: Sequence[tuple[int, int, Any]], *, token: str) -> list[Delayed]:
    """Delayed exact leaf counts (and direction extremes) of all rows, per block.

    Statistics merge by sum / min / max, which is exact and independent of the
    chunking and of the reduction order.
    """
    return _block_pass(x, location, directions, blocks, _histogram_chunk, _stats_merge, None,
                       token, "histogram")


def collect_graph(x: da.Array, location: np.ndarray, directions: np.ndarray,
                  blocks: Sequence[tuple[int, int, Any]],
                  wanted: Sequence[tuple[np.ndarray, int, int]], *,
                  token: str) -> list[Delayed]:
    """Delayed (leaf, projection, weight) of the rows in the wanted leaves, per block.

    ``wanted`` holds, per block, the leaf mask, the rows in those leaves and the
    total row count (to size each chunk's output).
    """
    return _block_pass(x, location, directions, blocks, _collect_chunk, _collect_merge, wanted,
                       token, "refine")


# --------------------------------------------------------------------------- scoring


def _score_chunk(x: np.ndarray, summary: DepthSummary, raise_nan: bool,
                 block_info: dict | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    valid = np.isfinite(x).all(axis=1)
    if raise_nan and not valid.all():
        start = block_info[0]["array-location"][0][0] if block_info else 0
        bad = np.flatnonzero(~valid)
        rows = ", ".join(str(start + i) for i in bad[:MAX_BAD_ROWS])
        more = ", ..." if bad.size > MAX_BAD_ROWS else ""
        raise ValueError(
            f"input has {bad.size} rows with NaN or inf values in this chunk (rows [{rows}{more}]);"
            " drop them or pass nan_policy='omit'"
        )
    return summary.depth(x, valid)


def score_array(x: da.Array, summary: DepthSummary, *, raise_nan: bool, token: str) -> da.Array:
    """Lazy depth of every row of ``x``: one task per row chunk."""
    ref = broadcast(summary, f"daskdepth-summary-{token}")
    return x.map_blocks(
        _score_chunk, ref, raise_nan, drop_axis=1, dtype=np.float64,
        meta=np.empty((0,), dtype=np.float64), name=f"daskdepth-score-{token}",
    )
