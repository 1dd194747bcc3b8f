"""Where tasks run: the distributed client if any, and spans grouping a pass's tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import dask
from dask.base import named_schedulers
from distributed import default_client, span

#: Names of dask's local schedulers (``dask.config.set(scheduler=...)``): with one of
#: them set, tasks run locally even when a distributed Client exists.
LOCAL_SCHEDULERS = frozenset(named_schedulers)


def active_client() -> Any | None:
    """The distributed Client that will run computations, if any."""
    if dask.config.get("scheduler", None) in LOCAL_SCHEDULERS:
        return None
    try:
        return default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Group the tasks submitted inside under the span ``("daskdepth", name)``."""
    with span("daskdepth", name):
        yield


def keep_placement() -> Any:
    """Context in which computing dask arrays keeps the tasks' worker annotations.

    dask.array's low-level fusion flattens a graph and drops its layers'
    annotations, among them the worker each shard task of the scoring must run
    on (:func:`daskdepth.runtime.shards.on_worker`); without them a task may
    run where its row chunk is and copy the shard there.  The scoring tasks
    are coarse, so not fusing them costs nothing.
    """
    return dask.config.set({"optimization.fuse.active": False})
