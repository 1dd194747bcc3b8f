"""Loading saved models: :func:`load_model` (public as :func:`daskdepth.load`).

The store is decoded by :mod:`daskdepth.storage.modelformat`; this module
decides which class may be built from it (only those of
:data:`daskdepth.estimators.ESTIMATORS`, never a class a file names), checks
the parameters as ``fit`` would and every fitted attribute (types, shapes,
ranges, the depth summary's structure through
:meth:`~daskdepth.summary.depth.DepthSummary.validate`, and the cross-checks
between them) before the model is handed out: a model file is untrusted input,
and a kernel must never see a structure it could not have built.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np

from ..errors import ModelFormatError, describe_rows
from ..estimators import ESTIMATORS
from ..storage.codec import corrupted, malformed
from ..storage.modelformat import read_model
from ..summary.mass import MassSummary
from ..summary.streaming import (
    STREAM_SAMPLE,
    BatchCounts,
    RowSample,
    StreamState,
    bottom_rows,
    sample_rows,
)

#: How far (in share of the training depths) ``offset_`` may lie from the
#: ``contamination`` quantile of the kept training depths: ``fit_predict`` takes
#: it over all training rows, or another row sample, not over the kept ones.
OFFSET_RANK_SLACK = 0.02

_TOKEN = re.compile(r"^[0-9a-f]{1,128}$")

#: How far the norm of a direction drawn on the unit sphere (``u / |u|``) may be from 1.
UNIT_SLACK = 1e-9
#: Slack of the whitened depths' invariants, in units of ``eps * cond(basis_)`` (for the
#: unit ``u`` of ``directions_ = u @ basis_.T``) and of ``eps * cond(basis_)**2`` (for
#: ``basis_.T @ covariance_ @ basis_ = I``): rounding grows with the conditioning.
WHITENED_SLACK = 1e3
#: A location whose float64 spacing exceeds this many times the spread the covariance
#: allows ``n`` rows around it (times ``sqrt(d)``, for shrinkage) cannot be theirs.
LOCATION_SLACK = 64.0


def load_model(path: str | os.PathLike[str],
               storage_options: dict[str, Any] | None = None,
               max_bytes: int | None = None) -> Any:
    """Load a model saved with ``model.save(path)``.

    Parameters
    ----------
    path : str or path-like
        Local path or fsspec URL of the saved model.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    max_bytes : int, optional
        Refuse a model whose arrays would take more memory than this (default
        4 GiB, or the environment variable ``DASKDEPTH_MAX_MODEL_BYTES``).

    Returns
    -------
    DepthDetector
        A fitted model of one of :data:`daskdepth.estimators.ESTIMATORS` that
        scores identically to the saved one.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a daskdepth model, is corrupted (missing or modified
        arrays or attributes, invalid parameters or fitted structures), or was
        written by another daskdepth format version.

    Examples
    --------
    >>> import os, tempfile, numpy as np, daskdepth
    >>> X = np.random.default_rng(1).normal(size=(200, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "irw.zarr")
    >>> _ = daskdepth.IRW(n_directions=50, random_state=0).fit(X).save(path)
    >>> model = load_model(path)
    >>> type(model).__name__, model.n_directions_
    ('IRW', 50)
    """
    stored = read_model(path, storage_options, max_bytes)
    where = stored.where
    cls = ESTIMATORS.get(stored.estimator)
    if cls is None:
        raise ModelFormatError(f"the model {where!r} is a {stored.estimator!r}, which "
                               f"this daskdepth does not have ({', '.join(sorted(ESTIMATORS))})")
    known = set(cls().get_params(deep=False))
    unknown = sorted(set(stored.params) - known)
    if unknown:
        raise ModelFormatError(f"the model {where!r} has parameters {unknown} that this "
                               f"daskdepth's {stored.estimator} does not take; load it with the "
                               "version that saved it")
    model = cls(**stored.params)
    try:
        model._validate_params()  # as fit does
    except ValueError as exc:
        raise corrupted(where, f"a parameter is invalid ({exc})") from None
    required = set(cls._fitted_attributes)
    # a stream's state (partial_fit), which the depths that have partial_fit keep
    streams = set(STREAM_STATE) if cls.capabilities.partial_fit else set()
    unknown = sorted(set(stored.state) - required - set(cls._optional_fitted_attributes)
                     - streams)
    missing = sorted(required - set(stored.state))
    if unknown or missing:
        raise corrupted(where, f"its fitted attributes {unknown or missing} are "
                               f"{'unknown' if unknown else 'missing'}")
    try:
        for key, value in stored.state.items():
            setattr(model, key, value)
    except (TypeError, AttributeError) as exc:  # e.g. a read-only attribute of the class
        raise malformed(where, exc) from None
    try:
        check_fitted(model)
    except ValueError as exc:
        raise corrupted(where, str(exc)) from None
    return model


def _int(model: Any, name: str, low: int, high: float = math.inf) -> int:
    value = getattr(model, name)
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) \
            or not low <= value <= high:
        raise ValueError(f"{name} is {value!r}, not an integer in [{low}, {high}]")
    return int(value)


def _float(model: Any, name: str, low: float, high: float) -> float:
    value = getattr(model, name)
    if not isinstance(value, (float, int, np.floating, np.integer)) \
            or isinstance(value, (bool, np.bool_)) or not low <= value <= high:
        raise ValueError(f"{name} is {value!r}, not a number in [{low}, {high}]")
    return float(value)


def _array(model: Any, name: str, shape: tuple[int, ...], finite: bool = True) -> np.ndarray:
    value = getattr(model, name)
    if not isinstance(value, np.ndarray) or value.dtype != np.float64 or value.shape != shape:
        raise ValueError(f"{name} is not a float64 array of shape {shape}")
    if finite and not np.isfinite(value).all():
        raise ValueError(f"{name} holds values that are not finite")
    return value


def _depths(model: Any, name: str, size: int | None = None) -> np.ndarray | None:
    """A vector of depths (NaN where not scored), each in [0, 1]; None when missing."""
    value = getattr(model, name, None)
    if value is None:
        return None
    if not (isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == 1
            and value.size and (size is None or value.size == size)):
        raise ValueError(f"{name} is not a non-empty float64 vector"
                         + (f" of {size} depths" if size is not None else ""))
    kept = value[~np.isnan(value)]
    if not ((kept >= 0) & (kept <= 1)).all():
        raise ValueError(f"{name} holds depths outside [0, 1]")
    return kept


def check_fitted(model: Any) -> None:
    """Refuse fitted attributes that ``fit`` could not have set, or that disagree.

    Types, shapes and ranges of each attribute; the summary's structure
    (:meth:`DepthSummary.validate <daskdepth.summary.depth.DepthSummary.validate>`,
    :meth:`MassSummary.validate <daskdepth.summary.mass.MassSummary.validate>`);
    the row count, directions and centring shared by the summary and the
    attributes; ``error_bound_`` equal to the bound the summary certifies;
    ``offset_`` at the ``contamination`` quantile of the kept training depths.

    Raises
    ------
    ValueError
        Naming the first attribute that is wrong.
    """
    d = _int(model, "n_features_in_", 1)
    names = getattr(model, "feature_names_in_", None)
    if names is not None and not (
            isinstance(names, np.ndarray) and names.shape == (d,)
            and all(isinstance(v, str) for v in names.ravel())):
        raise ValueError(f"feature_names_in_ is not an array of {d} strings")
    location = _array(model, "location_", (d,))
    m = _int(model, "n_directions_", 1)
    directions = _array(model, "directions_", (m, d))
    n = _int(model, "n_samples_fit_", 1)
    _int(model, "n_passes_", 0)
    token = model._fit_token
    if not (isinstance(token, str) and _TOKEN.match(token)):
        raise ValueError("_fit_token is not a hexadecimal token")
    summary = model.summary_
    expected = type(model).summary_type
    if type(summary) is not expected:
        raise ValueError(f"summary_ is a {type(summary).__name__}, not a {expected.__name__}")
    try:
        summary.validate()
    except ValueError as exc:
        raise ValueError(f"its summary is invalid: {exc}") from None
    if summary.n != n:
        raise ValueError(f"the summary's row count {summary.n} does not match n_samples_fit_ "
                         f"{n}")
    if not (np.array_equal(summary.directions, directions)
            and np.array_equal(summary.location, location)):
        raise ValueError("the summary's directions or centring differ from directions_ and "
                         "location_")
    _check_directions(model, directions)
    bound = _float(model, "error_bound_", 0.0, 1.0)
    if type(model).capabilities.covariance:
        _check_depth_attributes(model, d)
        _check_location(model, location, n)
    if isinstance(summary, MassSummary):
        _check_mass_attributes(model, summary)
    for name, field in type(model)._summary_fields.items():
        if not np.array_equal(_array(model, name, (m,)), getattr(summary, field)):
            raise ValueError(f"{name} differs from the summary's")
    certified = model._error_bound(summary)
    if bound != certified:
        raise ValueError(f"error_bound_ {bound!r} is not the bound the summary certifies "
                         f"({certified!r})")
    _check_stream(model, n, d, m)
    kept = _depths(model, "_sample_depth")
    if kept is None or not kept.size:
        raise ValueError("_sample_depth holds no training depth")
    offset = _float(model, "offset_", 0.0, 1.0)
    share = float(model.contamination)
    below, at_most = float(np.mean(kept < offset)), float(np.mean(kept <= offset))
    slack = OFFSET_RANK_SLACK + 1.0 / kept.size
    if below > share + slack or at_most < share - slack:
        raise ValueError(f"offset_ {offset!r} is not the contamination {share} quantile of the "
                         f"training depths ({below:.3f} of them lie below it)")


#: Fitted attributes of a model that follows a stream (``partial_fit``).
STREAM_STATE = ("n_batches_", "batch_rows_", "_stream", "_bound_warned")


def _check_sample(sample: Any, name: str, d: int, rows: int) -> None:
    """A content-keyed row sample: uint64 keys in order, finite float64 rows, at most ``rows``."""
    if not (isinstance(sample, RowSample) and isinstance(sample.keys, np.ndarray)
            and isinstance(sample.rows, np.ndarray) and sample.keys.dtype == np.uint64
            and sample.keys.ndim == 1 and sample.rows.dtype == np.float64
            and sample.rows.shape == (sample.keys.size, d)):
        raise ValueError(f"{name} is not a row sample of uint64 keys and float64 rows of {d} "
                         "features")
    if sample.keys.size > min(rows, STREAM_SAMPLE):
        raise ValueError(f"{name} holds {sample.keys.size} rows, more than the "
                         f"{min(rows, STREAM_SAMPLE)} it may")
    if (sample.keys[1:] < sample.keys[:-1]).any():
        raise ValueError(f"{name} is not sorted by its keys")
    if not np.isfinite(sample.rows).all():
        raise ValueError(f"{name} holds rows that are not finite")


def _check_held_rows(st: StreamState, n: int, d: int, summary: Any) -> None:
    """A stream's held rows (``StreamState.rows``, when it holds them): all its ``n`` rows.

    ``n x d`` finite float64, with base keys or with an exact summary that does
    not hold its rows itself (a window on as many features as directions or
    more), and the rows its row sample is drawn from.
    """
    rows = getattr(st, "rows", None)
    if rows is None:
        return
    if not (isinstance(rows, np.ndarray) and rows.dtype == np.float64
            and rows.shape == (n, d)):
        raise ValueError(f"the stream's held rows are not {n} x {d} float64 rows (its "
                         "n_samples_fit_ rows of n_features_in_ features)")
    if st.bounds is None and getattr(summary, "rows", None) is not None:
        raise ValueError("the stream holds rows its exact summary holds too")
    if not np.isfinite(rows).all():
        raise ValueError("the stream's held rows are not all finite")
    if not np.array_equal(bottom_rows(rows, sample_rows(d)).keys, st.sample.keys):
        raise ValueError("the stream's row sample is not drawn from its held rows")


def _check_stream(model: Any, n: int, d: int, m: int) -> None:
    """The state of a model that follows a stream (``partial_fit``), when it has one.

    ``n_batches_`` and ``batch_rows_`` go together: each held batch's rows
    (at least one), adding up to ``n_samples_fit_``, at most ``window`` of
    them; ``_stream``: its base keys (``(m, 2)``, first <= last; None until its
    second batch), its row sample (at most 4,096 of the ``n`` rows), its window
    equal to the model's, and with a window and base keys one history entry per
    held batch: per direction block, counts that
    are whole, non-negative and add up to the batch's rows on every direction
    of the block, and extremes of the block's shape.
    """
    counters = [name in vars(model) for name in ("n_batches_", "batch_rows_")]
    st = vars(model).get("_stream")
    if not any(counters) and st is None:
        return
    if not all(counters):
        raise ValueError("n_batches_ and batch_rows_ do not go together")
    batches = _int(model, "n_batches_", 1)
    rows = model.batch_rows_
    if not (isinstance(rows, np.ndarray) and rows.dtype == np.int64 and rows.ndim == 1
            and 1 <= rows.size <= batches and (rows >= 1).all()):
        raise ValueError(f"batch_rows_ is not an int64 vector of 1 to {batches} positive row "
                         "counts")
    if int(rows.sum()) != n:
        raise ValueError(f"batch_rows_ add up to {int(rows.sum())} rows, not n_samples_fit_ {n}")
    warned = vars(model).get("_bound_warned", False)
    if not isinstance(warned, bool):
        raise ValueError("_bound_warned is not a boolean")
    window = getattr(model, "window", None)
    if window is not None and rows.size > window:
        raise ValueError(f"batch_rows_ holds {rows.size} batches, more than the window {window}")
    if st is None:
        return
    if not isinstance(st, StreamState):
        raise ValueError("_stream is not a stream's state")
    if st.bounds is not None:
        b = st.bounds
        if not (isinstance(b, np.ndarray) and b.dtype == np.float64 and b.shape == (m, 2)
                and np.isfinite(b).all() and (b[:, 0] <= b[:, 1]).all()):
            raise ValueError(f"the stream's base key bounds are not {m} finite pairs "
                             "(first <= last)")
    _check_sample(st.sample, "the stream's row sample", d, n)
    _check_held_rows(st, n, d, model.summary_)
    if st.window != window:
        raise ValueError(f"the stream's window {st.window!r} is not the model's {window!r}")
    history = [st.history, st.history_rows, st.history_samples]
    if not all(isinstance(h, list) for h in history):
        raise ValueError("the stream's history is not a list per batch")
    if window is None or st.bounds is None:  # no window, or its history not started yet
        if any(history):
            raise ValueError("the stream keeps a history of batches without a window"
                             if window is None else "the stream keeps a history of batches "
                             "before its base keys are fixed")
        return
    if not (len(st.history) == len(st.history_samples) == rows.size
            and st.history_rows == [int(r) for r in rows]):
        raise ValueError("the stream's history does not hold one entry per batch of "
                         "batch_rows_")
    blocks = model.summary_.blocks
    for i, (parts, count, sample) in enumerate(zip(*history, strict=True)):
        _check_sample(sample, f"the row sample of batch {i} of the stream", d, count)
        if not (isinstance(parts, list) and len(parts) == len(blocks)):
            raise ValueError(f"the history of batch {i} of the stream does not have one entry "
                             "per direction block")
        for block, part in zip(blocks, parts, strict=True):
            mb = block.j1 - block.j0
            if not (isinstance(part, BatchCounts) and isinstance(part.counts, np.ndarray)
                    and part.counts.dtype == np.float64 and part.counts.ndim == 1
                    and isinstance(part.ext, np.ndarray) and part.ext.dtype == np.float64
                    and part.ext.shape == (mb, 2)):
                raise ValueError(f"the counts of batch {i} of the stream are not float64 "
                                 f"counts and ({mb}, 2) extremes per block")
            counts = part.counts
            if not ((counts >= 0) & (counts == np.floor(counts))).all() \
                    or float(counts.sum()) != float(mb) * count:
                raise ValueError(f"the counts of batch {i} of the stream are not whole "
                                 f"numbers adding up to its {count} rows on each of {mb} "
                                 "directions")


def _check_directions(model: Any, directions: np.ndarray) -> None:
    """The directions' invariant: unit vectors, or ``u @ basis_.T`` with unit ``u`` (whitened).

    A direction scaled (``x 1e3``), zeroed or otherwise edited scores other
    depths, since the summary's projections were made with the original one.
    The directions of IRW, the halfspace depth and the half-space mass are
    drawn on the unit sphere; those of the whitened depths (AI-IRW,
    ``Halfspace(affine_invariant=True)``) are ``u @ basis_.T`` with ``u`` on
    the unit sphere, and ``basis_`` whitens ``covariance_``
    (``basis_.T @ covariance_ @ basis_ = I``), each up to rounding that grows
    with the condition number of ``basis_``.
    """
    norms = np.linalg.norm(directions, axis=1)
    if not model._whitens():
        bad = np.flatnonzero(~(np.abs(norms - 1.0) <= UNIT_SLACK))
        if bad.size:
            raise ValueError(f"directions_ {describe_rows(bad, bad.size)} are not unit vectors "
                             f"(norm {norms[bad[0]]:.6g}); this depth draws its directions on "
                             "the unit sphere")
        return
    d = directions.shape[1]
    rank = _int(model, "covariance_rank_", 1, d)
    if getattr(model, "basis_", None) is None:
        raise ValueError("basis_ is missing: a whitened depth's directions are u @ basis_.T")
    basis = _array(model, "basis_", (d, rank))
    singular = np.linalg.svd(basis, compute_uv=False)
    if not singular[-1] > 0:
        raise ValueError("basis_ is singular: it does not whiten any covariance")
    cond = float(singular[0] / singular[-1])
    eps = float(np.finfo(np.float64).eps)
    slack = max(1e-6, WHITENED_SLACK * eps * cond)
    u = np.linalg.lstsq(basis, directions.T, rcond=None)[0]
    residual = np.linalg.norm(directions - (basis @ u).T, axis=1)
    unit = np.linalg.norm(u, axis=0)
    bad = np.flatnonzero(~((np.abs(unit - 1.0) <= slack) & (residual <= slack * norms)))
    if bad.size:
        raise ValueError(f"directions_ {describe_rows(bad, bad.size)} are not u @ basis_.T "
                         f"with u a unit vector (|u| = {unit[bad[0]]:.6g}): they are not "
                         "directions this whitening draws")
    cov = _array(model, "covariance_", (d, d))
    gram = basis.T @ cov @ basis
    if not np.abs(gram - np.eye(rank)).max() <= max(0.05, WHITENED_SLACK * eps * cond**2):
        raise ValueError("basis_ does not whiten covariance_ (basis_.T @ covariance_ @ basis_ "
                         "is not the identity)")


def _check_location(model: Any, location: np.ndarray, n: int) -> None:
    """Refuse a location float64 rows near it could not have with the covariance's spread.

    Rows near ``location`` differ by at least its spacing (``np.spacing``)
    where they differ at all, so the estimated variance of a feature that
    varies is at least about ``spacing**2 / n``: ``location_ = 1e308`` with
    unit variances cannot be the data's (it made every projection overflow).
    Only for covariances estimated from the data (a precomputed one may have
    any scale); a location moved by an amount the data's scale allows cannot
    be told from its own.
    """
    if not isinstance(getattr(model, "covariance", "sample"), str):
        return
    cov = _array(model, "covariance_", (location.size, location.size), finite=model._whitens())
    diag = np.diag(cov)  # inf where the variance overflowed: any location is allowed then
    allowed = LOCATION_SLACK * math.sqrt(location.size) * np.sqrt(np.maximum(diag, 0.0) * n)
    bad = np.flatnonzero((diag > 0) & ~(np.spacing(np.abs(location)) <= allowed))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"location_ {float(location[k])!r} (feature {k}) is not where the data "
                         f"can be: float64 values near it cannot vary by the standard deviation "
                         f"{math.sqrt(diag[k]):.3g} that covariance_ says")


def _check_depth_attributes(model: Any, d: int) -> None:
    """The attributes of the depths that fit a covariance (all but the half-space mass).

    A depth that whitens needs a finite ``covariance_`` (its directions are
    checked against it, :func:`_check_directions`).  One that does not (IRW,
    the halfspace and projection depths) uses it only to scale explanations,
    and ``fit`` keeps it as computed: on data of scale beyond about 1e154
    its entries overflow to ``inf`` (and ``nan`` where ``inf - inf``) while the
    depths stay right, so a model that fit and save accept loads too
    (:func:`_check_overflowed_covariance`).
    """
    _array(model, "covariance_", (d, d), finite=model._whitens())
    if not model._whitens():
        _check_overflowed_covariance(model.covariance_)
    rank = _int(model, "covariance_rank_", 0, d)
    if getattr(model, "basis_", None) is not None:
        _array(model, "basis_", (d, rank))
    if getattr(model, "frame_eigenvalues_", None) is not None:
        _array(model, "frame_eigenvalues_", (rank,))
    train = _depths(model, "_train_depth")
    train_token = getattr(model, "_train_token", None)
    if (train is None) != (train_token is None) or not (
            train_token is None or (isinstance(train_token, str) and len(train_token) <= 128)):
        raise ValueError("_train_depth and _train_token do not go together")


def _check_overflowed_covariance(cov: np.ndarray) -> None:
    """Refuse a covariance no data could give: asymmetric, or a variance below 0 or NaN.

    Entries that overflowed are allowed: a variance of ``inf``, a covariance of
    ``inf`` or ``nan`` (what float64 arithmetic gives on data of scale ~1e200).

    Examples
    --------
    >>> _check_overflowed_covariance(np.array([[np.inf, np.nan], [np.nan, 1.0]]))
    >>> _check_overflowed_covariance(np.array([[-1.0, 0.0], [0.0, 1.0]]))
    Traceback (most recent call last):
    ...
    ValueError: covariance_ has a variance that is negative or NaN
    """
    if not np.array_equal(cov, cov.T, equal_nan=True):
        raise ValueError("covariance_ is not symmetric")
    if not (np.diag(cov) >= 0).all():
        raise ValueError("covariance_ has a variance that is negative or NaN")


def _check_mass_attributes(model: Any, summary: MassSummary) -> None:
    """The subsamples of the half-space mass."""
    m = summary.directions.shape[0]
    size = _int(model, "subsample_size_", 1)
    rows = model.subsample_indices_
    if not (isinstance(rows, np.ndarray) and rows.dtype.kind in "iu"
            and rows.shape == (m, size)):
        raise ValueError(f"subsample_indices_ is not an integer array of shape {(m, size)}")
