"""Fitting the per-direction leaf summaries: the pilot, histogram and refinement phases.

The leaf algorithm only: what each phase computes (pilot leaves planned from
a row sample, exact counts, the refinement of leaves too heavy for ``tol``).
Where a pass runs (copied to every worker, sharded, in replica groups) is
decided by :func:`daskdepth.runtime.plan.pass_plan`, and the pass's graph is
built by :mod:`daskdepth.passes.leaves`.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed

from ..errors import ToleranceWarning, user_stacklevel
from ..kernels.leaves import cut_sorted
from ..kernels.tiles import project_columns
from ..passes.leaves import (
    BlockTask,
    Collected,
    Wanted,
    collect_graph,
    histogram_graph,
)
from ..passes.moments import sample_columns
from ..runtime.client import active_client, phase
from ..runtime.keys import key_name
from ..runtime.memory import BYTES_PER_PILOT_LEAF, MAX_DIRECTIONS_PER_BLOCK
from ..runtime.placement import compute_spread, on_worker, turns, worker_count
from ..runtime.plan import pass_plan
from ..runtime.reads import ChunkRead, chunk_reads
from ..runtime.shards import ClusterBlock, realize, share
from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves, LeafCounts
from ..summary.sorted import BlockSorted
from ..summary.statistics import MEAN, Statistic

#: Leaves planned from a row sample aim at this fraction of the row limit, so
#: that sampling noise rarely pushes them over it.
PILOT_GUARD = 0.4

#: The pilot projects this many directions per read of the row sample, for rows of
#: at least ``PILOT_GROUP_MIN_D`` features (narrower rows gain nothing from it).
PILOT_GROUP = 4
PILOT_GROUP_MIN_D = 4


def pilot_aim(cap: int, overfull: float = 1.0) -> float:
    """Rows a pilot leaf is planned to hold, for a row limit ``cap`` (sampled rows scaled up).

    ``overfull`` times :data:`PILOT_GUARD` of the limit: above 1 most pilot
    leaves come back from the histogram too heavy, and the fit refines them
    (the warm-up's miniature fit, :mod:`daskdepth.estimators.warmup`, passes
    through every phase of a large fit this way, a hundred times smaller).

    Examples
    --------
    >>> pilot_aim(100), pilot_aim(100, overfull=4.0)
    (40.0, 160.0)
    """
    return PILOT_GUARD * cap * float(overfull)


@dataclass
class FitInfo:
    """How the summaries were built.

    ``in_sample`` is set when the sample is every finite row and the fit
    counted, for each of them, ``min(L, G)`` summed over all directions (the
    in-sample depths times ``n * m``, see :meth:`DepthSummary.depth_of_totals`).
    """

    passes: int  # data passes after the moments pass; 0 means in memory
    in_sample: np.ndarray | None = None


def leaf_cap(n: int, tol: float) -> int:
    """Most rows a leaf that is not an atom may hold for an error <= tol.

    The midpoint estimate misplaces at most ``count / 2`` of a leaf's rows; with
    a cap of 0 (``tol < 1 / (2 n)``) every value gets a leaf of its own.
    """
    k = int(np.floor(2 * tol * n + 1e-9))
    while k > 0 and k / (2.0 * n) > tol:  # the bound is computed as count / (2 n)
        k -= 1
    return k


def pilot_leaves(sample_c: np.ndarray, v: np.ndarray, j0: int, j1: int, n: int,
                 tol: float, overfull: float = 1.0, fill: float = 1.0) -> BlockLeaves:
    """Leaf keys of one direction block planned from a row sample (in memory).

    Each direction's sorted sampled projections are cut greedily into leaves of
    a fraction of the row limit (scaled up from the sample), atoms apart.  When
    the sample is the whole data the cut is exact and the leaves come back
    finished; otherwise a pass over the data counts them.  Directions are
    projected :data:`PILOT_GROUP` at a time for rows of :data:`PILOT_GROUP_MIN_D`
    features or more (one read of the sample for the group), one at a time
    otherwise, and sorted one at a time, so the working set stays a few
    sample-sized vectors.  ``overfull`` as for :func:`pilot_aim`.  ``fill``
    (a stream's first fit, :data:`daskdepth.fitting.update.STREAM_FILL`) scales
    the planned size and, for an exact cut, the merge limit of light leaves:
    leaves hold about that fraction of the row limit (1: ``fit``'s leaves).
    """
    s, d = sample_c.shape
    mb = j1 - j0
    exact = s == n
    cap = leaf_cap(n, tol)
    target = float(cap if exact else pilot_aim(cap, overfull)) * fill
    scale = n / s
    group = PILOT_GROUP if d >= PILOT_GROUP_MIN_D else 1
    # The same bits as the routing kernels (atoms' keys must match exactly).
    proj = np.empty((min(group, mb), s))
    columns = np.ascontiguousarray(sample_c.T)
    keys_buf = np.empty(2 * s)
    rows_buf = np.empty(3 * s + 1)
    cuts, counts = [], []
    ext = np.empty((mb, 2))
    for g0 in range(0, mb, group):
        g1 = min(mb, g0 + group)
        project_columns(columns, v[g0:g1], proj[:g1 - g0])
        for jj in range(g0, g1):
            p = proj[jj - g0]
            p.sort()
            ne, nc = cut_sorted(p, scale, target, keys_buf, rows_buf)
            cuts.append(keys_buf[:ne].copy())
            if exact:
                counts.append(rows_buf[:nc].copy())
            ext[jj] = p[0], p[-1]
    cptr = np.concatenate([[0], np.cumsum([k.size for k in cuts])]).astype(np.int64)
    if not exact:
        return BlockLeaves.build(j0, j1, cptr, np.concatenate(cuts))
    # Cuts only: finishing builds the routing structure once, for the final keys.
    planned = BlockLeaves.planned(j0, j1, cptr, np.concatenate(cuts))
    return planned.finished(LeafCounts(np.concatenate(counts), ext), cap * fill)


def _pilot_task(columns: np.ndarray, v: np.ndarray, j0: int, j1: int, n: int,
                tol: float, overfull: float = 1.0, fill: float = 1.0) -> BlockLeaves:
    # The sample is shared transposed (features x rows, C order): its transpose is
    # the row view pilot_leaves takes, which it projects without a copy.
    block = pilot_leaves(columns.T, v, j0, j1, n, tol, overfull, fill)
    if isinstance(block, BlockLeaves) and block.lut is not None:  # exact: fitted
        return block.without_counts()
    return block


def _checked(block: BlockLeaves, n: int) -> BlockLeaves:
    total = int(block.counts.sum(dtype=np.float64))
    if total != n * block.mb:  # pragma: no cover - internal consistency check
        raise RuntimeError(
            f"daskdepth internal error: a direction block summarises {total} values, "
            f"expected {n * block.mb}; please report this with the input's shape and chunks"
        )
    return block


#: Tries of :func:`finish_block` at lower merge limits, and the lowest limit it
#: tries (as a fraction of the row limit): merging less only adds leaves.
SPARE_TRIES = 4
SPARE_FLOOR = 0.5


def finish_block(leaves: BlockLeaves, counts: LeafCounts, cap: int, n: int,
                 spare: bool = False, merge: float | None = None) -> BlockLeaves:
    """Coalesce light neighbouring leaves, then tabulate the scores from exact counts.

    The leaf counts are kept only when a direction still has a leaf heavier
    than ``cap`` (the refinement may split it); otherwise the block is final.

    With ``spare`` (the bound scored is the mean over directions, as
    :data:`~daskdepth.summary.statistics.MEAN`'s), a block where sampling noise
    left some leaves heavier than ``cap`` merges the light leaves of its
    directions up to a lower limit instead, so that the worst leaves of its
    directions add up to at most ``cap`` per direction: the mean bound then
    meets ``tol`` without a refinement pass (:func:`refine_plan` finds nothing
    to split).  It only adds leaves; when no limit down to :data:`SPARE_FLOOR`
    of ``cap`` makes room, the block is finished at ``cap`` and refined.
    ``merge`` (a stream's first fit) merges light leaves only up to that many
    rows, below ``cap`` (default ``cap``).
    """
    out = _checked(leaves.finished(counts, cap if merge is None else merge), n)
    if spare and out.heavy(cap):
        out = _spared(leaves, counts, cap, n, out, cap if merge is None else min(cap, merge))
    return out if out.heavy(cap) else out.without_counts()


def _spared(leaves: BlockLeaves, counts: LeafCounts, cap: int, n: int,
            out: BlockLeaves, start: float) -> BlockLeaves:
    """``leaves`` finished at the highest merge limit found that keeps the sum of its
    directions' worst leaves within ``cap`` each (``out``, finished at ``start``, if none)."""
    budget = float(cap) * out.mb
    limit = float(start)
    tried = out
    for _ in range(SPARE_TRIES):
        worst = tried.worst
        assert worst is not None
        excess = float(worst.sum(dtype=np.float64)) - budget
        if excess <= 0.0:
            return tried
        # Directions whose worst leaf is a merged one give room as the limit drops.
        free = int(np.count_nonzero(worst <= limit))
        if not free:
            break
        limit = float(np.floor(limit - excess / free))
        if limit < SPARE_FLOOR * cap:
            break
        tried = _checked(leaves.finished(counts, limit), n)
    return out


def split_block(leaves: BlockLeaves, collected: Collected, cap: int, n: int) -> BlockLeaves:
    """Split the collected leaves of finished leaves exactly and finish again (final)."""
    counts = leaves.leaf_counts
    if collected.leaf.size:
        leaves, counts = leaves.split(collected.leaf, collected.value, weights=collected.weight,
                                      target=cap, leaf_counts=counts)
    return _checked(leaves.finished(counts, cap), n).without_counts()


def _without_counts(block: BlockLeaves) -> BlockLeaves:
    return block.without_counts()


def _has_counts(block: Any) -> bool:
    if is_handle(block):
        return block.meta is not None and block.meta.values != -1
    return getattr(block, "counts", None) is not None


def refine_plan(blocks: list[Any], n: int, tol: float,
                statistic: Statistic = MEAN) -> list[np.ndarray]:
    """Per block, the directions whose heavy leaves to split so that the bound meets ``tol``.

    The bound of the scored ``statistic`` (:meth:`daskdepth.summary.statistics.Statistic.bound`)
    is the mean over directions of each direction's worst leaf for the depth,
    and the worst leaf over all directions for the halfspace depth
    (:data:`~daskdepth.summary.statistics.MIN`).  A split direction ends at most at the leaf limit's
    error, so only the directions with the worst leaves need splitting: the
    fewest that bring the bound (computed as :meth:`DepthSummary.error_bound`
    does) down to ``tol`` (for the minimum, every direction above ``tol``).
    Reads only the blocks' error bounds (metadata for blocks kept on a cluster);
    :func:`wanted_leaves` then picks the leaves of a picked direction.
    """
    cap = leaf_cap(n, tol)
    flat = np.concatenate([b.direction_errors(n) for b in blocks])
    done = cap / (2.0 * n)
    order = np.argsort(-flat, kind="stable")
    heavy = int(np.count_nonzero(flat > done))

    def bound_after(k: int) -> float:  # the k worst directions split
        errs = flat.copy()
        errs[order[:k]] = np.minimum(errs[order[:k]], done)
        return statistic.bound(errs)

    lo, hi = 0, heavy  # the bound decreases with k, and splitting all meets tol
    while lo < hi:
        mid = (lo + hi) // 2
        if bound_after(mid) <= tol:
            hi = mid
        else:
            lo = mid + 1
    chosen = np.zeros(flat.size, dtype=bool)
    chosen[order[:lo]] = True
    picks = []
    start = 0
    for b in blocks:
        picks.append(chosen[start:start + b.mb])
        start += b.mb
    return picks


def wanted_leaves(block: BlockLeaves, pick: np.ndarray, n: int, tol: float) -> Wanted:
    """The leaves of ``block`` to split: too heavy for ``tol``, in the picked directions."""
    mask = block.loose_leaves(leaf_cap(n, tol)) & pick[block.leaf_dir]
    return Wanted(mask, int(block.counts[mask].sum(dtype=np.float64)), n)


def direction_blocks(m: int, block_size: int) -> list[tuple[int, int]]:
    """``(j0, j1)`` of consecutive blocks of at most ``block_size`` of ``m`` directions."""
    return [(j0, min(m, j0 + block_size)) for j0 in range(0, m, block_size)]


def pilot_bytes_per_direction(n: int, tol: float, sample_rows: int) -> int:
    """Approximate bytes of one direction's pilot leaves (keys and guide grid).

    Pilot leaves hold about ``PILOT_GUARD`` times the leaf limit, so about
    ``n / (PILOT_GUARD * cap)`` of them (at most one per sampled row).
    """
    cap = max(1, leaf_cap(n, tol))
    leaves = min(sample_rows, int(np.ceil(n / (PILOT_GUARD * cap)))) + 2
    return int(leaves * BYTES_PER_PILOT_LEAF)


def next_wave(ranges: list[tuple[int, int]], wave_directions: int) -> int:
    """How many of the blocks ``ranges`` form the next wave (at least one).

    Examples
    --------
    >>> next_wave([(0, 32), (32, 64), (64, 70)], 64), next_wave([(0, 32), (32, 64)], 10)
    (2, 1)
    """
    size, k = 0, 0
    for j0, j1 in ranges:
        if k and size + (j1 - j0) > wave_directions:
            break
        size += j1 - j0
        k += 1
    return k


class Shared(NamedTuple):
    """What many tasks of a fit read: the centred sample (transposed), the directions (graph
    keys), and the row chunks' reads for the sharded passes (None where ``x`` has none, or
    the passes are not sharded: :func:`daskdepth.runtime.reads.chunk_reads`)."""

    columns: Any
    directions: Any
    reads: list[ChunkRead] | None = None


def build_summary(x: da.Array, location: np.ndarray, directions: np.ndarray,
                  sample: np.ndarray, n: int, tol: float, token: str,
                  block_size: int = MAX_DIRECTIONS_PER_BLOCK,
                  exact: bool = False,
                  statistic: Statistic = MEAN,
                  wave_directions: Callable[[], int] | None = None,
                  shard: bool = True,
                  source: Any = None,
                  overfull: float = 1.0,
                  fill: float = 1.0) -> tuple[DepthSummary, FitInfo]:
    """Leaf summaries of the projections of the ``n`` finite rows of ``x``.

    ``sample`` holds finite rows of ``x``; when it has all ``n`` of them the
    summaries are built in memory, without a pass over ``x``: with ``exact``,
    each direction's sorted projections, which also give the in-sample depths
    (:func:`exact_phase`), otherwise leaves planned exactly from the rows
    (:func:`pilot_phase`).  Otherwise one histogram pass counts every leaf
    exactly (:func:`histogram_phase`), for at most ``wave_directions()``
    directions at a time (asked before each wave: each wave of blocks is
    planned, counted and finished before the next is planned, which bounds
    the memory of the pilot leaves).  When leaves too heavy for ``tol``
    remain (sampling noise, values missing from the sample), a refinement pass
    collects their values and splits them exactly on the workers, only in the
    directions that need it (:func:`refine_phase`) for the bound of ``statistic``
    (the mean over directions, or their minimum: :mod:`daskdepth.summary.statistics`).

    With a distributed client and ``shard``, the blocks stay on the workers
    (:class:`daskdepth.runtime.shards.ClusterBlock`) and the client only gets
    their metadata; without ``shard`` (a summary small enough to copy to every
    worker, :func:`daskdepth.runtime.memory.shard_summary`) they come back here
    and each pass copies them to every worker, as the fitted model's scoring does.
    ``source`` is the future of the moments pass that drew ``sample``
    (:func:`~daskdepth.passes.moments.moments_pass` with ``keep``): on a
    cluster the centred sample the pilots read is then made from it where it
    is (:func:`~daskdepth.passes.moments.sample_columns`, which releases it).
    ``overfull``: the pilot leaves aim at that many times their usual size
    (:func:`pilot_aim`), so that the refinement runs; the bound still meets
    ``tol``, only the passes differ.  ``fill`` below 1 (a stream's first fit)
    plans and merges the leaves to about that fraction of the row limit
    (:func:`pilot_leaves`, :func:`finish_block`'s ``merge``).
    """
    ranges = direction_blocks(directions.shape[0], block_size)
    if source is not None and active_client() is not None:
        columns = sample_columns(source, location, key_name("pick", token))
    else:
        columns = share(np.ascontiguousarray((sample - location).T), key_name("pick", token))
    if exact and sample.shape[0] == n:
        sorted_blocks, in_sample = exact_phase(columns, directions, ranges, n, token, keep=shard)
        # With fewer features than directions the rows are smaller than the sorted
        # projections: kept (on the client, where ``sample`` is) for a saved model to
        # store instead, its blocks rebuilt from them when read (the same bits).
        rows = (np.ascontiguousarray(sample, dtype=np.float64)
                if directions.shape[1] < directions.shape[0] else None)
        return (DepthSummary(location, directions, sorted_blocks, n, rows=rows),
                FitInfo(0, in_sample))
    if sample.shape[0] == n:
        blocks = pilot_phase(columns, directions, ranges, n, tol, token, exact=True,
                             keep=shard, fill=fill)
        return assemble_summary(location, directions, blocks, n, tol, statistic), FitInfo(0)
    # The chunks' reads are found once (a walk of x's graph), for every wave and the refinement.
    reads = chunk_reads(x) if shard and active_client() is not None else None
    shared = Shared(columns, share(directions, key_name("share", token, "directions")), reads)
    # Blocks end in contiguous runs per worker; the waves take turns over the runs, so
    # that every wave keeps every worker counting and fills them evenly.
    order = turns(len(ranges), worker_count() if shard else 1)
    done: dict[int, Any] = {}
    w = 0
    while len(done) < len(ranges):
        rest = order[len(done):]
        wave = rest[:next_wave([ranges[b] for b in rest],
                               wave_directions() if wave_directions else len(ranges)
                               * block_size)]
        wave_token = f"{token}.{w}" if w else token
        pilots = pilot_phase(columns, directions, [ranges[b] for b in wave], n, tol,
                             wave_token, place=(wave, len(ranges)), keep=shard,
                             overfull=overfull, fill=fill)
        done.update(zip(wave, histogram_phase(x, location, shared, pilots, n, tol, wave_token,
                                              statistic, fill),
                        strict=True))
        del pilots  # the pilot leaves of this wave are released before the next is planned
        w += 1
    # The row sample is only read by the pilots: released before the refinement.
    shared = Shared(None, shared.directions, shared.reads)
    del columns
    blocks = [done[b] for b in range(len(ranges))]
    blocks, refined = refine_phase(x, location, shared, blocks, n, tol, token, statistic)
    blocks = final_blocks(blocks, n, token)
    # One histogram pass per wave, and the refinement's.
    return (assemble_summary(location, directions, blocks, n, tol, statistic),
            FitInfo(w + refined))


def pilot_phase(columns: Any, directions: np.ndarray, ranges: list[tuple[int, int]],
                n: int, tol: float, token: str, exact: bool = False,
                place: tuple[list[int], int] | None = None, keep: bool = True,
                overfull: float = 1.0, fill: float = 1.0) -> list[Any]:
    """Leaves of every block planned from the row sample, one task per block.

    ``columns``: the graph key of the centred row sample, transposed.  ``exact``:
    the sample is all the rows, and the leaves come back finished.  On a
    cluster the blocks are spread over the workers in contiguous runs and stay
    there; ``place`` is ``(indices, total)`` for a wave of the blocks ``indices``
    of ``total``, spread as if all were planned at once (even shares per worker).
    Without ``keep`` they come back here (:func:`~daskdepth.runtime.shards.realize`).
    ``overfull`` as for :func:`pilot_aim`, ``fill`` as for :func:`pilot_leaves`.
    """
    pilots = [
        delayed(_pilot_task, pure=True)(columns, np.ascontiguousarray(directions[j0:j1]),
                                        j0, j1, n, tol, overfull, fill,
                                        dask_key_name=(key_name("pilot", token), b))
        for b, (j0, j1) in enumerate(ranges)
    ]
    # The pilot keys are computed first: histogram tasks that waited for them
    # would let the workers load row chunks faster than they are consumed, and
    # hold all of them (memory growing with n) until the keys were ready.
    with phase("pilot"):
        return realize(pilots, n, key_name("bin", token, "meta"), spread=True,
                       finished=exact, place=place, keep=keep)


def exact_phase(columns: Any, directions: np.ndarray, ranges: list[tuple[int, int]], n: int,
                token: str, keep: bool = True) -> tuple[list[Any], np.ndarray]:
    """Sorted projections of every block and the in-sample counts, one task per block.

    ``columns`` is the graph key of every finite row, centred and transposed.
    Each task projects the rows on its directions once, sorts them and counts
    every row's ``min(L, G)``; the per-row sums of the blocks are integers
    (exact in float64), so adding them in any order gives the same bits as
    scoring the rows afresh.  On a cluster the blocks are spread over the
    workers and stay there (unless ``keep`` is false); only the per-row sums
    come back.
    """
    tasks = [
        delayed(BlockSorted.fit, pure=True)(columns, np.ascontiguousarray(directions[j0:j1]),
                                            j0, j1, dask_key_name=(key_name("sort", token), b))
        for b, (j0, j1) in enumerate(ranges)
    ]
    client = active_client()
    with phase("exact"):
        if client is None or not keep:
            done = dask.compute(*tasks)
            blocks: list[Any] = [block for block, _ in done]
            parts = [part for _, part in done]
        else:
            fitted = compute_spread(client, tasks)
            blocks = realize([delayed(operator.getitem, pure=True)(
                f, 0, dask_key_name=(key_name("sort", token, "block"), b))
                for b, f in enumerate(fitted)], n, key_name("sort", token, "meta"))
            parts = dask.compute(*[delayed(operator.getitem, pure=True)(
                f, 1, dask_key_name=(key_name("sort", token, "rows"), b))
                for b, f in enumerate(fitted)])
            del fitted  # the blocks stay on the workers; their tuples are released
    in_sample = np.zeros(n)
    for part in parts:
        in_sample += part
    return blocks, in_sample


def histogram_phase(x: da.Array, location: np.ndarray, shared: Shared, blocks: list[Any],
                    n: int, tol: float, token: str,
                    statistic: Statistic = MEAN, fill: float = 1.0) -> list[Any]:
    """One pass counting the rows of every leaf exactly, then the finished leaves.

    The finished leaves replace ``blocks`` (on a cluster each pilot block is
    freed once its finished block is computed): the caller drops them.  For
    the mean over directions (``statistic``), a block with leaves left too
    heavy by sampling noise makes room for them (``spare``, :func:`finish_block`).
    ``fill`` below 1 merges light leaves only up to that fraction of the row limit.
    """
    spare = statistic.name == MEAN.name
    with pass_plan(blocks, token, x, shared.reads, "histogram") as plan:
        outs = histogram_graph(x, location, shared.directions,
                               [BlockTask(b.j0, b.j1, r) for b, r in zip(blocks, plan.refs,
                                                                         strict=True)],
                               token=token, plan=plan, reads=shared.reads)
        cap = leaf_cap(n, tol)
        merge = None if fill == 1.0 else fill * cap
        finished = []
        for i, (ref, out) in enumerate(zip(plan.refs, outs, strict=True)):
            with on_worker(plan.homes[i]):
                finished.append(delayed(finish_block, pure=True)(
                    ref, out, cap, n, spare, merge, dask_key_name=(key_name("build", token), i)))
        return realize(finished, n, key_name("build", token, "meta"),
                       keep=plan.kept, replaces=blocks)


def refine_phase(x: da.Array, location: np.ndarray, shared: Shared, blocks: list[Any],
                 n: int, tol: float, token: str,
                 statistic: Statistic = MEAN) -> tuple[list[Any], int]:
    """Split the leaves still too heavy for ``tol``, if any: ``(blocks, passes made)``.

    The split blocks replace those of ``blocks`` (on a cluster each is freed
    once its split is computed): the caller keeps the returned list only.
    """
    picks = refine_plan(blocks, n, tol, statistic)
    todo = [i for i, p in enumerate(picks) if p.any()]
    if not todo:
        return blocks, 0
    cap = leaf_cap(n, tol)
    chosen = [blocks[i] for i in todo]
    blocks = list(blocks)
    with pass_plan(chosen, f"{token}.refine", x, shared.reads, "refine") as plan:
        wanted = []
        for k, (i, ref) in enumerate(zip(todo, plan.refs, strict=True)):
            with on_worker(plan.homes[k]):
                wanted.append(delayed(wanted_leaves, pure=True)(
                    ref, picks[i], n, tol, dask_key_name=(key_name("hone", token, "wanted"), i)))
        outs = collect_graph(
            x, location, shared.directions,
            [BlockTask(b.j0, b.j1, r) for b, r in zip(chosen, plan.refs, strict=True)], wanted,
            token=token, plan=plan, reads=shared.reads)
        refined = []
        for k, (i, ref, out) in enumerate(zip(todo, plan.refs, outs, strict=True)):
            with on_worker(plan.homes[k]):
                refined.append(delayed(split_block, pure=True)(
                    ref, out, cap, n, dask_key_name=(key_name("split", token), i)))
        for i, block in zip(todo, realize(refined, n, key_name("split", token, "meta"),
                                          keep=plan.kept, replaces=chosen),
                            strict=True):
            blocks[i] = block
    return blocks, 1


def final_blocks(blocks: list[Any], n: int, token: str) -> list[Any]:
    """The blocks without the leaf counts kept for the refinement (heavy but not split)."""
    todo = [i for i, b in enumerate(blocks) if _has_counts(b)]
    if not todo:
        return blocks
    if not any(isinstance(blocks[i], ClusterBlock) for i in todo):  # held here: no task
        return [_without_counts(b) if i in todo else b for i, b in enumerate(blocks)]
    with pass_plan([blocks[i] for i in todo], f"{token}.final") as plan:
        tasks = []
        for k, (i, ref) in enumerate(zip(todo, plan.refs, strict=True)):
            with on_worker(plan.homes[k]):
                tasks.append(delayed(_without_counts, pure=True)(
                    ref, dask_key_name=(key_name("build", token, "final"), i)))
    blocks = list(blocks)
    for i, block in zip(todo, realize(tasks, n, key_name("build", token, "final", "meta"),
                                      keep=plan.kept,
                                      replaces=[blocks[i] for i in todo]),
                        strict=True):
        blocks[i] = block
    return blocks


def assemble_summary(location: np.ndarray, directions: np.ndarray, blocks: list[Any],
                     n: int, tol: float, statistic: Statistic = MEAN) -> DepthSummary:
    """The depth summary of the finished blocks, its bound compared with ``tol``."""
    summary = DepthSummary(location, directions, blocks, n)
    bound = summary.error_bound(statistic)
    if bound > tol:  # pragma: no cover - guaranteed by construction
        warnings.warn(
            f"the certified depth error bound {bound:.3g} is above tol={tol:g}",
            ToleranceWarning, stacklevel=user_stacklevel(),
        )
    return summary
