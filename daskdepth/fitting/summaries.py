"""Fitting the per-direction leaf summaries: the pilot, histogram and refinement phases."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed

from ..errors import ToleranceWarning
from ..kernels.leaves import plan_cuts
from ..kernels.routing import project_columns
from ..passes.leaves import BlockTask, Collected, Wanted, collect_graph, histogram_graph
from ..runtime.client import broadcast, phase
from ..runtime.keys import key_name
from ..runtime.memory import MAX_DIRECTIONS_PER_BLOCK
from ..summary.depth import DepthSummary, statistic_bound
from ..summary.leaves import BlockLeaves, LeafCounts
from ..summary.sorted import BlockSorted

#: Leaves planned from a row sample aim at this fraction of the row limit, so
#: that sampling noise rarely pushes them over it.
PILOT_GUARD = 0.4


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
                 tol: float) -> BlockLeaves:
    """Leaf keys of one direction block planned from a row sample (in memory).

    Each direction's sorted sampled projections are cut greedily into leaves of
    a fraction of the row limit (scaled up from the sample), atoms apart.  When
    the sample is the whole data the cut is exact and the leaves come back
    finished; otherwise a pass over the data counts them.  Directions are
    projected and sorted one at a time, so the working set stays a few
    sample-sized vectors.
    """
    s = sample_c.shape[0]
    mb = j1 - j0
    exact = s == n
    cap = leaf_cap(n, tol)
    target = cap if exact else PILOT_GUARD * cap
    # The same bits as the routing kernels (atoms' keys must match exactly).
    proj = np.empty((1, s))
    columns = np.ascontiguousarray(sample_c.T)
    nodes = np.zeros(s, dtype=np.int64)
    whole = (np.array([-np.inf]), np.array([np.inf]))
    cuts, counts = [], []
    ext = np.empty((mb, 2))
    for jj in range(mb):
        project_columns(columns, v[jj:jj + 1], proj)
        p = proj[0]
        p.sort()
        _, _, k, c = plan_cuts(nodes, p, np.zeros(0), n / s, float(target), *whole)
        cuts.append(k)
        counts.append(c if c.size else np.array([float(s)]))  # one leaf: all rows
        ext[jj] = p[0], p[-1]
    cptr = np.concatenate([[0], np.cumsum([k.size for k in cuts])]).astype(np.int64)
    if not exact:
        return BlockLeaves.build(j0, j1, cptr, np.concatenate(cuts))
    # Cuts only: finishing builds the routing structure once, for the final keys.
    planned = BlockLeaves.planned(j0, j1, cptr, np.concatenate(cuts))
    return planned.finished(LeafCounts(np.concatenate(counts), ext), cap)


def finish_block(leaves: BlockLeaves, counts: LeafCounts, cap: int) -> BlockLeaves:
    """Coalesce light neighbouring leaves, then tabulate the scores from exact counts."""
    return leaves.finished(counts, cap)


def split_block(leaves: BlockLeaves, collected: Collected, cap: int) -> BlockLeaves:
    """Split the collected leaves of finished leaves exactly and finish again."""
    counts = leaves.leaf_counts
    if collected.leaf.size:
        leaves, counts = leaves.split(collected.leaf, collected.value, weights=collected.weight,
                                      target=cap, leaf_counts=counts)
    return leaves.finished(counts, cap)


def refine_plan(blocks: list[BlockLeaves], n: int, tol: float,
                statistic: str = "depth") -> list[np.ndarray]:
    """Per block, the leaves to split exactly so that the error bound meets ``tol``.

    The bound of the scored ``statistic`` (:func:`daskdepth.summary.depth.statistic_bound`)
    is the mean over directions of each direction's worst leaf for the depth,
    and the worst leaf over all directions for the halfspace depth
    (``'min_depth'``).  A split direction ends at most at the leaf limit's
    error, so only the directions with the worst leaves need splitting: the
    fewest that bring the bound (computed as :meth:`DepthSummary.error_bound`
    does) down to ``tol`` (for the minimum, every direction above ``tol``).
    """
    cap = leaf_cap(n, tol)
    flat = np.concatenate([b.direction_errors(n) for b in blocks])
    done = cap / (2.0 * n)
    order = np.argsort(-flat, kind="stable")
    heavy = int(np.count_nonzero(flat > done))

    def bound_after(k: int) -> float:  # the k worst directions split
        errs = flat.copy()
        errs[order[:k]] = np.minimum(errs[order[:k]], done)
        return statistic_bound(errs, statistic)

    lo, hi = 0, heavy  # the bound decreases with k, and splitting all meets tol
    while lo < hi:
        mid = (lo + hi) // 2
        if bound_after(mid) <= tol:
            hi = mid
        else:
            lo = mid + 1
    chosen = np.zeros(flat.size, dtype=bool)
    chosen[order[:lo]] = True
    wanted = []
    start = 0
    for b in blocks:
        pick = chosen[start:start + b.mb]
        start += b.mb
        wanted.append(b.loose_leaves(cap) & pick[b.leaf_dir] if pick.any()
                      else np.zeros(b.n_leaves, dtype=bool))
    return wanted


def direction_blocks(m: int, block_size: int) -> list[tuple[int, int]]:
    """``(j0, j1)`` of consecutive blocks of at most ``block_size`` of ``m`` directions."""
    return [(j0, min(m, j0 + block_size)) for j0 in range(0, m, block_size)]


def build_summary(x: da.Array, location: np.ndarray, directions: np.ndarray,
                  sample: np.ndarray, n: int, tol: float, token: str,
                  block_size: int = MAX_DIRECTIONS_PER_BLOCK,
                  exact: bool = False,
                  statistic: str = "depth") -> tuple[DepthSummary, FitInfo]:
    """Leaf summaries of the projections of the ``n`` finite rows of ``x``.

    ``sample`` holds finite rows of ``x``; when it has all ``n`` of them the
    summaries are built in memory, without a pass over ``x``: with ``exact``,
    each direction's sorted projections, which also give the in-sample depths
    (:func:`exact_phase`), otherwise leaves planned exactly from the rows
    (:func:`pilot_phase`).  Otherwise one histogram pass counts every leaf
    exactly (:func:`histogram_phase`).  When leaves too heavy for ``tol``
    remain (sampling noise, values missing from the sample), a refinement pass
    collects their values and splits them exactly on the workers, only in the
    directions that need it (:func:`refine_phase`) for the bound of ``statistic``
    (the mean over directions, ``'depth'``, or their minimum, ``'min_depth'``).
    """
    ranges = direction_blocks(directions.shape[0], block_size)
    if exact and sample.shape[0] == n:
        sorted_blocks, in_sample = exact_phase(sample, location, directions, ranges, token)
        return DepthSummary(location, directions, sorted_blocks, n), FitInfo(0, in_sample)
    blocks = pilot_phase(sample, location, directions, ranges, n, tol, token)
    if sample.shape[0] == n:
        return assemble_summary(location, directions, blocks, n, tol, statistic), FitInfo(0)
    blocks = histogram_phase(x, location, directions, blocks, n, tol, token)
    blocks, refined = refine_phase(x, location, directions, blocks, n, tol, token, statistic)
    return (assemble_summary(location, directions, blocks, n, tol, statistic),
            FitInfo(1 + refined))


def pilot_phase(sample: np.ndarray, location: np.ndarray, directions: np.ndarray,
                ranges: list[tuple[int, int]], n: int, tol: float,
                token: str) -> list[BlockLeaves]:
    """Leaves of every block planned from the row sample, one task per block."""
    sample_ref = broadcast(np.ascontiguousarray(sample - location), key_name("pick", token))
    pilots = [
        delayed(pilot_leaves, pure=True)(sample_ref, np.ascontiguousarray(directions[j0:j1]),
                                         j0, j1, n, tol,
                                         dask_key_name=(key_name("pilot", token), b))
        for b, (j0, j1) in enumerate(ranges)
    ]
    # The pilot keys are computed first: histogram tasks that waited for them
    # would let the workers load row chunks faster than they are consumed, and
    # hold all of them (memory growing with n) until the keys were ready.
    with phase("pilot"):
        return list(dask.compute(*pilots))


def exact_phase(sample: np.ndarray, location: np.ndarray, directions: np.ndarray,
                ranges: list[tuple[int, int]],
                token: str) -> tuple[list[BlockSorted], np.ndarray]:
    """Sorted projections of every block and the in-sample counts, one task per block.

    ``sample`` is every finite row.  Each task projects the rows on its
    directions once, sorts them and counts every row's ``min(L, G)``; the
    per-row sums of the blocks are integers (exact in float64), so adding them
    in any order gives the same bits as scoring the rows afresh.
    """
    columns = broadcast(np.ascontiguousarray((sample - location).T), key_name("pick", token))
    tasks = [
        delayed(BlockSorted.fit, pure=True)(columns, np.ascontiguousarray(directions[j0:j1]),
                                            j0, j1, dask_key_name=(key_name("sort", token), b))
        for b, (j0, j1) in enumerate(ranges)
    ]
    with phase("exact"):
        done = dask.compute(*tasks)
    in_sample = np.zeros(sample.shape[0])
    for _, part in done:
        in_sample += part
    return [block for block, _ in done], in_sample


def histogram_phase(x: da.Array, location: np.ndarray, directions: np.ndarray,
                    blocks: list[BlockLeaves], n: int, tol: float,
                    token: str) -> list[BlockLeaves]:
    """One pass counting the rows of every leaf exactly, then the finished leaves."""
    refs = [broadcast(b, key_name("bin", token, i)) for i, b in enumerate(blocks)]
    outs = histogram_graph(x, location, directions,
                           [BlockTask(b.j0, b.j1, r) for b, r in zip(blocks, refs, strict=True)],
                           token=token)
    cap = leaf_cap(n, tol)
    finished = [
        delayed(finish_block, pure=True)(ref, out, cap,
                                         dask_key_name=(key_name("build", token), i))
        for i, (ref, out) in enumerate(zip(refs, outs, strict=True))
    ]
    with phase("histogram"):
        return list(dask.compute(*finished))


def refine_phase(x: da.Array, location: np.ndarray, directions: np.ndarray,
                 blocks: list[BlockLeaves], n: int, tol: float, token: str,
                 statistic: str = "depth") -> tuple[list[BlockLeaves], int]:
    """Split the leaves still too heavy for ``tol``, if any: ``(blocks, passes made)``."""
    wanted = refine_plan(blocks, n, tol, statistic)
    todo = [i for i, w in enumerate(wanted) if w.any()]
    if not todo:
        return blocks, 0
    cap = leaf_cap(n, tol)
    refs = [broadcast(blocks[i], key_name("bin", token, "refine", i)) for i in todo]
    outs = collect_graph(
        x, location, directions,
        [BlockTask(blocks[i].j0, blocks[i].j1, r) for i, r in zip(todo, refs, strict=True)],
        [Wanted(wanted[i], int(blocks[i].counts[wanted[i]].sum(dtype=np.float64)), n)
         for i in todo],
        token=token)
    refined = [
        delayed(split_block, pure=True)(ref, out, cap, dask_key_name=(key_name("split", token), i))
        for i, ref, out in zip(todo, refs, outs, strict=True)
    ]
    blocks = list(blocks)
    with phase("refine"):
        for i, block in zip(todo, dask.compute(*refined), strict=True):
            blocks[i] = block
    return blocks, 1


def assemble_summary(location: np.ndarray, directions: np.ndarray, blocks: list[BlockLeaves],
                     n: int, tol: float, statistic: str = "depth") -> DepthSummary:
    """The depth summary of the finished blocks, checked and its bound compared with ``tol``."""
    for b in blocks:
        total = int(b.counts.sum(dtype=np.float64))
        if total != n * b.mb:  # pragma: no cover - internal consistency check
            raise RuntimeError(
                f"daskdepth internal error: a direction block summarises {total} values, "
                f"expected {n * b.mb}; please report this with the input's shape and chunks"
            )
    summary = DepthSummary(location, directions, blocks, n)
    bound = summary.error_bound(statistic)
    if bound > tol:  # pragma: no cover - guaranteed by construction
        warnings.warn(
            f"the certified depth error bound {bound:.3g} is above tol={tol:g}",
            ToleranceWarning, stacklevel=3,
        )
    return summary
