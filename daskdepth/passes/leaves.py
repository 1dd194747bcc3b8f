"""The leaf passes: exact leaf counts (histogram) and the values of chosen leaves (refine).

Both are one task per (row chunk, direction block), reduced over the row
chunks of each block.  Each row chunk is centred and its duplicate rows merged
once, by a ``deduplicate`` task that every block's task of that chunk reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name
from ..summary.leaves import BlockLeaves, LeafCounts
from ..summary.rows import Rows, prepare_rows


class BlockTask(NamedTuple):
    """One direction block of a leaf pass: its directions and its leaves.

    ``leaves`` is a :class:`BlockLeaves`, a Delayed one or a scattered Future
    (see :func:`daskdepth.runtime.client.broadcast`): the tasks read it by reference.
    """

    j0: int
    j1: int
    leaves: Any


class Collected(NamedTuple):
    """The values of the wanted leaves of a block: leaf index, projection and weight."""

    leaf: np.ndarray
    value: np.ndarray
    weight: np.ndarray


class Wanted(NamedTuple):
    """Which leaves of a block the refine pass collects, and how many rows they hold."""

    mask: np.ndarray
    rows: int
    n: int


def _deduplicate_chunk(x: np.ndarray, location: np.ndarray) -> Rows:
    return prepare_rows(x, location, keep_inverse=False)


def _histogram_chunk(rows: Rows, leaves: BlockLeaves, v: np.ndarray) -> LeafCounts:
    return leaves.accumulate(rows, v, LeafCounts.empty(leaves.n_leaves, leaves.mb))


def _merge_counts(*parts: LeafCounts) -> LeafCounts:
    return LeafCounts.merged(list(parts))


def _collect_chunk(rows: Rows, leaves: BlockLeaves, v: np.ndarray,
                   wanted: Wanted) -> Collected:
    # The chunk's share of the wanted values, with room for fluctuations.
    expected = int(1.25 * wanted.rows * rows.n_rows / max(wanted.n, 1)) + 1024
    return Collected(*leaves.collect(rows, v, wanted.mask, expected))


def _merge_collected(*parts: Collected) -> Collected:
    return Collected(*(np.concatenate([p[i] for p in parts]) for i in range(3)))


def _block_pass(x: da.Array, location: np.ndarray, directions: np.ndarray,
                blocks: Sequence[BlockTask], chunk_fn: Callable[..., Any],
                merge_fn: Callable[..., Any], extra: Sequence[Any] | None, token: str,
                verb: str) -> list[Delayed]:
    """One ``verb`` task per (row chunk, block), reduced over the row chunks per block."""
    chunks, _ = row_blocks(x)
    rows = [
        delayed(_deduplicate_chunk, pure=True)(c, location,
                                               dask_key_name=(key_name("dedup", token), i))
        for i, c in enumerate(chunks)
    ]
    outs = []
    for b, block in enumerate(blocks):
        v = np.ascontiguousarray(directions[block.j0:block.j1])
        more = (extra[b],) if extra is not None else ()
        outs.append(reduce_chunks(rows, chunk_fn, merge_fn, key=(key_name(verb, token), b),
                                  merge_key=key_name("merge", token, verb, b),
                                  args=(block.leaves, v, *more)))
    return outs


def histogram_graph(x: da.Array, location: np.ndarray, directions: np.ndarray,
                    blocks: Sequence[BlockTask], *, token: str) -> list[Delayed]:
    """Delayed exact leaf counts (and direction extremes) of all rows, per block.

    Counts merge by sum and extremes by min / max, which is exact and
    independent of the chunking and of the reduction order.
    """
    return _block_pass(x, location, directions, blocks, _histogram_chunk, _merge_counts, None,
                       token, "count")


def collect_graph(x: da.Array, location: np.ndarray, directions: np.ndarray,
                  blocks: Sequence[BlockTask], wanted: Sequence[Wanted], *,
                  token: str) -> list[Delayed]:
    """Delayed :class:`Collected` values of the rows in the wanted leaves, per block."""
    return _block_pass(x, location, directions, blocks, _collect_chunk, _merge_collected,
                       wanted, token, "hone")
