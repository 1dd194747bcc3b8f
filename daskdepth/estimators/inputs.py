"""Input checks at the public boundary: every problem named, with its fix.

NumPy, dask, xarray and pandas inputs become one float64 dask array with a
single column chunk; :meth:`Input.wrap` gives results back in the input's kind.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from ..errors import nan_rows_message
from ..runtime.client import keep_placement
from ..runtime.keys import key_name
from ..runtime.memory import row_chunk

NAN_POLICIES = ("raise", "omit")


@dataclass
class Input:
    """A validated 2-D input as a dask array, and how to give results back."""

    array: da.Array
    kind: str  # "numpy", "dask" or "xarray"
    original: Any
    feature_names: np.ndarray | None

    @property
    def n_features(self) -> int:
        return int(self.array.shape[1])

    def wrap(self, depth: da.Array, name: str = "depth") -> Any:
        """Return ``depth`` in the container type of the input."""
        if self.kind == "dask":
            return depth
        if self.kind == "numpy":
            with keep_placement():
                return np.asarray(depth.compute())
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
             nan_policy: str = "raise") -> Input:
    """Validate ``x`` and wrap it as a float64 dask array with one column chunk.

    In-memory input is checked for NaN/inf here; dask input is checked by the
    first pass over it (fit) or by each scoring task.
    """
    kind, data, feature_names = _unwrap(x, what)
    _check_dtype(np.dtype(data.dtype), what)
    _check_shape(data, what, min_samples)
    if isinstance(data, da.Array):
        arr = data if data.dtype == np.float64 else data.astype(np.float64)
        if arr.numblocks[1] > 1:
            arr = arr.rechunk({1: -1})
    else:
        arr = _from_memory(data, what, nan_policy)
    return Input(arr, kind, x, feature_names)


def _unwrap(x: Any, what: str) -> tuple[str, Any, np.ndarray | None]:
    """The input's kind, its array (dask or with ``dtype`` and ``ndim``), its feature names."""
    if isinstance(x, xr.Dataset):
        raise TypeError(
            f"{what} is an xarray.Dataset; pass one variable, e.g. ds['name'], or use "
            "daskdepth.score_dataset(ds, 'name')"
        )
    kind, names = "numpy", None
    if isinstance(x, xr.DataArray):
        kind = "xarray"
        if x.ndim == 2 and x.dims[1] in x.coords:
            coord = np.asarray(x.coords[x.dims[1]].values)
            if coord.dtype.kind in "OUS":
                names = coord.astype(object)
        x = x.data
    elif hasattr(x, "columns") and hasattr(x, "to_numpy"):
        cols = np.asarray(list(x.columns), dtype=object)
        if all(isinstance(c, str) for c in cols):
            names = cols
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


def _check_shape(x: Any, what: str, min_samples: int) -> None:
    """Two dimensions, known chunk sizes, at least one feature and ``min_samples`` rows."""
    if x.ndim != 2:
        if x.ndim == 1:
            raise ValueError(
                f"{what} is 1-D with shape {x.shape}; depth needs a 2-D array (n_samples, "
                f"n_features). Use {what}.reshape(-1, 1) for a single feature or "
                f"{what}.reshape(1, -1) for a single sample"
            )
        raise ValueError(f"{what} has {x.ndim} dimensions with shape {x.shape}; depth needs a "
                         "2-D array (n_samples, n_features)")
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


def _from_memory(x: Any, what: str, nan_policy: str) -> da.Array:
    """In-memory rows as float64 chunks of :func:`daskdepth.runtime.memory.row_chunk` rows."""
    x = np.asarray(x, dtype=np.float64)
    if nan_policy == "raise":
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(nan_rows_message(bad.size, bad, what))
    n, d = x.shape
    # A fresh name: the wrapped array is not hashed (that would read all of it).
    return da.from_array(x, chunks=(row_chunk(n, d), d),
                         name=key_name("wrap", uuid.uuid4().hex))
