"""Where tasks run: the distributed client if any, spans, and broadcasting read-only objects."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import dask
from dask.base import named_schedulers
from dask.delayed import delayed
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


def broadcast(obj: Any, name: str) -> Any:
    """Make a large read-only object available to every task that needs it.

    On a distributed cluster it is scattered once to every worker; otherwise it
    becomes a single graph key, shared by reference by the local schedulers.
    """
    client = active_client()
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, name=name, traverse=False)
