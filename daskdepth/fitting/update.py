"""Adding a batch of rows to a fitted leaf summary: one pass over the batch only.

``partial_fit``'s work (:meth:`daskdepth.estimators.depths.LeafDepth.partial_fit`):
the batch's rows are projected on the fitted directions, centred on the fitted
location, and counted into the existing leaves by the histogram pass
(:func:`daskdepth.passes.leaves.histogram_graph`, placed by
:func:`daskdepth.runtime.plan.pass_plan` as the fit's passes are: a summary
kept on the workers is updated where it is); the same pass draws the batch's
content-keyed row sample and counts its non-finite rows.  Each block is then
rebuilt from its base keys, the summed counts and the extremes
(:func:`daskdepth.summary.streaming.updated_block`), where it lives.  No row of
an earlier batch is read again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import delayed

from ..errors import MAX_BAD_ROWS
from ..kernels.leaves import plan_cuts
from ..passes.leaves import BlockTask, histogram_graph
from ..runtime.client import active_client
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import fresh_token, key_name
from ..runtime.memory import prefer_sorted
from ..runtime.placement import on_worker
from ..runtime.plan import pass_plan
from ..runtime.shards import realize, share
from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves, LeafCounts
from ..summary.rows import prepare_rows
from ..summary.sorted import BlockSorted, rebuild_sorted
from ..summary.statistics import Statistic
from ..summary.streaming import (
    BatchCounts,
    RowSample,
    base_keys,
    base_state,
    batch_counts,
    bottom_rows,
    empty_block,
    key_bounds,
    merge_samples,
    merged_ext,
    sample_rows,
    stream_block,
    updated_block,
)
from .fit import pilot_sample_size
from .summaries import build_summary, leaf_cap


@dataclass
class BatchScan:
    """What the pass learns of a batch besides its counts: finite and non-finite rows, sample.

    ``k`` is the sample's size limit (:func:`~daskdepth.summary.streaming.sample_rows`).
    """

    n: int
    n_bad: int
    bad_rows: np.ndarray
    sample: RowSample
    k: int


def _scan_chunk(x: np.ndarray, start: int, k: int) -> BatchScan:
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    bad = np.flatnonzero(~finite)
    return BatchScan(int(finite.sum()), int(bad.size), start + bad[:MAX_BAD_ROWS],
                     bottom_rows(x[finite], k), k)


def _scan_merge(*parts: BatchScan) -> BatchScan:
    return BatchScan(sum(p.n for p in parts), sum(p.n_bad for p in parts),
                     np.concatenate([p.bad_rows for p in parts])[:MAX_BAD_ROWS],
                     merge_samples([p.sample for p in parts], parts[0].k), parts[0].k)


def scan_graph(x: da.Array, token: str) -> Any:
    """Delayed :class:`BatchScan` of ``x``: one task per row chunk, reduced in a tree.

    It reads the same row-chunk keys as the histogram pass, so computed with it
    each chunk is read once.
    """
    blocks, starts = row_blocks(x)
    return reduce_chunks(blocks, _scan_chunk, _scan_merge, key=(key_name("feed", token),),
                         merge_key=key_name("merge", token, "stream"),
                         args=(sample_rows(x.shape[1]),),
                         starts=starts)


def sorted_to_leaves(block: BlockSorted, tol: float, aim: float | None = None) -> BlockLeaves:
    """Leaves with exact counts of a block of sorted projections, each within ``tol``.

    What the in-memory fit plans when it keeps leaves (each direction's sorted
    values cut greedily into leaves of at most the leaf limit for ``tol`` and
    ``n`` rows, atoms apart, light neighbours merged), so that batches can be
    counted into them: a small first fit's exact summary is converted once,
    before its first batch is added (its bound becomes at most ``tol``).
    ``aim`` (default: the leaf limit) is the most rows a leaf that is not an
    atom is planned to hold: a stream converted to leaves aims below the limit
    (:func:`convert_exact`), so that later batches of the same distribution
    keep the bound near ``tol``.

    Examples
    --------
    >>> block = BlockSorted(0, 1, np.array([[0.0, 1.0, 1.0, 3.0]]))
    >>> leaves = sorted_to_leaves(block, 0.0)
    >>> leaves.cuts.tolist()  # at tol=0 every value is an atom [a, nextafter(a))
    [0.0, 5e-324, 1.0, 1.0000000000000002, 3.0, 3.0000000000000004]
    >>> leaves.lut.tolist()  # min(L, G) of each leaf, exact
    [0.0, 1.0, 1.0, 3.0, 1.0, 1.0, 0.0]
    """
    values = block.values
    mb, n = values.shape
    cap = leaf_cap(n, tol) if aim is None else aim
    nodes = np.zeros(n, dtype=np.int64)
    whole = (np.array([-np.inf]), np.array([np.inf]))
    cuts, counts = [], []
    ext = np.empty((mb, 2))
    for jj in range(mb):
        p = np.ascontiguousarray(values[jj])
        _, _, k, c = plan_cuts(nodes, p, np.zeros(0), 1.0, float(cap), *whole)
        cuts.append(k)
        counts.append(c if c.size else np.array([float(n)]))
        ext[jj] = p[0], p[-1]
    cptr = np.concatenate([[0], np.cumsum([k.size for k in cuts])]).astype(np.int64)
    planned = BlockLeaves.planned(block.j0, block.j1, cptr, np.concatenate(cuts))
    # the counts stay (see daskdepth.summary.streaming.stream_block): the next batch adds to them
    return planned.finished(LeafCounts(np.concatenate(counts), ext), cap)


#: Rows a leaf that is not an atom holds when a stream's exact summary is converted to
#: leaves (:func:`convert_exact`).
CONVERT_AIM = 1.0


#: Fraction of the row limit the leaves of a stream's first fit are planned to hold (and
#: light leaves merged up to), where ``fit`` fills them up to the limit: later batches of the
#: same distribution add Poisson noise to every leaf, which pushes the fullest leaves past
#: the limit, so a stream started at the limit starts at ``tol`` and passes it at once.
#: Measured (benchmarks/stream_fill.py: AIIRW, tol=1e-4, 5 features, 50 directions, a
#: first batch of 50,000 rows, then batches of 10,000): the bound after 1, 9, 50 and 200
#: batches is 1.71, 2.28, 2.54, 2.59 x tol at fill 1 (``fit``'s leaves), 1.21, 1.74, 1.97
#: at 0.6, 0.96, 1.42, 1.63, 1.67 at 0.4, 0.84, 1.24, 1.44 at 0.3 and 0.71, 1.09, 1.26 at
#: 0.2 (after 1, 9, 50); the leaves grow as 1 / fill (2.5 times ``fit``'s at 0.4).
STREAM_FILL = 0.4


def stays_exact(n: int, d: int, m: int, tol: float) -> bool:
    """Whether ``fit`` on ``n`` rows would keep the exact summary (sorted projections).

    The rule of :func:`daskdepth.fitting.fit.fit_depth`: the row sample is
    every row (at most :func:`~daskdepth.fitting.fit.pilot_sample_size` rows)
    and the sorted projections take no more memory than the leaves
    (:func:`~daskdepth.runtime.memory.prefer_sorted`).  A stream keeps its
    summary exact while the rows it holds stay within this size.

    Examples
    --------
    >>> stays_exact(30_000, 5, 50, 1e-4), stays_exact(40_000, 5, 50, 1e-4)
    (True, False)
    """
    return 1 <= n <= pilot_sample_size(d, tol) and prefer_sorted(m, n, tol)


def held_sorted(summary: DepthSummary) -> list[BlockSorted] | None:
    """The summary's blocks, held here, when they are all sorted projections (else None).

    Blocks kept on a cluster are asked for their kind where they are, and
    brought here only when sorted (an exact summary is small).
    """
    handles = [b for b in summary.blocks if is_handle(b)]
    if handles:
        kinds = _fetch(handles, _is_sorted, [()] * len(handles), tokenize(fresh_token()),
                       "kinds")
        if not all(kinds):
            return None
    blocks = [b.load() if is_handle(b) else b for b in summary.blocks]
    if not blocks or not all(isinstance(b, BlockSorted) for b in blocks):
        return None
    return blocks


def exact_summary(summary: DepthSummary, blocks: list[BlockSorted], add: np.ndarray,
                  drop: int = 0) -> DepthSummary:
    """The exact summary of the rows of ``summary`` less its first ``drop`` and plus ``add``.

    With the reference rows (``summary.rows``) the blocks are rebuilt from the
    rows kept and added (:func:`~daskdepth.summary.sorted.rebuild_sorted`, the
    kernels of the exact fit: the same bits as ``fit``'s exact summary of
    those rows in this frame); without them (``drop`` must then be 0) the
    added rows' sorted projections are merged into each direction's values.
    Either way the values are the sorted projections of the union, whatever
    the order in which rows came.
    """
    location, directions = summary.location, summary.directions
    add = np.ascontiguousarray(add, dtype=np.float64).reshape(-1, directions.shape[1])
    ranges = [(b.j0, b.j1) for b in blocks]
    if summary.rows is not None:
        rows = np.ascontiguousarray(np.concatenate([summary.rows[drop:], add]))
        new = rebuild_sorted(rows, location, directions, ranges)
        return DepthSummary(location, directions, new, int(rows.shape[0]), rows=rows)
    if drop:
        raise ValueError("an exact summary without its rows cannot drop rows")
    added = rebuild_sorted(add, location, directions, ranges)
    new = [BlockSorted(b.j0, b.j1, np.ascontiguousarray(
        np.sort(np.concatenate([b.values, a.values], axis=1), axis=1)))
        for b, a in zip(blocks, added, strict=True)]
    return DepthSummary(location, directions, new, summary.n + int(add.shape[0]))


def convert_exact(summary: DepthSummary, tol: float, batches: list[np.ndarray] | None = None
                  ) -> tuple[DepthSummary, list[list[BatchCounts]] | None]:
    """An exact summary converted to leaves for a stream that outgrows it.

    The leaves are planned on all the rows the summary holds (its sorted
    projections), each leaf that is not an atom holding at most
    :data:`CONVERT_AIM` row (the leaf limit at this size is about 6 rows: a
    stream outgrows its exact summary at about ``3 / tol`` rows,
    :func:`~daskdepth.runtime.memory.prefer_sorted`).  Later batches of the
    same distribution fall into a leaf in proportion to the probability
    between its keys, which for leaves cut around few rows varies a lot (the
    spacings of the sample): leaves at the limit (6 rows) let the bound of a
    stationary stream grow to about 3 x ``tol`` after 50 batches of a sixth
    of the rows each, leaves of 2 rows to about 2 x ``tol``, leaves of one
    row keep it near 1.7 x ``tol`` (AI-IRW, 5 features, 50 directions).  The
    leaves then take about three times the bytes of the sorted projections.

    Blocks kept on a cluster are converted where they are.  With ``batches``
    (a window: the held rows of each batch, oldest first, adding up to the
    summary's rows) each batch's base-leaf counts are counted too (brought
    here), and the blocks are made from their sum
    (:func:`~daskdepth.summary.streaming.stream_block`), as a window's
    updates make them.
    """
    n = int(summary.n)
    aim = min(float(leaf_cap(n, tol)), CONVERT_AIM)
    token = tokenize(fresh_token())
    blocks = list(summary.blocks)
    leaves = _map_blocks(blocks, sorted_to_leaves, [(tol, aim)] * len(blocks), n, token,
                         "leaves")
    if batches is None:
        return DepthSummary(summary.location, summary.directions, leaves, n), None
    return _with_history(summary, leaves, batches, token)


def _with_history(summary: DepthSummary, leaves: list[Any], batches: list[np.ndarray],
                  token: str) -> tuple[DepthSummary, list[list[BatchCounts]]]:
    """Freshly planned ``leaves`` (of ``summary``'s frame) with each batch's base counts.

    A window's history: the rows of each batch (oldest first, adding up to
    the leaves' rows) counted into the leaves (brought here), and the blocks
    made from their sum (:func:`~daskdepth.summary.streaming.stream_block`),
    as a window's updates make them.
    """
    n = int(sum(int(r.shape[0]) for r in batches))
    blocks = list(leaves)
    history: list[list[BatchCounts]] = []
    for i, rows in enumerate(batches):
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        history.append(_fetch(leaves, _count_rows, [
            (rows, summary.location, np.ascontiguousarray(summary.directions[b.j0:b.j1]))
            for b in blocks], token, f"count{i}"))
    args = [(np.sum([batch[b].counts for batch in history], axis=0),
             merged_ext([batch[b].ext for batch in history], block.mb))
            for b, block in enumerate(blocks)]
    out = _map_blocks(leaves, _summed_block, args, n, token, "summed")
    return DepthSummary(summary.location, summary.directions, out, n), history


def row_limit(d: int, tol: float) -> int:
    """The most rows a stream holds besides its summary (``pilot_sample_size(d, tol)``).

    A stream started small holds its rows once its exact summary is converted
    to leaves, up to the rows a first fit plans its leaves on when its sample
    is every row (about ``16 / tol``, at most
    :data:`~daskdepth.fitting.fit.SAMPLE_BYTES` of them), so that its leaves can
    be planned again on all of them (:func:`replan_rows`).

    Examples
    --------
    >>> row_limit(5, 1e-4), row_limit(5, 1e-5)
    (160000, 1048576)
    """
    return int(pilot_sample_size(int(d), float(tol)))


def replan_rows(summary: DepthSummary, rows: np.ndarray, tol: float, fill: float,
                statistic: Statistic, batches: list[np.ndarray] | None = None
                ) -> tuple[DepthSummary, list[list[BatchCounts]] | None]:
    """Leaves planned again on all the ``rows`` a stream holds, in ``summary``'s frame.

    What the first ``partial_fit`` of those rows would plan
    (:func:`~daskdepth.fitting.summaries.build_summary` with every row in its
    sample: each direction's sorted projections cut into leaves of ``fill``
    of the row limit, exact counts), with ``summary``'s location, directions
    and direction blocks; the blocks stay on a cluster when ``summary``'s are
    kept there.  A function of the rows only (not of their order or
    batches).  With ``batches`` (a window: the rows of each kept batch, oldest
    first, adding up to ``rows``), each batch's base counts too, as
    :func:`convert_exact` counts them.
    """
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    n = int(rows.shape[0])
    token = tokenize(fresh_token())
    blocks = list(summary.blocks)
    size = max(int(b.j1 - b.j0) for b in blocks)
    shard = any(is_handle(b) for b in blocks)
    x = da.from_array(rows, chunks=(max(n, 1), rows.shape[1]))  # not read: the sample is x
    new, _ = build_summary(x, summary.location, summary.directions, rows, n, tol, token,
                           block_size=size, statistic=statistic, shard=shard, fill=fill)
    if batches is None:
        return new, None
    return _with_history(new, list(new.blocks), batches, token)


def _count_rows(block: BlockLeaves, rows: np.ndarray, location: np.ndarray,
                v: np.ndarray) -> BatchCounts:
    """The base-leaf counts of ``rows`` in a freshly converted block (its keys are its base)."""
    prepared = prepare_rows(rows, location, keep_inverse=False)
    part = block.accumulate(prepared, v, LeafCounts.empty(block.n_leaves, block.mb))
    return batch_counts(block, part, key_bounds(block))


def _summed_block(block: BlockLeaves, counts: np.ndarray, ext: np.ndarray) -> BlockLeaves:
    base_cptr, base_cuts = base_keys(block, key_bounds(block))
    return stream_block(block.j0, block.j1, base_cptr, base_cuts, counts, ext)


def _as_leaves(block: Any, tol: float) -> BlockLeaves:
    return sorted_to_leaves(block, tol) if isinstance(block, BlockSorted) else block


def _bounds_of(block: Any) -> np.ndarray:
    return key_bounds(block)


def _block_tasks(plan: Any, fn: Any, args: list[tuple], token: str, verb: str) -> list[Any]:
    """One task ``fn(block, *args[b])`` per block of ``plan``, on the worker that holds it."""
    tasks = []
    for b, ref in enumerate(plan.refs):
        with on_worker(plan.homes[b]):
            tasks.append(delayed(fn, pure=True)(
                ref, *args[b], dask_key_name=(key_name("feed", token, verb), b)))
    return tasks


def _map_blocks(blocks: list[Any], fn: Any, args: list[tuple], n: int, token: str,
                verb: str = "stream") -> list[Any]:
    """``fn(block, *args[b])`` for every block, where the block is; the results replace them.

    Blocks kept on a cluster stay there (the results too); blocks held here are
    computed here (nothing is sent to a cluster for them).
    """
    if not any(is_handle(b) for b in blocks):
        return [fn(b, *a) for b, a in zip(blocks, args, strict=True)]
    with pass_plan(blocks, f"{token}.{verb}") as plan:
        tasks = _block_tasks(plan, fn, args, token, verb)
        return realize(tasks, n, key_name("feed", token, verb, "meta"), keep=plan.kept)


def _fetch(blocks: list[Any], fn: Any, args: list[tuple], token: str, verb: str) -> list[Any]:
    """``fn(block, *args[b])`` for every block, computed where the block is, brought here."""
    if not any(is_handle(b) for b in blocks):
        return [fn(b, *a) for b, a in zip(blocks, args, strict=True)]
    with pass_plan(blocks, f"{token}.{verb}") as plan:
        tasks = _block_tasks(plan, fn, args, token, verb)
        client = active_client()
        if client is None:
            return list(dask.compute(*tasks))
        return list(client.gather(client.compute(tasks)))


def leaf_summary(summary: DepthSummary, tol: float) -> DepthSummary:
    """``summary`` with its blocks of sorted projections converted to leaves (exact counts)."""
    token = tokenize(fresh_token())
    held = [b for b in summary.blocks if is_handle(b)]
    if held:  # blocks kept elsewhere: asked where they are
        kinds = _fetch(held, _is_sorted, [()] * len(held), token, "kinds")
    else:
        kinds = []
    if not any(_is_sorted(b) for b in summary.blocks) and not any(kinds):
        return summary
    blocks = _map_blocks(list(summary.blocks), _as_leaves, [(tol,)] * len(summary.blocks),
                         summary.n, token, "leaves")
    return DepthSummary(summary.location, summary.directions, blocks, summary.n)


def _is_sorted(block: Any) -> bool:
    return isinstance(block, BlockSorted)


def leaf_total(summary: DepthSummary) -> int:
    """The leaves of all the blocks of ``summary`` (0 for blocks of sorted projections).

    Blocks kept on a cluster are asked where they are: one integer each comes
    back, not their leaves.
    """
    blocks = list(summary.blocks)
    total = sum(_n_leaves(b) for b in blocks if not is_handle(b))
    handles = [b for b in blocks if is_handle(b)]
    if handles:
        total += sum(_fetch(handles, _n_leaves, [()] * len(handles), tokenize(fresh_token()),
                            "nleaves"))
    return int(total)


def _n_leaves(block: Any) -> int:
    return int(getattr(block, "n_leaves", 0))


def block_bounds(summary: DepthSummary) -> list[np.ndarray]:
    """The base bounds (first and last key per direction) of every block of a leaf summary."""
    token = tokenize(fresh_token())
    return _fetch(list(summary.blocks), _bounds_of, [()] * len(summary.blocks), token, "bounds")


def base_counts(summary: DepthSummary, bounds: list[np.ndarray]) -> list[BatchCounts]:
    """The rows of every block as base-leaf counts (a window's first batch), brought here."""
    token = tokenize(fresh_token())
    return _fetch(list(summary.blocks), _base_counts_task,
                  [(summary.n, bounds[b]) for b in range(len(summary.blocks))], token, "base")


def _base_counts_task(block: BlockLeaves, n: int, bounds: np.ndarray) -> BatchCounts:
    return base_state(block, n, bounds)[2]


def empty_summary(summary: DepthSummary, bounds: list[np.ndarray]) -> DepthSummary:
    """The summary's base keys holding no rows (a template), its blocks where they were."""
    token = tokenize(fresh_token())
    blocks = _map_blocks(list(summary.blocks), empty_block,
                         [(bounds[b],) for b in range(len(summary.blocks))], 1, token, "empty")
    return DepthSummary(summary.location, summary.directions, blocks, 0)


@dataclass
class BatchUpdate:
    """A batch counted into a summary: the new summary, the batch's rows and sample.

    ``counts`` holds the batch's :class:`~daskdepth.summary.streaming.BatchCounts`
    per block (brought here) when asked for (a window's history), else None.
    """

    summary: DepthSummary
    scan: BatchScan
    counts: list[BatchCounts] | None


class BatchRefused(ValueError):
    """The batch cannot be added (its non-finite rows under ``nan_policy='raise'``, no rows)."""


def _update_task(block: BlockLeaves, part: LeafCounts, n: int, bounds: np.ndarray,
                 drop: BatchCounts | None, ext: np.ndarray | None) -> BlockLeaves:
    # a window's extremes: those of the batches it keeps, and the new batch's
    kept = None if ext is None else merged_ext([ext, part.ext], block.mb)
    return updated_block(block, n, bounds, batch_counts(block, part, bounds), drop, kept)


def add_batch(x: da.Array, summary: DepthSummary, bounds: list[np.ndarray], *,
              check: Any, keep_counts: bool = False,
              drops: list[BatchCounts] | None = None, dropped_rows: int = 0,
              exts: list[np.ndarray] | None = None, token: str) -> BatchUpdate:
    """One pass over the batch ``x``: its rows counted into ``summary``'s leaves.

    ``bounds`` are the base bounds of every block; ``check(scan)`` is called
    with the batch's :class:`BatchScan` before any block is changed (it raises
    to refuse the batch: the summary is then left as it was).  ``drops`` (a
    window) are the counts of the batch that leaves, per block, and
    ``dropped_rows`` its rows; ``exts`` the extremes of the batches kept before
    this one, per block (the new batch's are merged in).  ``keep_counts``
    brings the batch's base-leaf counts here (a window's history).
    """
    blocks = list(summary.blocks)
    directions = share(summary.directions, key_name("share", token, "directions"))
    scan = scan_graph(x, token)
    client = active_client()
    with pass_plan(blocks, token, x, None, "update") as plan:
        outs = histogram_graph(x, summary.location, directions,
                               [BlockTask(b.j0, b.j1, r) for b, r in
                                zip(blocks, plan.refs, strict=True)],
                               token=token, plan=plan)
        if client is None:
            # one computation: each row chunk is read once for the counts and the scan
            *parts, result = dask.compute(*outs, scan)
        else:
            futures = client.compute([*outs, scan])
            parts, result = futures[:-1], futures[-1].result()
        check(result)
        n = summary.n + result.n - dropped_rows
        counts = None
        if keep_counts:
            tasks = []
            for b, (ref, part) in enumerate(zip(plan.refs, parts, strict=True)):
                with on_worker(plan.homes[b]):
                    tasks.append(delayed(batch_counts, pure=True)(
                        ref, part, bounds[b],
                        dask_key_name=(key_name("feed", token, "batch"), b)))
            counts = (list(dask.compute(*tasks)) if client is None
                      else list(client.gather(client.compute(tasks))))
        tasks = []
        for b, (ref, part) in enumerate(zip(plan.refs, parts, strict=True)):
            with on_worker(plan.homes[b]):
                tasks.append(delayed(_update_task, pure=True)(
                    ref, part, summary.n, bounds[b], None if drops is None else drops[b],
                    None if exts is None else exts[b],
                    dask_key_name=(key_name("feed", token, "block"), b)))
        new_blocks = realize(tasks, max(n, 1), key_name("feed", token, "meta"),
                             keep=plan.kept)
        del parts
    return BatchUpdate(DepthSummary(summary.location, summary.directions, new_blocks, n),
                       result, counts)


def window_ext(history: list[list[BatchCounts]], block: int, mb: int) -> np.ndarray:
    """The extremes of block ``block`` over the batches of ``history``."""
    ext = np.empty((mb, 2))
    ext[:, 0], ext[:, 1] = np.inf, -np.inf
    for batch in history:
        np.minimum(ext[:, 0], batch[block].ext[:, 0], out=ext[:, 0])
        np.maximum(ext[:, 1], batch[block].ext[:, 1], out=ext[:, 1])
    return ext
