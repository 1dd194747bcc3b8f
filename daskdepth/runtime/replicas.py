"""Replica groups: a sharded summary held whole by each group of ``k`` workers.

A depth summary too large to copy to every worker
(:func:`daskdepth.runtime.memory.shard_summary`) is sharded by direction
block.  Spread over all ``W`` workers, every row chunk would visit every
worker: about ``W`` times the data moved per pass.  Here the summary is
sharded over the fewest workers ``k`` whose copy budget holds it
(:func:`replica_width`) and held by ``W // k`` groups of ``k`` workers each
(:func:`replica_groups`); a row chunk is processed by the group of the worker
that holds it, so about ``k`` times the data moves per pass whatever ``W``.
``k = 1`` is the summary copied to every worker; ``k = W`` is one group, the
summary spread over all workers.

Each block stays where it is in the group that holds it already, and the
other groups get a copy on the worker of the same rank
(:func:`block_ranks`): a task reading the block's future on that worker, so
that a copy lost with its worker is made again from the block, and the block
from its own lineage.  Copies are kept with the block
(:attr:`daskdepth.runtime.shards.ClusterBlock.copies`), so later passes and
scorings of the same model move no block; a kept block is read through a copy
on its own worker too (moving nothing), which no memory manager drops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from dask.delayed import delayed
from distributed import Future

from . import memory as budget
from .placement import Shard, keep_placed, on_worker, shards_of, spread_runs, worker_threads
from .shards import ClusterBlock, _same


def replica_width(nbytes: int, workers: int, memory: budget.WorkerMemory | None = None) -> int:
    """``k``: the fewest workers whose shares of a summary of ``nbytes`` fit the copy budget.

    The budget is the share of a worker's memory up to which a summary is
    copied whole (:data:`daskdepth.runtime.memory.REPLICATE_SHARE`), so that
    ``k = 1`` exactly when the summary is copied to every worker.  At most
    ``workers``.

    Examples
    --------
    >>> one_gib = budget.WorkerMemory(limit=2**30, nthreads=1, workers=8)
    >>> [replica_width(s * 2**20, 8, one_gib) for s in (10, 64, 65, 200, 4000)]
    [1, 1, 2, 4, 8]
    """
    mem = memory or budget.worker_memory()
    room = max(1, int(budget.REPLICATE_SHARE * mem.limit))
    return max(1, min(int(workers), -(-int(nbytes) // room)))


class ReplicaGroups(NamedTuple):
    """Workers in groups of ``k``, each group holding the whole summary.

    ``members[g]`` are the workers of group ``g`` that hold its blocks, by
    rank; ``group_of`` maps every worker to the group that processes the rows
    it holds (workers beyond ``(W // k) * k`` hold no block and send their
    rows to a group in turn).
    """

    members: list[list[str]]
    group_of: dict[str, int]

    @property
    def width(self) -> int:
        return len(self.members[0])


def replica_groups(workers: Sequence[str], width: int) -> ReplicaGroups:
    """``W // k`` groups of ``k = width`` consecutive workers; the rest attached in turn.

    Examples
    --------
    >>> g = replica_groups(["a", "b", "c", "d", "e"], 2)
    >>> g.members, g.group_of["e"]
    ([['a', 'b'], ['c', 'd']], 0)
    >>> replica_groups(["a", "b", "c"], 1).members
    [['a'], ['b'], ['c']]
    """
    workers = list(workers)
    k = max(1, min(int(width), len(workers)))
    count = max(1, len(workers) // k)
    members = [workers[g * k:(g + 1) * k] for g in range(count)]
    group_of = {w: g for g, ws in enumerate(members) for w in ws}
    for j, w in enumerate(workers[count * k:]):
        group_of[w] = j % count
    return ReplicaGroups(members, group_of)


def block_ranks(holders: Sequence[str], workers: Sequence[str], width: int) -> list[int]:
    """The rank (member ``0 .. k - 1`` of every group) that holds each block.

    A block held by a worker of a group keeps that worker's rank, so that its
    group needs no copy of it; blocks held elsewhere (a worker outside the
    groups, or unknown) are spread over the ranks in contiguous runs.  Blocks
    spread evenly over all workers thus give each rank an even share.

    Examples
    --------
    >>> block_ranks(["a", "a", "b", "c", "d", "d"], ["a", "b", "c", "d"], 2)
    [0, 0, 1, 0, 1, 1]
    >>> block_ranks(["a", "b", "c", "c"], ["a", "b", "c"], 2)
    [0, 1, 0, 1]
    """
    index = {w: i for i, w in enumerate(workers)}
    k = max(1, min(int(width), len(workers)))
    inside = len(workers) // k * k
    ranks = [-1] * len(holders)
    loose = []
    for b, h in enumerate(holders):
        i = index.get(h)
        if i is not None and i < inside:
            ranks[b] = i % k
        else:
            loose.append(b)
    for r, run in enumerate(spread_runs(len(loose), k)):
        for j in run:
            ranks[loose[j]] = r
    return ranks


class Replicas(NamedTuple):
    """Where a pass reads a sharded summary: per group, each block's future and the shards."""

    groups: ReplicaGroups
    futures: list[list[Future]]
    shards: list[list[Shard]]

    def group(self, worker: str) -> int:
        """The group that processes the rows held by ``worker`` (group 0 if unknown)."""
        return self.groups.group_of.get(worker, 0)


def _holder(block: Any, future: Future, who: dict[Any, Any], workers: Sequence[str]) -> str:
    """The worker that sets a block's rank: where it was first placed, while that worker lives.

    A copy made from a block leaves a replica of the block on the copy's
    worker, and dask's memory manager then keeps either replica: the rank
    must not follow it, or each scoring would lay the groups out anew.
    """
    held = sorted(who.get(future.key) or ())
    if not isinstance(block, ClusterBlock) or block.future is not future:
        return held[0] if held else "?"
    if block.home not in workers:
        block.home = held[0] if held else None
    return block.home or "?"


def replicate(blocks: Sequence[Any], futures: Sequence[Future], nbytes: int, name: str, *,
              keep_order: bool, width: int | None = None) -> Replicas:
    """The blocks (futures on the cluster) held whole by each replica group.

    ``width`` defaults to :func:`replica_width` of ``nbytes``.  Copies are
    tasks named ``(name, group, block)`` placed on their worker; those of a
    :class:`~daskdepth.runtime.shards.ClusterBlock` are kept with it and
    reused.  ``keep_order`` as for :func:`~daskdepth.runtime.placement.shards`.
    """
    client = futures[0].client
    workers = list(worker_threads(client))
    k = width if width is not None else replica_width(nbytes, len(workers))
    groups = replica_groups(workers, k)
    who = client.who_has(list(futures))
    holders = [_holder(block, f, who, workers) for block, f in zip(blocks, futures, strict=True)]
    ranks = block_ranks(holders, workers, groups.width)
    out: list[list[Any]] = [[None] * len(futures) for _ in groups.members]
    todo = []
    for b, (block, f) in enumerate(zip(blocks, futures, strict=True)):
        cache = (block.copies if isinstance(block, ClusterBlock) and block.future is f
                 else None)
        if cache is not None:
            for gone in set(cache) - set(workers):
                del cache[gone]
        for g, members in enumerate(groups.members):
            target = members[ranks[b]]
            # A kept block is read from copies only, its own worker's too (a copy there
            # moves nothing): the memory manager may drop the block's replica on its
            # worker and keep the one a copy's worker fetched.
            if target == holders[b] and cache is None:
                out[g][b] = f
            elif cache is not None and target in cache:
                out[g][b] = cache[target]
            else:
                with on_worker(target):
                    todo.append((g, b, cache, target,
                                 delayed(_same, pure=True)(f, dask_key_name=(name, g, b))))
    if todo:
        keep_placed(client)
        for (g, b, cache, target, _), copy in zip(todo, client.compute([t[-1] for t in todo]),
                                                  strict=True):
            out[g][b] = copy
            if cache is not None:
                cache[target] = copy
    shards = [shards_of([members[r] for r in ranks], keep_order=keep_order)
              for members in groups.members]
    return Replicas(groups, out, shards)


def pass_width(data_bytes: int, pass_bytes: int, workers: int,
               memory: budget.WorkerMemory | None = None) -> int:
    """``k`` for one data pass of a sharded fit: workers per replica group, ``W`` for none.

    A fit's pass over blocks sharded on ``W`` workers sends every row chunk to
    every worker holding blocks: about ``(W - 1) x data_bytes`` moved.  In
    ``G = W // k`` replica groups a chunk visits the ``k`` workers of its
    group only, ``(k - 1) x data_bytes``, but each of the ``G - 1`` other
    groups first gets a copy of the pass's blocks and sends back its partial
    results, about ``2 x pass_bytes`` per group.  The rows win as soon as the
    data outweighs the blocks (the blocks' size does not grow with the rows:
    about ``1 / tol`` leaves per direction), so that at 10^9 rows a pass moves
    about ``k x data`` whatever ``W``.  ``k`` is at least the width whose
    shares of the blocks and their partials (``2 x pass_bytes``) fit the copy
    budget (:func:`replica_width`).

    Examples
    --------
    >>> one_gib = budget.WorkerMemory(limit=2**30, nthreads=1, workers=8)
    >>> MiB = 2**20
    >>> pass_width(60 * MiB, 300 * MiB, 8, one_gib)  # small data: rows travel
    8
    >>> pass_width(8_000 * MiB, 60 * MiB, 8, one_gib)  # large data: groups of two
    2
    >>> pass_width(8_000 * MiB, 10 * MiB, 8, one_gib)  # blocks fit one worker's budget
    1
    """
    workers = max(1, int(workers))
    least = replica_width(2 * pass_bytes, workers, memory)
    best, cost = workers, None
    for groups in range(1, workers // least + 1):
        k = workers // groups
        moved = (k - 1) * data_bytes + 2 * (groups - 1) * pass_bytes
        if cost is None or moved < cost:
            best, cost = k, moved
    return best
