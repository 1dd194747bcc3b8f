"""Where a job's Dask computations run (:class:`Runner`), and how their progress is shown.

A job runs on a running scheduler (``--scheduler ADDRESS``), on one of Dask's
local schedulers (``--scheduler threads``, ...), or by default on a local
in-process cluster that lives as long as the job.  On a terminal, fitting
shows a progress bar polled from the scheduler's spans (:class:`SpanProgress`)
and writing a bar of its tasks.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import dask
import dask.threaded
from dask.diagnostics import ProgressBar
from distributed import Client, LocalCluster
from distributed.diagnostics.progressbar import progress

from ..runtime.client import LOCAL_SCHEDULERS
from .ui import UI, clear_line, progress_line

#: Seconds between two polls of the scheduler's spans.
POLL_SECONDS = 0.2
#: Task states that count as done in a span.
DONE_STATES = ("memory", "released", "forgotten", "erred")


#: Dask's names of its local thread-pool scheduler.
THREAD_SCHEDULERS = frozenset({"threads", "threading"})
#: Seconds a closing job waits for the tasks its thread pool is running (an
#: interrupted write must end before the temporary is removed).
POOL_CLOSE_SECONDS = 10.0

_PoolBase: type = getattr(dask.threaded, "ContextAwareThreadPoolExecutor",
                          concurrent.futures.ThreadPoolExecutor)


class TaskPool(_PoolBase):  # type: ignore[misc, valid-type]
    """The job's own thread pool for dask's threaded scheduler, which it can stop.

    Dask's default pool lives as long as the process, and its threads finish
    every queued task before the interpreter exits.  A job that fails or is
    interrupted cancels what is queued and waits (boundedly) for what runs, so
    that no task writes into a temporary after it was removed.
    """

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers)
        self._live: set[concurrent.futures.Future] = set()
        self._live_lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future = super().submit(fn, *args, **kwargs)
        with self._live_lock:
            self._live.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future) -> None:
        with self._live_lock:
            self._live.discard(future)

    def stop(self, timeout: float = POOL_CLOSE_SECONDS) -> None:
        """Cancel the queued tasks and wait up to ``timeout`` seconds for the running ones."""
        self.shutdown(wait=False, cancel_futures=True)
        with self._live_lock:
            running = list(self._live)
        concurrent.futures.wait(running, timeout=timeout)


class SpanState(NamedTuple):
    """Progress of the latest daskdepth span: its phase, and its tasks done and in all."""

    phase: str
    done: int
    total: int


def current_phase(since: float = 0.0, dask_scheduler: Any = None) -> SpanState:
    """Progress of the latest daskdepth span started after ``since`` (run on the scheduler)."""
    ext = dask_scheduler.extensions.get("spans")
    if ext is None:
        return SpanState("", 0, 0)
    spans = [s for s in ext.spans_search_by_tag.get("daskdepth", [])
             if len(s.name) >= 2 and s.enqueued >= since]
    if not spans:
        return SpanState("", 0, 0)
    latest = spans[-1]
    states = latest.states
    total = sum(states.values())
    done = sum(states.get(k, 0) for k in DONE_STATES)
    return SpanState(str(latest.name[1]), int(done), int(total))


class SpanProgress:
    """Progress bar of the fitting phases, polled from the scheduler's spans.

    The fit runs ``dask.compute`` on the default client; its phases are
    tagged ``("daskdepth", phase)`` and the scheduler counts their tasks by
    state, which this thread draws on stderr.
    """

    def __init__(self, client: Client, label: str) -> None:
        self.client = client
        self.label = label
        self.start = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SpanProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        clear_line()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                state = SpanState(*self.client.run_on_scheduler(current_phase,
                                                                since=self.start))
            except Exception:  # e.g. a remote scheduler without daskdepth installed
                return
            fraction = state.done / state.total if state.total else 0.0
            what = f"{self.label}: {state.phase}" if state.phase else self.label
            sys.stderr.write(progress_line(what, fraction, time.time() - self.start))
            sys.stderr.flush()


def _has_bokeh() -> bool:
    """Whether the dashboard can be served (it needs bokeh)."""
    return importlib.util.find_spec("bokeh") is not None


class Runner:
    """Where a job's Dask computations run, and how their progress is shown.

    ``address`` None starts a local in-process cluster (threads, one worker
    sized to the machine); the name of a Dask local scheduler
    (:data:`daskdepth.runtime.client.LOCAL_SCHEDULERS`) uses it; anything else
    is the address of a running scheduler.  Use as a context manager: the
    client (and a cluster it started) close on leaving.
    """

    def __init__(self, address: str | None, ui: UI, debug: bool = False) -> None:
        self.address = address
        self.ui = ui
        self.debug = debug
        self.client: Client | None = None
        self.cluster: LocalCluster | None = None
        self.pool: TaskPool | None = None
        self._stack = contextlib.ExitStack()

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
        try:
            timeout = dask.config.get("distributed.comm.timeouts.connect", "30s")
            self.client = Client(address, timeout=timeout, set_as_default=True)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to the Dask scheduler at {address!r}: "
                                  f"{exc}") from None
        self.ui.status(f"connected to the Dask scheduler at {address} "
                       f"(dashboard: {self.client.dashboard_link})")

    def _start_local_cluster(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. the dashboard port is taken
            self.cluster = LocalCluster(
                processes=False, dashboard_address=":8787",
                silence_logs=logging.WARNING if self.debug else logging.CRITICAL)
        self.client = Client(self.cluster, set_as_default=True)
        nthreads = sum(self.client.nthreads().values())
        note = "" if _has_bokeh() else " (install bokeh to use it)"
        self.ui.status(f"local Dask cluster with {nthreads} threads; dashboard: "
                       f"{self.client.dashboard_link}{note}")

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

    @contextlib.contextmanager
    def progress(self, label: str) -> Iterator[None]:
        """Progress of the computations run inside (a bar on stderr when it is a terminal)."""
        if not self.ui.progress:
            yield
            return
        if self.client is None:
            self.ui.status(f"{label}:")
            with ProgressBar(minimum=1.0, out=sys.stderr):
                yield
            return
        with SpanProgress(self.client, label):
            yield

    def compute(self, collection: Any, label: str) -> Any:
        """Compute a dask collection, with a progress bar of its tasks when wanted."""
        if self.client is None:
            with self.progress(label):
                return dask.compute(collection)[0]
        future = self.client.compute(collection)
        if self.ui.progress:
            self.ui.status(f"{label}:")
            with contextlib.redirect_stdout(sys.stderr):
                progress(future)
        return future.result()
