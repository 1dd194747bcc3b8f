"""A thread pool that a job run on dask's threaded scheduler can stop (``--scheduler threads``)."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import dask.threaded

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
