"""Models started from one frame, combined: :func:`template` and :func:`merge`.

A rank depth's summary is counts of rows per leaf along each direction, so
models that share a frame, directions and leaf keys (started from one
:func:`template`) merge into the model of the union of their rows by adding
counts; models that hold all their rows (:mod:`.streaming`) merge by planning
the union's leaves on the union's rows.  Either way the result does not
depend on the order or grouping of the models.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from dask.base import tokenize

from ..fitting.update import (
    STREAM_FILL,
    block_bounds,
    convert_exact,
    empty_summary,
    held_sorted,
    replan_rows,
    row_limit,
    sorted_to_leaves,
    stays_exact,
)
from ..runtime.keys import fresh_token
from ..summary.blocks import is_handle
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves
from ..summary.sorted import BlockSorted, rebuild_sorted
from ..summary.streaming import (
    BatchCounts,
    RowSample,
    StreamState,
    base_state,
    bottom_rows,
    key_bounds,
    merge_samples,
    sample_rows,
    stream_block,
)
from .streaming import _fix_bounds, _split_bounds, _started, _sum_counts, refresh


def _check_capable(model: Any, what: str) -> None:
    if not getattr(type(model).capabilities, "partial_fit", False):
        raise TypeError(f"{what} takes models whose summaries add up (AIIRW, IRW, Halfspace); "
                        f"got a {type(model).__name__}")
    if "summary_" not in model.__dict__:
        raise ValueError(f"{what} takes fitted models; this {type(model).__name__} is not "
                         "fitted: fit it (or partial_fit it) first")


def template(model: Any) -> Any:
    """A model with ``model``'s frame, directions and leaf keys, holding no rows yet.

    Models started from one template and fed with :meth:`partial_fit` (per
    site, per day, in parallel) share their frame and leaf keys, so that
    :func:`merge` combines them into the model of their union.  The template
    cannot score (it holds no rows); its first ``partial_fit`` counts a batch
    into its leaves.  Its ``window`` is the model's (``set_params`` before the
    first batch to change it).

    Parameters
    ----------
    model : AIIRW, IRW or Halfspace
        A fitted model: its frame (location, covariance, directions) and its
        leaf keys are kept; its rows are not.

    Returns
    -------
    model
        A new estimator of the same class and parameters with
        ``n_samples_fit_ == 0`` and ``n_batches_ == 0``.

    Examples
    --------
    >>> import numpy as np, daskdepth
    >>> rng = np.random.default_rng(0)
    >>> reference = daskdepth.IRW(n_directions=20, tol=0.01, random_state=0).fit(
    ...     rng.normal(size=(2000, 2)))
    >>> start = daskdepth.template(reference)
    >>> site_a = daskdepth.template(reference).partial_fit(rng.normal(size=(500, 2)))
    >>> site_b = daskdepth.template(reference).partial_fit(rng.normal(size=(700, 2)))
    >>> both = daskdepth.merge([site_a, site_b])
    >>> start.n_samples_fit_, both.n_samples_fit_, both.n_batches_
    (0, 1200, 2)
    """
    _check_capable(model, "daskdepth.template")
    source = _copy(model)  # the stream started on a copy: the model is left as it was
    if "_stream" in source.__dict__:
        source._stream = copy.copy(model._stream)
    st = _started(source)
    summary = source.summary_
    out = _copy(source)
    out.summary_ = empty_summary(summary, _split_bounds(summary, st.bounds))
    out.n_samples_fit_ = 0
    out.n_batches_ = 0
    out.batch_rows_ = np.zeros(0, dtype=np.int64)
    out.error_bound_ = 0.0
    out._sample_depth = np.zeros(0)
    out._train_depth = out._train_token = None
    out._fit_token = tokenize(model._fit_token, "template", fresh_token())
    out._stream = StreamState(st.bounds.copy(), RowSample.empty(model.n_features_in_),
                              window=model.window)
    out.__dict__.pop("_bound_warned", None)
    return out


def _local_leaves(model: Any) -> tuple[list[BlockLeaves], np.ndarray]:
    """The model's blocks as leaves held here, and its base bounds."""
    blocks = [b.load() if is_handle(b) else b for b in model.summary_.blocks]
    blocks = [sorted_to_leaves(b, float(model.tol)) if isinstance(b, BlockSorted) else b
              for b in blocks]
    st = model.__dict__.get("_stream")
    if st is not None and st.bounds is not None:
        return blocks, st.bounds
    return blocks, np.concatenate([key_bounds(b) for b in blocks])


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.shape == b.shape and bool(np.array_equal(a, b)))
    return bool(a == b)


#: Parameters that do not change a model's summary, so models to merge may differ in them.
_FREE_PARAMS = ("verbose",)


def merge(models: Any) -> Any:
    """The model of the union of the rows of ``models``, fitted in one frame.

    Models started from one :func:`template` (or one model fed with
    ``partial_fit``) on disjoint data, per site, per day or in parallel, hold
    counts of rows in the same leaves: merging adds them.  The result is the
    model that counting all their batches into one of them gives: the same
    depths, bound and ``offset_`` bit for bit, whatever the order or grouping
    of the merges (counts are exact integers, extremes merge by min / max, the
    row sample that sets ``offset_`` is content-keyed).  ``n_batches_`` adds
    up and ``batch_rows_`` lists the models' batches in the order given.

    Models that each hold all their rows (exact summaries, or streams that
    hold their rows: started by a first ``partial_fit`` of at most
    :func:`~daskdepth.fitting.fit.pilot_sample_size` rows, about ``16 /
    tol``) merge whatever their leaf keys when the union passes the exact
    size and stays within that many rows: the union's leaves are planned on
    the union of their rows (as a stream that holds its rows plans them
    again, :data:`~daskdepth.fitting.update.STREAM_FILL` of the row limit),
    a function of those rows only (held sorted by their bits), so any order
    or grouping gives the same bits; the result holds the union's rows.

    Models with a ``window`` are refused (a window's order of batches is not
    defined across models), and so are models whose class, parameters (but
    ``verbose``), features, frame (location, covariance, whitening basis),
    directions or (for models that do not all hold their rows) leaf keys
    differ.  The merged summary is held in this process (blocks kept on a
    cluster are brought here).

    Parameters
    ----------
    models : iterable of AIIRW, IRW or Halfspace
        At least one fitted model.

    Returns
    -------
    model
        A new estimator.

    Examples
    --------
    >>> import numpy as np, daskdepth
    >>> rng = np.random.default_rng(1)
    >>> first = daskdepth.AIIRW(n_directions=30, tol=0.01, random_state=0)
    >>> start = daskdepth.template(first.partial_fit(rng.normal(size=(3000, 3))))
    >>> days = [daskdepth.template(start).partial_fit(rng.normal(size=(1000, 3)))
    ...         for _ in range(3)]
    >>> a = daskdepth.merge([daskdepth.merge(days[:2]), days[2]])
    >>> b = daskdepth.merge([days[2], daskdepth.merge([days[1], days[0]])])
    >>> X = rng.normal(size=(5, 3))
    >>> bool((a.score_samples(X) == b.score_samples(X)).all()), a.n_samples_fit_
    (True, 3000)
    """
    models = list(models)
    if not models:
        raise ValueError("daskdepth.merge takes at least one model; got none")
    first = models[0]
    for model in models:
        _check_capable(model, "daskdepth.merge")
    cls = type(first)
    for i, model in enumerate(models[1:], 1):
        if type(model) is not cls:
            raise TypeError(f"daskdepth.merge: model {i} is a {type(model).__name__}, model 0 "
                            f"a {cls.__name__}: only models of one depth merge")
    for i, model in enumerate(models):
        if model.window is not None:
            raise ValueError(
                f"daskdepth.merge: model {i} has window={model.window}: a window keeps the most "
                "recent batches of one stream, which is not defined across models; merge "
                "models with window=None (set_params(window=None) before their first batch)")
    params = {k: v for k, v in first.get_params(deep=False).items() if k not in _FREE_PARAMS}
    for i, model in enumerate(models[1:], 1):
        other = model.get_params(deep=False)
        for key, value in params.items():
            if not _same(value, other.get(key)):
                raise ValueError(
                    f"daskdepth.merge: model {i} has {key}={other.get(key)!r}, model 0 "
                    f"{key}={value!r}: models merge only with the same parameters")
    checks = [("n_features_in_", "number of features"), ("feature_names_in_", "feature names"),
              ("location_", "location (the frame's centre)"),
              ("covariance_", "covariance (the frame)"), ("basis_", "whitening basis (the frame)"),
              ("directions_", "directions")]
    for i, model in enumerate(models[1:], 1):
        for attr, what in checks:
            if not _same(first.__dict__.get(attr), model.__dict__.get(attr)):
                raise ValueError(
                    f"daskdepth.merge: model {i} has another {what} ({attr}) than model 0: "
                    "models merge only when fitted in one frame; start them from one "
                    "template (daskdepth.template(model)) and add their rows with partial_fit")
    exact = [_exact_blocks(model) for model in models]
    if all(blocks is not None for blocks in exact):
        return _merge_exact(models, exact)  # type: ignore[arg-type]
    rows = _union_rows(models)
    if rows is not None:
        return _merge_rows(models, rows)
    held = [_local_leaves(model) for model in models]
    blocks0, bounds0 = held[0]
    bases0 = [base_state(b, first.summary_.n, bounds0[b.j0:b.j1]) for b in blocks0]
    totals = [state[2].counts.copy() for state in bases0]
    exts = [[state[2].ext] for state in bases0]
    for i, (model, (blocks, bounds)) in enumerate(zip(models[1:], held[1:], strict=True), 1):
        same = (len(blocks) == len(blocks0) and _same(bounds, bounds0)
                and all(b.j0 == a.j0 and b.j1 == a.j1 for a, b in zip(blocks0, blocks,
                                                                       strict=True)))
        states = [base_state(b, model.summary_.n, bounds[b.j0:b.j1]) for b in blocks] \
            if same else []
        if not same or not all(
                _same(s[0], a[0]) and _same(s[1], a[1]) for s, a in zip(states, bases0,
                                                                         strict=True)):
            raise ValueError(
                f"daskdepth.merge: model {i} has other leaf keys than model 0 (its first fit "
                f"was another){_no_rows_reason(models)}: models merge only when started "
                "from one template, or when each holds all its rows; start each from "
                "daskdepth.template(model) and add its rows with partial_fit")
        for b, state in enumerate(states):
            totals[b] += state[2].counts
            exts[b].append(state[2].ext)
    n = int(sum(int(model.summary_.n) for model in models))
    blocks = []
    for b, block in enumerate(blocks0):
        ext = _sum_counts([BatchCounts(np.zeros(0), e) for e in exts[b]]).ext
        blocks.append(stream_block(block.j0, block.j1, bases0[b][0], bases0[b][1], totals[b],
                                   ext))
    out = _copy(first)
    summary = first.summary_
    out.summary_ = DepthSummary(summary.location, summary.directions, blocks, n)
    _merged_counters(out, models, n)
    out._stream = StreamState(bounds0.copy(), _merged_sample(models))
    _refresh_merged(out, models)
    return out


def _held_rows(model: Any) -> np.ndarray | None:
    """All the rows ``model``'s summary counts, when it holds them (else None).

    A stream's held rows (``StreamState.rows``, all ``n_samples_fit_`` of
    them), an exact summary's reference rows (``summary_.rows``), or none for
    a template that holds no rows yet.
    """
    summary = model.summary_
    n = int(summary.n)
    d = int(model.n_features_in_)
    st = model.__dict__.get("_stream")
    if n == 0:
        return np.zeros((0, d))
    if st is not None and st.rows is not None and st.rows.shape[0] == n:
        return st.rows
    exact = st is None or st.bounds is None
    if exact and summary.rows is not None and summary.rows.shape[0] == n:
        return summary.rows
    return None


def _union_rows(models: list[Any]) -> np.ndarray | None:
    """The union of the models' rows when each holds all of its, past the exact size and
    within the row limit: sorted by their bits (an order that does not depend on the models'
    order); None otherwise (the models then merge by their counts)."""
    first = models[0]
    d = int(first.n_features_in_)
    tol = float(first.tol)
    n = int(sum(int(m.summary_.n) for m in models))
    ranges = [(b.j0, b.j1) for b in first.summary_.blocks]
    if (n > row_limit(d, tol)
            or stays_exact(n, d, int(first.summary_.directions.shape[0]), tol)
            or any([(b.j0, b.j1) for b in m.summary_.blocks] != ranges for m in models)):
        return None
    parts = [_held_rows(m) for m in models]
    if any(p is None for p in parts):
        return None
    return _canonical_rows(np.concatenate(parts))  # type: ignore[arg-type]


def _canonical_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` sorted lexicographically by their bits (a total order, -0.0 apart from 0.0)."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if rows.shape[0] < 2:
        return rows
    bits = rows.view(np.int64)
    return np.ascontiguousarray(rows[np.lexsort(bits.T[::-1])])


def _no_rows_reason(models: list[Any]) -> str:
    """Why the models cannot be merged on their rows (for the refusal of other leaf keys)."""
    first = models[0]
    d = int(first.n_features_in_)
    limit = row_limit(d, float(first.tol))
    lacking = [i for i, m in enumerate(models) if _held_rows(m) is None]
    if lacking:
        return (f"; model {lacking[0]} does not hold all its rows (only a stream started by "
                f"a first partial_fit of at most {limit:,} rows holds them, until they pass "
                "that many), so the union's leaves cannot be planned on the rows")
    n = int(sum(int(m.summary_.n) for m in models))
    if n > limit:
        return (f"; the union's {n:,} rows pass the {limit:,} rows a merge plans leaves on, "
                "so they cannot be planned on the rows")
    return ""


def _merge_rows(models: list[Any], rows: np.ndarray) -> Any:
    """:func:`merge` of models that all hold their rows: leaves planned on the union's rows.

    The union's leaves are planned on ``rows`` (all the models' rows, in
    their canonical order) as a stream that holds its rows plans them again
    (:func:`~daskdepth.fitting.update.replan_rows` at :data:`STREAM_FILL`),
    in the models' frame; the result holds the rows.
    """
    first = models[0]
    d = int(first.n_features_in_)
    new, _ = replan_rows(first.summary_, rows, float(first.tol), STREAM_FILL, first._statistic)
    out = _copy(first)
    st = StreamState(None, bottom_rows(rows, sample_rows(d)), rows=rows)  # type: ignore[arg-type]
    out._stream = st
    _fix_bounds(out, st, new)
    _merged_counters(out, models, int(new.n))
    _refresh_merged(out, models)
    return out


def _merged_counters(out: Any, models: list[Any], n: int) -> None:
    """The merged model's row and batch counters (batches in the order given), warning reset."""
    out.n_samples_fit_ = n
    out.n_batches_ = int(sum(int(m.__dict__.get("n_batches_", 1)) for m in models))
    out.batch_rows_ = np.concatenate([
        np.asarray(m.__dict__.get("batch_rows_", [m.n_samples_fit_]), dtype=np.int64)
        for m in models])
    out.__dict__.pop("_bound_warned", None)
    out.__dict__["verbose"] = models[0].verbose


def _merged_sample(models: list[Any]) -> RowSample:
    """The content-keyed row sample of the models' rows (empty when none has one)."""
    d = int(models[0].n_features_in_)
    samples = [m._stream.sample for m in models if "_stream" in m.__dict__]
    return merge_samples(samples, sample_rows(d)) if samples else RowSample.empty(d)


def _refresh_merged(out: Any, models: list[Any]) -> None:
    """The merged model's token (from the models' tokens in no order, and a fresh part),
    and the attributes that follow its summary (:func:`~.streaming.refresh`)."""
    token = tokenize("merge", sorted(str(m._fit_token) for m in models), fresh_token())
    refresh(out, token, "daskdepth.merge")


def _copy(model: Any) -> Any:
    """A shallow copy of ``model`` with an attribute dict of its own (the values shared)."""
    out = copy.copy(model)
    out.__dict__ = dict(model.__dict__)
    return out


def _exact_blocks(model: Any) -> list[BlockSorted] | None:
    """A stream's (or fitted model's) exact blocks, held here; None once it holds leaves."""
    st = model.__dict__.get("_stream")
    if st is not None and st.bounds is not None:
        return None
    return held_sorted(model.summary_)


def _merge_exact(models: list[Any], exact: list[list[BlockSorted]]) -> Any:
    """:func:`merge` of models whose summaries are all exact: the exact summary of the union.

    The sorted projections of the union are those of all the models' rows,
    whatever the order (rebuilt from the rows when every model holds them, the
    values merged otherwise); past the size at which ``fit`` keeps an exact
    summary, the union is converted to leaves as a stream is
    (:func:`~daskdepth.fitting.update.convert_exact`).
    """
    first = models[0]
    ranges = [(b.j0, b.j1) for b in exact[0]]
    for i, blocks in enumerate(exact[1:], 1):
        if [(b.j0, b.j1) for b in blocks] != ranges:
            raise ValueError(f"daskdepth.merge: model {i} has other direction blocks than "
                             "model 0; start each from daskdepth.template(model)")
    summary = first.summary_
    location, directions = summary.location, summary.directions
    n = int(sum(int(m.summary_.n) for m in models))
    d = int(first.n_features_in_)
    k = sample_rows(d)
    rows = None
    if all(m.summary_.rows is not None for m in models):
        rows = np.ascontiguousarray(np.concatenate([m.summary_.rows for m in models]))
        union = DepthSummary(location, directions,
                             rebuild_sorted(rows, location, directions, ranges), n, rows=rows)
    else:
        union = DepthSummary(location, directions, [
            BlockSorted(j0, j1, np.ascontiguousarray(np.sort(np.concatenate(
                [blocks[b].values for blocks in exact], axis=1), axis=1)))
            for b, (j0, j1) in enumerate(ranges)], n)
    bounds = None
    tol = float(first.tol)
    if not stays_exact(n, d, int(directions.shape[0]), tol):
        if rows is not None and n <= row_limit(d, tol):
            # the models' rows, planned on as any merge of models that hold them
            return _merge_rows(models, _canonical_rows(rows))
        union, _ = convert_exact(union, tol)
        parts = block_bounds(union)
        bounds = np.concatenate(parts) if parts else np.zeros((0, 2))
    out = _copy(first)
    out.summary_ = union
    _merged_counters(out, models, n)
    sample = bottom_rows(rows, k) if rows is not None else _merged_sample(models)
    held = rows if bounds is not None and n <= row_limit(d, tol) else None
    out._stream = StreamState(bounds, sample, rows=held)  # type: ignore[arg-type]
    _refresh_merged(out, models)
    return out
