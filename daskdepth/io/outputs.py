"""Output stores of batch jobs: a Dataset written as a consolidated Zarr v3 store.

Where a job may write is :func:`daskdepth.storage.targets.check_output`, and
how the store appears there only when complete is
:class:`daskdepth.storage.atomic.SafeOutput`; this module fills the temporary
directory that :class:`~daskdepth.storage.atomic.SafeOutput` made, marks the
store as daskdepth's (the root attribute
:data:`~daskdepth.storage.targets.OUTPUT_ATTR`, which lets ``--overwrite``
replace it) and checks that every chunk was written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import xarray as xr

from ..errors import OutputError
from ..runtime.client import keep_placement
from ..storage.paths import quiet_zarr
from ..storage.targets import OUTPUT_ATTR, OUTPUT_VERSION


def uniform_chunks(x: da.Array) -> da.Array:
    """Rechunk an array's rows so every chunk but the last has the same size (Zarr needs it).

    Examples
    --------
    >>> import dask.array as da
    >>> uniform_chunks(da.zeros(10, chunks=((3, 2, 5),))).chunks
    ((5, 5),)
    """
    c = x.chunks[0]
    if len(c) <= 1 or (len(set(c[:-1])) == 1 and c[-1] <= c[0]):
        return x
    return x.rechunk({0: max(c)})


def write_dataset(ds: xr.Dataset, path: str | os.PathLike[str], *,
                  compute: Callable[[Any], Any] | None = None) -> None:
    """Write ``ds`` as a consolidated Zarr v3 store into the new directory ``path``.

    Dask-backed variables are given uniform row chunks and every encoding
    carried over from an input store is dropped (on a shallow copy: the
    caller's variables keep theirs).  ``compute`` runs the delayed write
    (default :func:`dask.compute`), e.g. with a progress bar.  Every chunk is
    written, also one of fill values, so that :func:`check_complete` can tell
    a complete store from a partial one; it runs at the end.
    """
    ds = ds.copy(deep=False)
    ds.attrs[OUTPUT_ATTR] = OUTPUT_VERSION
    fixed = {}
    for name, var in ds.variables.items():
        if isinstance(var.data, da.Array) and var.ndim >= 1:
            fixed[name] = xr.Variable(var.dims, uniform_chunks(_plain(var.data)), var.attrs)
    data_vars = {k: v for k, v in fixed.items() if k in ds.data_vars}
    coords = {k: v for k, v in fixed.items() if k in ds.coords and k not in ds.indexes}
    ds = ds.assign(data_vars).assign_coords(coords)
    for var in ds.variables.values():
        var.encoding = {}
    with quiet_zarr(), keep_placement():
        # mode "a": the directory exists and holds SafeOutput's owner file
        delayed = ds.to_zarr(os.fspath(path), mode="a", compute=False, consolidated=True,
                             zarr_format=3, write_empty_chunks=True)
        (compute or dask.compute)(delayed)
    check_complete(path, ds)


def _plain(x: da.Array) -> da.Array:
    """``x`` as a plain dask array (same graph): xarray refuses to write arrays of mixed types.

    Scores placed on the workers that hold their summary's blocks come as a
    subclass that keeps its placement when computed; the write runs with
    fusion off (``keep_placement``), which keeps it as well.
    """
    if type(x) is da.Array:
        return x
    return da.Array(x.dask, x.name, x.chunks, meta=x._meta)


def check_complete(path: str | os.PathLike[str], ds: xr.Dataset) -> None:
    """Refuse a written store that lacks a variable of ``ds``, or chunks of one.

    Raises
    ------
    OutputError
        Naming the variable and how many chunks are missing.
    """
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

    where = os.fspath(path)
    with quiet_zarr():
        group = zarr.open_group(where, mode="r")
        for name, var in ds.variables.items():
            try:
                arr = group[str(name)]
            except KeyError:
                raise OutputError(f"the store written to {where!r} lacks the variable "
                                  f"{name!r}: the write did not complete") from None
            missing = int(arr.nchunks) - int(arr.nchunks_initialized)
            if tuple(arr.shape) != tuple(var.shape) or missing:
                raise OutputError(f"the store written to {where!r} is incomplete: variable "
                                  f"{name!r} has shape {tuple(arr.shape)} (expected "
                                  f"{tuple(var.shape)}) and {missing} of {arr.nchunks} chunks "
                                  "missing")
