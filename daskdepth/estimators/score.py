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


def score(X: Any, reference: Any = None, *, depth: str = "ai-irw",
          n_directions: int | str | None = None, covariance: object = "sample",
          tol: float = 1e-4, random_state: Any = None, nan_policy: str = "raise",
          support_fraction: float | None = None, contamination: float | None = None,
          sample_dim: Any = None, **options: Any) -> Any:
    """Depth of each row of ``X`` with respect to ``reference`` (default: ``X`` itself).

    The fit runs when ``score`` is called and ``score`` returns once it is done:
    for dask input that is a moments pass, the passes of robust covariances, and
    one or two passes that build the depth summary (see the README's "Accuracy
    guarantee"), each a ``dask.compute`` on the current scheduler.  Only the
    scoring of ``X`` is lazy: for dask input the returned depth is a dask
    collection that scores when computed.  To fit once and score several
    inputs, or to keep the fitted model, use the estimators
    (:class:`daskdepth.AIIRW`, ...) directly.

    Parameters
    ----------
    X : array-like, dask array or DataFrame, or xarray.DataArray of shape (n_samples, n_features)
        Points to score.
    reference : same kinds as ``X``, optional
        Reference sample defining the depth; ``None`` scores ``X`` against itself.
        It must have the features of ``X``.
    depth : {'ai-irw', 'irw', 'halfspace', 'halfspace-mass'}, default='ai-irw'
        :class:`daskdepth.AIIRW`, :class:`daskdepth.IRW`,
        :class:`daskdepth.Halfspace` or :class:`daskdepth.HalfspaceMass`.
    n_directions, covariance, tol, random_state, nan_policy, support_fraction
        As for :class:`daskdepth.AIIRW`; a depth that does not take one of them
        refuses values other than the defaults (``covariance`` and
        ``support_fraction`` apply to AI-IRW and the affine-invariant halfspace
        depth, ``tol`` to all but the half-space mass).
    contamination : float in (0, 0.5], optional
        Also flag outliers: the rows of ``X`` whose depth is below the
        ``contamination`` quantile of the reference's depths (``offset_`` of the
        fitted model).  Then the pair ``(depth, outlier)`` is returned.
    sample_dim : str, optional
        DataArray ``X`` (and ``reference``) only: the dimension that holds the
        samples.  By default the one named ``'sample'``, else the one not named
        ``'feature'``, else the first; an orientation the names leave open and
        the shape contradicts is refused, naming the ``sample_dim`` to pass.
    **options
        Parameters of the chosen depth only, e.g. ``frame='invariant'`` for
        'ai-irw', ``affine_invariant=True`` for 'halfspace', ``subsample_size``
        and ``scope`` for 'halfspace-mass'.

    Returns
    -------
    depth : same container kind as ``X``, shape (n_samples,)
        Returned alone without ``contamination``.  NumPy (and lists) in gives
        a NumPy array; a pandas DataFrame a pandas Series named ``'depth'``
        with the DataFrame's index; a dask array a lazy dask array with the
        same row chunks; a dask DataFrame a lazy dask Series aligned with its
        index; a DataArray a DataArray over its sample dimension, with that
        dimension's coordinates.  As ``score_samples`` of the estimators.
    (depth, outlier) : tuple, only with ``contamination``
        ``outlier`` has the kind of ``depth`` and boolean values: True for the
        flagged rows (False for rows with NaN depth under
        ``nan_policy='omit'``); named ``'outlier'`` where the kind has names.

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
    >>> d, outlier = daskdepth.score(X, random_state=0, contamination=0.05)
    >>> int(outlier.sum())
    50
    >>> import pandas as pd
    >>> frame = pd.DataFrame(X, columns=["a", "b"], index=range(100, 1100))
    >>> daskdepth.score(frame, random_state=0).index[:3].tolist()
    [100, 101, 102]
    """
    if contamination is not None:
        check_param("contamination", contamination, "daskdepth.score")
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
    if contamination is not None:
        options["contamination"] = contamination
    model = make_estimator(depth, n_directions=n_directions, covariance=covariance, tol=tol,
                           random_state=random_state, nan_policy=nan_policy,
                           support_fraction=support_fraction, **options)
    fitted_on = X if reference is None else reference
    model.fit(fitted_on, sample_dim=_first_dim(fitted_on))
    result = model.score_samples(X, sample_dim=_first_dim(X))
    if contamination is None:
        return result
    outlier = result < model.offset_
    if hasattr(outlier, "rename"):  # DataArray, pandas or dask Series
        outlier = outlier.rename("outlier")
    return result, outlier
