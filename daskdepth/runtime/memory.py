"""Default chunk sizes derived from the memory of the workers that run the tasks.

A histogram, refinement or scoring task holds a row chunk of ``R`` rows and
``d`` features and works on one block of ``B`` directions at a time:

    working set <= R * (16 d + 16 B + 16) bytes

(the chunk, its centred copy, room for the block's projections and leaf
indices, and the output).  This is an upper bound: with up to 32 features the
kernels project and route 256 rows at a time and keep no per-block arrays; wider
data has its block's projections computed beforehand (``8 B`` bytes per row).
Each task may use :data:`TASK_SHARE` of the memory of one worker
thread, so that the tasks running at once, the chunks waiting for them and the
worker's share of the summary stay well below the ``distributed.worker.memory``
spill threshold (70 % of the limit by default).  Rows per chunk (for in-memory
input) and directions per block (for every fit) follow from that budget, and
the directions planned and counted together (a *wave*, see
:func:`directions_per_wave`) from the memory of the pilot leaves.

Neither choice changes results: summaries are built direction by direction
and their leaf statistics merge exactly, so the depth does not depend on how
rows are chunked or directions are blocked.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from distributed.system import MEMORY_LIMIT

from ..summary.leaves import LUT32_MAX_ROWS
from .client import active_client, worker_records

#: Share of one worker thread's memory that the working set of one task may use.
TASK_SHARE = 1 / 8


#: Most directions per block (the block size of small, memory-rich tasks).
MAX_DIRECTIONS_PER_BLOCK = 32


#: Bytes of a task's working set per row, per feature and per direction (see above).
BYTES_PER_ROW_FEATURE = 16


BYTES_PER_ROW_DIRECTION = 16


BYTES_PER_ROW = 16


@dataclass(frozen=True)
class WorkerMemory:
    """Memory limit (bytes) and thread count of the smallest worker per thread.

    ``workers`` counts the workers (1 for this process under a local scheduler):
    a summary sharded over them takes a ``1 / workers`` share of its bytes on each.
    """

    limit: int
    nthreads: int
    workers: int = 1

    @property
    def per_thread(self) -> int:
        return max(1, self.limit // max(1, self.nthreads))

    @property
    def task_budget(self) -> int:
        """Bytes the working set of one task may use."""
        return max(1, int(self.per_thread * TASK_SHARE))


def _local_memory() -> WorkerMemory:
    """The machine's memory (cgroup-aware) shared by the local threaded scheduler."""
    return WorkerMemory(int(MEMORY_LIMIT), os.cpu_count() or 1)


def worker_memory() -> WorkerMemory:
    """Memory per thread of the workers that will run daskdepth's tasks.

    With a distributed client: the worker with the least memory per thread
    (a worker without a memory limit counts as having the machine's memory);
    otherwise, or while no worker is connected, the local machine.

    Examples
    --------
    >>> mem = worker_memory()
    >>> mem.task_budget > 0 and mem.nthreads >= 1
    True
    """
    local = _local_memory()
    client = active_client()
    if client is None:
        return local
    try:
        workers = worker_records(client).values()
    except Exception:  # pragma: no cover - the scheduler did not answer
        return local
    workers = list(workers)
    best: WorkerMemory | None = None
    for w in workers:
        limit = int(w.get("memory_limit") or 0) or local.limit
        cand = WorkerMemory(limit, max(1, int(w.get("nthreads") or 1)), len(workers))
        if best is None or cand.per_thread < best.per_thread:
            best = cand
    return best if best is not None else local


def rows_per_chunk(d: int, memory: WorkerMemory | None = None,
                   block: int = MAX_DIRECTIONS_PER_BLOCK) -> int:
    """Most rows of ``d`` features whose task working set fits the task budget.

    Examples
    --------
    >>> rows_per_chunk(5, WorkerMemory(2**30, 1))
    220752
    """
    mem = memory or worker_memory()
    per_row = BYTES_PER_ROW_FEATURE * d + BYTES_PER_ROW_DIRECTION * block + BYTES_PER_ROW
    return max(1, mem.task_budget // per_row)


def directions_per_block(d: int, rows: int, memory: WorkerMemory | None = None) -> int:
    """Directions per block for tasks over row chunks of at most ``rows`` rows.

    The largest block (at most :data:`MAX_DIRECTIONS_PER_BLOCK`, at least 1)
    whose task working set fits the task budget.

    Examples
    --------
    >>> directions_per_block(5, 100_000, WorkerMemory(2**30, 1))
    32
    >>> directions_per_block(5, 400_000, WorkerMemory(2**30, 1))
    14
    >>> directions_per_block(5, 400_000, WorkerMemory(2**30, 4))
    1
    """
    mem = memory or worker_memory()
    rows = max(1, int(rows))
    free = mem.task_budget // rows - BYTES_PER_ROW_FEATURE * d - BYTES_PER_ROW
    return int(min(MAX_DIRECTIONS_PER_BLOCK, max(1, free // BYTES_PER_ROW_DIRECTION)))


#: Bytes per leaf of a fitted summary: its padded key, its tabulated score and
#: its share of the guide grid (one to four cells of 2 bytes), with scores in
#: float32 up to 2**23 rows (measured: 14 on Gaussian data, 20 on Http at
#: tol = 1e-4), float64 above.
BYTES_PER_LEAF = 20


BYTES_PER_LEAF_LARGE_N = 24


#: Bytes per leaf while a summary is fitted: as :data:`BYTES_PER_LEAF` with the
#: leaf count (float32 up to 2**23 rows, float64 above) and a guide grid of up to
#: four cells per key (measured: 24.0 on Http, Smtp and Satimage-2 at tol = 1e-4).
BYTES_PER_FITTING_LEAF = 24


BYTES_PER_FITTING_LEAF_LARGE_N = 32


#: Leaves of a fitted summary hold about this share of the leaf limit
#: ``2 tol n`` on average (light neighbours are merged; measured 0.80 on
#: Gaussian data and 0.82 on Http at tol = 1e-4), so a direction has about
#: ``1 / (2 * LEAF_FILL * tol)`` leaves, and at most ``1 / tol``.
LEAF_FILL = 0.8


#: Share of a worker's memory limit above which the summary size is reported.
SUMMARY_SHARE = 1 / 4


#: Share of the smallest worker's memory limit up to which a depth summary is copied
#: whole to every worker: its tasks then run where the row chunks are, and no row
#: moves.  A larger summary is sharded by direction block (each worker holds its
#: share, and the rows go to the blocks).
REPLICATE_SHARE = 1 / 16


def shard_summary(nbytes: int, memory: WorkerMemory | None = None) -> bool:
    """Whether a summary of ``nbytes`` is sharded over a cluster's workers, not copied to each.

    A copy on every worker costs each of them the whole summary but moves no
    row; shards cost each worker its share, and every row chunk travels to the
    workers that hold the blocks.  Copies win while the summary is a small
    part of a worker's memory (:data:`REPLICATE_SHARE`).

    Examples
    --------
    >>> one_gib = WorkerMemory(limit=2**30, nthreads=1, workers=2)
    >>> shard_summary(10 * 2**20, one_gib), shard_summary(600 * 2**20, one_gib)
    (False, True)
    """
    mem = memory or worker_memory()
    return nbytes > REPLICATE_SHARE * mem.limit


def leaves_per_direction(n: int, tol: float) -> int:
    """Most leaves a direction's summary holds: about ``1 / tol``, at most ``n``.

    Examples
    --------
    >>> leaves_per_direction(10**6, 1e-4), leaves_per_direction(500, 0.0)
    (10001, 500)
    >>> leaves_per_direction(10**6, 1e-320)  # no overflow: as exact
    1000000
    """
    if tol <= 0 or 1.0 / tol >= n:  # also tol so small that 1 / tol overflows
        return max(1, int(n))
    return max(1, min(int(n), int(1.0 / tol) + 1))


def summary_bytes(m: int, n: int, tol: float) -> int:
    """Approximate bytes of the depth summary of ``m`` directions over ``n`` rows.

    About ``1 / (2 LEAF_FILL tol)`` leaves per direction (at most ``n``, and at
    most ``1 / tol``: merged neighbours hold more than ``2 tol n`` rows
    together), so the summary does not grow with ``n``.  On a cluster it is
    sharded by direction block: each worker holds its share.

    Examples
    --------
    >>> round(summary_bytes(500, 10**6, 1e-4) / 1e6)
    63
    """
    per_leaf = BYTES_PER_LEAF if n <= LUT32_MAX_ROWS else BYTES_PER_LEAF_LARGE_N
    return int(m) * typical_leaves(n, tol) * per_leaf


def typical_leaves(n: int, tol: float) -> int:
    """About how many leaves a fitted direction holds: ``1 / (2 LEAF_FILL tol)``, at most ``n``.

    Examples
    --------
    >>> typical_leaves(10**6, 1e-4), typical_leaves(500, 0.0)
    (6251, 500)
    """
    most = leaves_per_direction(n, tol)
    if most >= n:
        return most
    return min(most, int(1 / (2 * LEAF_FILL * tol)) + 2)


def largest_summary_bytes(m: int, n: int, tol: float) -> int:
    """Bytes of the leaf summary at its largest: while it is fitted, with its leaf counts.

    Up to :func:`leaves_per_direction` leaves per direction of
    :data:`BYTES_PER_FITTING_LEAF` bytes: the bound used to refuse a fit that
    cannot fit (:func:`plan_memory_message`) and to choose the sorted
    projections instead (:func:`prefer_sorted`).

    Examples
    --------
    >>> round(largest_summary_bytes(500, 10**6, 1e-4) / 1e6)
    120
    """
    per_leaf = (BYTES_PER_FITTING_LEAF if n <= LUT32_MAX_ROWS
                else BYTES_PER_FITTING_LEAF_LARGE_N)
    return int(m) * leaves_per_direction(n, tol) * per_leaf


#: Bytes per reference row and direction of the exact in-memory summary
#: (:class:`daskdepth.summary.sorted.BlockSorted`: sorted float64 projections).
BYTES_PER_SORTED_VALUE = 8


def sorted_summary_bytes(m: int, n: int) -> int:
    """Bytes of the sorted projections of ``n`` rows on ``m`` directions.

    Examples
    --------
    >>> sorted_summary_bytes(16_600, 3_062) / 1e6  # Musk: 166 features, m = 100 d
    406.6336
    """
    return int(m) * int(n) * BYTES_PER_SORTED_VALUE


def prefer_sorted(m: int, n: int, tol: float) -> bool:
    """Whether an in-memory fit keeps each direction's sorted projections instead of leaves.

    When they take no more memory than the leaf summary may while it is fitted
    (:func:`largest_summary_bytes`): at most about ``3 / tol`` rows, and always at
    ``tol = 0``, where leaves hold one value each.  They are exact (error bound
    0) and give the in-sample depths while fitting.

    Examples
    --------
    >>> prefer_sorted(3_600, 5_803, 1e-4), prefer_sorted(3_600, 60_000, 1e-4)
    (True, False)
    """
    return sorted_summary_bytes(m, n) <= largest_summary_bytes(m, n, tol)


def summary_memory_message(m: int, n: int, tol: float,
                           memory: WorkerMemory | None = None,
                           exact: bool = False) -> str | None:
    """A warning text when the summary's share would take much of a worker's memory.

    The summary is sharded over the workers (or held by this process under a
    local scheduler): each holds ``1 / workers`` of its bytes.

    ``exact`` means the sorted projections (:func:`sorted_summary_bytes`),
    otherwise leaves (:func:`summary_bytes`).

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
    smaller (:func:`prefer_sorted`).

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
    here = local or _local_memory()
    if sharded is None:
        sharded = active_client() is not None
    workers = max(1, mem.workers) if sharded else 1
    leaves = leaves_per_direction(n, tol)
    per_leaf = BYTES_PER_FITTING_LEAF if n <= LUT32_MAX_ROWS else BYTES_PER_FITTING_LEAF_LARGE_N
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


#: Bytes per pilot leaf: its padded key and its share of a ``uint16`` guide grid
#: (up to four cells per key).
BYTES_PER_PILOT_LEAF = 16


#: Share of a worker's memory limit that one wave's pilot leaves may take, with
#: their partial leaf counts (about as large again) during the histogram pass.
WAVE_SHARE = 1 / 8


#: Share of the memory limit under which a wave's pilot leaves and counts are
#: planned to fit next to what a worker holds between passes: below dask's
#: default spill threshold (``distributed.worker.memory.spill``, 0.7).  The row
#: chunks in flight during a pass come on top; they are the same for any wave
#: size (measured at 10^6 x 40 on 1 GiB workers: waves sized under 0.65 took
#: 11 passes and peaked at 711 / 731 MiB while counting, waves sized to leave
#: a further eighth of the limit free took 98 passes and peaked at 723 / 725).
WAVE_CEILING = 0.65


def free_worker_memory() -> int | None:
    """Bytes a wave may take on the fullest worker now, below :data:`WAVE_CEILING`.

    From the workers' own memory metrics (process memory, refreshed at each
    heartbeat: libraries, compiled kernels, the summary blocks already
    finished); None without a distributed client or without metrics.
    """
    client = active_client()
    if client is None:
        return None
    try:
        workers = worker_records(client).values()
    except Exception:  # pragma: no cover - the scheduler did not answer
        return None
    free = []
    for w in workers:
        limit = int(w.get("memory_limit") or 0)
        used = (w.get("metrics") or {}).get("memory")
        if limit and used is not None:
            free.append(int(WAVE_CEILING * limit) - int(used))
    return max(0, min(free)) if free else None


def directions_per_wave(pilot_bytes: int, memory: WorkerMemory | None = None,
                        free: int | None = None) -> int:
    """Directions planned and counted together, given one direction's pilot bytes.

    A wave's pilot leaves and their leaf counts live until the wave is
    finished; sharded over the workers they may take :data:`WAVE_SHARE` of
    each worker's memory, and (with ``free``, the bytes the fullest worker
    has left, see :func:`free_worker_memory`) no more than that, as the
    finished blocks of the previous waves fill the workers.  Waves do not
    change results, only how many passes the histogram makes.

    Examples
    --------
    >>> directions_per_wave(200_000, WorkerMemory(2**30, 1, 2))
    671
    >>> directions_per_wave(200_000, WorkerMemory(2**30, 1, 2), free=60 * 2**20)
    314
    """
    mem = memory or worker_memory()
    budget = WAVE_SHARE * mem.limit
    if free is not None:
        budget = min(budget, free)
    return max(1, int(budget * max(1, mem.workers) // (2 * max(1, pilot_bytes))))


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
    here = local or _local_memory()
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


#: Largest row chunk made from in-memory input (smaller when the workers' memory
#: limit asks for it, see :func:`row_chunk`).
CHUNK_BYTES = 32 * 2**20


#: Fewest rows per chunk of in-memory input when there are enough rows for one
#: chunk per core (see :func:`row_chunk`).
MIN_CHUNK_ROWS = 16384


def row_chunk(n: int, d: int) -> int:
    """Rows per chunk of in-memory input.

    A quarter of the rows per core, but at least :data:`MIN_CHUNK_ROWS` (or
    one chunk per core for fewer rows): each scoring task looks its rows up in
    every direction's summary, which is only cheap when many rows share the
    summary's cache lines.  At most ``CHUNK_BYTES`` of input, and at most what
    one task may hold given the memory limit of the workers
    (:func:`rows_per_chunk`).
    """
    cores = os.cpu_count() or 1
    by_bytes = max(1, min(CHUNK_BYTES // (8 * max(d, 1)), rows_per_chunk(max(d, 1))))
    by_cores = max(math.ceil(n / (4 * cores)), min(math.ceil(n / cores), MIN_CHUNK_ROWS))
    return max(1, min(n, by_bytes, by_cores))
