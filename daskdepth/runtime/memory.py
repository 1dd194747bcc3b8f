"""Sizes: chunks, blocks and waves from the memory of the workers, and a summary's bytes.

A histogram, refinement or scoring task holds a row chunk of ``R`` rows and
``d`` features and works on one block of ``B`` directions at a time:

    working set <= R * (16 d + 16 B + 16) bytes

(the chunk, its centred copy, room for the block's projections and leaf
indices, and the output).  This is an upper bound: the block kernels project
and route tiles of at most 512 rows and keep no projections beyond a tile; the
``16 B`` bytes per row hold a copy of the chunk's columns (``8 d``, made only
where ``d <= 2 B``, :func:`~daskdepth.kernels.tiles.whole_chunk`) or, for wide
rows in small direction groups, the block's projections computed beforehand
(``8 B`` bytes per row).
Each task may use :data:`TASK_SHARE` of the memory of one worker
thread, so that the tasks running at once, the chunks waiting for them and the
worker's share of the summary stay well below the ``distributed.worker.memory``
spill threshold (70 % of the limit by default).  Rows per chunk (for in-memory
input) and directions per block (for every fit) follow from that budget, and
the directions planned and counted together (a *wave*, see
:func:`directions_per_wave`) from the memory of the pilot leaves.

Neither choice changes results: summaries are built direction by direction
and their leaf statistics merge exactly, so the depth does not depend on how
rows are chunked or directions are blocked.  The warnings and refusals built
from these sizes are :mod:`daskdepth.runtime.refusals`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

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


def _connected_workers() -> list[dict[str, Any]] | None:
    """The scheduler's records of the active distributed client's workers; None without
    a client, or when the scheduler did not answer."""
    client = active_client()
    if client is None:
        return None
    try:
        return list(worker_records(client).values())
    except Exception:  # pragma: no cover - the scheduler did not answer
        return None


def local_memory() -> WorkerMemory:
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
    local = local_memory()
    workers = _connected_workers()
    if workers is None:
        return local
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
#: float32 up to :data:`~daskdepth.summary.leaves.LUT32_MAX_ROWS` rows, float64
#: above; an upper estimate (evenly spread keys take fewer guide cells) except on
#: clustered keys, whose fitted grids take eight cells per key
#: (:data:`~daskdepth.summary.guide.GUIDE_CLUSTERED_PER_KEY`: 8 bytes more per leaf,
#: as on Http); the bounds on the largest summary (:func:`largest_summary_bytes`)
#: count the most leaves a direction may hold (``1 / tol``, ``1.6`` times the
#: typical), which covers them at the typical fill (:data:`LEAF_FILL`).
BYTES_PER_LEAF = 20


BYTES_PER_LEAF_LARGE_N = 24


#: Bytes per leaf while a summary is fitted: as :data:`BYTES_PER_LEAF` with the
#: leaf count (float32 up to :data:`~daskdepth.summary.leaves.LUT32_MAX_ROWS`
#: rows, float64 above) and a guide grid of up to four cells per key.
BYTES_PER_FITTING_LEAF = 24


BYTES_PER_FITTING_LEAF_LARGE_N = 32


#: Leaves of a fitted summary hold about this share of the leaf limit
#: ``2 tol n`` on average (light neighbours are merged), so a direction has about
#: ``1 / (2 * LEAF_FILL * tol)`` leaves, and at most ``1 / tol``.
LEAF_FILL = 0.8


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
    cannot fit (:func:`~daskdepth.runtime.refusals.plan_memory_message`) and to
    choose the sorted projections instead (:func:`prefer_sorted`).

    Examples
    --------
    >>> round(largest_summary_bytes(500, 10**6, 1e-4) / 1e6)
    120
    """
    return int(m) * leaves_per_direction(n, tol) * fitting_leaf_bytes(n)


def fitting_leaf_bytes(n: int) -> int:
    """Bytes per leaf of a summary of ``n`` rows while it is fitted.

    Examples
    --------
    >>> fitting_leaf_bytes(10**6), fitting_leaf_bytes(10**8)
    (24, 32)
    """
    return BYTES_PER_FITTING_LEAF if n <= LUT32_MAX_ROWS else BYTES_PER_FITTING_LEAF_LARGE_N


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
#: size, so leaving more room for them only multiplies the passes without
#: lowering the peak.
WAVE_CEILING = 0.65


def free_worker_memory() -> int | None:
    """Bytes a wave may take on the fullest worker now, below :data:`WAVE_CEILING`.

    From the workers' own memory metrics (process memory, refreshed at each
    heartbeat: libraries, compiled kernels, the summary blocks already
    finished); None without a distributed client or without metrics.
    """
    workers = _connected_workers()
    if workers is None:
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
