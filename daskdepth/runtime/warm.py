"""The worker's side of the ``kernels`` phase: once per process, see that the kernels are cached.

A task of :func:`daskdepth.estimators.warmup.warm_workers` runs
:func:`warm_here` in every worker before a fit's first pass.  It is given the
job that compiles a fit's kernels (a miniature of the fit, pickled on the
client) as bytes, and unpickles it only where it has to run here: a worker
whose machine's cache already holds the kernels imports nothing more than
the passes do (not the estimators, nor scikit-learn: seconds and tens of MiB
in each fresh worker).

Where the cache lacks them, a new Python process (``python -m
daskdepth.runtime.warm MARKER``) runs the job, which caches every kernel it
compiles, and ends, taking the compiler's memory with it.  The workers of a
machine share its cache and take turns through a lock file next to the
cache's record (:func:`daskdepth.kernels._jit.ready_marker`), so that one
compiles and the others then find the record.  Without a kernel cache the job
runs in the worker itself (the fit would compile there anyway).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..kernels._jit import kernel_cache_dir, ready_marker
from .client import profiler_can_deadlock

logger = logging.getLogger(__name__)

#: Kinds of fit whose kernels this process has seen to.
_done: set[str] = set()
_done_lock = threading.Lock()

#: Longest a worker waits for the process that compiles its kernels (then the job compiles).
COMPILE_TIMEOUT = 900

#: Flags of the record and lock files in the kernel cache: never through a link.
_NO_LINK = getattr(os, "O_NOFOLLOW", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINK


def warm_here(job: bytes, kind: str, client_pid: int) -> dict[str, Any]:
    """In a worker, once per ``kind`` of fit: see that the kernel cache holds its kernels.

    ``job`` is a pickled ``(callable, description)``: calling it compiles the
    kernels (and may set process-wide dask settings while it runs, so it runs
    in a process of its own where it can).  Returns what happened, ``how``, in
    words (``'ready'``: seen to before in this process, or this is the
    client's own process, whose kernels are the client's; ``'cached'``: the
    cache's record says it holds them; ``'compiled apart'``; ``'compiled
    here'``: no cache, the job ran in this process; or why none of these
    happened), ``seconds``, and ``profiler_can_deadlock``: whether this
    worker's task profiler runs on a Python where it can deadlock the process
    (:func:`daskdepth.runtime.client.profiler_can_deadlock`), for the client
    to warn.  Nothing here changes a result: when it fails the kernels
    compile during the passes, as they would without it.
    """
    start = time.perf_counter()
    at_risk = profiler_can_deadlock() and _profiler_runs()
    with _done_lock:
        first = kind not in _done and os.getpid() != client_pid
        _done.add(kind)
    how = "ready"
    if first:
        marker = ready_marker(kind)
        if marker is not None:
            with _one_at_a_time(marker):  # the machine's other workers wait, then find it
                how = "cached" if marker.exists() else compile_apart(job, marker)
        else:
            import cloudpickle  # only here: unpickling the job imports what it fits with

            try:
                run, _ = cloudpickle.loads(job)
                run()
                how = "compiled here"
            except Exception as exc:  # noqa: BLE001 - only a head start: the job compiles
                how = _not_compiled(f"miniature failed ({exc!r})")
            _trim_memory()
    return {"how": how, "seconds": time.perf_counter() - start,
            "profiler_can_deadlock": at_risk}


def _profiler_runs() -> bool:
    """Whether the worker running this task samples its threads (distributed's task profiler)."""
    from distributed import get_worker

    try:
        callback = get_worker().periodic_callbacks.get("profile")
    except ValueError:  # not in a worker: nothing samples this task's threads
        return False
    return callback is not None and callback.is_running()


def compile_apart(job: bytes, marker: Path) -> str:
    """Run ``job`` in a new Python process that compiles into the kernel cache; then ``marker``.

    The compiler's memory (a few hundred MiB for all the kernels, which a
    process keeps until it ends) goes with that process; the worker then
    loads the cached kernels, a small part of it.  What happened, in words.
    """
    # the worker's own import path: classes and modules it was sent (upload_file) included
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(marker)], input=job, capture_output=True,
            timeout=COMPILE_TIMEOUT, check=False, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return _not_compiled(f"not compiled apart ({exc!r})")
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return _not_compiled(
            f"not compiled apart (exit status {done.returncode}: {' '.join(tail)})")
    return "compiled apart"


def _not_compiled(why: str) -> str:
    """``why``, logged: the job's kernels compile during its passes, as without a warm-up."""
    logger.debug("kernels not compiled before the job: %s", why)
    return why


@contextlib.contextmanager
def _one_at_a_time(marker: Path) -> Iterator[None]:
    """Held by one process of the machine at a time: an exclusive lock on ``<marker>.lock``.

    Where the folder cannot be locked (no ``fcntl``, a file system without
    locks) it holds nothing: workers may then compile the same kernels at
    once, which costs time, not results (each writes its cache files whole).
    """
    try:
        import fcntl  # only here: POSIX only
    except ImportError:
        fcntl = None
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(marker.with_name(f"{marker.name}.lock"),
                         os.O_CREAT | os.O_RDWR | _NO_LINK, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            logger.debug("kernel cache not locked (%r): workers may compile at once", exc)
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the file releases the lock


def _trim_memory() -> None:
    """Give the job's freed memory back to the system (glibc keeps it otherwise)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _main() -> None:
    """``python -m daskdepth.runtime.warm MARKER``: run the pickled job from standard input.

    The job caches every kernel it compiles; then the marker file says so,
    written 0600 (the cache stays private whatever the umask).  This process
    checks the cache as every process does
    (:func:`daskdepth.kernels._jit.cache_choice`): where it refuses it, or
    chose another, the kernels were not cached there, and no record is
    written (exit status 1).
    """
    import cloudpickle  # only here: the process apart unpickles the job

    run, description = cloudpickle.loads(sys.stdin.buffer.read())
    run()
    marker = Path(sys.argv[1])
    if kernel_cache_dir() != marker.parent:
        sys.exit(f"the kernel cache {marker.parent} was not used by the process apart "
                 f"(its cache: {kernel_cache_dir()}): no record written")
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, _NEW_FILE, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{description}\n")
    os.replace(tmp, marker)


if __name__ == "__main__":
    _main()
