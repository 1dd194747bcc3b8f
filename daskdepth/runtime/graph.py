"""Graph building blocks: key names, per-chunk tasks and tree reductions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed


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
