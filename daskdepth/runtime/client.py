"""Where tasks run: the distributed client if any, spans, and broadcasting read-only objects."""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import dask
from dask.base import named_schedulers
from dask.delayed import delayed
from distributed import default_client, span

from .keys import check_phase, unique_key

#: Names of dask's local schedulers (``dask.config.set(scheduler=...)``): with one of
#: them set, tasks run locally even when a distributed Client exists.
LOCAL_SCHEDULERS = frozenset(named_schedulers)


#: Dask setting of the workers' statistical task profiler (``sys._current_frames`` every 10 ms).
TASK_PROFILER = "distributed.worker.profile.enabled"


def profiler_can_deadlock(version: tuple[int, ...] | None = None) -> bool:
    """Whether distributed's task profiler can deadlock a worker on this Python (3.11).

    On CPython 3.11 ``sys._current_frames`` holds the interpreter's
    thread-list lock while it builds its result, which can run the garbage
    collector and so wait for the GIL, while another thread holds the GIL and
    waits for the thread-list lock: a lock-ordering deadlock that stops the
    whole process (CPython gh-106883, distributed issue 8616).  distributed
    already turns off its event-loop profiler on 3.11, but not the workers'
    task profiler, which calls it every 10 ms.  Found in this project as a
    test process that stopped with no CPU in an in-process cluster's scoring.
    A fix went into a later 3.11 release; like distributed, every 3.11 counts.

    Examples
    --------
    >>> profiler_can_deadlock((3, 11, 7)), profiler_can_deadlock((3, 12, 1))
    (True, False)
    """
    return tuple(version or sys.version_info)[:2] == (3, 11)


#: daskdepth's dask setting of what to do with the task profiler of a local cluster this
#: process started, on a Python where it can deadlock: ``'auto'`` (the default) turns it off,
#: ``'keep'`` leaves it on (and warns).  E.g. ``DASK_DASKDEPTH__TASK_PROFILER=keep``.
PROFILER_CHOICE = "daskdepth.task-profiler"


def owns_local_cluster(client: Any) -> bool:
    """Whether ``client``'s cluster is a :class:`distributed.LocalCluster` of this process.

    ``Client()`` starts one, as does ``Client(LocalCluster(...))``; a client
    connected to a scheduler's address has none (its workers are not this
    process's to configure).
    """
    from distributed import LocalCluster

    return isinstance(getattr(client, "cluster", None), LocalCluster)


def stop_task_profiler(dask_worker: Any = None) -> bool:
    """Stop a worker's task profiler (``client.run``); whether it was running.

    The profiler is a periodic callback of the worker (``'profile'``), which
    samples every running thread's frame; removed, it is not started again
    for the life of the worker (the dashboard's profile page stays empty).
    """
    callback = dask_worker.periodic_callbacks.pop("profile", None)
    if callback is None:
        return False
    running = bool(callback.is_running())
    callback.stop()
    return running


def active_client() -> Any | None:
    """The distributed Client that will run computations, if any."""
    if dask.config.get("scheduler", None) in LOCAL_SCHEDULERS:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def worker_records(client: Any) -> dict[str, dict[str, Any]]:
    """The scheduler's record of every connected worker, by address.

    All of them: ``scheduler_info()`` lists only the first few workers unless
    asked for all (``n_workers=-1``), which older clients do not take.  Errors
    of the scheduler's answer are the caller's to handle.
    """
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # pragma: no cover - an older client signature
        info = client.scheduler_info()
    return dict(info["workers"])


#: Told ``(name, True, span_id)`` when a phase starts and ``(name, False, span_id)`` when it
#: ends; ``span_id`` is the distributed span's id, None for work done here without tasks.
PhaseListener = Callable[[str, bool, "str | None"], None]
_listeners: list[PhaseListener] = []
_listeners_lock = threading.Lock()
#: Threads whose phases nobody is told of (:func:`unheard_phases`).
_unheard = threading.local()


@contextlib.contextmanager
def listen_to_phases(listener: PhaseListener) -> Iterator[None]:
    """Call ``listener`` at the start and end of every :func:`phase` inside (progress displays)."""
    with _listeners_lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _listeners_lock:
            _listeners.remove(listener)


@contextlib.contextmanager
def unheard_phases() -> Iterator[None]:
    """Phases run by this thread inside are told to no listener.

    For a job run inside a worker for its own purpose (compiling the kernels
    before a fit, :mod:`daskdepth.estimators.warmup`): with a cluster of
    threads in the client's process, its phases would otherwise show in the
    progress display of the job that asked for it.
    """
    before = getattr(_unheard, "on", False)
    _unheard.on = True
    try:
        yield
    finally:
        _unheard.on = before


def _tell(name: str, started: bool, span_id: str | None) -> None:
    if getattr(_unheard, "on", False):
        return
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(name, started, span_id)


@contextlib.contextmanager
def phase(name: str, *, tasks: bool = True) -> Iterator[None]:
    """Group the tasks submitted inside under the span ``("daskdepth", name)``.

    ``tasks=False`` marks work done here, without Dask tasks (e.g. FastMCD on an
    in-memory sample), so that progress displays can say what the job is doing.
    ``name`` must be one of :data:`daskdepth.runtime.keys.PHASES`, the one list
    of phase names that the progress displays show.
    """
    check_phase(name)
    if not tasks:
        _tell(name, True, None)
        try:
            yield
        finally:
            _tell(name, False, None)
        return
    with span("daskdepth", name) as span_id:
        _tell(name, True, span_id)
        try:
            yield
        finally:
            _tell(name, False, span_id)


def key_names(collection: Any) -> frozenset[str]:
    """Names of the keys of a collection's graph (a tuple key's first item), as strings."""
    return frozenset(str(k[0] if isinstance(k, tuple) else k)
                     for k in collection.__dask_graph__().keys())


def running_tasks(names: frozenset[str], dask_worker: Any = None) -> int:
    """How many tasks whose key name is in ``names`` a worker is running (``client.run``).

    Counts tasks that are still executing after they were cancelled: their
    thread cannot be stopped, and may still write.
    """
    state = dask_worker.state
    running = list(state.executing) + list(state.long_running)
    return sum(1 for ts in running
               if str(ts.key[0] if isinstance(ts.key, tuple) else ts.key) in names)


def broadcast(obj: Any, name: str) -> Any:
    """Make a large read-only object available to every task that needs it, under ``name``.

    On a distributed cluster it is scattered once to every worker; otherwise it
    becomes a single graph key, shared by reference by the local schedulers.
    Either way its key is ``name`` (a :func:`daskdepth.runtime.keys.key_name`),
    so the dashboard shows it in the group of its verb (``client.scatter`` names
    a lone object ``<type>-<uuid>``, but keeps the keys of a dict).  Scattered
    keys get a unique suffix (:func:`daskdepth.runtime.keys.unique_key`, which
    says why).
    """
    client = active_client()
    if client is not None:
        key = unique_key(name)
        return client.scatter({key: obj}, broadcast=True)[key]
    return delayed(obj, name=name, traverse=False)


@contextlib.contextmanager
def sent_in_graph() -> Iterator[None]:
    """Context in which computing a graph that carries data on purpose raises no warning.

    Objects sent once as keys of a graph (recomputable from the scheduler,
    unlike scattered data: row samples, summary blocks and their copies) make
    graphs over 10 MB, and distributed warns about any of them ("Sending large
    graph"), telling the user to load the data with dask instead.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph")
        yield


def keep_placement() -> Any:
    """Context in which computing dask arrays keeps the tasks' worker annotations.

    dask.array's low-level fusion flattens a graph and drops its layers'
    annotations, among them the worker each shard task of the scoring must run
    on (:func:`daskdepth.runtime.placement.on_worker`); without them a task may
    run where its row chunk is and copy the shard there.  The scoring tasks
    are coarse, so not fusing them costs nothing.
    """
    return dask.config.set({"optimization.fuse.active": False})
