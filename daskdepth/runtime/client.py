"""Where tasks run: the distributed client if any, spans, and broadcasting read-only objects."""

from __future__ import annotations

import contextlib
import uuid
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
    """Make a large read-only object available to every task that needs it, under ``name``.

    On a distributed cluster it is scattered once to every worker; otherwise it
    becomes a single graph key, shared by reference by the local schedulers.
    Either way its key is ``name`` (a :func:`daskdepth.runtime.keys.key_name`),
    so the dashboard shows it in the group of its verb (``client.scatter`` names
    a lone object ``<type>-<uuid>``, but keeps the keys of a dict).  Scattered
    keys get a unique suffix: a key reused soon after an earlier job released it
    could meet that release on the scheduler.
    """
    client = active_client()
    if client is not None:
        key = f"{name}-{uuid.uuid4().hex[:12]}"
        return client.scatter({key: obj}, broadcast=True)[key]
    return delayed(obj, name=name, traverse=False)
