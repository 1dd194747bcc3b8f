"""Kernels compiled before a fit's first pass on a cluster, outside the workers.

A worker that meets a kernel the kernel cache lacks compiles it there, in the
middle of a pass: seconds of a single core, and memory that the compiler
keeps for the life of the process (a few hundred MiB for all the kernels,
where loading them from the cache takes tens), in a process whose memory was
planned full of row chunks and summary blocks.  A fit of 10^6 x 40 on two
1 GiB workers spilled 3,055 keys to disk so with an empty cache.

So before the first pass of a fit on a cluster each worker runs one task
(phase ``kernels``, keys ``daskdepth-warm-*``) that, once per worker process
and kind of fit (:func:`fit_kind`), unless the kernel cache says it holds that
kind's kernels (:func:`daskdepth.kernels._jit.ready_marker`), has a new
Python process fit and score a miniature of the job (:data:`MINI_ROWS`
random rows with the same features and the estimator's own parameters,
:data:`MINI_DIRECTIONS` directions, local scheduler) that goes through every
phase of a large fit, the refinement included.  That process compiles what
the cache lacks into it and ends, taking the compiler's memory with it; the
job's tasks then load each kernel from the cache when they first call it.

One worker goes first, so that the workers of a machine, which share its
cache, compile once.  Nothing here changes a result: the miniature is thrown
away, and when it fails the kernels compile during the passes, as they would
without it.  Without a kernel cache
(:func:`daskdepth.kernels._jit.kernel_cache_dir` is None) the miniature runs
in the worker itself: the job would compile there anyway.
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
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from sklearn.base import clone

from ..fitting.offset import SAMPLE_SIZE
from ..fitting.summaries import overfull_pilot
from ..kernels._jit import ready_marker
from ..runtime.client import active_client, phase, unheard_phases, worker_records
from ..runtime.keys import fresh_token, key_name

logger = logging.getLogger(__name__)

#: Rows of the miniature fit, in chunks of :data:`MINI_CHUNK` rows: more than a
#: fit's row sample (:data:`daskdepth.fitting.offset.SAMPLE_SIZE`), so that it
#: samples its rows and counts them in a histogram pass, as a large job does.
MINI_CHUNK = SAMPLE_SIZE // 4
MINI_ROWS = SAMPLE_SIZE + MINI_CHUNK
#: At most this many bytes of miniature rows: wider data (over 100 features) gets
#: fewer rows, all of them in its row sample, and the kernels of the passes that
#: count rows compile during the job.
MINI_BYTES = 64 * 2**20
#: Directions of the miniature fit: a block of the largest size and one more.
MINI_DIRECTIONS = 33
#: Tolerance of the miniature fit of a depth with ``tol > 0``: leaves of a few
#: thousand rows, so that the fit stays small.
MINI_TOL = 1e-2
#: The miniature's pilot leaves aim at this many times their usual size, so that
#: the histogram finds leaves too heavy and the refinement runs, as in large jobs
#: (:func:`daskdepth.fitting.summaries.overfull_pilot`).
MINI_OVERFULL = 3.0

#: Kinds of fit (:func:`fit_kind`) whose kernels this process has seen to.
_done: set[str] = set()
_done_lock = threading.Lock()


def fit_kind(estimator: Any, n_features: int) -> str:
    """What decides which kernels a fit compiles: the class, the parameters, the features.

    Not the number of directions, the seed or the outlier share, which only
    change sizes.

    Examples
    --------
    >>> import daskdepth
    >>> fit_kind(daskdepth.IRW(tol=1e-3), 5) == fit_kind(daskdepth.IRW(tol=1e-2), 5)
    True
    >>> fit_kind(daskdepth.IRW(), 5) == fit_kind(daskdepth.IRW(), 6)
    False
    """
    params = miniature(estimator).get_params(deep=False)
    return tokenize(type(estimator).__module__, type(estimator).__qualname__,
                    sorted(params.items(), key=lambda kv: kv[0]), int(n_features))


def miniature(estimator: Any) -> Any:
    """An unfitted copy of ``estimator`` for the miniature fit (fewer directions, quiet).

    Examples
    --------
    >>> import daskdepth
    >>> miniature(daskdepth.AIIRW(n_directions=4000, tol=1e-4, verbose=1)).get_params()["tol"]
    0.01
    """
    mini = clone(estimator)
    params = mini.get_params(deep=False)
    # 'auto' too: its pilot runs on the client, not in the workers
    changes: dict[str, Any] = {"verbose": 0, "random_state": 0, "contamination": 0.1,
                               "n_directions": MINI_DIRECTIONS}
    tol = params.get("tol")
    if isinstance(tol, (int, float)) and tol > 0:
        changes["tol"] = MINI_TOL
    return mini.set_params(**{k: v for k, v in changes.items() if k in params})


def run_miniature(estimator: Any, n_features: int) -> None:
    """Fit and score the miniature of ``estimator`` on random rows, here, with the local scheduler.

    Sets the local scheduler for the whole process while it runs (``dask.config``
    is global): only for a process that runs nothing else meanwhile.
    """
    n = max(MINI_CHUNK, min(MINI_ROWS, MINI_BYTES // (8 * n_features)))
    rows = np.random.default_rng(0).standard_normal((n, n_features))
    x = da.from_array(rows, chunks=(MINI_CHUNK, n_features))
    with unheard_phases(), overfull_pilot(MINI_OVERFULL), dask.config.set(scheduler="sync"):
        mini = miniature(estimator).fit(x)
        mini.score_samples(x).compute()


#: Longest a worker waits for the process that compiles its kernels (then the job compiles).
COMPILE_TIMEOUT = 900


def _compile_apart(estimator: Any, n_features: int, marker: Path) -> str:
    """Run the miniature in a new Python process, which compiles into the kernel cache.

    The compiler's memory (a few hundred MiB for all the kernels, which a
    process keeps until it ends) goes with that process; the worker then
    loads the cached kernels, a small part of it.  What happened, in words.
    """
    import cloudpickle

    # the worker's own import path: classes and modules it was sent (upload_file) included
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(marker)],
            input=cloudpickle.dumps((estimator, int(n_features))), capture_output=True,
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


def _warm_here(estimator: Any, n_features: int, kind: str, client_pid: int) -> dict[str, Any]:
    """In a worker, once per kind of fit: see that the kernel cache holds the job's kernels.

    Where the cache says it does (its :func:`~daskdepth.kernels._jit.ready_marker`),
    nothing is left to do: the job's tasks load each kernel from the cache
    when first called (milliseconds, and a small part of the memory compiling
    takes).  Otherwise a new process runs the miniature and caches its kernels.
    Without a kernel cache the miniature runs here (the job would compile
    here anyway).  Nothing in the client's own process (a cluster of threads):
    its kernels are the client's, and the miniature would set the local
    scheduler for the client too.
    """
    start = time.perf_counter()
    with _done_lock:
        first = kind not in _done and os.getpid() != client_pid
        _done.add(kind)
    how = "ready"
    if first:
        marker = ready_marker(kind)
        if marker is not None and marker.exists():
            how = "cached"
        elif marker is not None:
            how = _compile_apart(estimator, n_features, marker)
        else:
            try:
                run_miniature(estimator, n_features)
                how = "compiled here"
            except Exception as exc:  # noqa: BLE001 - only a head start: the job compiles
                how = _not_compiled(f"miniature failed ({exc!r})")
            _trim_memory()
    return {"how": how, "seconds": time.perf_counter() - start}


def _trim_memory() -> None:
    """Give the miniature's freed memory back to the system (glibc keeps it otherwise)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def warm_workers(estimator: Any, n_features: int) -> dict[str, dict[str, Any]]:
    """Have every worker of the active cluster load or compile ``estimator``'s kernels.

    What each worker did, by address: ``how``, in words (``'ready'``: this
    kind of fit was readied before in the process, or the process is the
    client's; ``'cached'``: the cache holds this kind's kernels; ``'compiled
    apart'``: a new process compiled them into the cache; ``'compiled
    here'``: no cache, the worker ran the miniature; or why none of these
    happened), and ``seconds``.  Empty without a distributed client.  A
    worker that leaves meanwhile is skipped.
    """
    client = active_client()
    if client is None:
        return {}
    try:
        workers = sorted(worker_records(client))
    except Exception:  # noqa: BLE001 - the scheduler did not answer: the passes will say
        return {}
    if not workers:
        return {}
    kind = fit_kind(estimator, n_features)
    mini = miniature(estimator)
    token = fresh_token()  # one warm-up per fit: keys never shared with another

    def submit(i: int, addr: str) -> Any:
        # loose restriction: a worker that left meanwhile must not leave the task waiting
        return client.submit(_warm_here, mini, n_features, kind, os.getpid(),
                             key=key_name("warm", token, i), workers=[addr],
                             allow_other_workers=True, pure=False)

    done: dict[str, dict[str, Any]] = {}
    with phase("kernels"):
        first = submit(0, workers[0])
        futures = [first]
        with contextlib.suppress(Exception):
            first.result()  # a cold cache shared by the machine's workers: one compiles
        futures += [submit(i, addr) for i, addr in enumerate(workers[1:], 1)]
        for addr, future in zip(workers, futures, strict=True):
            try:
                done[addr] = future.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker: the fit's passes go on
                logger.debug("worker %s did not warm its kernels: %r", addr, exc)
            future.release()
    if done:
        logger.debug("kernels ready on %d workers: %s", len(done), done)
    return done


def _main() -> None:
    """``python -m daskdepth.estimators.warmup MARKER``: the miniature of a pickled estimator.

    Reads ``(estimator, n_features)`` (cloudpickle) from standard input, runs
    its miniature, which caches every kernel it compiles, and writes the
    marker file that says so.
    """
    import cloudpickle

    estimator, n_features = cloudpickle.loads(sys.stdin.buffer.read())
    run_miniature(estimator, n_features)
    marker = Path(sys.argv[1])
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(f"kernels of {type(estimator).__name__} with {n_features} features cached\n")
    os.replace(tmp, marker)


if __name__ == "__main__":
    _main()
