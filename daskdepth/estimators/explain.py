"""``model.explain``: why a row is deep or outlying, in the containers of ``score_samples``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from dask.base import tokenize
from sklearn.utils.validation import check_is_fitted

from ..passes.explain import explain_array
from ..runtime.client import keep_placement
from ..summary.depth import DepthSummary
from ..summary.explain import direction_scales, feature_axes
from ..summary.projection import ProjectionSummary
from .known import DEPTHS

#: Summaries made of univariate depths along directions: those that explain.
EXPLAINED = (DepthSummary, ProjectionSummary)


def explained() -> list[str]:
    """The estimators whose scores are built from per-direction univariate depths."""
    return [cls.__name__ for cls in DEPTHS.values() if cls.capabilities.explains]

#: Names of the explanation's variables (an xarray Dataset's, and the command line's).
VARIABLES = ("explain_direction", "explain_depth", "explain_side", "contribution")


@dataclass
class Explanation:
    """Each row's least-deep directions and its features' contributions.

    The arrays have the container kind of the rows explained: NumPy arrays
    for NumPy input, lazy dask arrays (with the input's row chunks) for dask
    input, pandas DataFrames with the input's index for pandas input (the
    contributions with its column names), dask DataFrames for a dask
    DataFrame.  A DataArray gives an :class:`xarray.Dataset` instead (see
    :meth:`daskdepth.DepthDetector.explain`).

    Attributes
    ----------
    direction : (n_samples, n_top) int64
        Indices (rows of ``model.directions_`` and of ``axes``) of each row's
        ``n_top`` directions of smallest univariate depth, least deep first
        (``n_top`` at most ``n_directions_``: a larger one reports them all);
        among equal depths, the direction along which the row lies farthest
        from ``location_`` (in standard deviations of the reference
        projections) first, then the smaller index.  For the projection depth,
        by outlyingness ``|<x - location_, v_j> - med_j| / mad_j``, largest
        first (which orders the depths too), ties broken the same way.  -1 for
        rows not scored (NaN under ``nan_policy='omit'``).
    depth : (n_samples, n_top) float64
        Their univariate depths ``min(L_j, G_j) / n``: the values the depth
        averages (IRW, AI-IRW) or takes the minimum of (halfspace), so
        ``depth[:, 0]`` is the halfspace depth itself.  Each is within
        ``error_bound`` of the exact univariate depth.  For the projection
        depth, ``1 / (1 + |<x - location_, v_j> - med_j| / mad_j)``, whose
        minimum is the depth: ``depth[:, 0]`` is its score.
    side : (n_samples, n_top) int8
        -1 where the row lies below the direction's median (fewer reference
        rows at or below it than at or above; for the projection depth, its
        projection below ``med_j``), +1 above, 0 at it.
    contribution : (n_samples, n_features) float64
        Each feature's share of the row's outlyingness along those directions,
        in standard deviations (defined in :meth:`daskdepth.DepthDetector.explain`).
    axes : (n_directions, n_features) ndarray
        Every direction as a unit vector in the features' space (for AI-IRW and
        ``Halfspace(affine_invariant=True)`` the whitened direction mapped back).
    error_bound : float
        Certified bound on ``|depth - exact univariate depth|`` for every entry:
        the largest per-direction bound of the summary (0 when exact).
    feature_names : ndarray or None
        The features' names, when the model was fitted with them.
    """

    direction: Any
    depth: Any
    side: Any
    contribution: Any
    axes: np.ndarray = field(repr=False)
    error_bound: float = 0.0
    feature_names: np.ndarray | None = None

    def vectors(self) -> np.ndarray:
        """``axes[direction]``: (n_samples, n_top, n_features), NaN where ``direction`` is -1.

        Computed from the NumPy values (for other containers, on ``direction``'s values).
        """
        index = np.asarray(self.direction)
        out = self.axes[np.maximum(index, 0)]
        out[index < 0] = np.nan
        return out

    def top_feature(self) -> Any:
        """Per row, the feature with the largest contribution: its name, or its position.

        - pandas or dask DataFrame rows: a pandas Series with the rows' index
          holding the column labels (as ``contribution.idxmax(axis=1)``),
          missing for rows not scored;
        - other rows, for a model fitted with feature names (a DataFrame's
          string columns, ``feature_names_in_``): an object array of the names,
          None for rows not scored;
        - otherwise an int64 array of positions, -1 for rows not scored.

        Computed with the values of ``contribution`` (NumPy, or computed from its container).

        Examples
        --------
        >>> import numpy as np, pandas as pd, daskdepth
        >>> X = pd.DataFrame(np.random.default_rng(0).normal(size=(500, 3)),
        ...                  columns=["p", "q", "r"])
        >>> model = daskdepth.AIIRW(random_state=0).fit(X)
        >>> rows = pd.DataFrame([[0.0, 0.0, 8.0], [9.0, 0.0, 0.0]], columns=["p", "q", "r"],
        ...                     index=[10, 11])
        >>> model.explain(rows).top_feature().to_dict()
        {10: 'r', 11: 'p'}
        """
        contribution = self.contribution
        if hasattr(contribution, "compute") and hasattr(contribution, "columns"):
            contribution = contribution.compute()  # a dask DataFrame: its pandas values
        values = np.asarray(contribution, dtype=np.float64)
        position = np.full(values.shape[0], -1, dtype=np.int64)
        ok = ~np.isnan(values).any(axis=1)
        position[ok] = np.argmax(values[ok], axis=1)
        if isinstance(contribution, pd.DataFrame):
            labels = np.asarray(contribution.columns, dtype=object)
        elif self.feature_names is not None:
            labels = np.asarray(self.feature_names, dtype=object)
        else:
            return position
        named = np.full(values.shape[0], None, dtype=object)
        named[ok] = labels[position[ok]]
        if isinstance(contribution, pd.DataFrame):
            return pd.Series(named, index=contribution.index, name="top_feature")
        return named


def _check_model(model: Any) -> DepthSummary | ProjectionSummary:
    summary = getattr(model, "summary_", None)
    if not isinstance(summary, EXPLAINED):
        raise TypeError(
            f"{type(model).__name__} has no per-direction depths to explain: explanations "
            f"exist for {', '.join(explained())} (and depths scored from univariate depths along "
            "directions); score it with score_samples")
    return summary


def _check_n_top(n_top: Any, n_directions: int) -> int:
    """``n_top`` checked, and at most ``n_directions``: a larger one reports every direction.

    Examples
    --------
    >>> _check_n_top(3, 300), _check_n_top(10**9, 300)
    (3, 300)
    """
    if isinstance(n_top, (bool, np.bool_)) or not isinstance(n_top, (int, np.integer)) \
            or n_top < 1:
        raise ValueError(f"n_top={n_top!r}: pass a positive integer, the number of "
                         "directions to report per row (e.g. n_top=3)")
    # Slots beyond the model's directions could only be empty; clamped before anything is
    # allocated (an n_top of 10**9 would otherwise ask for rows x 3 x 10**9 values).
    return int(min(int(n_top), int(n_directions)))


def explain_rows(model: Any, X: Any, n_top: int = 3, *, sample_dim: Any = None) -> Any:
    """What :meth:`daskdepth.DepthDetector.explain` returns (see there)."""
    check_is_fitted(model, "summary_")
    summary = _check_model(model)
    k = _check_n_top(n_top, summary.directions.shape[0])
    data = model._check_input(X, sample_dim)
    scales = direction_scales(model.directions_, model.covariance_)
    token = tokenize(data.array.name, getattr(model, "_fit_token", id(summary)),
                     model.nan_policy, "explain", k)
    packed = explain_array(data.array, summary, scales, k,
                           raise_nan=model.nan_policy == "raise", token=token)
    axes = feature_axes(model.directions_, model.covariance_, model._whitens())
    bound = float(summary.direction_errors().max(initial=0.0))
    names = getattr(model, "feature_names_in_", None)
    return _wrap(data, packed, k, axes, bound, names)


def _split(packed: Any, k: int) -> tuple[Any, Any, Any, Any]:
    return (packed[:, :k].astype(np.int64), packed[:, k:2 * k],
            packed[:, 2 * k:3 * k].astype(np.int8), packed[:, 3 * k:])


def _wrap(data: Any, packed: da.Array, k: int, axes: np.ndarray, bound: float,
          names: np.ndarray | None) -> Any:
    kind = data.kind
    in_memory = data.in_memory
    if in_memory:
        with keep_placement():
            values = np.asarray(packed.compute())
        parts = _split(values, k)
    else:
        parts = _split(packed, k)
    if kind == "xarray":
        return _dataset(data.original, parts, axes, bound)
    if kind == "pandas":
        index = data.original.index
        top = pd.RangeIndex(k, name="top")
        columns = data.original.columns
        parts = (pd.DataFrame(parts[0], index=index, columns=top),
                 pd.DataFrame(parts[1], index=index, columns=top),
                 pd.DataFrame(parts[2], index=index, columns=top),
                 pd.DataFrame(parts[3], index=index, columns=columns))
    elif kind == "dask-dataframe":
        import dask.dataframe as dd  # why: loads only for dask DataFrame input

        index = data.original.index
        top = list(range(k))
        columns = list(data.original.columns)
        parts = tuple(dd.from_dask_array(p, columns=c, index=index)
                      for p, c in zip(parts, (top, top, top, columns), strict=True))
    return Explanation(*parts, axes=axes, error_bound=bound, feature_names=names)


def _dataset(xa: xr.DataArray, parts: tuple[Any, ...], axes: np.ndarray,
             bound: float) -> xr.Dataset:
    """The explanation as a Dataset over the DataArray's sample and feature dimensions."""
    sample, feature = xa.dims
    coords = {name: c for name, c in xa.coords.items()
              if set(c.dims) <= {sample} or set(c.dims) <= {feature}}
    k = parts[0].shape[1]
    coords["top"] = np.arange(k)
    variables = {
        VARIABLES[0]: ((sample, "top"), parts[0], {
            "long_name": "directions of smallest univariate depth (rows of directions_)"}),
        VARIABLES[1]: ((sample, "top"), parts[1], {
            "long_name": "univariate depth along each of those directions",
            "error_bound": bound}),
        VARIABLES[2]: ((sample, "top"), parts[2], {
            "long_name": "side of the direction's median: -1 below, +1 above, 0 at it"}),
        VARIABLES[3]: ((sample, feature), parts[3], {
            "long_name": "feature's contribution to the outlyingness, in standard deviations"}),
    }
    return xr.Dataset({name: xr.Variable(dims, values, attrs)
                       for name, (dims, values, attrs) in variables.items()}, coords=coords,
                      attrs={"error_bound": bound})
