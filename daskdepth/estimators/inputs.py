"""Input checks at the public boundary: every problem named, with its fix.

NumPy, dask, xarray and pandas inputs become one float64 dask array with a
single column chunk; :meth:`Input.wrap` gives results back in the input's kind:

- NumPy (and lists) in: NumPy out (as scikit-learn's detectors);
- pandas DataFrame in: pandas Series out, with the DataFrame's index (its
  column names become ``feature_names_in_``);
- dask array in: lazy dask array out, with the same row chunks;
- dask DataFrame in: lazy dask Series out, aligned with the DataFrame's index
  and partitions (``ddf.assign(depth=model.score_samples(ddf))`` works); its
  column names become ``feature_names_in_``.  Fitting needs the partitions'
  lengths (the keyed row sample is drawn on global row numbers): unless they
  are known, one quick pass counts them.  Scoring does not;
- xarray DataArray in: DataArray out over its sample dimension, with that
  dimension's coordinates.  The sample dimension is ``sample_dim=`` when
  given, else the dimension named ``"sample"``, else the one that is not named
  ``"feature"``, else the first (:func:`samples_first`).

Columns that hold real numbers in another container are converted as
scikit-learn's ``check_array`` does: pandas' nullable ``Float64``/``Int64``/
``boolean`` columns and object arrays or columns holding numbers become
float64, with ``pd.NA`` and ``None`` as NaN (so ``nan_policy`` applies to
them).  Text is refused, also text that looks like numbers: it is rarely meant
as a measurement.
"""

from __future__ import annotations

import decimal
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from dask.base import tokenize

from ..errors import nan_rows_message, user_stacklevel
from ..runtime.client import keep_placement
from ..runtime.keys import fresh_token, key_name
from ..runtime.memory import row_chunk

NAN_POLICIES = ("raise", "omit")

#: The names of a DataArray's dimensions that say which holds the samples (rows) and which
#: the features, as the command line's inputs name them.
SAMPLE_DIM = "sample"
FEATURE_DIM = "feature"


@dataclass
class Input:
    """A validated 2-D input as a dask array, and how to give results back.

    ``values`` is the float64 array behind ``array`` for in-memory input.
    """

    array: da.Array
    kind: str  # "numpy", "pandas", "dask", "dask-dataframe" or "xarray"
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

    @property
    def in_memory(self) -> bool:
        """Whether results are given back computed (NumPy, pandas, NumPy-backed DataArray)."""
        return self.kind in ("numpy", "pandas") or (
            self.kind == "xarray" and self.original.chunks is None)

    def wrap(self, depth: da.Array, name: str = "depth") -> Any:
        """Return ``depth`` in the container type of the input."""
        if self.kind == "dask":
            return depth
        if self.kind in ("numpy", "pandas"):
            with keep_placement():
                values = np.asarray(depth.compute())
            if self.kind == "pandas":
                return pd.Series(values, index=self.original.index, name=name)
            return values
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
             check_names: Callable[[np.ndarray | None], None] | None = None,
             sample_dim: str | None = None, n_features: int | None = None) -> Input:
    """Validate ``x`` and wrap it as a float64 dask array with one column chunk.

    In-memory input is checked for NaN/inf here; dask input is checked by the
    first pass over it (fit) or by each scoring task.  ``lengths=False`` (for
    scoring) leaves a dask DataFrame's unknown partition lengths unknown, so
    that nothing is computed.  Masked entries of :mod:`numpy.ma` arrays (also
    as dask chunks) become NaN, so that ``nan_policy`` applies to them: they
    are never fitted or scored as the values they hide.  ``check_names`` is
    given the feature names (or None) before anything else is checked, as
    scikit-learn does.  ``sample_dim`` and ``n_features`` (the fitted model's,
    when scoring) orient a DataArray (:func:`samples_first`); ``sample_dim``
    is refused for other inputs.
    """
    if isinstance(x, xr.DataArray):
        x = samples_first(x, sample_dim, what, n_features=n_features)
    elif sample_dim is not None:
        raise TypeError(f"sample_dim={sample_dim!r} applies to an xarray.DataArray, whose "
                        f"dimensions have names; {what} is a {type(x).__name__}, whose rows "
                        "are the samples: leave sample_dim out (transpose the data if needed)")
    kind, data, feature_names = _unwrap(x, what, lengths)
    if check_names is not None:
        check_names(feature_names)
    data = _as_numbers(data, what)
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
                      UserWarning, stacklevel=user_stacklevel())
        return
    if given is None:
        warnings.warn(f"X does not have valid feature names, but {estimator} was fitted with "
                      "feature names", UserWarning, stacklevel=user_stacklevel())
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


def samples_first(x: xr.DataArray, sample_dim: Any = None, what: str = "X", *,
                  n_features: int | None = None) -> xr.DataArray:
    """``x`` with the dimension that holds the samples first.

    The sample dimension is ``sample_dim`` when given; else the dimension
    named ``'sample'``; else the one that is not named ``'feature'``; else the
    first.  When neither name says, an orientation that the shape contradicts
    is refused instead of guessed: fewer samples than features when fitting
    (``n_features`` None), or the fitted model's feature count along the
    first dimension but not along the second when scoring.

    Raises
    ------
    ValueError
        ``sample_dim`` is not a dimension of ``x``, or the orientation is
        ambiguous; the message names the ``sample_dim=`` to pass.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> samples_first(xr.DataArray(np.zeros((3, 500)), dims=("feature", "time"))).dims
    ('time', 'feature')
    >>> samples_first(xr.DataArray(np.zeros((3, 500)), dims=("band", "pixel")),
    ...               sample_dim="pixel").dims
    ('pixel', 'band')
    >>> samples_first(xr.DataArray(np.zeros((3, 500)), dims=("band", "pixel")))
    Traceback (most recent call last):
    ...
    ValueError: X has dimensions ('band', 'pixel') of shape (3, 500): which one holds the \
samples is ambiguous (neither is named 'sample' or 'feature', and along 'band' there are \
fewer samples than features). Pass sample_dim='pixel' if the samples run along 'pixel' \
(sample_dim='band' fits the 3 rows along 'band')
    """
    if x.ndim != 2:
        return x  # refused, with its shape, by the checks that follow
    first, second = x.dims
    if sample_dim is not None:
        if sample_dim not in x.dims:
            raise ValueError(f"{what} has no dimension {sample_dim!r} (its dimensions: "
                             f"{x.dims!r}); pass sample_dim= the one that holds the samples")
        found = sample_dim
    elif SAMPLE_DIM in x.dims:
        found = SAMPLE_DIM
    elif FEATURE_DIM in x.dims:
        found = second if first == FEATURE_DIM else first
    else:
        n, d = (int(v) for v in x.shape)
        if n_features is None and n < d:
            raise ValueError(
                f"{what} has dimensions {x.dims!r} of shape {x.shape}: which one holds the "
                f"samples is ambiguous (neither is named {SAMPLE_DIM!r} or {FEATURE_DIM!r}, and "
                f"along {first!r} there are fewer samples than features). Pass "
                f"sample_dim={second!r} if the samples run along {second!r} "
                f"(sample_dim={first!r} fits the {n} rows along {first!r})")
        if n_features is not None and d != n_features and n == n_features:
            raise ValueError(
                f"{what} has dimensions {x.dims!r} of shape {x.shape}: the model's "
                f"{n_features} features run along {first!r}, not along {second!r}. Pass "
                f"sample_dim={second!r} if the samples run along {second!r} (or name the "
                f"dimensions {SAMPLE_DIM!r} and {FEATURE_DIM!r})")
        return x
    return x if first == found else x.transpose(found, ...)


def _is_dask_frame(x: Any) -> bool:
    """A dask DataFrame or Series (without importing dask.dataframe)."""
    module = type(x).__module__
    return module.startswith("dask.dataframe") or module.startswith("dask_expr")


def _column_names(columns: Any, what: str = "X") -> np.ndarray | None:
    """Feature names from DataFrame columns: all strings, or none (as scikit-learn).

    Names of mixed types are refused, as scikit-learn does: some would be
    checked at scoring and others not.
    """
    cols = np.asarray(list(columns), dtype=object)
    strings = [isinstance(c, str) for c in cols]
    if all(strings):
        return cols
    if any(strings):
        types = sorted({type(c).__qualname__ for c in cols})
        raise TypeError(
            f"Feature names are only supported if all input features have string names, but "
            f"{what} has {types} as feature name / column name types. Convert them all to "
            f"strings, e.g. {what}.columns = {what}.columns.astype(str), to have them stored "
            "and checked, or else remove the names or make none of them a string")
    return None


#: pandas' ``infer_dtype`` kinds of object values that are all real numbers (or missing).
_NUMBER_KINDS = frozenset({"floating", "integer", "mixed-integer-float", "decimal",
                           "boolean", "empty"})


def _is_number(value: Any) -> bool:
    """A real number, or a missing value (None, NaN, ``pd.NA``), as one Python object."""
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return True
    if isinstance(value, (str, bytes)):
        return False
    missing = pd.isna(value)  # an array for sequences: not one number
    return isinstance(missing, (bool, np.bool_)) and bool(missing)


def _non_number(values: np.ndarray) -> tuple[tuple[int, ...], Any] | None:
    """The index and value of the first entry of an object array that is not a number."""
    if pd.api.types.infer_dtype(values.ravel(), skipna=True) in _NUMBER_KINDS:
        return None  # the common case, decided in compiled code
    for index, value in np.ndenumerate(values):
        if not _is_number(value):
            return index, value
    return None


def _non_number_message(what: str, index: tuple[int, ...], value: Any,
                        column: Any = None) -> str:
    where = (f"column {column!r}, row {index[0]}" if column is not None else
             f"row {index[0]}, column {index[1]}" if len(index) == 2 else f"index {index}")
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    if isinstance(value, (str, bytes)):
        return (f"{what} holds text ({shown} at {where}); depth needs real numbers: encode "
                f"text columns as numbers (text that spells numbers, e.g. '1.5', converts with "
                f"{what}.astype(float))")
    kind = type(value).__name__
    return (f"{what} holds a {kind} ({shown} at {where}), not a real number (float() argument "
            f"must be a string or a real number, not {kind!r}); depth needs real numbers: drop "
            "or encode that column as numbers")


def object_floats(values: np.ndarray, what: str = "X", column: Any = None) -> np.ndarray:
    """An object array holding real numbers as float64, as scikit-learn's ``check_array``.

    ``None``, NaN and ``pd.NA`` become NaN (``nan_policy`` then applies to
    them).  Text is refused, also text that spells a number.

    Raises
    ------
    TypeError
        Naming the first entry that is not a number, where it is, and the fix.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> object_floats(np.array([[1, 2.5], [None, pd.NA]], dtype=object))
    array([[1. , 2.5],
           [nan, nan]])
    >>> object_floats(np.array([[1.0, "2.5"]], dtype=object))
    Traceback (most recent call last):
    ...
    TypeError: X holds text ('2.5' at row 0, column 1); depth needs real numbers: encode text \
columns as numbers (text that spells numbers, e.g. '1.5', converts with X.astype(float))
    """
    bad = _non_number(values)
    if bad is not None:
        raise TypeError(_non_number_message(what, *bad, column))
    missing = pd.isna(values)
    if missing.any():
        values = values.copy()
        values[missing] = np.nan
    try:
        return values.astype(np.float64)
    except OverflowError as exc:  # a Python int beyond float64's range
        raise TypeError(f"{what} holds a number too large for float64 ({exc}); depth needs "
                        "real numbers within float64's range: rescale that column") from None


def _frame_dtype_problem(dtype: Any, column: pd.Series | None = None) -> str | None:
    """Why a DataFrame column is not real numbers (None when it is); the row is named by its
    index label, which a dask partition shares with the whole frame."""
    if getattr(dtype, "kind", "O") in "biuf":  # NumPy's or pandas' nullable dtypes
        return None
    if _numeric_categories(dtype):  # as scikit-learn: the categories' values
        return None
    if isinstance(dtype, pd.CategoricalDtype):
        return f"category of {dtype.categories.dtype}, whose codes .cat.codes are numbers"
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        bad = None if column is None else _non_number(column.to_numpy(dtype=object))
        if bad is None:
            return None
        shown = repr(bad[1]) if len(repr(bad[1])) <= 20 else repr(bad[1])[:17] + "..."
        return (f"object, holds {type(bad[1]).__name__} {shown} at index "
                f"{_label(column.index[bad[0][0]])!r}")
    return str(dtype)


def _numeric_categories(dtype: Any) -> bool:
    """A pandas categorical dtype whose categories are real numbers (known categories)."""
    if not isinstance(dtype, pd.CategoricalDtype) or dtype.categories is None:
        return False
    return getattr(dtype.categories.dtype, "kind", "O") in "biuf"


def _label(value: Any) -> Any:
    """An index label as Python shows it (``7``, not ``np.int64(7)``)."""
    return value.item() if isinstance(value, np.generic) else value


def _refuse_columns(bad: list[tuple[Any, str]], what: str, hint: str = "") -> None:
    if bad:
        listed = ", ".join(f"{name!r} ({problem})" for name, problem in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise TypeError(f"{what} has columns that are not real numbers: {listed}{more}; depth "
                        f"needs numbers: drop them or encode them as numbers{hint}")


def _frame_values(frame: pd.DataFrame, what: str) -> np.ndarray:
    """A pandas DataFrame's values: NumPy columns as ``to_numpy`` gives them, else float64.

    pandas' nullable columns (``Float64``, ``Int64``, ``boolean``) and object
    columns of numbers become float64 with ``pd.NA`` and ``None`` as NaN, as
    scikit-learn converts them.
    """
    dtypes = list(frame.dtypes)
    if not dtypes:
        return np.empty((len(frame), 0))
    if all(isinstance(t, np.dtype) and t.kind in "biuf" for t in dtypes):
        # NumPy's own dtypes: kept (64-bit integers are checked for float64's precision),
        # unless mixing them gives object (booleans with numbers): then column by column.
        values = frame.to_numpy()
        if values.dtype.kind in "biuf":
            if values.dtype.kind == "f":  # 64-bit integer columns mixed in are rounded now
                for j, dtype in enumerate(dtypes):
                    if dtype.kind in "iu" and dtype.itemsize == 8:
                        _warn_wide_integers(frame.iloc[:, j].to_numpy(), what)
            return values
    bad, columns = [], []
    for j, (name, dtype) in enumerate(zip(frame.columns, dtypes, strict=True)):
        column = frame.iloc[:, j]
        problem = _frame_dtype_problem(dtype, column)
        if problem is not None:
            bad.append((name, problem))
        elif not bad:
            if isinstance(dtype, np.dtype) and dtype.kind == "O":
                columns.append(object_floats(column.to_numpy(), what, column=name))
                continue
            if isinstance(dtype, pd.CategoricalDtype):  # numeric categories: their values
                columns.append(column.astype(np.float64).to_numpy())
                continue
            if dtype.kind in "iu":  # e.g. Int64 ids beyond 2**53
                _warn_wide_integers(column.dropna().to_numpy(
                    dtype=getattr(dtype, "numpy_dtype", dtype)), what)
            columns.append(column.to_numpy(dtype=np.float64, na_value=np.nan))
    _refuse_columns(bad, what)
    return np.column_stack(columns)


def _float_frame(part: pd.DataFrame, what: str) -> pd.DataFrame:
    """One partition of a dask DataFrame as float64 columns (:func:`_frame_values`)."""
    return pd.DataFrame(_frame_values(part, what).astype(np.float64, copy=False),
                        index=part.index, columns=part.columns)


#: dask.dataframe turns object columns into strings when it reads them (its default).
_DASK_STRINGS = (" (dask.dataframe stores object columns as text unless "
                 "dask.config.set({'dataframe.convert-string': False}): convert numbers to "
                 "float before building the dask DataFrame)")


def _unwrap_dask_frame(x: Any, what: str, lengths: bool) -> tuple[str, Any, np.ndarray | None]:
    if getattr(x, "ndim", 2) != 2:  # a dask Series: one column of values
        raise ValueError(f"{what} is a dask Series (1-D); depth needs a 2-D table (n_samples, "
                         f"n_features): pass a DataFrame, e.g. {what}.to_frame()")
    dtypes = list(x.dtypes)
    bad = [(name, problem) for name, dtype in zip(x.columns, dtypes, strict=True)
           if (problem := _frame_dtype_problem(dtype)) is not None]
    strings = any(isinstance(t, pd.StringDtype) for t in dtypes)
    _refuse_columns(bad, what, _DASK_STRINGS if strings else "")
    names = _column_names(x.columns, what)
    if not all(isinstance(t, np.dtype) and t.kind in "biuf" for t in dtypes):
        # Nullable and object columns: converted (and object values checked) per partition.
        meta = pd.DataFrame(np.empty((0, len(dtypes))), columns=x.columns)
        x = x.map_partitions(_float_frame, what, meta=meta)
    # Rows are numbered globally for the keyed row sample (fit): with lengths=True the
    # partitions' lengths are counted when unknown.  Scoring keeps them unknown (lazy).
    arr = x.to_dask_array(lengths=True) if lengths else x.to_dask_array()
    return "dask-dataframe", arr, names


def _unwrap(x: Any, what: str, lengths: bool = True) -> tuple[str, Any, np.ndarray | None]:
    """The input's kind, its data (dask, a pandas DataFrame, or with ``dtype`` and ``ndim``),
    and its feature names.  Values are converted to numbers later (:func:`_as_numbers`)."""
    if isinstance(x, xr.Dataset):
        raise TypeError(
            f"{what} is an xarray.Dataset; pass one variable, e.g. ds['name'], or use "
            "daskdepth.score_dataset(ds, 'name')"
        )
    if _is_dask_frame(x):
        return _unwrap_dask_frame(x, what, lengths)
    if isinstance(x, pd.Series):
        raise ValueError(
            f"{what} is a pandas Series (1-D, {len(x)} values); depth needs a 2-D table "
            f"(n_samples, n_features): for one feature pass {what}.to_frame() (a one-column "
            f"DataFrame, its name the feature's), for one sample (a row such as df.iloc[i]) "
            f"pass {what}.to_frame().T, or for NumPy {what}.to_numpy().reshape(-1, 1)")
    kind, names = "numpy", None
    if isinstance(x, xr.DataArray):
        kind = "xarray"
        if x.ndim == 2 and x.dims[1] in x.coords:
            coord = np.asarray(x.coords[x.dims[1]].values)
            if coord.dtype.kind in "US":
                names = coord.astype(object)
            elif coord.dtype.kind == "O":
                names = _column_names(coord, what)
        x = x.data
    elif isinstance(x, pd.DataFrame):
        return "pandas", x, _column_names(x.columns, what)
    elif hasattr(x, "columns") and hasattr(x, "to_numpy"):  # other DataFrame libraries
        if hasattr(x, "dtypes"):
            _refuse_columns([(name, str(dtype)) for name, dtype in
                             zip(x.columns, x.dtypes, strict=True)
                             if getattr(dtype, "kind", "O") not in "biuf"], what)
        names = _column_names(x.columns, what)
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


def _as_numbers(data: Any, what: str) -> Any:
    """A pandas DataFrame as an array, object values as float64 (lazily for dask)."""
    if isinstance(data, pd.DataFrame):
        return _frame_values(data, what)
    if np.dtype(data.dtype) != object:
        return data
    if isinstance(data, da.Array):
        return data.map_blocks(object_floats, what, dtype=np.float64)
    if isinstance(data, np.ma.MaskedArray):
        return np.ma.MaskedArray(object_floats(np.ma.getdata(data), what),
                                 mask=np.ma.getmaskarray(data))
    return object_floats(np.asarray(data), what)


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
                          stacklevel=user_stacklevel())


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
                         name=key_name("wrap", fresh_token()))
