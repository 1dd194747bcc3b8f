"""Held blocks: direction blocks kept in the memory of the cluster's workers, never gathered.

With a distributed client, the blocks a fit computes stay on the workers that
computed them; the client keeps a :class:`ClusterBlock` per block (its
:class:`~daskdepth.summary.blocks.BlockMeta` and the future of the block).
This module makes and holds such blocks (:func:`realize`, :func:`hold`,
:func:`share`, :func:`local_copies`) and says how a task reads one
(:func:`graph_ref`); where the tasks that read them run is
:mod:`daskdepth.runtime.placement`'s job, and which of the ways a pass runs
(copied, sharded, in replica groups) is :mod:`daskdepth.runtime.plan`'s.
Blocks held in this process (local schedulers, a model fitted without a
cluster) are handed to the graph as keys.

A lost worker costs recomputation only: block futures come from task graphs,
which the scheduler keeps and reruns for lost keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

import dask
from dask.base import tokenize
from dask.delayed import Delayed, delayed
from distributed import Future, wait

from ..errors import SummaryLostError
from ..summary.blocks import BlockHandle, BlockMeta, block_meta, is_handle
from .client import active_client, sent_in_graph
from .keys import unique_key
from .placement import compute_spread, keep_placed, on_worker, spread_runs, workers_of


class ClusterBlock(BlockHandle):
    """A direction block held in the memory of a worker of the client that computed it.

    ``load`` fetches it (one block at a time: :class:`DepthSummary
    <daskdepth.summary.depth.DepthSummary>` methods called on the client score
    with it); the passes read it where it is through ``future``.
    """

    def __init__(self, future: Future, meta: BlockMeta) -> None:
        super().__init__(meta.j0, meta.j1, meta.nbytes, meta)
        self.future = future
        #: The worker that held the block when it was placed (it may gain replicas later).
        self.home: str | None = None
        #: Copies of the block kept on other workers (replica groups), by worker address:
        #: futures of tasks that read ``future``, so a lost copy is made again.
        self.copies: dict[str, Future] = {}

    def load(self) -> Any:
        self.check()
        return self.future.result()

    def check(self) -> None:
        """Raise :class:`~daskdepth.errors.SummaryLostError` if the cluster no longer has it.

        Its client is closed, or the scheduler dropped it (``client.restart()``):
        nothing can compute it again.  A block lost with its worker is not
        refused: the scheduler computes it again.
        """
        client = self.future.client
        if getattr(client, "status", "running") not in ("running", "connecting"):
            raise SummaryLostError(
                f"direction block {self.j0}..{self.j1 - 1} of this model's summary lives on a "
                "cluster whose client is closed: a model fitted on a cluster keeps its summary "
                "there. Save it (model.save) while the client is connected, then load it "
                "anywhere, or refit"
            )
        if self.future.status == "cancelled":
            raise SummaryLostError(
                f"this model was fitted on a Dask cluster, and its summary lived in the memory "
                f"of the cluster's workers, which dropped it ({_cancel_reason(self.future)}, "
                "as after client.restart()): the model can no longer score. To keep a model "
                "across a restart, save it before (model.save(path)) and load it after "
                "(daskdepth.load(path)); this one must be fitted again"
            )


def _cancel_reason(future: Future) -> str:
    """Why distributed cancelled ``future`` (e.g. ``scheduler-restart``), in a few words."""
    state = getattr(future, "_state", None)
    reason = getattr(getattr(state, "exception", None), "reason", None)
    return f"distributed cancelled it: {reason}" if reason else "distributed cancelled it"


def check_kept(blocks: Sequence[Any]) -> None:
    """Raise :class:`~daskdepth.errors.SummaryLostError` if a block kept on a cluster is gone."""
    for block in blocks:
        if isinstance(block, ClusterBlock):
            block.check()


#: Cancellations that a lost cluster state explains; the scheduler's going away is
#: reported as distributed reports it (``scheduler-connection-lost``).
_CONNECTION_LOST = "scheduler-connection-lost"


@contextlib.contextmanager
def fitting_on_cluster() -> Iterator[None]:
    """Context of a fit: a cancelled future becomes a :class:`~daskdepth.errors.SummaryLostError`.

    A fit keeps its intermediate results (the row sample, the pilot's blocks)
    on the workers; a ``client.restart()`` meanwhile cancels them, and the fit
    fails with distributed's bare ``FuturesCancelledError``.  Said here in the
    fit's terms, with what to do.
    """
    try:
        yield
    except CancelledError as exc:
        if active_client() is None or _CONNECTION_LOST in str(exc):
            raise
        reasons = sorted({g.reason for g in getattr(exc, "error_groups", ())}
                         | ({exc.reason} if getattr(exc, "reason", None) else set()))
        why = f" (distributed cancelled them: {', '.join(reasons)})" if reasons else ""
        raise SummaryLostError(
            "the fit's intermediate results, kept in the memory of the Dask cluster's workers, "
            f"were dropped while it ran{why}, as client.restart() during a fit does: nothing of "
            "this fit is left. Fit again once the cluster is up; to keep a fitted model across "
            "a restart, save it (model.save(path)) and load it after (daskdepth.load(path))"
        ) from exc


def share(obj: Any, name: str) -> Any:
    """A read-only object many tasks read: a graph key, or on a cluster its future.

    On a cluster the object is sent once, as a task of its own (not scattered:
    the scheduler keeps the task, so blocks computed from it can be recomputed
    if a worker is lost, also after the future is released), and later graphs
    refer to the future instead of sending the object again.  Its key is
    ``name`` with a unique suffix there (:func:`daskdepth.runtime.keys.unique_key`,
    which says why).
    """
    client = active_client()
    if client is None:
        return delayed(obj, name=name, traverse=False)
    literal = delayed(obj, name=unique_key(name), traverse=False)
    with sent_in_graph():  # the object is sent on purpose, once
        return client.compute(literal)


def token_after(token: str, refs: Sequence[Any]) -> str:
    """The token of the tasks that read ``refs`` (futures): ``token`` with the futures' keys.

    Objects sent anew at each call get new keys (:func:`share`, :func:`hold`'s
    copies), so the tasks that read them must too: a key repeated while an
    earlier call's results are kept would name a task of other inputs, which
    distributed warns of ("different run_spec") and may run instead.  A
    model's own futures (a fitted summary's :class:`ClusterBlock`) keep their
    keys, and so the same call gets the same keys.
    """
    return tokenize(token, [r.key for r in refs])


def _load(block: BlockHandle) -> Any:
    return block.load()


def graph_ref(block: Any, name: str) -> Any:
    """What a task takes to read ``block``: a future, a load task or a graph key.

    A :class:`ClusterBlock` is read where it is (fetched by a load task under
    a local scheduler); another handle (a saved model's block) is loaded by a
    task, once per graph; a block in this process becomes a key of the graph
    (shared by reference on the local schedulers, sent to one worker by a
    distributed scheduler).
    """
    if isinstance(block, ClusterBlock) and block.future.client is active_client():
        return block.future
    if is_handle(block):
        return delayed(_load, pure=True)(block, dask_key_name=name)
    return delayed(block, name=name, traverse=False)


def realize(blocks: Sequence[Delayed], n: int, name: str, *, spread: bool = False,
            finished: bool = True, place: tuple[Sequence[int], int] | None = None,
            keep: bool = True, replaces: Sequence[Any] = ()) -> list[Any]:
    """Compute direction blocks: here (local schedulers) or kept on the cluster.

    Without ``keep``, blocks computed on a cluster come back to this process
    (a summary small enough to be copied to every worker,
    :func:`daskdepth.runtime.memory.shard_summary`).

    On a distributed client each block stays on its worker and comes back as a
    :class:`ClusterBlock` with its :class:`~daskdepth.summary.blocks.BlockMeta`
    (computed there by tasks named ``(name, i)``); only the metadata travels.
    With ``spread``, the blocks are computed in contiguous runs per worker
    (for blocks whose inputs sit on one worker, such as the pilot's sample);
    ``place`` as for :func:`compute_spread`.  ``finished`` says whether the
    blocks' leaves are counted (their error bounds are then part of the
    metadata).

    ``replaces`` lists the blocks the new ones are computed from and replace
    (the caller drops them): their futures are released as soon as the new
    tasks are submitted, so that the scheduler frees each old block once the
    tasks reading it have run, instead of holding every old block until every
    new one is done (two copies of a worker's share at the end of a phase).
    Their lineage stays with the scheduler: a new block lost with its worker
    is recomputed from it.  Their copies in replica groups
    (:attr:`ClusterBlock.copies`) are released with them.
    """
    client = active_client()
    if client is None:
        return list(dask.compute(*blocks))
    if not keep:
        return list(client.gather(client.compute(list(blocks))))
    futures = (compute_spread(client, blocks, place) if spread
               else list(client.compute(list(blocks))))
    for old in replaces:
        if isinstance(old, ClusterBlock) and old.future.client is client:
            old.future.release()
            for copy in old.copies.values():  # a pass's replica groups' copies
                copy.release()
            old.copies.clear()
    # Each block's metadata is computed where the block is, after it: a metadata task
    # left unplaced may be stolen by an idle worker, which then copies the block.
    wait(futures)
    holders = client.who_has(futures)
    metas = []
    for i, f in enumerate(futures):
        with on_worker(min(holders.get(f.key) or ["?"])):
            metas.append(delayed(block_meta, pure=True)(f, n, finished, dask_key_name=(name, i)))
    meta_futures = client.compute(metas)
    values = client.gather(meta_futures)
    del meta_futures
    return [ClusterBlock(f, meta) for f, meta in zip(futures, values, strict=True)]


def hold(blocks: Sequence[Any], name: str) -> list[Future]:
    """Futures of ``blocks`` on the active cluster, each block held by one worker.

    :class:`ClusterBlock` futures as they are; other handles loaded by tasks
    spread over the workers; blocks of this process sent as tasks of their own
    (one copy each, in contiguous runs per worker), recomputable as graph keys.
    """
    client = active_client()
    assert client is not None, "hold() needs a distributed client"
    out: list[Any] = [None] * len(blocks)
    loads = [i for i, b in enumerate(blocks) if is_handle(b) and not isinstance(b, ClusterBlock)]
    local = [i for i, b in enumerate(blocks) if not is_handle(b)]
    for i, b in enumerate(blocks):
        if isinstance(b, ClusterBlock):
            if b.future.client is not client:
                b.load()  # raises the clear error when that client is closed
                local.append(i)
            else:
                out[i] = b.future
    if loads:
        tasks = [delayed(_load, pure=True)(blocks[i], dask_key_name=(name, i)) for i in loads]
        for i, f in zip(loads, compute_spread(client, tasks), strict=True):
            out[i] = f
    if local:
        local.sort()
        workers = workers_of(client)
        runs = spread_runs(len(local), max(1, len(workers)))
        for addr, run in zip(workers or [None], runs, strict=False):
            items = [blocks[local[k]] for k in run]
            items = [b.load() if is_handle(b) else b for b in items]
            if not items:
                continue
            # Sent as tasks of their own, not scattered: the scheduler keeps them, so a
            # block (and the copies read from it) lost with its worker is made again.
            # Named after the caller (the dashboard shows the verb), unique (unique_key).
            literals = [delayed(item, name=unique_key(name, local[k]),
                                traverse=False) for k, item in zip(run, items, strict=True)]
            with sent_in_graph():
                futures = client.compute(literals, workers=[addr] if addr else None,
                                         allow_other_workers=True)
            for k, future in zip(run, futures, strict=True):
                out[local[k]] = future
    wait(out)
    return out


def _same(obj: Any) -> Any:
    return obj


def local_copies(refs: Sequence[Any], workers: Sequence[str | None],
                 name: str) -> dict[str | None, list[Any]]:
    """For each worker, tasks on it that hold ``refs`` (objects copied to every worker).

    Each task returns its input once it is on the worker (no copy there), as
    a key of its own with one replica.  Dask's memory manager drops the extra
    replicas of an object once few tasks still wait for it, so a pass's later
    tasks on a worker (the end of a fold, the finishing of a block) would
    fetch the object again; a task reading the worker's own key never does.
    With ``refs`` keys of the graph (not scattered objects), a lost worker's
    keys are computed again.
    """
    client = active_client()
    out: dict[str | None, list[Any]] = {}
    for w, worker in enumerate(dict.fromkeys(workers)):
        with on_worker(worker):
            out[worker] = [delayed(_same, pure=True)(ref, dask_key_name=(name, w, i))
                           for i, ref in enumerate(refs)]
    if client is not None:
        # Submitted at once, in one graph (each object sent once): the memory manager
        # drops replicas no task waits for, and the pass's own graph comes later.
        keep_placed(client)
        with sent_in_graph():  # the blocks are sent on purpose, once, as keys of the graph
            flat = client.compute([t for tasks in out.values() for t in tasks])
        k = 0
        for worker, tasks in out.items():
            out[worker], k = flat[k:k + len(tasks)], k + len(tasks)
    return out
