"""Placed tasks stay on their worker: a scheduler plugin that keeps them from work stealing.

daskdepth runs every task that reads a worker's direction blocks on that
worker (:func:`daskdepth.runtime.shards.on_worker`), with loose restrictions
(``allow_other_workers=True``) so that a lost worker never stalls a fit.  Work
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

import logging
import weakref
from typing import Any

from dask.utils import key_split
from distributed.diagnostics.plugin import SchedulerPlugin

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
