"""Models that follow the data: ``partial_fit`` and windows.

The rank depths' summaries are counts of rows per leaf along each direction
(:mod:`daskdepth.summary.streaming`): counts add, so a fitted model takes a
new batch in one pass over that batch alone, and a window of the most recent
batches subtracts the batch that leaves (models started from one frame merge
into the model of their union: :mod:`.merging`).  The frame (location,
covariance or whitening, directions) and the leaf keys are those of the first
fit (or of the template), or planned again on the rows a small stream holds;
the depths are those with respect to all the rows the summary holds, in that
frame, within ``error_bound_``, which stays certified.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..errors import MAX_BAD_ROWS, StreamBoundWarning, nan_rows_message, user_stacklevel
from ..fitting.fit import SAMPLE_PER_LEAF, pilot_sample_size
from ..fitting.offset import offset_depths
from ..fitting.update import (
    STREAM_FILL,
    BatchScan,
    add_batch,
    base_counts,
    block_bounds,
    convert_exact,
    exact_summary,
    held_sorted,
    leaf_summary,
    leaf_total,
    replan_rows,
    row_limit,
    scan_graph,
    stays_exact,
    window_ext,
)
from ..runtime.client import keep_placement, phase
from ..runtime.keys import fresh_token
from ..runtime.progress import show_phases
from ..summary.depth import DepthSummary
from ..summary.leaves import LeafCounts
from ..summary.sorted import BlockSorted
from ..summary.streaming import (
    BatchCounts,
    RowSample,
    StreamState,
    bottom_rows,
    history_bytes,
    merge_samples,
    sample_rows,
)
from .inputs import as_input, check_feature_names

#: ``partial_fit`` warns (once per model, :class:`~daskdepth.StreamBoundWarning`)
#: when ``error_bound_`` passes this many times ``tol``.
BOUND_BUDGET = 2.0

#: The most bytes a window's history may take (``window`` times
#: :func:`~daskdepth.summary.streaming.history_bytes`): a larger window is refused at its
#: first batch.
WINDOW_MAX_BYTES = 4 * 2**30

#: A stream that holds its rows (:attr:`~daskdepth.summary.streaming.StreamState.rows`)
#: plans its leaves again on all of them when, after a batch, ``error_bound_`` passes
#: this many times ``tol`` (three quarters of :data:`BOUND_BUDGET`): leaves planned on
#: fewer rows than the stream now holds resolve it less and less.
REPLAN_BOUND = 1.5


def _seed_sample(model: Any, x: Any) -> RowSample:
    """The content-keyed row sample of a first batch (one pass over it)."""
    token = tokenize(x.name, fresh_token())
    with phase("update"), keep_placement():
        scan: BatchScan = scan_graph(x, token).compute()
    return scan.sample


def start(model: Any, data: Any) -> None:
    """After the first ``partial_fit`` (a fit of ``data``): the stream's row sample and counters.

    The stream holds the batch's rows when :func:`_hold_first` says so (a
    window's exact summary without its rows, or leaves planned on at most the
    row limit); otherwise its row sample is drawn in one more pass over the
    batch.
    """
    if _hold_first(model, data, model.summary_):
        return
    _begin(model, StreamState(None, _seed_sample(model, data.array),  # type: ignore[arg-type]
                              window=model.window))


def _begin(model: Any, st: StreamState) -> StreamState:
    """``st`` becomes the model's stream state; its first batch is every row the model holds.

    Where a stream starts (a first ``partial_fit``, or the first batch of a
    model fitted by ``fit``): ``n_batches_`` is 1 and ``batch_rows_`` lists
    ``n_samples_fit_``.
    """
    model._stream = st
    model.n_batches_ = 1
    model.batch_rows_ = np.array([model.n_samples_fit_], dtype=np.int64)
    return st


def _hold_first(model: Any, data: Any, summary: DepthSummary) -> bool:
    """The stream of a first ``partial_fit`` holds the batch's rows in its state: True when it does.

    Two first fits hold them; the rows are read once, as the row sample's
    pass read them, and their sample is the stream's:

    - a window whose first fit kept an exact summary without its rows (as
      many features as directions or more: the sorted projections are the
      smaller), so that the window can drop them later while the summary
      stays exact (its base keys are fixed when it is converted to leaves);
    - a first fit of more rows than the exact size (about ``3 / tol``) but at
      most :func:`~daskdepth.fitting.update.row_limit` (about ``16 / tol``),
      which plans its leaves on all its rows (``StreamState.rows``, as a
      stream started small holds them from its conversion), so that its
      leaves can be planned again on all the rows held (:func:`_replan`) when
      the bound passes :data:`REPLAN_BOUND`, and a window drops the leaving
      batch's rows; its base keys (and a window's first batch) are fixed here.

    False (nothing held) otherwise: an exact first fit that holds its rows in
    its summary, or a larger batch.
    """
    d = int(model.n_features_in_)
    exact = (model.window is not None and summary.rows is None
             and all(isinstance(b, BlockSorted) for b in summary.blocks))
    if not exact:
        rows_in = float(data.array.shape[0])
        if not (np.isfinite(rows_in) and int(rows_in) <= row_limit(d, float(model.tol))):
            return False
        if held_sorted(summary) is not None:
            return False
    rows = _finite_rows(model, data)
    if rows.shape[0] != int(model.n_samples_fit_):
        return False
    st = _begin(model, StreamState(None, bottom_rows(rows, sample_rows(d)),  # type: ignore[arg-type]
                                   window=model.window, rows=rows))
    if not exact:
        _first_history(model, st, _fix_base(model, st, summary))
    return True


def _first_history(model: Any, st: StreamState, bounds: list[np.ndarray]) -> None:
    """A window's history of a stream that holds its first batch only (or none without one)."""
    st.window = model.window
    if model.window is None:
        st.history, st.history_rows, st.history_samples = [], [], []
        return
    st.history = [base_counts(model.summary_, bounds)]
    st.history_rows = [int(model.summary_.n)]
    st.history_samples = [st.sample]


def _started(model: Any) -> StreamState:
    """The model's stream state, with its base keys fixed (and its summary in leaves).

    A model fitted by ``fit`` (not ``partial_fit``) has no row sample of its
    first batch: its sample starts with the next batch.  A small first fit's
    exact summary (sorted projections) is converted to leaves with exact counts
    within ``tol`` here, once.
    """
    st = _stream_state(model)
    if st.bounds is None:
        summary = leaf_summary(model.summary_, float(model.tol))
        if summary is not model.summary_:
            _adopt(model, summary)
        bounds = _fix_base(model, st, summary)
        if model.window is not None:
            _first_history(model, st, bounds)
    return st


def _stream_state(model: Any) -> StreamState:
    """The model's stream state, started (base keys not fixed yet) for a model fitted by ``fit``."""
    st = model.__dict__.get("_stream")
    if st is None:
        st = _begin(model, StreamState(None,  # type: ignore[arg-type]
                                       RowSample.empty(model.n_features_in_),
                                       window=model.window))
    return st


def _adopt(model: Any, summary: DepthSummary) -> None:
    """The model's summary becomes ``summary`` (converted to leaves), with what follows it."""
    model.summary_ = summary
    model.error_bound_ = model._error_bound(summary)
    model._train_depth = model._train_token = None
    model._fit_token = tokenize(model._fit_token, "leaves")


def _fix_base(model: Any, st: StreamState, summary: DepthSummary) -> list[np.ndarray]:
    """Fix the stream's base keys (and window) from ``summary``'s blocks; their bounds per block."""
    bounds = block_bounds(summary)
    st.bounds = np.concatenate(bounds) if bounds else np.zeros((0, 2))
    st.window = model.window
    return bounds


def _fix_bounds(model: Any, st: StreamState, summary: DepthSummary) -> None:
    """The leaf summary a stream converted to: its base keys fixed, the attributes that follow."""
    _adopt(model, summary)
    _fix_base(model, st, summary)


def _exact_batch(model: Any, st: StreamState, data: Any) -> bool:
    """Add a batch to a stream whose summary is still exact; False when it is not (any more).

    While the rows held (less those of a window's leaving batch, plus the
    batch's) stay within the size at which ``fit`` keeps the exact summary
    (:func:`~daskdepth.fitting.update.stays_exact`), the batch's rows (small:
    they are brought here) are added to the sorted projections, which stay
    exact (error bound 0, the depths of the union bit for bit).  Otherwise the
    exact summary is converted to leaves planned on all the rows it holds,
    aiming below the leaf limit (:func:`~daskdepth.fitting.update.convert_exact`),
    its base keys are fixed, and False is returned: the batch is then counted
    into those leaves as any later batch.  A window needs the summary's rows
    (``summary_.rows``, kept for fewer features than directions) to drop a
    batch: without them the summary is converted at once.
    """
    summary = model.summary_
    blocks = held_sorted(summary)
    if blocks is None:
        return False
    if int(model.n_batches_) <= 1:  # the window is adopted until the second batch
        st.window = model.window
    _check_window(model, st)
    window = model.window
    tol = float(model.tol)
    d = int(model.n_features_in_)
    m = int(summary.directions.shape[0])
    held = np.asarray(model.batch_rows_, dtype=np.int64)
    leaving = max(0, held.size + 1 - window) if window is not None else 0
    dropped = int(held[:leaving].sum())
    rows_in = float(data.array.shape[0])
    k = sample_rows(d)
    # past the exact size, the rows are held (as rows) while the batch keeps them within
    # the row limit, so that the leaves can be planned again on all of them
    # (a window's exact summary without its rows, d >= m, has them in the stream's state)
    rows = summary.rows if summary.rows is not None else st.rows
    hold = (rows is not None and np.isfinite(rows_in)
            and int(summary.n) - dropped + int(rows_in) <= row_limit(d, tol))
    if (np.isfinite(rows_in) and (window is None or rows is not None)
            and stays_exact(int(summary.n) - dropped + int(rows_in), d, m, tol)):
        batch = _finite_rows(model, data)
        if summary.rows is None and st.rows is not None:
            with_rows = DepthSummary(summary.location, summary.directions, blocks,
                                     summary.n, rows=st.rows)
            new = exact_summary(with_rows, blocks, batch, dropped)
            st.rows = new.rows
            new = DepthSummary(new.location, new.directions, new.blocks, new.n)
        else:
            new = exact_summary(summary, blocks, batch, dropped)
        model.summary_ = new
        model.n_samples_fit_ = int(new.n)
        model.n_batches_ = int(model.n_batches_) + 1
        model.batch_rows_ = np.append(held[leaving:], np.int64(batch.shape[0]))
        st.sample = (bottom_rows(new.rows, k) if new.rows is not None
                     else bottom_rows(st.rows, k) if st.rows is not None
                     else merge_samples([st.sample, bottom_rows(batch, k)], k))
        refresh(model, tokenize(model._fit_token, data.array.name, fresh_token()))
        return True
    if window is not None and rows is not None:
        ends = np.cumsum(held)
        batches = [rows[a:b] for a, b in zip(ends - held, ends, strict=True)]
        new, history = convert_exact(summary, tol, batches)
        assert history is not None
        st.history = history
        st.history_rows = [int(r) for r in held]
        st.history_samples = [bottom_rows(r, k) for r in batches]
        st.sample = merge_samples(st.history_samples, k)
        _fix_bounds(model, st, new)
        st.rows = rows if hold else None
        return False
    new, _ = convert_exact(summary, tol)
    _fix_bounds(model, st, new)
    st.rows = rows if hold else None
    if hold:  # the sample of the rows held (a model fitted by fit had none yet)
        st.sample = bottom_rows(rows, k)
    if window is not None:  # without rows: the stream holds its first batch only
        _first_history(model, st, _split_bounds(new, st.bounds))
    return False


def _finite_rows(model: Any, data: Any) -> np.ndarray:
    """The batch's finite rows, brought here (a batch small enough to be held)."""
    d = int(model.n_features_in_)
    x = np.asarray(data.array.compute(), dtype=np.float64).reshape(-1, d)
    finite = np.isfinite(x).all(axis=1)
    n_bad = int((~finite).sum())
    _check_rows(model, int(finite.sum()), n_bad, np.flatnonzero(~finite)[:MAX_BAD_ROWS])
    return np.ascontiguousarray(x[finite])


def _check_rows(model: Any, n: int, n_bad: int, bad_rows: np.ndarray) -> None:
    """Refuse a batch of ``n`` finite rows and ``n_bad`` others (the first ``bad_rows``).

    Rows with NaN or inf are refused under ``nan_policy='raise'`` (as ``fit``
    refuses them), and a batch with no finite row has nothing to add.
    """
    if n_bad and model.nan_policy == "raise":
        raise ValueError(nan_rows_message(n_bad, bad_rows))
    if n == 0:
        raise ValueError(f"X has no finite rows (all {n_bad} hold NaN or inf): there "
                         "is nothing to add; pass a batch with finite rows")


def _replan(model: Any, st: StreamState) -> None:
    """Plan the leaves of a stream that holds its rows again, on all of them.

    :func:`~daskdepth.fitting.update.replan_rows` at :data:`STREAM_FILL` of the
    row limit (what a first ``partial_fit`` of those rows plans, exact
    counts); the base keys become the new leaves' and, with a window, each
    held batch's counts are counted again.
    """
    batches = None
    if model.window is not None:
        ends = np.cumsum(np.asarray(st.history_rows, dtype=np.int64))
        batches = [st.rows[a:b] for a, b in zip(ends - st.history_rows, ends, strict=True)]
    new, history = replan_rows(model.summary_, st.rows, float(model.tol), STREAM_FILL,
                               model._statistic, batches)
    _fix_bounds(model, st, new)
    model.n_samples_fit_ = int(new.n)
    if history is not None:
        st.history = history


def _release_rows(model: Any, st: StreamState, leaving: int) -> None:
    """A batch would take the rows held past the row limit: plan on them a last time.

    The window's leaving batches are dropped first (their rows, counts and
    samples); the leaves are planned again on the rows kept
    (:func:`_replan`) and the rows are no longer held.  A window that keeps
    none of them (``window=1``) lets them go as they are: the batch replaces them.
    """
    if leaving and int(sum(st.history_rows[leaving:])) == 0:
        st.rows = None
        return
    if leaving:
        dropped = int(sum(st.history_rows[:leaving]))
        st.rows = st.rows[dropped:]
        st.history = st.history[leaving:]
        st.history_rows = st.history_rows[leaving:]
        st.history_samples = st.history_samples[leaving:]
        st.sample = merge_samples(st.history_samples, sample_rows(model.n_features_in_))
        model.batch_rows_ = np.asarray(model.batch_rows_, dtype=np.int64)[leaving:]
    _replan(model, st)
    st.rows = None


def _split_bounds(summary: DepthSummary, bounds: np.ndarray) -> list[np.ndarray]:
    return [bounds[b.j0:b.j1] for b in summary.blocks]


def _check_window(model: Any, st: StreamState) -> None:
    """Refuse a window set after the stream started, or one whose history is too large."""
    if int(model.n_batches_) == 0:  # a template holds no batch yet: any window applies
        st.window = model.window
    if model.window != st.window:
        raise ValueError(
            f"window={model.window!r} was set after this model's first batch (it started with "
            f"window={st.window!r}): a window keeps each batch's counts from the first batch "
            "on. Set window= before the first partial_fit, or start again from "
            "daskdepth.template(model)")
    if model.window is None:
        return
    leaves = leaf_total(model.summary_)  # blocks kept on a cluster too, asked where they are
    per_batch = history_bytes(leaves, model.n_directions_, model.n_features_in_)
    if model.window * per_batch > WINDOW_MAX_BYTES:
        raise ValueError(
            f"window={model.window} would keep {model.window * per_batch / 2**30:.1f} GiB of "
            f"batch history ({per_batch:,} bytes per batch: 8 per leaf, 16 per direction and a "
            f"row sample), above the {WINDOW_MAX_BYTES // 2**30} GiB allowed: use a smaller "
            "window, fewer directions or a larger tol")


def update(model: Any, X: Any, sample_dim: Any = None) -> None:
    """Add the rows of ``X`` to a fitted (or template) model: one pass over ``X`` only.

    A batch refused (or any error on the way) leaves the model as it was.
    """
    saved = dict(model.__dict__)
    if saved.get("_stream") is not None:
        saved["_stream"] = copy.copy(saved["_stream"])  # its fields are replaced, not mutated
    try:
        _update(model, X, sample_dim)
    except BaseException:
        model.__dict__.clear()
        model.__dict__.update(saved)
        raise


def _update(model: Any, X: Any, sample_dim: Any = None) -> None:
    model._validate_params()  # as fit does (window= may have been set since)
    fitted = getattr(model, "feature_names_in_", None)
    name = type(model).__name__
    data = as_input(X, what="X", min_samples=1, nan_policy=model.nan_policy,
                    check_names=lambda names: check_feature_names(fitted, names, name),
                    sample_dim=sample_dim, n_features=model.n_features_in_)
    if data.n_features != model.n_features_in_:
        raise ValueError(
            f"X has {data.n_features} features, but {name} is expecting "
            f"{model.n_features_in_} features as input; partial_fit takes batches with the "
            "columns of the first fit")
    st = _stream_state(model)
    if st.bounds is None and _exact_batch(model, st, data):
        return
    st = _started(model)
    if (st.rows is not None and int(model.n_batches_) == 1
            and model.window != st.window):  # the window is adopted until the second batch
        _first_history(model, st, _split_bounds(model.summary_, st.bounds))
    _check_window(model, st)
    window = model.window
    tol = float(model.tol)
    held = None  # the batch's rows, when the stream goes on holding its rows
    if st.rows is not None:
        leaving = max(0, len(st.history) + 1 - window) if window is not None else 0
        kept = st.rows.shape[0] - int(sum(st.history_rows[:leaving]))
        rows_in = float(data.array.shape[0])
        if np.isfinite(rows_in) and kept + int(rows_in) <= row_limit(model.n_features_in_,
                                                                      tol):
            held = _finite_rows(model, data)
        else:
            _release_rows(model, st, leaving)
    summary = model.summary_
    bounds = _split_bounds(summary, st.bounds)
    drops = exts = None
    dropped_rows = 0
    leaving = 0
    if window is not None:
        leaving = max(0, len(st.history) + 1 - window)
        kept = st.history[leaving:]
        if leaving:
            drops = [_sum_counts([batch[b] for batch in st.history[:leaving]])
                     for b in range(len(summary.blocks))]
            dropped_rows = sum(st.history_rows[:leaving])
        exts = [window_ext(kept, b, block.mb) for b, block in enumerate(summary.blocks)]

    def check(scan: BatchScan) -> None:
        _check_rows(model, scan.n, scan.n_bad, scan.bad_rows)

    token = tokenize(model._fit_token, data.array.name, fresh_token())
    x = data.array if held is None else da.from_array(held, chunks=(
        max(1, int(data.array.chunks[0][0])), held.shape[1]))
    done = add_batch(x, summary, bounds, check=check,
                     keep_counts=window is not None, drops=drops, dropped_rows=dropped_rows,
                     exts=exts, token=token)
    rows = int(done.scan.n)
    model.summary_ = done.summary
    model.n_samples_fit_ = int(done.summary.n)
    model.n_batches_ = int(model.n_batches_) + 1
    batch_rows = np.append(np.asarray(model.batch_rows_, dtype=np.int64), rows)
    if window is not None:
        assert done.counts is not None
        st.history = st.history[leaving:] + [done.counts]
        st.history_rows = st.history_rows[leaving:] + [rows]
        st.history_samples = st.history_samples[leaving:] + [done.scan.sample]
        st.sample = merge_samples(st.history_samples, sample_rows(model.n_features_in_))
        batch_rows = batch_rows[-len(st.history):]
    else:
        st.sample = merge_samples([st.sample, done.scan.sample],
                                  sample_rows(model.n_features_in_))
    model.batch_rows_ = batch_rows
    if held is not None:
        st.rows = np.concatenate([st.rows[dropped_rows:], held])
        if float(model._error_bound(model.summary_)) > REPLAN_BOUND * tol:
            _replan(model, st)
    refresh(model, token)


def refresh(model: Any, token: str, who: str = "partial_fit") -> None:
    """The attributes that follow the summary: bound, sample depths, offset, tokens.

    ``offset_`` is the ``contamination`` quantile of the depths, under the
    updated summary, of the stream's content-keyed row sample (at most
    :func:`~daskdepth.summary.streaming.sample_rows` rows of those the
    summary holds); with no sampled rows (a model fitted by ``fit`` before its
    first batch) it stays.  Warns once when the bound passes its budget.
    """
    summary = model.summary_
    model._fit_token = token
    model._train_depth = None
    model._train_token = None
    model.error_bound_ = float(model._error_bound(summary)) if summary.n else 0.0
    sample = model._stream.sample
    if sample.size and summary.n:
        model._sample_depth = offset_depths(summary, sample.rows, token, model._statistic)
        model.offset_ = float(np.percentile(model._sample_depth, 100 * model.contamination))
    budget = BOUND_BUDGET * float(model.tol)
    if model.error_bound_ > budget and not model.__dict__.get("_bound_warned", False):
        model._bound_warned = True
        warnings.warn(_bound_message(model, who, budget), StreamBoundWarning,
                      stacklevel=user_stacklevel())


def _bound_message(model: Any, who: str, budget: float) -> str:
    """Why the bound passed its budget, and the fixes.

    A model that holds fewer rows (a window's, or all) than leaves at ``tol``
    need (:func:`_needed_rows`, about ``16 / tol``) counts few rows per leaf:
    the bound, set by each direction's fullest leaf, is then moved by
    counting noise alone, whatever the leaves.  Otherwise the new rows fall
    in few of the stream's first leaves (drift), or those were planned on
    too few rows.
    """
    head = (f"{who}: the certified depth error bound is now {model.error_bound_:.3g}, "
            f"above its budget of {BOUND_BUDGET:g} x tol = {budget:.3g}")
    n = int(model.n_samples_fit_)
    needed = _needed_rows(model)
    if n < needed:
        held = (f"the window of {model.window} batches holds {n:,} rows"
                if model.window is not None else f"the model holds {n:,} rows")
        fixes = ("a longer window (window=) or a larger tol" if model.window is not None
                 else "more rows (fit or partial_fit at least that many) or a larger tol")
        return (f"{head}: {held}, fewer than about {needed:,} that tol={float(model.tol):g} "
                "needs, so counting noise alone moves the bound (each leaf holds few rows, "
                "and the bound is set by the fullest ones), even on data that do not drift. "
                f"The depths stay within the bound; to bring it back, use {fixes}")
    return (f"{head}: the new rows fall in few of the leaves fitted when the stream started "
            "(the data drift away from them; on data that do not drift, those leaves were "
            f"planned on too few rows to resolve tol: fewer than about "
            f"{_resolving_rows(model):,}). The depths stay within the bound; to bring it "
            "back to tol, fit a model on recent data (fit), on at least that many rows for a "
            "long stream")


def _needed_rows(model: Any) -> int:
    """Rows leaves at the model's ``tol`` need to count their rows well: ``16 / tol``.

    :data:`~daskdepth.fitting.fit.SAMPLE_PER_LEAF` rows per ``tol`` of the
    rows, what a fit's row sample takes to size its leaves.
    """
    tol = float(model.tol)
    return int(min(np.ceil(SAMPLE_PER_LEAF / tol), 2.0**62)) if tol > 0 else 0


def _resolving_rows(model: Any) -> int:
    """Rows a first fit plans its leaves on when its row sample is every row (16 / tol)."""
    return int(pilot_sample_size(int(model.n_features_in_), float(model.tol)))


def _sum_counts(parts: list[BatchCounts]) -> BatchCounts:
    """The batches' counts summed, their extremes merged (:meth:`LeafCounts.merged`)."""
    merged = LeafCounts.merged(parts)  # type: ignore[arg-type]  # the same two fields
    return BatchCounts(merged.counts, merged.ext)


def first_batch(model: Any, X: Any, sample_dim: Any) -> None:
    """The first ``partial_fit`` of an unfitted model: ``fit``, then the stream's state."""
    model._validate_params()
    model._stream_fill = STREAM_FILL  # read by the fit of a leaf depth, this fit only
    try:
        with show_phases(model._progress_label(), model.verbose):
            data = model._fit(X, sample_dim)
    finally:
        model.__dict__.pop("_stream_fill", None)
    model.offset_ = float(np.percentile(model._sample_depth, 100 * model.contamination))
    start(model, data)
