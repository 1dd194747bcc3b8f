"""Placement: which worker each task runs on, and placed tasks kept from work stealing.

The passes run their tasks where their inputs are: a task reading a worker's
direction blocks on that worker (:func:`on_worker`; blocks grouped per
worker by :func:`shards`), a task reading a row chunk where the chunk is
(:func:`row_groups`, :func:`chunk_owners`), and items computed in batches in
contiguous runs per worker (:func:`spread_runs`, :func:`compute_spread`).
Which blocks are held where is :mod:`daskdepth.runtime.shards`'s job.

Placed tasks get loose restrictions (``allow_other_workers=True``) so that a
lost worker never stalls a fit.  Work
stealing reads loose restrictions as a hint: an idle worker takes queued tasks
of a busy one, and with them a copy of the blocks they read (one block for a
finishing task, a whole shard for a pass task).  On a worker near its memory
limit such a copy is what makes it spill; and a stolen finishing task leaves
its block, and every later pass's work on it, on the wrong worker.

:class:`KeepPlaced` takes daskdepth's placed tasks out of the stealing
extension's candidates while they wait on their own worker.  Their
restrictions stay loose: a task whose worker is lost still runs elsewhere.
Tasks of other libraries, and daskdepth tasks without a placement, are left
to the scheduler as before.  :func:`keep_placed` registers the plugin once per
client; where it cannot be (an older scheduler, one without daskdepth
installed), fits run as before and only lose this guarantee.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import dask
import dask.array as da
from dask.core import flatten
from dask.delayed import Delayed
from dask.utils import key_split
from distributed import Future
from distributed.diagnostics.plugin import SchedulerPlugin

from .client import active_client, worker_records

logger = logging.getLogger(__name__)

#: The key prefix of every task this package creates (:mod:`daskdepth.runtime.keys`).
PREFIX = "daskdepth-"

#: Clients the plugin was offered through: their scheduler's address then, and whether
#: it was registered (a refusal is not asked again of the same scheduler).
_offered: weakref.WeakKeyDictionary[Any, tuple[str | None, bool]] = weakref.WeakKeyDictionary()


class KeepPlaced(SchedulerPlugin):
    """Scheduler plugin: daskdepth's placed tasks are never candidates for work stealing.

    A task counts as placed when its key starts with ``daskdepth-``, it has
    worker restrictions and it waits on one of those workers.  The stealing
    extension adds a task to its candidates when it is queued on a worker, and
    again when the first task of its prefix finishes (its cost is then known);
    this plugin runs after it and takes placed tasks out both times.
    """

    name = "daskdepth-keep-placed"
    idempotent = True

    def __init__(self) -> None:
        self.scheduler: Any = None
        # Placed tasks waiting on their worker, by prefix (the stealing extension
        # re-adds a prefix's tasks when their duration becomes known).
        self.waiting: dict[str, set[Any]] = {}

    def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def _stealing(self) -> Any:
        extensions = getattr(self.scheduler, "extensions", None) or {}
        return extensions.get("stealing")

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        stealing = self._stealing()
        if stealing is None:
            return
        ts = self.scheduler.tasks.get(key)
        if start == "processing" and ts is not None:
            prefix = ts.prefix.name
            waiting = self.waiting.get(prefix)
            if waiting is not None:
                waiting.discard(ts)
                # The stealing extension may just have re-added this prefix's tasks.
                for other in waiting:
                    stealing.remove_key_from_stealable(other)
                if not waiting:
                    del self.waiting[prefix]
        if finish == "processing" and ts is not None and _placed(ts):
            stealing.remove_key_from_stealable(ts)
            self.waiting.setdefault(ts.prefix.name, set()).add(ts)


def _placed(ts: Any) -> bool:
    """A daskdepth task waiting on one of the workers it is placed on."""
    restrictions = ts.worker_restrictions
    worker = ts.processing_on
    return (bool(restrictions) and worker is not None and worker.address in restrictions
            and key_split(ts.key).startswith(PREFIX))


def keep_placed(client: Any) -> bool:
    """Register :class:`KeepPlaced` on ``client``'s scheduler, once; whether it is there.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, \\
    ...         Client(cluster) as client:
    ...     keep_placed(client)
    True
    """
    address = getattr(getattr(client, "scheduler", None), "address", None)
    before = _offered.get(client)
    if before is not None and before[0] == address:
        return before[1]
    try:
        client.register_plugin(KeepPlaced())
        ok = True
    except Exception as err:  # noqa: BLE001 - any failure leaves the scheduler as it was
        logger.info("daskdepth could not register its placement plugin on the scheduler "
                    "(%s); placed tasks may be stolen by idle workers, and blocks copied", err)
        ok = False
    _offered[client] = (address, ok)
    return ok


def worker_threads(client: Any) -> dict[str, int]:
    """Threads of each connected worker, by address in a fixed (sorted) order."""
    return {addr: max(1, int(w.get("nthreads") or 1))
            for addr, w in sorted(worker_records(client).items())}


def workers_of(client: Any) -> list[str]:
    """Addresses of the connected workers, in a fixed order."""
    return list(worker_threads(client))


def spread_runs(count: int, workers: int) -> list[range]:
    """``count`` items cut into ``workers`` contiguous runs of nearly equal length.

    Examples
    --------
    >>> [list(r) for r in spread_runs(5, 2)]
    [[0, 1, 2], [3, 4]]
    """
    workers = max(1, min(workers, count)) if count else 1
    bounds = [(count * w + workers - 1) // workers for w in range(workers + 1)]
    return [range(bounds[w], bounds[w + 1]) for w in range(workers)]


def spread_owner(index: int, total: int, workers: int) -> int:
    """The worker (0 .. workers - 1) of item ``index`` of ``total`` spread in contiguous runs.

    The runs of :func:`spread_runs`, item by item, so that items computed in
    several batches (the waves of a fit) are spread as if computed at once.

    Examples
    --------
    >>> [spread_owner(i, 5, 2) for i in range(5)]
    [0, 0, 0, 1, 1]
    """
    return next(w for w, run in enumerate(spread_runs(total, workers)) if index in run)


def turns(count: int, workers: int) -> list[int]:
    """Items ``0 .. count - 1`` in an order that takes turns over their workers' runs.

    Items computed in batches in this order (the waves of a fit) keep every
    worker busy in every batch, and still end in contiguous runs per worker
    (:func:`spread_owner`).

    Examples
    --------
    >>> turns(5, 2)
    [0, 3, 1, 4, 2]
    """
    runs = [list(r) for r in spread_runs(count, workers)]
    return [run[k] for k in range(max((len(r) for r in runs), default=0))
            for run in runs if k < len(run)]


def worker_count() -> int:
    """Workers of the active distributed client (1 without one)."""
    client = active_client()
    return max(1, len(workers_of(client))) if client is not None else 1


def compute_spread(client: Any, tasks: Sequence[Delayed],
                   place: tuple[Sequence[int], int] | None = None) -> list[Future]:
    """Compute ``tasks`` in contiguous runs per worker (loosely: any worker if one is lost).

    ``place`` is ``(indices, total)`` when the tasks are the items ``indices``
    of ``total`` spread over several calls: each goes to the worker of its
    place among all of them (:func:`spread_owner`), so that the runs stay even.
    """
    workers = workers_of(client)
    if len(workers) <= 1:
        return list(client.compute(list(tasks)))
    keep_placed(client)
    indices, total = place if place is not None else (range(len(tasks)), len(tasks))
    owners = [spread_owner(i, total, len(workers)) for i in indices]
    out: list[Future | None] = [None] * len(tasks)
    for w, addr in enumerate(workers):
        run = [i for i, o in enumerate(owners) if o == w]
        if not run:
            continue
        futures = client.compute([tasks[i] for i in run], workers=[addr],
                                 allow_other_workers=True)
        for i, f in zip(run, futures, strict=True):
            out[i] = f
    return [f for f in out if f is not None]


class Shard(NamedTuple):
    """Blocks (indices, in block order) read together, and the worker that holds them."""

    worker: str | None
    blocks: list[int]


def shards(futures: Sequence[Future], *, keep_order: bool,
           by_thread: bool = False) -> list[Shard]:
    """Blocks grouped by the worker that holds them, in the order of their first block.

    With ``keep_order``, each group is a run of consecutive blocks on one
    worker (so that groups processed in order visit the blocks in order);
    otherwise all the blocks of a worker form one group, or with
    ``by_thread`` one group per thread of the worker (contiguous parts of its
    blocks), for passes that process a group's row chunks one after the
    other.  Tasks that read a shard run on its worker (:func:`on_worker`).
    """
    if not futures:
        return []
    client = futures[0].client
    who = client.who_has(list(futures))
    owner = [min(who.get(f.key) or ["?"]) for f in futures]
    return shards_of(owner, keep_order=keep_order,
                     threads=worker_threads(client) if by_thread else None)


def shards_of(owner: Sequence[str], *, keep_order: bool,
              threads: dict[str, int] | None = None) -> list[Shard]:
    """Blocks grouped by their worker ``owner[b]``, as :func:`shards` groups them.

    Examples
    --------
    >>> shards_of(["a", "b", "a"], keep_order=True)
    [Shard(worker='a', blocks=[0]), Shard(worker='b', blocks=[1]), Shard(worker='a', blocks=[2])]
    >>> shards_of(["a", "b", "a"], keep_order=False)
    [Shard(worker='a', blocks=[0, 2]), Shard(worker='b', blocks=[1])]
    """
    if keep_order:
        runs: list[Shard] = []
        for i, w in enumerate(owner):
            if runs and runs[-1].worker == w:
                runs[-1].blocks.append(i)
            else:
                runs.append(Shard(w, [i]))
        return runs
    by_worker: dict[str, list[int]] = {}
    for i, w in enumerate(owner):
        by_worker.setdefault(w, []).append(i)
    groups = []
    for w, members in by_worker.items():
        parts = spread_runs(len(members), (threads or {}).get(w, 1))
        groups += [Shard(w, [members[k] for k in part]) for part in parts if len(part)]
    return sorted(groups, key=lambda g: g.blocks[0])


class RowGroup(NamedTuple):
    """Row chunks (indices, ascending) processed one after the other on one worker."""

    worker: str | None
    chunks: list[int]


def row_groups(x: da.Array, gated: bool) -> list[RowGroup] | None:
    """The row chunks of ``x`` grouped where they are: one group per thread of each worker.

    A chunk persisted on the cluster belongs to a worker holding it; the other
    chunks (read by their own tasks) are spread over the workers in contiguous
    runs, and their reads placed there.  A pass that folds each group's chunks
    into one partial result, in place, on the group's worker moves one partial
    per group instead of one per row chunk, and no row.  None without a
    distributed client, and when some chunk is neither held on the cluster nor
    read in its turn (``gated``: :mod:`daskdepth.runtime.reads`): dask would
    read such chunks as fast as workers have slots, and a group adding them one
    after the other would let them pile up in memory.
    """
    placed = placed_chunks(x, gated)
    if placed is None:
        return None
    threads, owner = placed
    groups: list[RowGroup] = []
    for w in threads:
        members = [i for i, o in enumerate(owner) if o == w]
        parts = spread_runs(len(members), threads.get(w, 1))
        groups += [RowGroup(w, [members[k] for k in part]) for part in parts if len(part)]
    return groups


def placed_chunks(x: da.Array, gated: bool) -> tuple[dict[str, int], list[str]] | None:
    """The connected workers' threads (:func:`worker_threads`) and the worker of each
    row chunk of ``x`` (:func:`chunk_owners`, strict unless its reads are ``gated``).

    None without a distributed client, and when some chunk is neither held on the
    cluster nor read in its turn.
    """
    client = active_client()
    if client is None:
        return None
    threads = worker_threads(client)
    owner = chunk_owners(x, list(threads), strict=not gated)
    if owner is None:
        return None
    return threads, owner


def chunk_owners(x: da.Array, workers: Sequence[str], strict: bool = False) -> list[str] | None:
    """The worker where each row chunk of ``x`` is: its holder, or a contiguous run's worker.

    A chunk persisted on the cluster belongs to the first (sorted) of the
    ``workers`` holding it; a chunk that is not held goes to the workers in
    contiguous runs (:func:`spread_owner`), where a task placed there reads
    it.  With ``strict``, None as soon as one chunk is not held.  None too
    without a client or without workers.
    """
    client = active_client()
    if client is None or not workers:
        return None
    keys = list(flatten(x.__dask_keys__()))
    held = client.futures_of(x)
    who = client.who_has(held) if held else {}
    known = set(workers)
    owner: list[str] = []
    for i, key in enumerate(keys):
        holders = sorted(h for h in who.get(key) or () if h in known)
        if not holders and strict:
            return None
        owner.append(holders[0] if holders else workers[spread_owner(i, len(keys),
                                                                      len(workers))])
    return owner


def fold_homes(rows: Sequence[RowGroup], n_blocks: int) -> list[str | None]:
    """The worker that reduces each block's folded partials: contiguous runs over the workers.

    Each worker of ``rows`` reduces (and finishes) a run of the blocks, so that
    the reduction moves each block's partials once and its work is spread.

    Examples
    --------
    >>> fold_homes([RowGroup("a", [0]), RowGroup("a", [1]), RowGroup("b", [2])], 3)
    ['a', 'a', 'b']
    """
    homes = list(dict.fromkeys(g.worker for g in rows))
    return [homes[spread_owner(b, n_blocks, len(homes))] for b in range(n_blocks)]


def on_worker(worker: str | None) -> Any:
    """Context in which the tasks created run on ``worker`` (or anywhere if it is lost).

    Dask would otherwise run a task where most of its input bytes are, and a
    row chunk often outweighs a shard's blocks: the blocks would be copied to
    the chunks instead of the chunks to the blocks.  Idle workers do not steal
    such tasks either (:class:`KeepPlaced`).
    """
    if worker is None or worker == "?":
        return contextlib.nullcontext()
    client = active_client()
    if client is not None:
        keep_placed(client)  # not stolen by idle workers either (once per client)
    return dask.annotate(workers=[worker], allow_other_workers=True)


class PlacedArray(da.Array):
    """A dask array whose computation keeps its tasks' worker annotations.

    dask.array's low-level fusion flattens a graph and drops its layers'
    annotations (:func:`daskdepth.runtime.client.keep_placement`), among them
    the worker each shard task must run on; without them the scheduler may
    run a shard's task elsewhere to balance the load and copy the shard's
    blocks there.  Computing this array directly (``compute``, ``persist``,
    ``dask.compute``, ``client.compute``) skips that fusion; arrays derived
    from it are ordinary dask arrays.
    """

    __slots__ = ()

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        with dask.config.set({"optimization.fuse.active": False}):
            return da.Array.__dask_optimize__(dsk, keys, **kwargs)


def placed(array: da.Array) -> da.Array:
    """``array`` as a :class:`PlacedArray` (the same graph, keys and chunks)."""
    return PlacedArray(array.dask, array.name, array.chunks, meta=array._meta)
