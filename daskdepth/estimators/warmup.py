"""Kernels ready in every worker before a fit's first pass: loaded from the cache, or compiled.

A worker that meets a kernel for the first time in the middle of a pass
compiles it there: seconds of a single core, and tens of megabytes that the
compiler keeps, in a process whose memory was planned full of row chunks and
summary blocks (a fit of 10^6 x 40 on two 1 GiB workers spilled to disk the
first time, and not once its kernels were cached).  So before the first pass
of a fit on a cluster each worker runs one task (phase ``kernels``, keys
``daskdepth-warm-*``) that

1. loads every kernel signature the machine's kernel cache holds
   (:func:`daskdepth.kernels._jit.load_cached`: about a second), and
2. once per worker process and kind of fit, fits and scores a miniature of
   the job (:data:`MINI_ROWS` random rows with the same features and the
   estimator's own parameters, :data:`MINI_DIRECTIONS` directions, local
   scheduler) that goes through every phase of a large fit, the refinement
   included; it compiles whatever step 1 did not find (and caches it for the
   next process).  About a second where the kernels are cached; where they
   are not, the time to compile them, which the job would otherwise spend in
   its passes.

One worker goes first, so that on a cold cache shared by the workers of a
machine one of them compiles and the others load its work.  The memory the
kernels take is then in each worker's memory metrics when the fit plans its
waves (:func:`daskdepth.runtime.memory.free_worker_memory`).  Nothing here
changes a result: the miniature is thrown away, and a failure of it only
means that the kernels compile during the passes as they would without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import threading
import time
import uuid
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from sklearn.base import clone

from ..fitting.offset import SAMPLE_SIZE
from ..fitting.summaries import overfull_pilot
from ..kernels._jit import load_cached, overload_counts
from ..runtime.client import active_client, phase, unheard_phases, worker_records
from ..runtime.keys import key_name

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

#: Kinds of fit (:func:`fit_kind`) whose miniature ran in this process.
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


def _trim_memory() -> None:
    """Give the miniature's freed memory back to the system (glibc keeps it otherwise)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _warm_here(estimator: Any, n_features: int, kind: str, client_pid: int) -> dict[str, Any]:
    """In a worker: load the cached kernels, then (once per kind of fit) run the miniature.

    Not in the client's own process (a cluster of threads): the miniature
    sets the local scheduler for its process, which would reach the client.
    """
    start = time.perf_counter()
    loaded = load_cached()
    before = sum(overload_counts().values())
    ran = False
    with _done_lock:
        first = kind not in _done and os.getpid() != client_pid
        _done.add(kind)
    if first:
        n = max(MINI_CHUNK, min(MINI_ROWS, MINI_BYTES // (8 * n_features)))
        rows = np.random.default_rng(0).standard_normal((n, n_features))
        x = da.from_array(rows, chunks=(MINI_CHUNK, n_features))
        try:
            with unheard_phases(), overfull_pilot(MINI_OVERFULL), \
                    dask.config.set(scheduler="sync"):
                mini = miniature(estimator).fit(x)
                mini.score_samples(x).compute()
            ran = True
        except Exception as exc:  # noqa: BLE001 - only a head start: the job compiles instead
            logger.debug("the miniature fit that compiles the kernels failed: %r", exc)
        del rows, x
        _trim_memory()
    return {"loaded": loaded, "compiled": sum(overload_counts().values()) - before,
            "miniature": ran, "seconds": time.perf_counter() - start}


def warm_workers(estimator: Any, n_features: int) -> dict[str, dict[str, Any]]:
    """Have every worker of the active cluster load or compile ``estimator``'s kernels.

    What each worker did, by address (``loaded``: signatures read from the
    kernel cache, ``compiled``: signatures compiled, ``miniature``: whether it
    ran the miniature fit, ``seconds``); empty without a distributed client.
    A worker that leaves meanwhile is skipped.
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
    token = uuid.uuid4().hex[:12]  # one warm-up per fit: keys never shared with another

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
