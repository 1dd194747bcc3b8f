"""Input checks at the public boundary: every problem named, with its fix."""

from __future__ import annotations

import math
import os
import uuid
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import dask.array as da
import numpy as np

from ._graph import MAX_BAD_ROWS

NAN_POLICIES = ("raise", "omit")
#: Largest row chunk made from in-memory input (smaller when the workers' memory
#: limit asks for it, see :func:`_default_row_chunk`).
CHUNK_BYTES = 32 * 2**20
#: Fewest rows per chunk of in-memory input when there are enough rows for one
#: chunk per core (see :func:`_default_row_chunk`).
MIN_CHUNK_ROWS = 16384


@dataclass
class Input:
    """A validated 2-D input as a dask array, and how to give results back."""

    array: da.Array
    kind: str  # "numpy", "dask" or "xarray"
    original: Any
    feature_names: np.ndarray | None

    @property
    def n_samples(self) -> int:
        return int(self.array.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.array.shape[1])

    def wrap(self, depth: da.Array, name: str = "depth") -> Any:
        """Return ``depth`` in the container type of the input."""
        if self.kind == "dask":
            return depth
        if self.kind == "numpy":
            return np.asarray(depth.compute())
        import xarray as xr

        xa = self.original
        dim = xa.dims[0]
        data = depth if xa.chunks is not None else np.asarray(depth.compute())
        coords = {k: c for k, c in xa.coords.items() if set(c.dims) <= {dim}}
        return xr.DataArray(data, dims=(dim,), coords=coords, name=name)


def _describe_rows(bad: np.ndarray, total: int) -> str:
    rows = ", ".join(str(int(i)) for i in bad[:MAX_BAD_ROWS])
    more = ", ..." if total > MAX_BAD_ROWS else ""
    return f"[{rows}{more}]"


def nan_message(count: int, first_rows: np.ndarray, what: str = "input") -> str:
    noun = "row" if count == 1 else "rows"
    return (f"{what} has {count} {noun} with NaN or inf values (rows "
            f"{_describe_rows(first_rows, count)}); drop them or pass nan_policy='omit'")


def _check_dtype(dtype: np.dtype, what: str) -> None:
    if dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {what} has dtype {dtype}; "
                         "pass its real part or its modulus")
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{what} has dtype {dtype}; depth needs real numbers. Convert the data with "
            f"{what}.astype(float) (after encoding any text columns as numbers)"
        )


def _default_row_chunk(n: int, d: int) -> int:
    """Rows per chunk of in-memory input.

    A quarter of the rows per core, but at least :data:`MIN_CHUNK_ROWS` (or
    one chunk per core for fewer rows): each scoring task looks its rows up in
    every direction's summary, which is only cheap when many rows share the
    summary's cache lines.  At most ``CHUNK_BYTES`` of input, and at most what
    one task may hold given the memory limit of the workers
    (:func:`daskdepth._memory.rows_per_chunk`).
    """
    from ._memory import rows_per_chunk

    cores = os.cpu_count() or 1
    by_bytes = max(1, min(CHUNK_BYTES // (8 * max(d, 1)), rows_per_chunk(max(d, 1))))
    by_cores = max(math.ceil(n / (4 * cores)), min(math.ceil(n / cores), MIN_CHUNK_ROWS))
    return max(1, min(n, by_bytes, by_cores))


def as_input(x: Any, *, what: str = "X", min_samples: int = 1, nan_policy: str = "raise",
             check_finite: bool = True) -> Input:
    """Validate ``x`` and wrap it as a float64 dask array with one column chunk.

    In-memory input is checked for NaN/inf here; dask input is checked by the
    first pass over it (fit) or by each scoring task.
    """
    feature_names = None
    kind = "numpy"
    original = x
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - xarray is a dependency
        xr = None
    if xr is not None and isinstance(x, xr.Dataset):
        raise TypeError(
            f"{what} is an xarray.Dataset; pass one variable, e.g. ds['name'], or use "
            "daskdepth.score_dataset(ds, 'name')"
        )
    if xr is not None and isinstance(x, xr.DataArray):
        kind = "xarray"
        if x.ndim == 2 and x.dims[1] in x.coords:
            names = np.asarray(x.coords[x.dims[1]].values)
            if names.dtype.kind in "OUS":
                feature_names = names.astype(object)
        x = x.data
    elif hasattr(x, "columns") and hasattr(x, "to_numpy"):
        cols = np.asarray(list(x.columns), dtype=object)
        if all(isinstance(c, str) for c in cols):
            feature_names = cols
        x = x.to_numpy()

    if isinstance(x, da.Array):
        if kind != "xarray":
            kind = "dask"
        arr = x
    else:
        if hasattr(x, "tocsr") or type(x).__module__.startswith("scipy.sparse"):
            raise TypeError(
                f"{what} is a sparse matrix; depth needs dense rows. Convert it with "
                f"{what}.toarray() (or dask's map_blocks(lambda b: b.toarray()) for chunks)"
            )
        if not hasattr(x, "dtype") or not hasattr(x, "ndim"):
            x = np.asarray(x)
        arr = None
    dtype = np.dtype(x.dtype)
    _check_dtype(dtype, what)
    if x.ndim != 2:
        if x.ndim == 1:
            raise ValueError(
                f"{what} is 1-D with shape {x.shape}; depth needs a 2-D array (n_samples, "
                f"n_features). Use {what}.reshape(-1, 1) for a single feature or "
                f"{what}.reshape(1, -1) for a single sample"
            )
        raise ValueError(f"{what} has {x.ndim} dimensions with shape {x.shape}; depth needs a "
                         "2-D array (n_samples, n_features)")
    if arr is not None:
        if any(math.isnan(c) for c in arr.chunks[0]) or any(math.isnan(c) for c in arr.chunks[1]):
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
    if arr is None:
        x = np.asarray(x, dtype=np.float64)
        if check_finite and nan_policy == "raise":
            finite = np.isfinite(x).all(axis=1)
            if not finite.all():
                bad = np.flatnonzero(~finite)
                raise ValueError(nan_message(bad.size, bad, what))
        chunk = _default_row_chunk(n, d)
        arr = da.from_array(x, chunks=(chunk, d), name=f"daskdepth-wrap-{uuid.uuid4().hex}")
    else:
        if arr.dtype != np.float64:
            arr = arr.astype(np.float64)
        if arr.numblocks[1] > 1:
            arr = arr.rechunk({1: -1})
    return Input(arr, kind, original, feature_names)


# --------------------------------------------------------------------------- parameters


def check_params(*, n_directions: Any, tol: Any, nan_policy: Any, contamination: Any = 0.1,
                 depth: str | None = None) -> None:
    """Raise a ValueError/TypeError naming any invalid parameter."""
    if n_directions is not None and (
        isinstance(n_directions, bool) or not isinstance(n_directions, Integral)
        or n_directions < 1
    ):
        raise ValueError(f"n_directions must be a positive integer or None (100 x n_features), "
                         f"got {n_directions!r}")
    if isinstance(tol, bool) or not isinstance(tol, Real) or not (0 <= tol < 0.5):
        raise ValueError(f"tol must be a number in [0, 0.5), got {tol!r}; tol=0 gives exact depth")
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    if isinstance(contamination, bool) or not isinstance(contamination, Real) or not (
        0 < contamination <= 0.5
    ):
        raise ValueError(f"contamination must be a number in (0, 0.5], got {contamination!r}")
    if depth is not None and depth not in ("ai-irw", "irw"):
        raise ValueError(f"depth must be 'ai-irw' or 'irw', got {depth!r}")
