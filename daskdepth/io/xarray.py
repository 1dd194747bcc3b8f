"""xarray in, xarray out: the depth of a Dataset variable as a Dataset (:func:`score_dataset`).

:func:`depth_dataset` and :func:`model_attrs` are shared with the command
line, so that a Python call and a batch job describe their results alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from ..estimators import check_param, make_estimator
from ..estimators.inputs import samples_first

#: Range of every notion's scores, for netCDF readers (which mask values outside it):
#: depths lie in [0, 1/2] off the reference rows, but a reference row counts on both
#: sides of itself (up to (n + 1) / 2n) and rows tied with many reach up to 1; masses
#: are shares.
VALID_RANGE = (0.0, 1.0)


def _as_2d(data: Any, variable: str, sample_dim: str | None,
           n_features: int | None = None) -> xr.DataArray:
    """``data`` as a 2-D DataArray with the sample dimension first (as the estimators read it:
    :func:`~daskdepth.estimators.inputs.samples_first`)."""
    if not isinstance(data, xr.DataArray):
        raise TypeError(f"expected an xarray.DataArray for {variable!r}, got "
                        f"{type(data).__name__}")
    if data.ndim != 2:
        raise ValueError(f"variable {variable!r} has dimensions {data.dims}; depth needs two "
                         "(sample, feature)")
    return samples_first(data, sample_dim, f"variable {variable!r}", n_features=n_features)


def model_attrs(model: Any) -> dict[str, Any]:
    """Attributes describing how a fitted model computes depth (netCDF-compatible)."""
    kind = str(model.depth_name)
    attrs: dict[str, Any] = {
        "long_name": model.long_name,
        "method": kind,
    }
    if model.capabilities.directions:
        attrs["n_directions"] = int(model.n_directions_)
    if hasattr(model, "tol"):
        attrs["tol"] = float(model.tol)
    attrs.update({
        "error_bound": float(model.error_bound_),
        "n_samples_fit": int(model.n_samples_fit_),
        "n_features": int(model.n_features_in_),
        "nan_policy": str(model.nan_policy),
        "valid_range": list(VALID_RANGE),
    })
    for param in ("affine_invariant", "subsample_size", "scope"):
        value = getattr(model, param, None)
        if value is not None:  # netCDF attributes are numbers or strings
            attrs[param] = int(value) if isinstance(value, (bool, np.bool_)) else value
    cov = getattr(model, "covariance", None)
    if model._whitens():
        attrs["covariance"] = cov if isinstance(cov, str) else "precomputed"
        attrs["frame"] = str(getattr(model, "frame", "correlation"))
        fraction = getattr(model, "support_fraction", None)
        if fraction is not None:
            attrs["support_fraction"] = float(fraction)
    seed = getattr(model, "random_state", None)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        attrs["seed"] = int(seed)
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        attrs["feature_names"] = [str(n) for n in names]
    return attrs


def offset_for(model: Any, contamination: float) -> float:
    """Depth threshold flagging the ``contamination`` share of the training rows.

    Equal to ``model.offset_`` when ``contamination`` is the model's own;
    otherwise the same quantile of the training depths the model kept.
    """
    check_param("contamination", contamination)
    if contamination == getattr(model, "contamination", None):
        return float(model.offset_)
    sample = getattr(model, "_sample_depth", None)
    if sample is None:  # pragma: no cover - every fitted model has it
        raise ValueError("this model does not keep its training depths; refit it with "
                         f"contamination={contamination}")
    return float(np.nanpercentile(sample, 100 * contamination))


def depth_dataset(model: Any, data: xr.DataArray, *, contamination: float | None = None,
                  name: str = "depth", attrs: dict[str, Any] | None = None,
                  std: bool = False) -> xr.Dataset:
    """Score the rows of a 2-D DataArray with a fitted model, as a Dataset.

    The Dataset has the variable ``name`` over the sample dimension (the first
    one) with the coordinates of that dimension, plus a boolean ``outlier``
    (depth below the model's offset for ``contamination``) when
    ``contamination`` is given, and ``<name>_std``, each depth's Monte Carlo
    standard error over the directions, with ``std``.  Lazy input gives lazy
    variables (both scored by the same tasks).
    """
    sample_dim = data.dims[0]  # as the caller oriented it, not read again from the names
    if std:
        depth, error = model.score_samples(data, return_std=True, sample_dim=sample_dim)
    else:
        depth, error = model.score_samples(data, sample_dim=sample_dim), None
    depth.attrs = model_attrs(model)
    variables = {name: depth.rename(name)}
    if error is not None:
        error.attrs = {
            "long_name": "Monte Carlo standard error of the depth",
            "description": "standard deviation of the per-direction depths over sqrt(m): the "
                           "spread due to drawing m random directions (not the covariance "
                           "estimate's error; the summary's approximation is bounded by "
                           f"{name}.error_bound)",
            "units": "1",
        }
        variables[f"{name}_std"] = error.rename(f"{name}_std")
    if contamination is not None:
        offset = offset_for(model, contamination)
        flags = (depth < offset).rename("outlier")
        flags.attrs = {
            "long_name": "outlier flag",
            "description": f"{name} < offset: the least deep rows, about a share of "
                           f"contamination of the training rows",
            "contamination": float(contamination),
            "offset": offset,
        }
        variables["outlier"] = flags
    return xr.Dataset(variables, attrs=dict(attrs or {}))


def score_dataset(ds: xr.Dataset, variable: str, reference: Any = None, *,
                  depth: str = "ai-irw", contamination: float | None = None,
                  sample_dim: str | None = None, model: Any = None, name: str = "depth",
                  merge: bool = False, std: bool = False, **params: Any) -> xr.Dataset:
    """Depth of the rows of a Dataset variable, as a Dataset with its coordinates and attrs.

    Parameters
    ----------
    ds : xarray.Dataset
        Holds ``variable``, a 2-D (sample, feature) array; NumPy- or dask-backed.
    variable : str
        Name of the variable to score.
    reference : xarray.Dataset or DataArray, optional
        Reference sample defining the depth: a Dataset's ``variable`` or a
        DataArray.  ``None`` scores ``ds[variable]`` against itself.  Ignored
        when ``model`` is given.
    depth : str, default='ai-irw'
        The depth's name, as for :func:`daskdepth.score`.
    **params
        Parameters of the chosen estimator (``n_directions``, ``tol``,
        ``random_state``, ``covariance``, ...), with the estimator's defaults
        for those left out; built by :func:`daskdepth.estimators.make_estimator`,
        which refuses a value other than the default for a parameter the depth
        does not take (e.g. a ``covariance`` for IRW, ``tol`` for the
        half-space mass).  Ignored when ``model`` is given.
    contamination : float in (0, 0.5], optional
        When given, a boolean ``outlier`` variable flags rows whose depth is
        below that quantile of the reference depths.
    sample_dim : str, optional
        The sample dimension of ``variable`` (and of ``reference``).  By
        default the one named ``'sample'``, else the one not named
        ``'feature'``, else the first; an orientation the names leave open and
        the shape contradicts is refused, naming the ``sample_dim`` to pass.
    model : fitted daskdepth estimator, optional
        Score with this model instead of fitting one.
    name : str, default='depth'
        Name of the depth variable.
    merge : bool, default=False
        Return ``ds`` with the new variables added instead of a new Dataset.
    std : bool, default=False
        Add ``<name>_std``, each depth's Monte Carlo standard error over the
        directions (``score_samples(..., return_std=True)``).

    Returns
    -------
    xarray.Dataset
        ``name`` (and ``outlier``) over the sample dimension, with the
        coordinates of ``ds`` along it and ``ds.attrs``; the depth variable's
        attributes (:func:`model_attrs`) record the method, ``n_directions``,
        ``tol``, the certified ``error_bound``, the covariance (AI-IRW), the
        seed (when ``random_state`` is an int), the feature names and
        ``source_variable``.  Dask-backed input gives lazy variables.

    Examples
    --------
    >>> import numpy as np, xarray as xr, daskdepth
    >>> rng = np.random.default_rng(0)
    >>> ds = xr.Dataset(
    ...     {"X": (("time", "feature"), rng.normal(size=(500, 3)))},
    ...     coords={"time": np.arange(500), "feature": ["a", "b", "c"]},
    ...     attrs={"site": "north"})
    >>> out = daskdepth.score_dataset(ds, "X", random_state=0, contamination=0.05)
    >>> sorted(out.data_vars), out.depth.dims, out.attrs["site"]
    (['depth', 'outlier'], ('time',), 'north')
    >>> int(out.outlier.sum()) in range(20, 31)
    True
    >>> out.depth.attrs["feature_names"]
    ['a', 'b', 'c']
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}; for a "
                        "DataArray use daskdepth.score")
    if variable not in ds.data_vars:
        raise KeyError(f"the Dataset has no variable {variable!r} (variables: "
                       f"{', '.join(map(repr, ds.data_vars)) or 'none'})")
    if model is None:
        ref = None if reference is None else _reference(reference, variable, sample_dim)
        data = _as_2d(ds[variable], variable, sample_dim,
                      n_features=None if ref is None else int(ref.shape[1]))
        if contamination is not None:
            params["contamination"] = contamination
        model = make_estimator(depth, **params)
        model.fit(data if ref is None else ref)
    else:
        data = _as_2d(ds[variable], variable, sample_dim, n_features=model.n_features_in_)
    out = depth_dataset(model, data, contamination=contamination, name=name, attrs=ds.attrs,
                        std=std)
    out[name].attrs["source_variable"] = str(variable)
    if merge:
        return ds.assign({k: out[k] for k in out.data_vars})
    return out


def _reference(reference: Any, variable: str, sample_dim: str | None) -> xr.DataArray:
    """The rows that define the depth: a Dataset's ``variable``, or a DataArray."""
    if isinstance(reference, xr.Dataset):
        return _as_2d(reference[variable], variable, sample_dim)
    return _as_2d(reference, variable, sample_dim)
