"""The one-call entry point :func:`score`."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .inputs import samples_first
from .params import check_param
from .registry import make_estimator


def _n_features(x: Any) -> int | None:
    """The feature count of a 2-D input, read from its shape (nothing computed); else None."""
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    if len(shape) != 2:
        return None  # refused, with its own message, by the estimator
    try:
        return int(shape[1])
    except (TypeError, ValueError):  # pragma: no cover - a lazily known column count
        return None


def _first_dim(x: Any) -> Any:
    """The sample dimension of a DataArray oriented by :func:`samples_first` (None otherwise)."""
    return x.dims[0] if isinstance(x, xr.DataArray) and x.ndim == 2 else None


def _fitted(X: Any, reference: Any, depth: str, sample_dim: Any,
            params: dict[str, Any]) -> tuple[Any, Any]:
    """The model of ``depth`` with ``params`` fitted on ``reference`` (or ``X``), and ``X``."""
    # DataArrays oriented first, so that the feature counts compared are the features'.
    if isinstance(reference, xr.DataArray):
        reference = samples_first(reference, sample_dim, "reference")
    if isinstance(X, xr.DataArray):
        X = samples_first(X, sample_dim, "X",
                          n_features=None if reference is None else _n_features(reference))
    if reference is not None:
        d_x, d_ref = _n_features(X), _n_features(reference)
        if d_x is not None and d_ref is not None and d_x != d_ref:
            raise ValueError(f"X has {d_x} features but reference has {d_ref}; the depth of a "
                             "point is defined against reference rows of the same features")
    model = make_estimator(depth, **params)
    fitted_on = X if reference is None else reference
    model.fit(fitted_on, sample_dim=_first_dim(fitted_on))
    return model, X


def score(X: Any, reference: Any = None, *, depth: str = "ai-irw", sample_dim: Any = None,
          **params: Any) -> Any:
    """Depth of each row of ``X`` with respect to ``reference`` (default: ``X`` itself).

    The fit runs when ``score`` is called and ``score`` returns once it is done:
    for dask input that is a moments pass, the passes of robust covariances, and
    one or two passes that build the depth summary (see the README's "Accuracy
    guarantee"), each a ``dask.compute`` on the current scheduler.  Only the
    scoring of ``X`` is lazy: for dask input the returned depth is a dask
    collection that scores when computed.  To fit once and score several
    inputs, or to keep the fitted model, use the estimators
    (:class:`daskdepth.AIIRW`, ...) directly; for outlier flags too,
    :func:`outliers`.

    Parameters
    ----------
    X : array-like, dask array or DataFrame, or xarray.DataArray of shape (n_samples, n_features)
        Points to score.
    reference : same kinds as ``X``, optional
        Reference sample defining the depth; ``None`` scores ``X`` against itself.
        It must have the features of ``X``.
    depth : str, default='ai-irw'
        The depth's name: 'ai-irw', 'irw', 'halfspace', 'halfspace-mass' or
        'projection' (:class:`daskdepth.AIIRW`, :class:`daskdepth.IRW`,
        :class:`daskdepth.Halfspace`, :class:`daskdepth.HalfspaceMass`,
        :class:`daskdepth.Projection`; ``daskdepth.estimators.DEPTHS`` lists them).
    sample_dim : str, optional
        DataArray ``X`` (and ``reference``) only: the dimension that holds the
        samples.  By default the one named ``'sample'``, else the one not named
        ``'feature'``, else the first; an orientation the names leave open and
        the shape contradicts is refused, naming the ``sample_dim`` to pass.
    **params
        Parameters of the chosen estimator (``n_directions``, ``tol``,
        ``random_state``, ``nan_policy``, ``covariance``, ``frame='invariant'``
        for 'ai-irw', ``affine_invariant=True`` for 'halfspace', ...), with the
        estimator's defaults for those left out.  A parameter the depth does
        not take is refused unless it is None or the default of the depths
        that take it.

    Returns
    -------
    depth : same container kind as ``X``, shape (n_samples,)
        NumPy (and lists) in gives a NumPy array; a pandas DataFrame a pandas
        Series named ``'depth'`` with the DataFrame's index; a dask array a
        lazy dask array with the same row chunks; a dask DataFrame a lazy dask
        Series aligned with its index; a DataArray a DataArray over its sample
        dimension, with that dimension's coordinates.  As ``score_samples`` of
        the estimators.  Always the depth alone: earlier versions returned
        ``(depth, outlier)`` when given ``contamination``, which
        :func:`outliers` returns now.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(1000, 2))
    >>> d = daskdepth.score(X, random_state=0)
    >>> d.shape, bool(d.argmax() != d.argmin())
    ((1000,), True)
    >>> t = daskdepth.score(X, depth="halfspace", affine_invariant=True, random_state=0)
    >>> float(t.min()), bool(t.max() <= 0.5)  # the least deep rows: only themselves
    (0.001, True)
    >>> import pandas as pd
    >>> frame = pd.DataFrame(X, columns=["a", "b"], index=range(100, 1100))
    >>> daskdepth.score(frame, random_state=0).index[:3].tolist()
    [100, 101, 102]
    """
    if params.pop("contamination", None) is not None:
        raise TypeError("score() returns the depths only; for outlier flags too, call "
                        "daskdepth.outliers(X, contamination=...), which returns "
                        "(depth, outlier)")
    model, X = _fitted(X, reference, depth, sample_dim, params)
    return model.score_samples(X, sample_dim=_first_dim(X))


def outliers(X: Any, reference: Any = None, *, contamination: float = 0.1,
             depth: str = "ai-irw", sample_dim: Any = None, **params: Any) -> tuple[Any, Any]:
    """Depth of each row of ``X`` and whether it is flagged as an outlier: ``(depth, outlier)``.

    As :func:`score`, and ``outlier`` True for the rows of ``X`` whose depth is
    below the ``contamination`` quantile of the reference's depths
    (``offset_`` of the fitted model).

    Parameters
    ----------
    X, reference, depth, sample_dim, **params
        As for :func:`score`.
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers among the reference rows.

    Returns
    -------
    depth : same container kind as ``X``, shape (n_samples,)
        As :func:`score` returns it.
    outlier : same kind and shape
        Boolean: True for the flagged rows (False for rows with NaN depth under
        ``nan_policy='omit'``); named ``'outlier'`` where the kind has names.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(1000, 2))
    >>> d, outlier = daskdepth.outliers(X, random_state=0, contamination=0.05)
    >>> int(outlier.sum())
    50
    """
    check_param("contamination", contamination, "daskdepth.outliers")
    model, X = _fitted(X, reference, depth, sample_dim,
                       {**params, "contamination": contamination})
    result = model.score_samples(X, sample_dim=_first_dim(X))
    outlier = result < model.offset_
    if hasattr(outlier, "rename"):  # DataArray, pandas or dask Series
        outlier = outlier.rename("outlier")
    return result, outlier
