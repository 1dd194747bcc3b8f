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

from ..errors import ModelFormatError
from ..estimators import ESTIMATORS
from ..storage.modelformat import corrupted, malformed, read_model
from ..summary.depth import DepthSummary
from ..summary.mass import MassSummary

#: How far (in share of the training depths) ``offset_`` may lie from the
#: ``contamination`` quantile of the kept training depths: ``fit_predict`` takes
#: it over all training rows, or another row sample, not over the kept ones.
OFFSET_RANK_SLACK = 0.02

_TOKEN = re.compile(r"^[0-9a-f]{1,128}$")


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
    AIIRW, IRW, Halfspace or HalfspaceMass
        A fitted model that scores identically to the saved one.

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
    unknown = sorted(set(stored.state) - required - set(cls._optional_fitted_attributes))
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
    expected = DepthSummary if "covariance_" in type(model)._fitted_attributes else MassSummary
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
    bound = _float(model, "error_bound_", 0.0, 1.0)
    if isinstance(summary, DepthSummary):
        _check_depth_attributes(model, d)
        certified = summary.error_bound(model._statistic)
    else:
        _check_mass_attributes(model, summary)
        certified = 0.0
    if bound != certified:
        raise ValueError(f"error_bound_ {bound!r} is not the bound the summary certifies "
                         f"({certified!r})")
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


def _check_depth_attributes(model: Any, d: int) -> None:
    """The attributes of the depths with a :class:`DepthSummary` (AI-IRW, IRW, halfspace)."""
    _array(model, "covariance_", (d, d))
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


def _check_mass_attributes(model: Any, summary: MassSummary) -> None:
    """The attributes of the half-space mass, the same arrays as its summary's."""
    m = summary.directions.shape[0]
    for name, value in (("split_points_", summary.splits), ("left_mass_", summary.left)):
        if not np.array_equal(_array(model, name, (m,)), value):
            raise ValueError(f"{name} differs from the summary's")
    size = _int(model, "subsample_size_", 1)
    rows = model.subsample_indices_
    if not (isinstance(rows, np.ndarray) and rows.dtype.kind in "iu"
            and rows.shape == (m, size)):
        raise ValueError(f"subsample_indices_ is not an integer array of shape {(m, size)}")
