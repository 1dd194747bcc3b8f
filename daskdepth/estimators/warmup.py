"""Kernels compiled before a fit's first pass on a cluster, outside the workers.

A worker that meets a kernel the kernel cache lacks compiles it there, in the
middle of a pass: seconds of a single core, and memory that the compiler
keeps for the life of the process (a few hundred MiB for all the kernels,
where loading them from the cache takes tens), in a process whose memory was
planned full of row chunks and summary blocks.  A fit of 10^6 x 40 on two
1 GiB workers spilled 3,055 keys to disk so with an empty cache.

So before the first pass of a fit on a cluster each worker runs one task
(phase ``kernels``, keys ``daskdepth-warm-*``; the worker's side is
:mod:`daskdepth.runtime.warm`) that, once per worker process and kind of fit
(:func:`fit_kind`), unless the kernel cache says it holds that kind's kernels
(:func:`daskdepth.kernels._jit.ready_marker`), has a new Python process fit
and score a miniature of the job (:data:`MINI_ROWS` random rows with the same
features and the estimator's own parameters, :data:`MINI_DIRECTIONS`
directions, local scheduler) that goes through every phase of a large fit, the
refinement included.  That process compiles what the cache lacks into it and
ends, taking the compiler's memory with it; the job's tasks then load each
kernel from the cache when they first call it.

The miniature travels pickled, as bytes, and is unpickled only where it runs:
a worker whose cache is ready does not import this module, the estimators or
scikit-learn (the passes do not need them).  The workers warm up at the same
time; those of a machine, which share its cache, take turns through a lock
file, so that one compiles and the others then find the cache's record.
Nothing here changes a result: the miniature is thrown away, and when it
fails the kernels compile during the passes, as they would without it.
Without a kernel cache (:func:`daskdepth.kernels._jit.kernel_cache_dir` is
None) the miniature runs in the worker itself: the job would compile there
anyway.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from sklearn.base import clone

from ..errors import ClusterSettingWarning, user_stacklevel
from ..fitting.offset import SAMPLE_SIZE
from ..runtime.client import (
    PROFILER_CHOICE,
    TASK_PROFILER,
    active_client,
    owns_local_cluster,
    phase,
    stop_task_profiler,
    unheard_phases,
    worker_records,
)
from ..runtime.keys import fresh_token, key_name
from ..runtime.warm import warm_here

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
#: (:func:`daskdepth.fitting.summaries.pilot_aim`; the miniature's ``_pilot_overfull``,
#: which a depth with leaf summaries passes to its fit).
MINI_OVERFULL = 3.0


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
    mini = miniature(estimator)
    mini._pilot_overfull = MINI_OVERFULL  # read by the fit of a depth with leaf summaries
    with unheard_phases(), dask.config.set(scheduler="sync"):
        mini.fit(x)
        mini.score_samples(x).compute()


def miniature_job(estimator: Any, n_features: int) -> bytes:
    """The miniature of ``estimator``'s fit, pickled for :func:`daskdepth.runtime.warm.warm_here`.

    ``(callable, description)``: the callable runs :func:`run_miniature`.

    Examples
    --------
    >>> import cloudpickle, daskdepth
    >>> run, description = cloudpickle.loads(miniature_job(daskdepth.IRW(), 3))
    >>> description
    'kernels of IRW with 3 features cached'
    """
    import cloudpickle  # only here: the one place that pickles the miniature

    return cloudpickle.dumps((functools.partial(run_miniature, miniature(estimator),
                                                int(n_features)),
                              f"kernels of {type(estimator).__name__} with {n_features} "
                              "features cached"))


def warm_workers(estimator: Any, n_features: int) -> dict[str, dict[str, Any]]:
    """Have every worker of the active cluster load or compile ``estimator``'s kernels.

    What each worker did, by address: ``how``, in words (``'ready'``: this
    kind of fit was readied before in the process, or the process is the
    client's; ``'cached'``: the cache holds this kind's kernels; ``'compiled
    apart'``: a new process compiled them into the cache; ``'compiled
    here'``: no cache, the worker ran the miniature; or why none of these
    happened), ``seconds`` and ``profiler_can_deadlock``.  Empty without a
    distributed client.  A worker that leaves meanwhile is skipped.  Turns off
    the task profiler where it can deadlock a worker of a local cluster this
    process started, and warns
    (:class:`~daskdepth.errors.ClusterSettingWarning`, once per worker and
    process) of other workers whose task profiler can deadlock them
    (:func:`_warn_of_profilers`).
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
    job = miniature_job(estimator, n_features)
    token = fresh_token()  # one warm-up per fit: keys never shared with another

    def submit(i: int, addr: str) -> Any:
        # loose restriction: a worker that left meanwhile must not leave the task waiting
        return client.submit(warm_here, job, kind, os.getpid(),
                             key=key_name("warm", token, i), workers=[addr],
                             allow_other_workers=True, pure=False)

    done: dict[str, dict[str, Any]] = {}
    with phase("kernels"):
        futures = [submit(i, addr) for i, addr in enumerate(workers)]
        for addr, future in zip(workers, futures, strict=True):
            try:
                done[addr] = future.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker: the fit's passes go on
                logger.debug("worker %s did not warm its kernels: %r", addr, exc)
            future.release()
    if done:
        logger.debug("kernels ready on %d workers: %s", len(done), done)
    _warn_of_profilers(done, client)
    return done


#: Workers whose deadlock-prone task profiler was warned of in this process.
_warned: set[str] = set()
_warned_lock = threading.Lock()

#: The one-time fix of the workers' setting, as a dask config file says it (YAML).
PROFILER_YAML = "distributed: {worker: {profile: {enabled: false}}}"


def _warn_of_profilers(done: dict[str, dict[str, Any]], client: Any = None) -> None:
    """Deal with workers whose task profiler can stop them for good (Python 3.11).

    On a local cluster this process started (``Client()``), the profiler is
    turned off on those workers (:func:`daskdepth.runtime.client.stop_task_profiler`),
    without a word: nothing else runs on them, and the setting would have to
    be made before the cluster started.  Unless the dask setting
    :data:`daskdepth.runtime.client.PROFILER_CHOICE` is ``'keep'``.  Other
    workers (a scheduler's address, a cluster started elsewhere) are not this
    process's to configure: warned of, once per worker and process, with the
    one-time fix where they start.
    """
    at_risk = {addr for addr, r in done.items() if r.get("profiler_can_deadlock")}
    if not at_risk:
        return
    if client is not None and owns_local_cluster(client) \
            and dask.config.get(PROFILER_CHOICE, "auto") != "keep":
        try:
            stopped = client.run(stop_task_profiler, workers=sorted(at_risk))
        except Exception as exc:  # noqa: BLE001 - a worker gone meanwhile: warned of below
            logger.debug("could not turn off the task profiler: %r", exc)
        else:
            logger.info("turned off the task profiler of %d workers of this process's local "
                        "cluster (it can deadlock a Python 3.11 worker)", len(stopped))
            return
    with _warned_lock:
        new = sorted(at_risk - _warned)
        _warned.update(new)
    if not new:
        return
    env = "DASK_" + TASK_PROFILER.upper().replace(".", "__").replace("-", "_")
    warnings.warn(
        f"{len(at_risk)} of {len(done)} workers ({', '.join(sorted(at_risk)[:3])}"
        f"{', ...' if len(at_risk) > 3 else ''}) run Python 3.11 with distributed's task "
        "profiler on, which can stop a worker for good, with no CPU and no error (CPython "
        "gh-106883). Turn it off once for good where the workers start: a dask config file "
        f"they read (e.g. ~/.config/dask/distributed.yaml) with '{PROFILER_YAML}', or "
        f"{env}=False in their environment; or run them on Python 3.12 or later. Warned once "
        "per worker; to silence it: warnings.filterwarnings('ignore', "
        "category=daskdepth.ClusterSettingWarning)",
        ClusterSettingWarning, stacklevel=user_stacklevel())
