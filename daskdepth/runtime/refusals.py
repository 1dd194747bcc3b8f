"""Why a fit would not fit in memory: the warnings and refusals given before it starts.

From the shape of the data and the parameters alone, with the sizes of
:mod:`daskdepth.runtime.memory`: :func:`summary_memory_message` warns when the
depth summary takes much of a worker's memory, :func:`plan_memory_message` and
:func:`mass_plan_message` say why a fit cannot fit at all, and what would
(fewer directions, a larger ``tol``, more memory).
"""

from __future__ import annotations

from .client import active_client
from .memory import (
    BYTES_PER_SORTED_VALUE,
    WorkerMemory,
    fitting_leaf_bytes,
    leaves_per_direction,
    local_memory,
    sorted_summary_bytes,
    summary_bytes,
    worker_memory,
)

#: Share of a worker's memory limit above which the summary size is reported.
SUMMARY_SHARE = 1 / 4


def summary_memory_message(m: int, n: int, tol: float,
                           memory: WorkerMemory | None = None,
                           exact: bool = False) -> str | None:
    """A warning text when the summary's share would take much of a worker's memory.

    The summary is sharded over the workers (or held by this process under a
    local scheduler): each holds ``1 / workers`` of its bytes.

    ``exact`` means the sorted projections (:func:`~daskdepth.runtime.memory.sorted_summary_bytes`),
    otherwise leaves (:func:`~daskdepth.runtime.memory.summary_bytes`).

    Examples
    --------
    >>> summary_memory_message(4000, 10**6, 1e-4, WorkerMemory(2**30, 1)) is not None
    True
    >>> summary_memory_message(4000, 10**6, 1e-4, WorkerMemory(2**30, 1, 2)) is None
    True
    >>> summary_memory_message(50, 10**7, 1e-3, WorkerMemory(2**30, 1)) is None
    True
    >>> summary_memory_message(16_600, 3_062, 1e-4, WorkerMemory(2**30, 1), exact=True)[:50]
    'the exact depth summary (sorted projections of 3,0'
    >>> summary_memory_message(16_600, 3_062, 1e-4, WorkerMemory(24 * 2**30, 2), exact=True)
    """
    mem = memory or worker_memory()
    size = sorted_summary_bytes(m, n) if exact else summary_bytes(m, n, tol)
    share = size / max(1, mem.workers)
    if share <= SUMMARY_SHARE * mem.limit:
        return None
    what = (f"the exact depth summary (sorted projections of {n:,} rows) of {m} directions"
            if exact else f"the depth summary of {m} directions at tol={tol:g}")
    where = ("in this process" if mem.workers <= 1 else
             f"sharded over {mem.workers} workers, about {share / 2**20:,.0f} MiB on each")
    more = "" if mem.workers <= 1 else ", add workers"
    return (f"{what} takes about {size / 2**20:,.0f} MiB ({where}), more than a quarter of "
            f"the memory limit ({mem.limit / 2**20:,.0f} MiB); workers may spill or pause. "
            f"Raise tol, lower n_directions{more}, or give the workers more memory")


#: Share of the smallest worker memory limit above which a fit is refused before it starts:
#: each worker holds its share of the summary next to the tasks' working sets.
SUMMARY_REFUSE_SHARE = 1 / 2


#: Share of this machine's memory that the fit's client-side arrays (the directions, and
#: under a local scheduler the summary, assembled here) may take.
CLIENT_SHARE = 1 / 2


def _size(nbytes: float) -> str:
    """``1.5 GiB``: a byte count for messages."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes / 2**10:,.1f} KiB"


def plan_memory_message(n: int, d: int, m: int, tol: float,
                        memory: WorkerMemory | None = None,
                        local: WorkerMemory | None = None,
                        in_memory: bool = False,
                        sharded: bool | None = None) -> str | None:
    """Why a fit of ``m`` directions over ``n x d`` rows at ``tol`` cannot fit in memory.

    None when it can.  Checked before the first pass, from the shape alone: the
    summary (at most ``leaves_per_direction(n, tol)`` leaves per direction while
    it is fitted, sharded over the workers) must leave each worker's share under
    half the smallest worker's memory limit, and the directions (with the
    summary when it is not ``sharded``: under a local scheduler this process
    holds it) under half of this machine's memory.  ``sharded`` defaults to
    whether a distributed client runs the fit.  The message says what would
    fit: fewer directions, a larger ``tol``, more memory.  ``in_memory``: all
    rows fit the row sample, so the summary may be the sorted projections when
    smaller (:func:`~daskdepth.runtime.memory.prefer_sorted`).

    Examples
    --------
    >>> mem = WorkerMemory(2**33, 1)
    >>> print(plan_memory_message(10**7, 5, 10**7, 1e-4, mem, mem))
    ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    the fit needs about 2.9 TiB for its depth summary (10,000,000 directions x up to 10,001
    leaves at tol=0.0001), more than half of a worker's memory limit (8.0 GiB): use
    n_directions <= 13,418, or tol >= 0.083, or workers with more memory
    >>> plan_memory_message(10**7, 5, 500, 1e-4, mem, mem) is None
    True
    >>> two = WorkerMemory(2**30, 1, 2)  # the summary's share on each of 2 workers
    >>> plan_memory_message(10**6, 40, 4000, 1e-4, two, mem, sharded=True) is None
    True
    """
    mem = memory or worker_memory()
    here = local or local_memory()
    if sharded is None:
        sharded = active_client() is not None
    workers = max(1, mem.workers) if sharded else 1
    leaves = leaves_per_direction(n, tol)
    per_leaf = fitting_leaf_bytes(n)
    if in_memory and sorted_summary_bytes(1, n) < leaves * per_leaf:  # as prefer_sorted()
        leaves, per_leaf = int(n), BYTES_PER_SORTED_VALUE
    summary = int(m) * leaves * per_leaf
    held = 0 if sharded else summary  # what this process holds of the summary
    directions = 8 * int(m) * int(d)
    worker_room = SUMMARY_REFUSE_SHARE * mem.limit * workers
    client_room = CLIENT_SHARE * here.limit
    if summary > worker_room:
        need, room, limit = summary, worker_room, mem.limit * workers
        where = ("half of a worker's memory limit" if workers == 1 else
                 f"half of the memory limit of {workers} workers")
    elif held + directions > client_room:
        need, room, where = held + directions, client_room, "half of this machine's memory"
        limit = here.limit
    else:
        return None
    exact = " (tol=0: exact, one leaf per distinct value)" if tol <= 0 else f" at tol={tol:g}"
    kept = (f"{leaves:,} sorted values (exact)" if per_leaf == BYTES_PER_SORTED_VALUE else
            f"up to {leaves:,} leaves{exact}")
    if need == summary:
        what = f"its depth summary ({m:,} directions x {kept})"
    elif held:
        what = f"its {m:,} directions of {d:,} features and its depth summary ({m:,} x {kept})"
    else:
        what = f"its {m:,} directions of {d:,} features"
    max_m = int(room // ((leaves * per_leaf if need == summary or held else 0) + 8 * d))
    fixes = [f"n_directions <= {max_m:,}" if max_m >= 1 else None]
    max_leaves = int(room // max(1, m * per_leaf)) - 1
    if (need == summary or held) and max_leaves >= 2 and max_leaves < n:
        fixes.append(f"tol >= {1.0 / max_leaves:.2g}")
    options = ", or ".join(f for f in fixes if f)
    return (f"the fit needs about {_size(need)} for {what}, more than {where} "
            f"({_size(limit)}): use {options + ', or ' if options else ''}"
            f"{'workers with more memory' if need == summary else 'a machine with more memory'}")


def mass_plan_message(d: int, t: int, psi: int, memory: WorkerMemory | None = None,
                      local: WorkerMemory | None = None) -> str | None:
    """Why a half-space mass fit of ``t`` half-spaces cannot fit in memory; None when it can.

    Its fitted state (per half-space: a direction of ``d`` features, a split
    point, a mass and ``psi`` subsample row indices) is built on the client and
    sent to every scoring task, so it must stay under half the smallest
    worker's memory limit and half of this machine's memory.

    Examples
    --------
    >>> mem = WorkerMemory(2**33, 1)
    >>> print(mass_plan_message(5, 10**8, 32, mem, mem))
    ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    the fit needs about 29.1 GiB for 100,000,000 half-spaces of 5 features (directions, split
    points, masses and 32 subsample rows each), more than half of a worker's memory limit
    (8.0 GiB): use n_directions <= 13,765,920, or workers with more memory
    >>> mass_plan_message(5, 1000, 32, mem, mem) is None
    True
    """
    mem = memory or worker_memory()
    here = local or local_memory()
    per = 8 * (int(d) + 2 + int(psi))
    need = int(t) * per
    worker_room, client_room = SUMMARY_REFUSE_SHARE * mem.limit, CLIENT_SHARE * here.limit
    if worker_room <= client_room:
        room, where, limit, more = worker_room, "half of a worker's memory limit", mem.limit, \
            "workers"
    else:
        room, where, limit, more = client_room, "half of this machine's memory", here.limit, \
            "a machine"
    if need <= room:
        return None
    return (f"the fit needs about {_size(need)} for {int(t):,} half-spaces of {int(d):,} features "
            f"(directions, split points, masses and {int(psi):,} subsample rows each), more than "
            f"{where} ({_size(limit)}): use n_directions <= {int(room // per):,}, or "
            f"{more} with more memory")
