"""The leaf passes: exact leaf counts (histogram) and the values of chosen leaves (refine).

Both are one task per (row chunk, group of direction blocks), reduced over the
row chunks of each group.  Each row chunk is centred and its duplicate rows
merged once, by a ``deduplicate`` task that every group's task of that chunk
reads.  On the local schedulers each block is a group of its own; on a cluster
a group is the blocks one worker holds (:mod:`daskdepth.runtime.shards`), so the
row chunks travel to the blocks and the blocks stay where they are, and each
chunk is read in its turn (:mod:`daskdepth.runtime.reads`): a worker whose
shard lags holds no more chunks than the others.  Which of these ways a pass
runs (or folded where the rows are, or in replica groups) is the pass's
:class:`~daskdepth.runtime.plan.PassPlan`, read in one place (:func:`leaf_pass`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from ..runtime.graph import row_blocks, tree_reduce
from ..runtime.keys import key_name
from ..runtime.placement import RowGroup, Shard, fold_homes, on_worker
from ..runtime.plan import PassPlan, Replicated
from ..runtime.reads import ChunkRead, gate, passed
from ..summary.leaves import BlockLeaves, LeafCounts
from ..summary.nbytes import ArrayRecord
from ..summary.rows import Rows, prepare_rows


class BlockTask(NamedTuple):
    """One direction block of a leaf pass: its directions and its leaves.

    ``leaves`` is a :class:`BlockLeaves`, a Delayed one or the Future of one
    held on the cluster (see :func:`daskdepth.runtime.shards.graph_ref`): the
    tasks read it by reference.
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


def _deduplicate_read(read: ChunkRead, location: np.ndarray, *gate: int) -> Rows:
    """A row chunk read here (in its turn: ``gate``, see :mod:`daskdepth.runtime.reads`)."""
    return prepare_rows(read(), location, keep_inverse=False)


def _prepared(i: int, k: int, chunks: list[Any] | None, reads: list[ChunkRead] | None,
              tokens: list[list[Delayed]], location: np.ndarray, key: tuple) -> Delayed:
    """Row chunk ``i`` centred and its duplicates merged, as the ``k``-th chunk of a chain.

    From ``chunks`` (its graph), or without them read in its turn: once the
    chain's tokens of the chunk :data:`~daskdepth.runtime.reads.READ_AHEAD`
    before have run (:func:`~daskdepth.runtime.reads.gate`).
    """
    if reads is None:
        return delayed(_deduplicate_chunk, pure=True)(chunks[i], location, dask_key_name=key)
    return delayed(_deduplicate_read, pure=True)(reads[i], location, *gate(tokens, k),
                                                 dask_key_name=key)


def _histogram_chunk(rows: Rows, leaves: BlockLeaves, v: np.ndarray) -> LeafCounts:
    return leaves.accumulate(rows, v, LeafCounts.empty(leaves.n_leaves, leaves.mb))


def _merge_counts(*parts: LeafCounts) -> LeafCounts:
    return LeafCounts.merged(list(parts))


def _count_into(rows: Rows, leaves: BlockLeaves, v: np.ndarray, into: LeafCounts | None,
                chunk: int, share: float = 1.0) -> LeafCounts:
    """Row chunk ``chunk`` counted into ``into`` in place (a chained histogram's link).

    A chain's counts are read by its next link only, so adding in place holds one
    copy of a shard's counts instead of two (the counts of a worker's blocks are
    its largest object while it counts).  ``upto`` makes a link run again on the
    same counts add its chunk once.  ``share`` (of the rows the chain adds) is not
    used: counts have one size.
    """
    if into is None:
        into = LeafCounts.empty(leaves.n_leaves, leaves.mb)
    if into.upto < chunk:
        leaves.accumulate(rows, v, into)
        into.upto = chunk
    return into


def _collect_chunk(rows: Rows, leaves: BlockLeaves, v: np.ndarray,
                   wanted: Wanted) -> Collected:
    # The chunk's share of the wanted values, with room for fluctuations.
    expected = int(1.25 * wanted.rows * rows.n_rows / max(wanted.n, 1)) + 1024
    return Collected(*leaves.collect(rows, v, wanted.mask, expected))


def _merge_collected(*parts: Collected) -> Collected:
    return Collected(*(np.concatenate([p[i] for p in parts]) for i in range(3)))


@dataclass
class CollectBuffer(ArrayRecord):
    """A chained refinement's values of one block, filled in place, chunk after chunk.

    Sized once for all the values of the wanted leaves (their counts are
    known: at most one value per row and direction), so that each link copies
    its chunk's values in, instead of concatenating everything collected so
    far (twice the memory at every link).  A chain over part of the rows (a
    folded pass) starts at its share, with room, and grows if it must.
    """

    leaf: np.ndarray
    value: np.ndarray
    weight: np.ndarray
    size: int = 0
    #: The last row chunk added (-1: none): a link run again adds its chunk once.
    upto: int = -1

    @classmethod
    def empty(cls, capacity: int) -> CollectBuffer:
        return cls(np.empty(capacity, dtype=np.int64), np.empty(capacity), np.empty(capacity))

    def add(self, part: Collected) -> None:
        """Append ``part`` (growing the buffers if the capacity is exceeded)."""
        k, s = part.leaf.size, self.size
        if s + k > self.leaf.size:  # a chain's share of the values exceeded its estimate
            grow = max(s + k, 2 * self.leaf.size)
            for name in ("leaf", "value", "weight"):
                old = getattr(self, name)
                new = np.empty(grow, dtype=old.dtype)
                new[:s] = old[:s]
                setattr(self, name, new)
        self.leaf[s:s + k] = part.leaf
        self.value[s:s + k] = part.value
        self.weight[s:s + k] = part.weight
        self.size = s + k

    def collected(self) -> Collected:
        """The values added, in row-chunk order (views of the buffers)."""
        return Collected(self.leaf[:self.size], self.value[:self.size], self.weight[:self.size])


def _collect_into(rows: Rows, leaves: BlockLeaves, v: np.ndarray, wanted: Wanted,
                  into: CollectBuffer | None, chunk: int, share: float = 1.0) -> CollectBuffer:
    """Row chunk ``chunk``'s values of the wanted leaves added to ``into`` (a chained link).

    ``share``: the part of all rows the chain adds, for its buffers' first size.
    """
    if into is None:
        cap = wanted.rows if share >= 1 else int(1.25 * share * wanted.rows) + 1024
        into = CollectBuffer.empty(min(wanted.rows, cap))
    if into.upto < chunk:
        into.add(_collect_chunk(rows, leaves, v, wanted))
        into.upto = chunk
    return into


class _InPlaceLink:
    """A chained task: a row chunk added in place to each of the shard's partial results.

    ``add`` is :func:`_count_into` (histogram) or :func:`_collect_into`
    (refinement, with the block's :class:`Wanted` from ``extras``); ``share``
    the part of all rows the chain adds (the first size of its buffers).
    """

    def __init__(self, add: Callable[..., Any], share: float = 1.0) -> None:
        self.add = add
        self.share = share

    def __call__(self, rows: Rows, directions: np.ndarray, ranges: list[tuple[int, int]],
                 previous: tuple | None, chunk: int, extras: tuple | None,
                 *leaves: Any) -> tuple:
        return tuple(
            self.add(rows, block, np.ascontiguousarray(directions[j0:j1]),
                     *(() if extras is None else (extras[k],)),
                     None if previous is None else previous[k], chunk, share=self.share)
            for k, (block, (j0, j1)) in enumerate(zip(leaves, ranges, strict=True)))


class _ShardTask:
    """One task of a leaf pass: a row chunk against a shard's blocks, in block order.

    Returns a tuple with one partial result per block; given ``previous`` (the
    tuple of the shard's previous row chunks, in a chained pass) each partial
    is merged into it.
    """

    def __init__(self, chunk_fn: Callable[..., Any], merge_fn: Callable[..., Any]) -> None:
        self.chunk_fn = chunk_fn
        self.merge_fn = merge_fn

    def __call__(self, rows: Rows, directions: np.ndarray, ranges: list[tuple[int, int]],
                 previous: tuple | None, extras: tuple | None, *leaves: Any) -> tuple:
        out = []
        for k, (block, (j0, j1)) in enumerate(zip(leaves, ranges, strict=True)):
            more = (extras[k],) if extras is not None else ()
            part = self.chunk_fn(rows, block, np.ascontiguousarray(directions[j0:j1]), *more)
            out.append(part if previous is None else self.merge_fn(previous[k], part))
        return tuple(out)


def _merge_tuples(merge_fn: Callable[..., Any], *parts: tuple) -> tuple:
    return tuple(merge_fn(*items) for items in zip(*parts, strict=True))


class _GroupInputs(NamedTuple):
    """What every task of one group reads besides its row chunk."""

    ranges: list[tuple[int, int]]
    leaves: list[Any]
    extras: tuple | None


def _group_inputs(blocks: Sequence[BlockTask], group: list[int],
                  extra: Sequence[Any] | None) -> _GroupInputs:
    return _GroupInputs([(blocks[b].j0, blocks[b].j1) for b in group],
                        [blocks[b].leaves for b in group],
                        tuple(extra[b] for b in group) if extra is not None else None)


class _Chain(NamedTuple):
    """How a chained pass links a group's row chunks, and picks a block's result."""

    link: Callable[..., Any]
    indexed: bool  # the link takes the chunk's index (an in-place link)
    pick: Callable[..., Any]

    @classmethod
    def of(cls, task: _ShardTask, share: float = 1.0) -> _Chain:
        """Counts or values added in place, link by link, where the pass has such a merge.

        ``share``: the part of all rows a chain adds (the first size of its buffers).
        """
        add = {_merge_counts: _count_into, _merge_collected: _collect_into}.get(task.merge_fn)
        if add is None:
            return cls(task, False, operator.getitem)
        # Collected values are picked out of their buffers.
        return cls(_InPlaceLink(add, share), True,
                   _collected_item if add is _collect_into else operator.getitem)

    def step(self, rows: Any, directions: Any, inputs: _GroupInputs, previous: Any, i: int,
             key: tuple) -> Delayed:
        """The link adding row chunk ``i`` to ``previous``."""
        index = (i,) if self.indexed else ()
        return delayed(self.link, pure=True)(rows, directions, inputs.ranges, previous, *index,
                                             inputs.extras, *inputs.leaves, dask_key_name=key)


def _pick_blocks(outs: list[Delayed | None], result: Any, group: list[int],
                 pick: Callable[..., Any], token: str, verb: str) -> None:
    """Each block's result out of its group's tuple, into ``outs``."""
    for k, b in enumerate(group):
        outs[b] = delayed(pick, pure=True)(
            result, k, dask_key_name=key_name("merge", token, verb, "block", b))


def _block_pass(x: da.Array, location: np.ndarray, directions: Any,
                blocks: Sequence[BlockTask], chunk_fn: Callable[..., Any],
                merge_fn: Callable[..., Any], extra: Sequence[Any] | None, token: str,
                verb: str, groups: Sequence[Shard] | None = None,
                chain: bool = False, reads: list[ChunkRead] | None = None) -> list[Delayed]:
    """One ``verb`` task per (row chunk, group of blocks), reduced over the row chunks.

    ``groups`` lists the blocks read together by one task (default: each block
    alone); on a cluster a group is a shard of one worker, and its tasks run
    there, so its blocks stay there and the row chunks come to them.  With
    ``chain`` each group's tasks merge the row chunks one after the other (one
    partial result alive per group), otherwise in a tree.  Counts merge by sum
    and values by concatenation in row-chunk order either way, so the result
    is the same.  ``reads`` are ``x``'s chunk reads
    (:func:`daskdepth.runtime.reads.chunk_reads`, None where it has none): a
    chained pass given them reads each chunk in its turn.
    """
    if groups is None:
        groups = [Shard(None, [b]) for b in range(len(blocks))]
    task = _ShardTask(chunk_fn, merge_fn)
    inputs = [_group_inputs(blocks, group, extra) for _, group in groups]
    outs: list[Delayed | None] = [None] * len(blocks)
    steps = _Chain.of(task) if chain else None
    if steps is not None and reads is not None:  # each chunk read in its turn, per shard
        _gated_chains(outs, reads, location, directions, groups, inputs, steps, token, verb)
        return [o for o in outs if o is not None]
    chunks, _ = row_blocks(x)
    rows = [
        delayed(_deduplicate_chunk, pure=True)(c, location,
                                               dask_key_name=(key_name("dedup", token, verb), i))
        for i, c in enumerate(chunks)
    ]
    name = key_name(verb, token)
    for g, ((worker, group), grouped) in enumerate(zip(groups, inputs, strict=True)):
        with on_worker(worker):
            if steps is not None:
                result = None
                for i, r in enumerate(rows):
                    result = steps.step(r, directions, grouped, result, i, (name, g, i))
                pick = steps.pick
            else:
                parts = [delayed(task, pure=True)(r, directions, grouped.ranges, None,
                                                  grouped.extras, *grouped.leaves,
                                                  dask_key_name=(name, g, i))
                         for i, r in enumerate(rows)]
                result = tree_reduce(parts, partial(_merge_tuples, merge_fn),
                                     key_name("merge", token, verb, g))
                pick = operator.getitem
            _pick_blocks(outs, result, group, pick, token, verb)
    return [o for o in outs if o is not None]


def _gated_chains(outs: list[Delayed | None], reads: list[ChunkRead], location: np.ndarray,
                  directions: Any, groups: Sequence[Shard], inputs: list[_GroupInputs],
                  steps: _Chain, token: str, verb: str) -> None:
    """Chained shard tasks whose row chunks are read in turn (:mod:`daskdepth.runtime.reads`).

    Chunk ``i`` is read and prepared once every shard's link of chunk
    ``i - READ_AHEAD`` has run (a token per link, on its worker), so a worker
    holds at most ``READ_AHEAD`` chunks however far its shard lags.  The same
    links as the chained pass of :func:`_block_pass`: the same results.

    The chunks' keys name the pass's verb: the scheduler keeps the tasks of a
    finished pass as the lineage of its blocks, and a later pass (the
    refinement shares the first wave's token) reusing such a key would get
    that pass's gate, and with it a rerun of that pass's counting.
    """
    name = key_name(verb, token)
    results: list[Any] = [None] * len(groups)
    tokens: list[list[Delayed]] = []
    for i, read in enumerate(reads):
        rows = delayed(_deduplicate_read, pure=True)(
            read, location, *gate(tokens, i), dask_key_name=(key_name("dedup", token, verb), i))
        done = []
        for g, ((worker, _), grouped) in enumerate(zip(groups, inputs, strict=True)):
            with on_worker(worker):
                results[g] = steps.step(rows, directions, grouped, results[g], i, (name, g, i))
                done.append(delayed(passed, pure=True)(
                    results[g], dask_key_name=(key_name("gate", token, verb), g, i)))
        tokens.append(done)
    for g, (worker, group) in enumerate(groups):
        with on_worker(worker):
            _pick_blocks(outs, results[g], group, steps.pick, token, verb)


def _folded(x: da.Array, location: np.ndarray, directions: Any, blocks: Sequence[BlockTask],
            rows: Sequence[RowGroup], add: Callable[..., Any], merge: Callable[..., Any],
            pick: Callable[..., Any], extra: Sequence[Any] | None, token: str, verb: str,
            reads: list[ChunkRead] | None,
            local: dict[str | None, list[Any]] | None) -> list[Delayed]:
    """A leaf pass over a summary every worker holds, folded where the row chunks are.

    Each :class:`~daskdepth.runtime.placement.RowGroup` adds its row chunks into
    one partial result of every block (``add``: :func:`_count_into` or
    :func:`_collect_into`), in place, chunk after chunk, on its worker; only
    those partials (one per group) are reduced, each block's on its home
    worker (:func:`~daskdepth.runtime.placement.fold_homes`), where the caller
    finishes it.  The bytes moved per pass are then about one partial per
    group, whatever the number of rows, no row chunk moves, and the tasks are
    ``chunks + groups x homes``, not ``chunks x blocks``.  Counts add exactly
    (integers in float64) and extremes by min / max, and the split of
    collected values does not depend on their order, so the result is the same
    bits as any other grouping.  Given ``reads``, a group reads each of its
    chunks once its link of the chunk ``READ_AHEAD`` before has run.  ``local``
    holds each worker's own keys of the blocks
    (:func:`~daskdepth.runtime.shards.local_copies`), read by its groups.
    """
    every = list(range(len(blocks)))
    total_rows = max(1, x.shape[0])
    chunks = row_blocks(x)[0] if reads is None else None
    sizes = x.chunks[0]
    name, dedup = key_name(verb, token), key_name("dedup", token, verb)
    partials = []
    for g, (worker, members) in enumerate(rows):
        share = sum(sizes[i] for i in members) / total_rows
        step = _Chain(_InPlaceLink(add, share), True, pick)
        inputs = _group_inputs(blocks, every, extra)
        if local is not None:
            inputs = inputs._replace(leaves=local[worker])
        with on_worker(worker):
            result: Any = None
            tokens: list[list[Delayed]] = []
            for k, i in enumerate(members):
                prepared = _prepared(i, k, chunks, reads, tokens, location, (dedup, i))
                result = step.step(prepared, directions, inputs, result, i, (name, g, i))
                if reads is not None:
                    tokens.append([delayed(passed, pure=True)(
                        result, dask_key_name=(key_name("gate", token, verb), g, i))])
            partials.append(result)
    homes = fold_homes(rows, len(blocks))
    outs: list[Delayed | None] = [None] * len(blocks)
    for home in dict.fromkeys(homes):
        run = [b for b, h in enumerate(homes) if h == home]
        parts = []
        for g, result in enumerate(partials):
            with on_worker(rows[g].worker):  # each group sends each home its part once
                parts.append(delayed(_part_of, pure=True)(
                    result, run[0], run[-1] + 1,
                    dask_key_name=(key_name("merge", token, verb, "part"), g, run[0])))
        with on_worker(home):
            total = tree_reduce(parts, partial(_merge_tuples, merge),
                                key_name("merge", token, verb, "run", run[0]))
            for k, b in enumerate(run):
                outs[b] = delayed(pick, pure=True)(
                    total, k, dask_key_name=key_name("merge", token, verb, "block", b))
    return [o for o in outs if o is not None]


def _replicated(x: da.Array, location: np.ndarray, directions: Any,
                blocks: Sequence[BlockTask], task: _ShardTask, extra: Sequence[Any] | None,
                token: str, verb: str, plan: Replicated,
                reads: list[ChunkRead] | None) -> list[Delayed]:
    """A leaf pass over blocks held whole by each replica group, rows staying in their group.

    Group ``g`` runs the chained, gated pass of :func:`_gated_chains` over its
    own row chunks only (each read on the worker that holds it, in its turn),
    against its own copies of the blocks; each block's partial results, one
    per group, are then reduced on its home worker.  Counts add exactly and
    the split of collected values does not depend on their order, so the
    result is the bits of any other grouping; a chunk moves to the ``k``
    workers of its group, not to all of them.
    """
    sizes, total_rows = x.chunks[0], max(1, x.shape[0])
    chunks = row_blocks(x)[0] if reads is None else None
    name, dedup = key_name(verb, token), key_name("dedup", token, verb)
    parts: list[list[Delayed]] = [[] for _ in blocks]
    s = 0  # shards are numbered across the groups
    for g, (futures, shards, members) in enumerate(
            zip(plan.futures, plan.shards, plan.chunks, strict=True)):
        grouped = [_group_inputs(blocks, shard.blocks, extra)._replace(
            leaves=[futures[b] for b in shard.blocks]) for shard in shards]
        # A group's chains add its share of the rows: their buffers start at that share.
        steps = _Chain.of(task, sum(sizes[i] for i in members) / total_rows)
        results: list[Any] = [None] * len(shards)
        tokens: list[list[Delayed]] = []
        for k, i in enumerate(members):
            with on_worker(plan.owners[i]):
                rows = _prepared(i, k, chunks, reads, tokens, location, (dedup, i))
            done = []
            for t, (shard, inputs) in enumerate(zip(shards, grouped, strict=True)):
                with on_worker(shard.worker):
                    results[t] = steps.step(rows, directions, inputs, results[t], i,
                                            (name, s + t, i))
                    if reads is not None:
                        done.append(delayed(passed, pure=True)(
                            results[t], dask_key_name=(key_name("gate", token, verb),
                                                       s + t, i)))
            tokens.append(done)
        for t, shard in enumerate(shards):
            if results[t] is None:  # a group without row chunks adds nothing
                continue
            with on_worker(shard.worker):
                for pos, b in enumerate(shard.blocks):
                    parts[b].append(delayed(steps.pick, pure=True)(
                        results[t], pos,
                        dask_key_name=(key_name("merge", token, verb, "part"), g, b)))
        s += len(shards)
    outs = []
    for b, home in enumerate(plan.homes):
        with on_worker(home):
            outs.append(tree_reduce(parts[b], task.merge_fn,
                                    key_name("merge", token, verb, "block", b)))
    return outs


def _part_of(result: tuple, j0: int, j1: int) -> tuple:
    return result[j0:j1]


def _merge_buffers(*parts: CollectBuffer | Collected) -> Collected:
    return _merge_collected(*(_as_collected(p) for p in parts))


def _as_collected(part: CollectBuffer | Collected) -> Collected:
    return part.collected() if isinstance(part, CollectBuffer) else part


def _collected_item(result: tuple, k: int) -> Collected:
    return _as_collected(result[k])


class _Verb(NamedTuple):
    """What a leaf pass computes per block: its verb and its per-chunk, merge and fold steps.

    ``chunk`` computes a row chunk's partial result of a block and ``merge``
    merges partial results; ``add`` adds a chunk in place (a fold's link),
    ``fold_merge`` merges folded partials and ``pick`` takes a block's result
    out of a fold's tuple.
    """

    name: str
    chunk: Callable[..., Any]
    merge: Callable[..., Any]
    add: Callable[..., Any]
    fold_merge: Callable[..., Any]
    pick: Callable[..., Any]


#: The histogram: exact leaf counts (and direction extremes).
COUNT = _Verb("count", _histogram_chunk, _merge_counts, _count_into, _merge_counts,
              operator.getitem)
#: The refinement: the values of the wanted leaves.
HONE = _Verb("hone", _collect_chunk, _merge_collected, _collect_into, _merge_buffers,
             _collected_item)


def leaf_pass(verb: _Verb, x: da.Array, location: np.ndarray, directions: Any,
              blocks: Sequence[BlockTask], extra: Sequence[Any] | None, *, token: str,
              plan: PassPlan, reads: list[ChunkRead] | None = None) -> list[Delayed]:
    """Delayed results of ``verb`` per block, built the way ``plan`` says the pass runs.

    The one place that picks among the ways a pass runs
    (:class:`~daskdepth.runtime.plan.PassPlan`): in replica groups
    (:func:`_replicated`), folded where the row chunks are over blocks copied
    to every worker (:func:`_folded`, reading the workers' own keys
    ``plan.local``), per shard with each thread's chain of row chunks
    (:func:`_block_pass` with ``plan.shards``), or one task per (row chunk,
    block) merged in a tree.  ``extra`` holds one more input per block (the
    refinement's :class:`Wanted`), ``reads`` ``x``'s chunk reads (a chained
    pass given them reads each chunk in its turn).  The same bits every way.
    """
    if not blocks:
        return []
    if plan.where == "replicas" and plan.replicas is not None:
        return _replicated(x, location, directions, blocks, _ShardTask(verb.chunk, verb.merge),
                           extra, token, verb.name, plan.replicas, reads)
    if plan.where == "copied" and plan.rows:
        return _folded(x, location, directions, blocks, plan.rows, verb.add, verb.fold_merge,
                       verb.pick, extra, token, verb.name, reads, plan.local)
    sharded = plan.where in ("sharded", "replicas")
    return _block_pass(x, location, directions, blocks, verb.chunk, verb.merge, extra, token,
                       verb.name, plan.shards if sharded else None, sharded, reads)


def histogram_graph(x: da.Array, location: np.ndarray, directions: Any,
                    blocks: Sequence[BlockTask], *, token: str, plan: PassPlan,
                    reads: list[ChunkRead] | None = None) -> list[Delayed]:
    """Delayed exact leaf counts (and direction extremes) of all rows, per block.

    Counts merge by sum and extremes by min / max, which is exact and
    independent of the chunking and of the reduction order.  ``directions``
    is the direction matrix or a graph key holding it; ``plan`` where the
    pass runs and ``reads`` as for :func:`leaf_pass`.
    """
    return leaf_pass(COUNT, x, location, directions, blocks, None, token=token, plan=plan,
                     reads=reads)


def collect_graph(x: da.Array, location: np.ndarray, directions: Any,
                  blocks: Sequence[BlockTask], wanted: Sequence[Any], *,
                  token: str, plan: PassPlan,
                  reads: list[ChunkRead] | None = None) -> list[Delayed]:
    """Delayed :class:`Collected` values of the rows in the wanted leaves, per block.

    ``wanted`` holds a :class:`Wanted` (or a task computing one) per block;
    ``plan`` and ``reads`` as for :func:`leaf_pass`.
    """
    return leaf_pass(HONE, x, location, directions, blocks, wanted, token=token, plan=plan,
                     reads=reads)
