"""Row chunks read in turn: a pass reads chunk ``i`` once its tasks of chunk ``i - READ_AHEAD`` ran.

A sharded pass sends every row chunk to each worker holding blocks, and a
chunk stays in memory until the slowest shard has processed it.  Dask reads
the chunks (root tasks) whenever a worker has a free slot, so a worker whose
shard is slower collects chunks it has not reached yet, several of them next
to its share of the summary.  Gating the chunk's *preparation* does not help: the
read, a task of its own, would still run ahead and its result wait.

So the pass reads each chunk inside its own preparation task, which waits for
a tiny token of each shard's task of chunk ``i - READ_AHEAD``: at most
``READ_AHEAD`` chunks per worker are in memory (one processed, one ready).
The tasks that make a chunk are run in that task (:class:`ChunkRead`) only
when they are a cheap, self-contained read: a few tasks (a store read, a
random draw) that no other chunk shares.  Chunks of an array persisted on the
cluster, held in this process, or computed from tasks that several chunks
share (a rechunk) are left to dask as before (:func:`chunk_reads` returns
None).
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
from dask.core import flatten
from dask.sizeof import sizeof

#: Row chunks a gated pass may hold per worker: one being processed, one ready.
READ_AHEAD = 2

#: Most tasks that make one chunk for it to be read inside another task.
MAX_READ_TASKS = 8

#: Largest data a chunk's read may carry in its graph (a store's handle, a seed).
MAX_READ_BYTES = 1 << 20


class ChunkRead:
    """The tasks that make one chunk of an array, run inside the task that reads it.

    Calling it computes the chunk with the synchronous scheduler, in the task
    that calls it (on a worker: no other task holds the chunk meanwhile).
    """

    __slots__ = ("graph", "key")

    def __init__(self, graph: dict, key: Any) -> None:
        self.graph = graph
        self.key = key

    def __call__(self) -> Any:
        return dask.get(self.graph, self.key)


def chunk_reads(x: da.Array) -> list[ChunkRead] | None:
    """Per row chunk of ``x`` (one column chunk), the tasks that read it; None if not cheap.

    None when a chunk is not made by at most :data:`MAX_READ_TASKS` tasks of
    its own (data in the graph over :data:`MAX_READ_BYTES`, a chunk persisted
    on the cluster, a task shared with another chunk) or when this dask has
    no task-spec graph (older releases): the pass then reads the chunks as
    dask schedules them.
    """
    try:
        from dask._task_spec import DataNode, GraphNode
    except ImportError:  # pragma: no cover - dask releases before the task spec
        return None
    keys = list(flatten(x.__dask_keys__()))
    try:
        graph = dict(x.__dask_optimize__(x.__dask_graph__(), keys))
    except Exception:  # noqa: BLE001 - any graph this cannot analyse is read as before
        return None
    owner: dict[Any, int] = {}
    reads = []
    for i, key in enumerate(keys):
        part: dict[Any, Any] = {}
        todo = [key]
        while todo:
            k = todo.pop()
            if k in part:
                continue
            node = graph.get(k)
            if not isinstance(node, GraphNode) or len(part) >= MAX_READ_TASKS:
                return None  # persisted (a future), foreign, or too many tasks
            if isinstance(node, DataNode):
                if sizeof(node.value) > MAX_READ_BYTES:
                    return None  # the chunk's data is in the graph: nothing to gate
            elif owner.setdefault(k, i) != i:
                return None  # a task shared with another chunk would run twice
            part[k] = node
            # The node's own dependencies: a persisted chunk's key is not in the graph.
            todo.extend(node.dependencies)
        reads.append(ChunkRead(part, key))
    return reads


def passed(*_: Any) -> int:
    """A gate token: the task it follows has run (its value is not read)."""
    return 0


def gate(tokens: list[list[Any]], i: int) -> list[Any]:
    """The tokens chunk ``i``'s read waits for: those of chunk ``i - READ_AHEAD``.

    ``tokens[k]`` holds the :func:`passed` tasks of chunk ``k`` (one per task
    that must have run before a later chunk is read).

    Examples
    --------
    >>> [gate([["a"], ["b"], ["c"]], i) for i in range(3)]
    [[], [], ['a']]
    """
    return tokens[i - READ_AHEAD] if i >= READ_AHEAD else []
