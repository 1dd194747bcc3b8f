"""Fitting the per-direction summaries: pilot trees, histogram and refinement passes."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import delayed

from ._graph import (
    broadcast,
    collect_graph,
    histogram_graph,
    moments_pass,
    phase,
    score_array,
)
from ._kernels import plan_cuts, project_columns
from ._summary import BlockSummary, DepthSummary, LeafStats, mean_bound

#: Most directions per block: one histogram task covers one row chunk and one
#: block.  ``fit_depth`` uses fewer when the workers' memory limit asks for it
#: (:func:`daskdepth._memory.directions_per_block`); results do not depend on it.
DIRECTIONS_PER_BLOCK = 32
#: Leaves planned from a row sample aim at this fraction of the row limit, so
#: that sampling noise rarely pushes them over it.
PILOT_GUARD = 0.4


class ToleranceWarning(UserWarning):
    """The certified error bound could not be brought below ``tol``."""


@dataclass
class FitInfo:
    passes: int  # data passes after the moments pass; 0 means exact, in memory


def leaf_cap(n: int, tol: float) -> int:
    """Most rows a leaf that is not an atom may hold for an error <= tol.

    The midpoint estimate misplaces at most ``count / 2`` of a leaf's rows; with
    a cap of 0 (``tol < 1 / (2 n)``) every value gets a leaf of its own.
    """
    k = int(np.floor(2 * tol * n + 1e-9))
    while k > 0 and k / (2.0 * n) > tol:  # the bound is computed as count / (2 n)
        k -= 1
    return k


def pilot_summary(sample_c: np.ndarray, v: np.ndarray, j0: int, j1: int, n: int,
                  tol: float) -> BlockSummary:
    """Leaf keys of one direction block planned from a row sample (in memory).

    Each direction's sorted sampled projections are cut greedily into leaves of
    a fraction of the row limit (scaled up from the sample), atoms apart.  When
    the sample is the whole data the cut is exact and the summary comes back
    finished; otherwise a pass over the data counts its leaves.  Directions are
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
    keys, counts = [], []
    ext = np.empty((mb, 2))
    for jj in range(mb):
        project_columns(columns, v[jj:jj + 1], proj)
        p = proj[0]
        p.sort()
        _, _, k, c = plan_cuts(nodes, p, np.zeros(0), n / s, float(target), *whole)
        keys.append(k)
        counts.append(c if c.size else np.array([float(s)]))  # one leaf: all rows
        ext[jj] = p[0], p[-1]
    bptr = np.concatenate([[0], np.cumsum([k.size for k in keys])]).astype(np.int64)
    if not exact:
        return BlockSummary.build(j0, j1, bptr, np.concatenate(keys))
    # Keys only: finishing builds the routing structure once, for the final keys.
    planned = BlockSummary.planned(j0, j1, bptr, np.concatenate(keys))
    return finish_summary(planned, LeafStats(np.concatenate(counts), ext), cap)


def finish_summary(summary: BlockSummary, stats: LeafStats, cap: int) -> BlockSummary:
    """Coalesce light neighbouring leaves, then tabulate the scores from exact counts."""
    return summary.finished(stats, cap)


def refine_summary(summary: BlockSummary,
                   collected: tuple[np.ndarray, np.ndarray, np.ndarray],
                   cap: int) -> BlockSummary:
    """Split the collected leaves of a finished summary exactly and finish again."""
    leaves, values, weights = collected
    stats = summary.stats
    if leaves.size:
        summary, stats = summary.split(leaves, values, weights=weights, target=cap,
                                       stats=stats)
    return finish_summary(summary, stats, cap)


def refine_plan(trees: list[BlockSummary], n: int, tol: float) -> list[np.ndarray]:
    """Per block, the leaves to split exactly so that the error bound meets ``tol``.

    The bound is the mean over directions of each direction's worst leaf, and
    a split direction ends at most at the leaf limit's error, so only the
    directions with the worst leaves need splitting: the fewest that bring the
    bound (computed as :meth:`DepthSummary.error_bound` does) down to ``tol``.
    """
    cap = leaf_cap(n, tol)
    flat = np.concatenate([t.direction_errors(n) for t in trees])
    done = cap / (2.0 * n)
    order = np.argsort(-flat, kind="stable")
    heavy = int(np.count_nonzero(flat > done))

    def bound_after(k: int) -> float:  # the k worst directions split
        errs = flat.copy()
        errs[order[:k]] = np.minimum(errs[order[:k]], done)
        return mean_bound(errs)

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
    for t in trees:
        pick = chosen[start:start + t.mb]
        start += t.mb
        wanted.append(t.loose_leaves(cap) & pick[t.leaf_dir] if pick.any()
                      else np.zeros(t.n_leaves, dtype=bool))
    return wanted


def build_summary(x: da.Array, location: np.ndarray, directions: np.ndarray,
                  sample: np.ndarray, n: int, tol: float, token: str,
                  block_size: int = DIRECTIONS_PER_BLOCK) -> tuple[DepthSummary, FitInfo]:
    """Summaries of the projections of the ``n`` finite rows of ``x``.

    ``sample`` holds finite rows of ``x``; when it has all ``n`` of them the
    summaries are built in memory and exactly, without a pass over ``x``.
    Otherwise one histogram pass counts every leaf exactly.  When leaves too
    heavy for ``tol`` remain (sampling noise, values missing from the sample),
    a refinement pass collects their values and splits them exactly on the
    workers (one task per direction block, only the directions that need it).
    """
    m = directions.shape[0]
    bounds = [(j0, min(m, j0 + block_size)) for j0 in range(0, m, block_size)]
    sample_c = np.ascontiguousarray(sample - location)
    exact = sample.shape[0] == n
    sample_ref = broadcast(sample_c, f"daskdepth-sample-{token}")
    pilots = [
        delayed(pilot_summary, pure=True)(sample_ref, np.ascontiguousarray(directions[j0:j1]),
                                       j0, j1, n, tol,
                                       dask_key_name=(f"daskdepth-pilot-{token}", b))
        for b, (j0, j1) in enumerate(bounds)
    ]
    # The pilot keys are computed first: histogram tasks that waited for them
    # would let the workers load row chunks faster than they are consumed, and
    # hold all of them (memory growing with n) until the keys were ready.
    with phase("pilot"):
        trees = list(dask.compute(*pilots))
    if exact:
        return _finish(location, directions, trees, n, tol), FitInfo(0)

    refs = [broadcast(t, f"daskdepth-tree-{token}-{b}") for b, t in enumerate(trees)]
    outs = histogram_graph(x, location, directions,
                           [(j0, j1, r) for (j0, j1), r in zip(bounds, refs, strict=True)],
                           token=token)
    cap = leaf_cap(n, tol)
    finished = [
        delayed(finish_summary, pure=True)(ref, out, cap,
                                           dask_key_name=(f"daskdepth-finish-{token}", b))
        for b, (ref, out) in enumerate(zip(refs, outs, strict=True))
    ]
    with phase("histogram"):
        trees = list(dask.compute(*finished))
    passes = 1
    wanted = refine_plan(trees, n, tol)
    todo = [b for b, w in enumerate(wanted) if w.any()]
    if todo:
        refs = [broadcast(trees[b], f"daskdepth-refine-{token}-{b}") for b in todo]
        rows = [int(trees[b].counts[wanted[b]].sum(dtype=np.float64)) for b in todo]
        outs = collect_graph(x, location, directions,
                             [(*bounds[b], ref) for b, ref in zip(todo, refs, strict=True)],
                             [(wanted[b], r, n) for b, r in zip(todo, rows, strict=True)],
                             token=token)
        refined = [
            delayed(refine_summary, pure=True)(ref, out, cap,
                                            dask_key_name=(f"daskdepth-split-{token}", b))
            for b, ref, out in zip(todo, refs, outs, strict=True)
        ]
        with phase("refine"):
            for b, tree in zip(todo, dask.compute(*refined), strict=True):
                trees[b] = tree
        passes += 1
    return _finish(location, directions, trees, n, tol), FitInfo(passes)


def _finish(location: np.ndarray, directions: np.ndarray, trees: list[BlockSummary], n: int,
            tol: float) -> DepthSummary:
    for t in trees:
        total = int(t.counts.sum(dtype=np.float64))
        if total != n * (t.j1 - t.j0):  # pragma: no cover - internal consistency check
            raise RuntimeError(
                f"daskdepth internal error: a direction block summarises {total} values, "
                f"expected {n * (t.j1 - t.j0)}; please report this with the input's shape "
                "and chunks"
            )
    summary = DepthSummary(location, directions, trees, n)
    bound = summary.error_bound()
    if bound > tol:  # pragma: no cover - guaranteed by construction
        warnings.warn(
            f"the certified depth error bound {bound:.3g} is above tol={tol:g}",
            ToleranceWarning, stacklevel=3,
        )
    return summary


# --------------------------------------------------------------------------- whole fit

#: Rows drawn (Bernoulli, keyed on the global row index) for the pilot trees and
#: for ``offset_``: the contamination quantile of 65,536 depths is within about
#: 1e-3 in rank of the quantile over all training rows.  Small ``tol`` asks for
#: more (``SAMPLE_PER_LEAF / tol``, at most ``SAMPLE_MAX``) so that the pilot
#: leaves hold enough sampled rows to be sized reliably.
SAMPLE_SIZE = 1 << 16
SAMPLE_PER_LEAF = 16
SAMPLE_MAX = 1 << 20
#: Upper bound on the bytes of that sample (matters only for very wide data).
SAMPLE_BYTES = 256 * 2**20


def sample_rows(d: int, tol: float) -> int:
    """Expected size of the row sample for ``d`` features and tolerance ``tol``."""
    want = SAMPLE_SIZE if tol <= 0 else max(SAMPLE_SIZE, int(np.ceil(SAMPLE_PER_LEAF / tol)))
    return int(max(1024, min(want, SAMPLE_MAX, SAMPLE_BYTES // (8 * d))))


@dataclass
class FittedDepth:
    location: np.ndarray
    covariance: np.ndarray
    whitening: np.ndarray | None
    rank: int
    directions: np.ndarray
    summary: DepthSummary
    n: int
    sample_depth: np.ndarray
    info: FitInfo
    token: str


def fit_depth(x: da.Array, *, depth: str, n_directions: int | None, covariance: object,
              tol: float, rng: np.random.RandomState, nan_policy: str) -> FittedDepth:
    """Fit location, covariance, directions and summaries on the rows of ``x``."""
    from ._covariance import canonical_covariance, resolve_covariance, whitening
    from ._directions import draw_directions
    from ._memory import SummaryMemoryWarning, directions_per_block, summary_memory_message
    from ._validation import _default_row_chunk, nan_message

    n_total, d = x.shape
    seed = int(rng.randint(0, 2**63 - 1, dtype=np.int64))
    token = tokenize(x.name, depth, n_directions, covariance, tol, seed, nan_policy)
    sample_size = sample_rows(d, tol)
    mom = moments_pass(x, seed=seed, sample_size=sample_size, token=token)
    if mom.n_bad and nan_policy == "raise":
        raise ValueError(nan_message(mom.n_bad, mom.bad_rows))
    if mom.n < 2:
        raise ValueError(
            f"only {mom.n} finite rows remain out of {n_total}; a depth reference needs at "
            "least 2"
        )
    location, cov = resolve_covariance(covariance, mom.n, mom.exact_mean, mom.scatter, d, x=x,
                                       seed=seed, token=token)
    w, rank = None, d
    if depth == "ai-irw":
        if not cov.any() and np.ptp(mom.sample, axis=0).any():
            raise ValueError(
                "the covariance of the reference data underflows to zero although the rows "
                f"differ: the values are too small in scale (largest |x| about "
                f"{np.abs(mom.sample).max():.1e}) for float64 squares; rescale the features, "
                "e.g. multiply them by a common factor"
            )
        w, rank = whitening(canonical_covariance(cov))
        if rank < d:
            warnings.warn(
                f"the covariance has rank {rank} < {d} features (some features are linear "
                f"combinations of others or constant); AI-IRW depth is computed in the "
                f"{rank}-dimensional principal subspace",
                RankWarning, stacklevel=3,
            )
    m = n_directions if n_directions is not None else 100 * d
    directions = draw_directions(rng, m, d, w)
    # Tasks hold a row chunk, or (pilot) the row sample, with one block's projections.
    block = directions_per_block(d, max(max(x.chunks[0], default=1), 2 * mom.sample.shape[0]))
    too_big = summary_memory_message(m, mom.n, tol)
    if too_big:
        warnings.warn(too_big, SummaryMemoryWarning, stacklevel=3)
    summary, info = build_summary(x, location, directions, mom.sample, mom.n, tol, token,
                                  block_size=min(block, DIRECTIONS_PER_BLOCK))
    # offset_ needs at most SAMPLE_SIZE depths (rank error ~1e-3); the sample is in
    # global row order, so evenly spaced picks are as random and chunking-independent.
    rows_for_offset = mom.sample
    if rows_for_offset.shape[0] > SAMPLE_SIZE:
        pick = np.linspace(0, rows_for_offset.shape[0] - 1, SAMPLE_SIZE).astype(np.int64)
        rows_for_offset = rows_for_offset[pick]
    rows = _default_row_chunk(*rows_for_offset.shape)
    sample = da.from_array(rows_for_offset, chunks=(rows, d),
                           name=f"daskdepth-offset-{token}")
    with phase("offset"):
        sample_depth = score_array(sample, summary, raise_nan=False, token=token).compute()
    return FittedDepth(location, cov, w, rank, directions, summary, mom.n, sample_depth, info,
                       token)


class RankWarning(UserWarning):
    """The covariance is singular; the depth is computed in its principal subspace."""
