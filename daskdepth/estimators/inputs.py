"""Input checks at the public boundary: every problem named, with its fix.

NumPy, dask, xarray and pandas inputs become one float64 dask array with a
single column chunk; :meth:`Input.wrap` gives results back in the input's kind:

- NumPy (and lists, pandas DataFrames) in: NumPy out (as scikit-learn's
  detectors; a DataFrame's column names become ``feature_names_in_``);
- dask array in: lazy dask array out, with the same row chunks;
- dask DataFrame in: lazy dask Series out, aligned with the DataFrame's index
  and partitions (``ddf.assign(depth=model.score_samples(ddf))`` works); its
  column names become ``feature_names_in_``.  Fitting needs the partitions'
  lengths (the keyed row sample is drawn on global row numbers): unless they
  are known, one quick pass counts them.  Scoring does not;
- xarray DataArray in: DataArray out over its first dimension.
"""

from __future__ import annotations

import math
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
from dask.base import tokenize

from ..errors import nan_rows_message
from ..runtime.client import keep_placement
from ..runtime.keys import key_name
from ..runtime.memory import row_chunk

NAN_POLICIES = ("raise", "omit")


@dataclass
class Input:
    """A validated 2-D input as a dask array, and how to give results back.

    ``values`` is the float64 array behind ``array`` for in-memory input.
    """

    array: da.Array
    kind: str  # "numpy", "dask", "dask-dataframe" or "xarray"
    original: Any
    feature_names: np.ndarray | None
    values: np.ndarray | None = None
    _token: str | None = field(default=None, repr=False)
    source_dtype: np.dtype = np.dtype(np.float64)  # before the conversion to float64

    @property
    def n_features(self) -> int:
        return int(self.array.shape[1])

    @property
    def content_token(self) -> str:
        """A token of the rows' values: equal tokens mean equal rows (computed once).

        In-memory rows are hashed (about a millisecond per 4 MB); a dask array's
        name already is a token of its content.
        """
        if self._token is None:
            self._token = tokenize(self.values if self.values is not None else self.array)
        return self._token

    def wrap(self, depth: da.Array, name: str = "depth") -> Any:
        """Return ``depth`` in the container type of the input."""
        if self.kind == "dask":
            return depth
        if self.kind == "numpy":
            with keep_placement():
                return np.asarray(depth.compute())
        if self.kind == "dask-dataframe":
            # Imported here: dask.dataframe (and pandas' extension types) loads only for
            # DataFrame input.
            import dask.dataframe as dd

            return dd.from_dask_array(depth, index=self.original.index).rename(name)
        xa = self.original
        dim = xa.dims[0]
        if xa.chunks is not None:
            data = depth
        else:
            with keep_placement():
                data = np.asarray(depth.compute())
        coords = {k: c for k, c in xa.coords.items() if set(c.dims) <= {dim}}
        return xr.DataArray(data, dims=(dim,), coords=coords, name=name)


def as_input(x: Any, *, what: str = "X", min_samples: int = 1,
             nan_policy: str = "raise", lengths: bool = True,
             check_names: Callable[[np.ndarray | None], None] | None = None) -> Input:
    """Validate ``x`` and wrap it as a float64 dask array with one column chunk.

    In-memory input is checked for NaN/inf here; dask input is checked by the
    first pass over it (fit) or by each scoring task.  ``lengths=False`` (for
    scoring) leaves a dask DataFrame's unknown partition lengths unknown, so
    that nothing is computed.  Masked entries of :mod:`numpy.ma` arrays (also
    as dask chunks) become NaN, so that ``nan_policy`` applies to them: they
    are never fitted or scored as the values they hide.  ``check_names`` is
    given the feature names (or None) before anything else is checked, as
    scikit-learn does.
    """
    kind, data, feature_names = _unwrap(x, what, lengths)
    if check_names is not None:
        check_names(feature_names)
    source_dtype = np.dtype(data.dtype)
    _check_dtype(source_dtype, what)
    _check_shape(data, what, min_samples, unknown_rows=kind == "dask-dataframe")
    values = None
    if isinstance(data, da.Array):
        arr = data if data.dtype == np.float64 else data.astype(np.float64)
        if isinstance(getattr(arr, "_meta", None), np.ma.MaskedArray):
            arr = da.ma.filled(arr, np.nan)
        if arr.numblocks[1] > 1:
            arr = arr.rechunk({1: -1})
    else:
        _warn_wide_integers(data, what)
        masked = isinstance(data, np.ma.MaskedArray) and bool(np.ma.getmaskarray(data).any())
        if isinstance(data, np.ma.MaskedArray):  # np.asarray would keep the hidden values
            values = np.ma.filled(data.astype(np.float64), np.nan)
        else:
            values = np.asarray(data, dtype=np.float64)
        where = f"{what} (its masked entries count as NaN)" if masked else what
        arr = _from_memory(values, where, nan_policy)
    return Input(arr, kind, x, feature_names, values, source_dtype=source_dtype)


def check_feature_names(fitted: np.ndarray | None, given: np.ndarray | None,
                        estimator: str) -> None:
    """Refuse input whose feature names differ from those seen by ``fit``, as scikit-learn.

    Renamed, missing or reordered columns raise; names on one side only warn.
    Names come from DataFrame columns and DataArray feature coordinates
    (:attr:`Input.feature_names`).

    Raises
    ------
    ValueError
        Listing the unseen and missing names, or saying the order differs.

    Examples
    --------
    >>> import numpy as np
    >>> check_feature_names(np.array(["a", "b"], dtype=object),
    ...                     np.array(["b", "a"], dtype=object), "AIIRW")
    Traceback (most recent call last):
    ...
    ValueError: The feature names should match those that were passed during fit.
    Feature names must be in the same order as they were in fit.
    Select the model's columns in its order, e.g. X[model.feature_names_in_]
    """
    if fitted is None and given is None:
        return
    if fitted is None:
        warnings.warn(f"X has feature names, but {estimator} was fitted without feature names",
                      UserWarning, stacklevel=6)
        return
    if given is None:
        warnings.warn(f"X does not have valid feature names, but {estimator} was fitted with "
                      "feature names", UserWarning, stacklevel=6)
        return
    have, want = [str(v) for v in given], [str(v) for v in fitted]
    if have == want:
        return
    message = "The feature names should match those that were passed during fit.\n"
    unseen = sorted(set(have) - set(want))
    missing = sorted(set(want) - set(have))
    for title, names in (("Feature names unseen at fit time:", unseen),
                         ("Feature names seen at fit time, yet now missing:", missing)):
        if names:
            message += title + "\n" + "".join(f"- {n}\n" for n in names[:5])
            message += "- ...\n" if len(names) > 5 else ""
    if not (unseen or missing):
        message += "Feature names must be in the same order as they were in fit.\n"
    raise ValueError(message + "Select the model's columns in its order, e.g. "
                               "X[model.feature_names_in_]")


def _is_dask_frame(x: Any) -> bool:
    """A dask DataFrame or Series (without importing dask.dataframe)."""
    module = type(x).__module__
    return module.startswith("dask.dataframe") or module.startswith("dask_expr")


def _column_names(columns: Any) -> np.ndarray | None:
    """Feature names from DataFrame columns: all strings, or none (as scikit-learn)."""
    cols = np.asarray(list(columns), dtype=object)
    return cols if all(isinstance(c, str) for c in cols) else None


def _check_frame_dtypes(dtypes: Any, what: str) -> None:
    """Name the columns of a (dask or pandas) DataFrame that are not real numbers."""
    bad = [(str(name), str(dtype)) for name, dtype in dtypes.items()
           if getattr(dtype, "kind", "O") not in "biuf"]
    if bad:
        listed = ", ".join(f"{name!r} ({dtype})" for name, dtype in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise TypeError(f"{what} has columns that are not real numbers: {listed}{more}; depth "
                        "needs numbers: drop them or encode them as numbers")


def _unwrap_dask_frame(x: Any, what: str, lengths: bool) -> tuple[str, Any, np.ndarray | None]:
    if getattr(x, "ndim", 2) != 2:  # a dask Series: one column of values
        raise ValueError(f"{what} is a dask Series (1-D); depth needs a 2-D table (n_samples, "
                         f"n_features): pass a DataFrame, e.g. {what}.to_frame()")
    _check_frame_dtypes(x.dtypes, what)
    # Rows are numbered globally for the keyed row sample (fit): with lengths=True the
    # partitions' lengths are counted when unknown.  Scoring keeps them unknown (lazy).
    arr = x.to_dask_array(lengths=True) if lengths else x.to_dask_array()
    return "dask-dataframe", arr, _column_names(x.columns)


def _unwrap(x: Any, what: str, lengths: bool = True) -> tuple[str, Any, np.ndarray | None]:
    """The input's kind, its array (dask or with ``dtype`` and ``ndim``), its feature names."""
    if isinstance(x, xr.Dataset):
        raise TypeError(
            f"{what} is an xarray.Dataset; pass one variable, e.g. ds['name'], or use "
            "daskdepth.score_dataset(ds, 'name')"
        )
    if _is_dask_frame(x):
        return _unwrap_dask_frame(x, what, lengths)
    kind, names = "numpy", None
    if isinstance(x, xr.DataArray):
        kind = "xarray"
        if x.ndim == 2 and x.dims[1] in x.coords:
            coord = np.asarray(x.coords[x.dims[1]].values)
            if coord.dtype.kind in "OUS":
                names = coord.astype(object)
        x = x.data
    elif hasattr(x, "columns") and hasattr(x, "to_numpy"):
        if hasattr(x, "dtypes"):
            _check_frame_dtypes(x.dtypes, what)
        names = _column_names(x.columns)
        x = x.to_numpy()
    if isinstance(x, da.Array):
        return ("dask" if kind == "numpy" else kind), x, names
    if hasattr(x, "tocsr") or type(x).__module__.startswith("scipy.sparse"):
        raise TypeError(
            f"{what} is a sparse matrix; depth needs dense rows. Convert it with "
            f"{what}.toarray() (or dask's map_blocks(lambda b: b.toarray()) for chunks)"
        )
    if not hasattr(x, "dtype") or not hasattr(x, "ndim"):
        x = np.asarray(x)
    return kind, x, names


def _check_dtype(dtype: np.dtype, what: str) -> None:
    if dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {what} has dtype {dtype}; "
                         "pass its real part or its modulus")
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{what} has dtype {dtype}; depth needs real numbers. Convert the data with "
            f"{what}.astype(float) (after encoding any text columns as numbers)"
        )


def _check_shape(x: Any, what: str, min_samples: int, unknown_rows: bool = False) -> None:
    """Two dimensions, known chunk sizes, at least one feature and ``min_samples`` rows.

    ``unknown_rows``: a dask DataFrame scored lazily, whose partition lengths may be unknown.
    """
    if x.ndim != 2:
        if x.ndim == 1:
            raise ValueError(
                f"{what} is 1-D with shape {x.shape}; depth needs a 2-D array (n_samples, "
                f"n_features). Use {what}.reshape(-1, 1) for a single feature or "
                f"{what}.reshape(1, -1) for a single sample"
            )
        raise ValueError(f"{what} has {x.ndim} dimensions with shape {x.shape}; depth needs a "
                         "2-D array (n_samples, n_features)")
    if unknown_rows and isinstance(x, da.Array) and any(math.isnan(c) for c in x.chunks[0]):
        return
    if isinstance(x, da.Array) and any(math.isnan(c) for axis in x.chunks for c in axis):
        raise ValueError(
            f"{what} has unknown chunk sizes (after boolean indexing or a filter); call "
            f"{what}.compute_chunk_sizes() first, or build it with known chunks"
        )
    n, d = int(x.shape[0]), int(x.shape[1])
    if d == 0:
        raise ValueError(f"{what} has 0 features (shape {x.shape}); depth needs at least one")
    if n < min_samples:
        noun = "sample" if n == 1 else "samples"
        raise ValueError(
            f"{what} has {n} {noun} (shape {x.shape}); a depth reference needs at least "
            f"{min_samples} rows"
        )


#: Integers of larger magnitude are not all exact in float64 (53-bit significand).
FLOAT64_EXACT_INT = 2**53


def wide_integer_message(dtype: np.dtype, what: str, largest: Any = None) -> str:
    """Why 64-bit integers beyond 2**53 are a problem, and the lossless fix."""
    held = (f"{dtype} integers beyond 2**53 (largest {largest})" if largest is not None else
            f"{dtype} integers")
    return (f"{what} holds {held}, which float64 (the depth's arithmetic) rounds beyond 2**53: "
            "rows that differ only in their last bits become equal. Subtract an offset first, "
            f"e.g. {what} - {what}.min(axis=0), which leaves the depth unchanged")


def _warn_wide_integers(x: Any, what: str) -> None:
    """Warn when in-memory 64-bit integers lose precision in float64."""
    source = np.asarray(x)
    if source.dtype.kind in "iu" and source.dtype.itemsize == 8 and source.size:
        largest = max(int(source.max()), -int(source.min()))
        if largest >= FLOAT64_EXACT_INT:
            warnings.warn(wide_integer_message(source.dtype, what, largest), UserWarning,
                          stacklevel=4)


def _from_memory(x: np.ndarray, what: str, nan_policy: str) -> da.Array:
    """In-memory float64 rows as chunks of :func:`daskdepth.runtime.memory.row_chunk` rows."""
    if nan_policy == "raise":
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(nan_rows_message(bad.size, bad, what))
    n, d = x.shape
    # A fresh name: the wrapped array is not hashed (that would read all of it).
    return da.from_array(x, chunks=(row_chunk(n, d), d),
                         name=key_name("wrap", uuid.uuid4().hex))
