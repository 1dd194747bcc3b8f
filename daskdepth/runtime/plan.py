"""Where a pass runs: one plan per pass, decided once, before its graph is built.

A pass reads a summary's direction blocks with every row chunk.  Where its
tasks run depends on where the blocks are and how large they are, and is
decided here, once per pass (:func:`pass_plan`), as a :class:`PassPlan`:

``"here"``
    No distributed client (or blocks held by a saved model's store, loaded by
    their tasks): each block is a key of the graph, and each pass task reads
    one block.  On a cluster, a summary held here that cannot be folded where
    the rows are (a row chunk neither held nor read in its turn) is broadcast
    and read this way too.
``"copied"``
    A summary held here, small enough to copy to every worker
    (:func:`daskdepth.runtime.memory.shard_summary`): each worker gets its own
    key of every block (:func:`~daskdepth.runtime.shards.local_copies`), and
    the row chunks are folded where they are
    (:func:`~daskdepth.runtime.placement.row_groups`); each block is finished
    on its home worker (:func:`~daskdepth.runtime.placement.fold_homes`).
``"sharded"``
    Blocks kept on the cluster (:class:`~daskdepth.runtime.shards.ClusterBlock`),
    read per shard on the workers that hold them (one chain of row chunks per
    thread): every row chunk travels to every worker.
``"replicas"``
    Sharded blocks copied to ``W // k`` groups of ``k`` workers, each group
    processing the row chunks its workers hold, where that moves fewer bytes
    (:func:`~daskdepth.runtime.replicas.pass_width`).

The pass itself (:mod:`daskdepth.passes.leaves`) builds the graph the plan
names, and the fit's phases (:mod:`daskdepth.fitting.summaries`) only say what
is computed.  Scoring and explaining ask :func:`scored_by_shard` the same
question for a fitted summary.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple

import dask.array as da

from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from .client import active_client, broadcast, phase
from .keys import key_name
from .memory import shard_summary
from .placement import (
    RowGroup,
    Shard,
    fold_homes,
    placed_chunks,
    row_groups,
    shards,
    spread_runs,
)
from .reads import ChunkRead
from .replicas import pass_width, replicate
from .shards import ClusterBlock, graph_ref, local_copies

logger = logging.getLogger(__name__)

#: The ways a pass runs (see the module docstring).
Where = Literal["here", "copied", "sharded", "replicas"]


class Replicated(NamedTuple):
    """A sharded pass in replica groups: where each group holds the blocks, and the rows.

    ``futures[g][b]`` is block ``b`` in group ``g``, ``shards[g]`` the shards
    (worker, blocks) of group ``g``, ``chunks[g]`` the row chunks (ascending)
    its workers hold, ``owners[i]`` the worker of chunk ``i`` and ``homes[b]``
    the worker where block ``b``'s partial results are reduced (where it is
    finished).
    """

    futures: list[list[Any]]
    shards: list[list[Shard]]
    chunks: list[list[int]]
    owners: list[str]
    homes: list[str | None]


class PassPlan(NamedTuple):
    """Where one pass over a summary's blocks runs, and what its tasks read.

    ``refs[b]`` is what the tasks finishing block ``b`` read (a graph key, a
    future or a worker's own copy) and ``homes[b]`` the worker they run on
    (None: anywhere).  ``shards`` are the blocks read together per task
    (``"sharded"``), ``rows`` and ``local`` the row groups and each worker's
    keys of the blocks (``"copied"``), ``replicas`` the replica groups
    (``"replicas"``); each is None for the other ways.
    """

    where: Where
    refs: list[Any]
    homes: list[str | None]
    shards: list[Shard] | None = None
    rows: list[RowGroup] | None = None
    local: dict[str | None, list[Any]] | None = None
    replicas: Replicated | None = None

    @property
    def kept(self) -> bool:
        """Whether the pass's finished blocks stay on the cluster (they were kept there)."""
        return self.where in ("sharded", "replicas")


def _here(blocks: Sequence[Any], token: str) -> PassPlan:
    """Each block a key of the graph: read as it is held (:func:`graph_ref`)."""
    refs = [graph_ref(b, key_name("bin", token, i)) for i, b in enumerate(blocks)]
    return PassPlan("here", refs, [None] * len(blocks))


def _held_plan(blocks: Sequence[Any], token: str) -> PassPlan:
    """The plan of a pass that reads no row placement: sharded, broadcast or here.

    Blocks held here are copied to every worker of a cluster (a summary too
    small to shard); blocks kept on a cluster are read per shard, on their
    workers, each thread's chain of row chunks in turn.
    """
    if blocks and active_client() is not None and not any(is_handle(b) for b in blocks):
        refs = [broadcast(b, key_name("bin", token, i)) for i, b in enumerate(blocks)]
        return PassPlan("here", refs, [None] * len(blocks))
    if blocks and all(isinstance(b, ClusterBlock) for b in blocks):
        refs = [graph_ref(b, key_name("bin", token, i)) for i, b in enumerate(blocks)]
        groups = shards([b.future for b in blocks], keep_order=False, by_thread=True)
        homes: list[str | None] = [None] * len(blocks)
        for shard in groups:
            for i in shard.blocks:
                homes[i] = shard.worker
        return PassPlan("sharded", refs, homes, shards=groups)
    return _here(blocks, token)


def _replicas(x: da.Array, blocks: Sequence[Any], plan: PassPlan, gated: bool,
              token: str) -> Replicated | None:
    """Replica groups for one pass over sharded ``blocks``, where they move fewer bytes.

    A pass over blocks sharded on ``W`` workers sends every row chunk to
    every worker; with enough rows (:func:`~daskdepth.runtime.replicas.pass_width`)
    the blocks are copied to ``W // k`` groups of ``k`` workers instead
    (:func:`~daskdepth.runtime.replicas.replicate`), each group processes the
    row chunks its workers hold, and only each group's partial results of a
    block travel to the block's worker, where it is finished.  None (the
    sharded pass as it is) with a single worker, when some row chunk is
    neither held on the cluster nor read in its turn, or when copying the
    blocks would move more than the rows.
    """
    placed = placed_chunks(x, gated)
    if placed is None:
        return None
    threads, owners = placed
    workers = list(threads)
    if len(workers) < 2:
        return None
    nbytes = sum(int(b.nbytes) for b in blocks)
    k = pass_width(int(x.shape[0]) * int(x.shape[1]) * 8, nbytes, len(workers))
    logger.debug("pass %s over %d blocks (%d bytes) of %d rows: groups of k = %d of %d workers",
                 token, len(blocks), nbytes, x.shape[0], min(k, len(workers)), len(workers))
    if k >= len(workers):
        return None
    copies = replicate(blocks, [b.future for b in blocks], nbytes,
                       key_name("bin", token, "copy"), keep_order=False, width=k)
    # One chain per thread of a worker, as the sharded pass has (contiguous runs of blocks).
    groups = [[Shard(s.worker, [s.blocks[j] for j in run]) for s in group
               for run in spread_runs(len(s.blocks), threads.get(s.worker or "", 1)) if len(run)]
              for group in copies.shards]
    chunks = [[i for i, o in enumerate(owners) if copies.group(o) == g]
              for g in range(len(copies.groups.members))]
    return Replicated(copies.futures, groups, chunks, owners, list(plan.homes))


@contextlib.contextmanager
def pass_plan(blocks: Sequence[Any], token: str, x: da.Array | None = None,
              reads: list[ChunkRead] | None = None,
              phase_name: str | None = None) -> Iterator[PassPlan]:
    """Where a pass over ``blocks`` runs (see the module docstring), decided once, here.

    ``x`` is the pass's rows (None for a pass that reads none, such as the
    finishing of blocks), ``reads`` their chunk reads
    (:func:`daskdepth.runtime.reads.chunk_reads`, None where the chunks are not
    read in their turn).  Blocks held here, on a cluster, are copied to every
    worker and the row chunks folded where they are (``"copied"``), each
    worker reading its own key of every block, made from a key of the graph
    rather than a scattered object so that a lost worker's keys are computed
    again; blocks kept on the cluster are read per shard (``"sharded"``), or
    by replica groups where that moves fewer bytes (``"replicas"``).

    The body builds the pass inside the phase ``phase_name``
    (:func:`daskdepth.runtime.client.phase`; none if None), which the replica
    groups' copies are part of; the workers' copies of a copied summary are
    made before it.
    """
    gated = reads is not None
    copied = (x is not None and bool(blocks) and active_client() is not None
              and not any(is_handle(b) for b in blocks))
    rows = row_groups(x, gated) if copied and x is not None else None
    if rows:
        refs = [graph_ref(b, key_name("bin", token, i)) for i, b in enumerate(blocks)]
        homes = fold_homes(rows, len(blocks))
        local = local_copies(refs, [g.worker for g in rows], key_name("bin", token, "at"))
        plan = PassPlan("copied", [local[h][i] for i, h in enumerate(homes)], list(homes),
                        rows=rows, local=local)
    else:
        plan = _held_plan(blocks, token)
    with phase(phase_name) if phase_name is not None else contextlib.nullcontext():
        if plan.where == "sharded" and x is not None:
            replicas = _replicas(x, blocks, plan, gated, token)
            if replicas is not None:
                plan = plan._replace(where="replicas", replicas=replicas)
        yield plan


def scored_by_shard(summary: Any, rows: float) -> bool:
    """Whether a fitted summary is scored (or explained) where its blocks are, shard by shard.

    On a cluster, a depth summary kept there by its fit, or one too large to
    copy to every worker (:func:`daskdepth.runtime.memory.shard_summary`), is;
    a smaller one is copied to every worker and the rows are scored where they
    are.  Never without a client, for a summary without blocks, nor for no
    rows (``rows`` is the row count, NaN when unknown).
    """
    return (isinstance(summary, DepthSummary) and active_client() is not None
            and bool(summary.blocks) and rows != 0
            and (any(isinstance(b, ClusterBlock) for b in summary.blocks)
                 or shard_summary(summary.nbytes)))
