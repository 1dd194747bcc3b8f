"""Where a job's Dask computations run (:class:`Runner`).

A job runs on a running scheduler (``--scheduler ADDRESS``, checked first by
:func:`daskdepth.cli.probe.probe_scheduler`), on one of Dask's local schedulers
(``--scheduler threads``, ...; the threaded one on the job's own
:class:`~daskdepth.cli.pool.TaskPool`), or by default on a local in-process
cluster that lives as long as the job, its dashboard on this machine only
unless ``--dashboard-address`` says otherwise.  Its progress is shown by
:class:`daskdepth.cli.progress.Progress`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import dask
from distributed import Client, LocalCluster

from ..runtime.client import (
    LOCAL_SCHEDULERS,
    TASK_PROFILER,
    keep_placement,
    key_names,
    phase,
    profiler_can_deadlock,
    running_tasks,
)
from .parser import DEFAULT_DASHBOARD, DEFAULT_TIMEOUT
from .pool import TaskPool
from .probe import probe_scheduler
from .progress import Progress
from .ui import UI

#: Dask's names of its local thread-pool scheduler.
THREAD_SCHEDULERS = frozenset({"threads", "threading"})
#: Seconds a failed or interrupted computation on a cluster waits for the tasks the
#: workers had started (their threads cannot be stopped, and a running task may still
#: write a chunk) before it gives up and leaves the temporary to them.
STOP_TIMEOUT = 20.0


def _has_bokeh() -> bool:
    """Whether the dashboard can be served (it needs bokeh)."""
    return importlib.util.find_spec("bokeh") is not None


def _with_timeout(call: Callable[[], Any], timeout: float) -> Any:
    """``call()`` in a thread; None when it fails or takes longer than ``timeout`` seconds.

    A client call can hang while it waits for a scheduler that is gone.
    """
    result: list[Any] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            out = call()
            result.append(True if out is None else out)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else None


class Runner:
    """Where a job's Dask computations run, and how their progress is shown.

    ``address`` None starts a local in-process cluster (threads, one worker
    sized to the machine, its dashboard at ``dashboard_address``); the name of
    a Dask local scheduler (:data:`daskdepth.runtime.client.LOCAL_SCHEDULERS`)
    uses it; anything else is the address of a running scheduler, which must
    answer within ``timeout`` seconds.  Use as a context manager: the client
    (and a cluster it started) close on leaving.
    """

    def __init__(self, address: str | None, ui: UI, debug: bool = False, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 dashboard_address: str = DEFAULT_DASHBOARD) -> None:
        self.address = address
        self.ui = ui
        self.debug = debug
        self.timeout = timeout
        self.dashboard_address = dashboard_address
        self.client: Client | None = None
        self.cluster: LocalCluster | None = None
        self.pool: TaskPool | None = None
        #: Set when a computation failed and its tasks may still be running on workers.
        self.stray_writers = False
        self._stack = contextlib.ExitStack()

    @property
    def remote(self) -> bool:
        """Whether tasks run in other processes (a scheduler at an address) that outlive a job."""
        return self.client is not None and self.cluster is None

    def __enter__(self) -> Runner:
        try:
            if self.address in THREAD_SCHEDULERS:
                self.pool = TaskPool(os.cpu_count() or 1)
                self._stack.enter_context(dask.config.set(scheduler=self.address,
                                                          pool=self.pool))
            elif self.address in LOCAL_SCHEDULERS:
                self._stack.enter_context(dask.config.set(scheduler=self.address))
            elif self.address:
                self._connect(self.address)
            else:
                self._start_local_cluster()
        except BaseException:
            self.close()
            raise
        return self

    def _connect(self, address: str) -> None:
        self.ui.status(f"connecting to the Dask scheduler at {address} (waiting up to "
                       f"{self.timeout:g} s; --timeout changes it)")
        probe_scheduler(address, self.timeout)
        try:
            self.client = Client(address, timeout=f"{self.timeout}s", set_as_default=True)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to the Dask scheduler at {address}: "
                                  f"{exc}") from None
        self.ui.status(f"connected to the Dask scheduler at {address} "
                       f"(dashboard: {self.client.dashboard_link})")

    def _start_local_cluster(self) -> None:
        # The workers run in this process: on Python 3.11 their task profiler can
        # stop it for good (profiler_can_deadlock); the dashboard loses its profile page.
        quiet = {TASK_PROFILER: False} if profiler_can_deadlock() else {}
        with warnings.catch_warnings(), dask.config.set(quiet):
            warnings.simplefilter("ignore")  # e.g. the dashboard port is taken
            self.cluster = LocalCluster(
                processes=False, dashboard_address=self.dashboard_address,
                silence_logs=logging.WARNING if self.debug else logging.CRITICAL)
        self.client = Client(self.cluster, set_as_default=True)
        nthreads = sum(self.client.nthreads().values())
        note = "" if _has_bokeh() else " (install bokeh to use it)"
        self.ui.status(f"local Dask cluster with {nthreads} threads; dashboard: "
                       f"{self._dashboard_link()}{note}")

    def _dashboard_link(self) -> str:
        """Where the local cluster's dashboard answers (the host it was bound to).

        distributed's ``dashboard_link`` names the machine's address, on which a
        dashboard bound to 127.0.0.1 does not listen.
        """
        host = self.dashboard_address.rpartition(":")[0].strip("[]")
        try:
            port = self.client.scheduler_info()["services"]["dashboard"]
        except Exception:  # no dashboard (e.g. bokeh missing): distributed's link
            return self.client.dashboard_link
        if host in ("", "0.0.0.0", "::"):
            return self.client.dashboard_link
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/status"

    def close(self) -> None:
        """Close the client and the cluster it started (errors while closing are ignored)."""
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
        for obj in (self.client, self.cluster):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self.client = self.cluster = None
        self._stack.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def progress(self, label: str) -> Progress:
        """Progress of the phases run inside (see :class:`Progress`)."""
        return Progress(self.ui, label, self.client)

    def compute(self, collection: Any, label: str, phase_name: str = "score") -> Any:
        """Compute a dask collection (or a tuple of them) as phase ``phase_name``, with progress.

        On a cluster, when the computation fails or is interrupted, no task of
        it is left running on return (its side effects, such as writing a
        chunk, are over): the futures are cancelled and the workers polled
        until the tasks they had started have finished.  When that cannot be
        confirmed (the scheduler is gone, or :data:`STOP_TIMEOUT` passed),
        :attr:`stray_writers` is set.  (With dask's threaded scheduler,
        :meth:`close` stops the job's own pool.)
        """
        with self.progress(label), phase(phase_name):
            if self.client is None:
                return dask.compute(collection)[0]
            many = isinstance(collection, (tuple, list))
            parts = list(collection) if many else [collection]
            with keep_placement():  # the scoring's shard tasks stay on their workers
                futures = self.client.compute(parts)
            try:
                results = self.client.gather(futures)
            except BaseException:
                self.stray_writers = True
                names = frozenset().union(*(key_names(c) for c in parts))
                self.stray_writers = not self._stop_tasks(futures, names)
                raise
            return tuple(results) if many else results[0]

    def _stop_tasks(self, futures: list[Any], names: frozenset[str]) -> bool:
        """Cancel ``futures`` and wait until no worker runs a task of ``names``.

        Returns whether that was confirmed.
        """
        client = self.client
        deadline = time.monotonic() + STOP_TIMEOUT
        if client is None or client.status != "running":
            return False
        if _with_timeout(lambda: client.cancel(futures, force=True), STOP_TIMEOUT) is None:
            return False
        while True:
            left = deadline - time.monotonic()
            counts = _with_timeout(lambda: client.run(running_tasks, names), max(left, 0.1))
            if counts is None:
                return False
            if not any(counts.values()):
                return True
            if left <= 0:
                return False
            time.sleep(0.1)
