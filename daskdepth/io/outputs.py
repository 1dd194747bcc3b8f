"""Output stores of batch jobs: a Dataset written as a consolidated Zarr v3 store.

Where a job may write, and how the store appears there only when complete,
is :mod:`daskdepth.storage.atomic` (:func:`~daskdepth.storage.atomic.check_output`,
:class:`~daskdepth.storage.atomic.SafeOutput`); this module fills the
temporary directory that :class:`~daskdepth.storage.atomic.SafeOutput` made.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import xarray as xr

from ..runtime.client import keep_placement
from ..storage.paths import quiet_zarr


def uniform_chunks(x: da.Array) -> da.Array:
    """Rechunk a 1-D array so every chunk but the last has the same size (Zarr needs it).

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
    """Write ``ds`` as a consolidated Zarr v3 store into the (empty) directory ``path``.

    Dask-backed 1-D variables are given uniform chunks and every encoding
    carried over from an input store is dropped (on a shallow copy: the
    caller's variables keep theirs).  ``compute`` runs the delayed write
    (default :func:`dask.compute`), e.g. with a progress bar.
    """
    ds = ds.copy(deep=False)
    fixed = {}
    for name, var in ds.variables.items():
        if isinstance(var.data, da.Array) and var.ndim == 1:
            fixed[name] = xr.Variable(var.dims, uniform_chunks(var.data), var.attrs)
    data_vars = {k: v for k, v in fixed.items() if k in ds.data_vars}
    coords = {k: v for k, v in fixed.items() if k in ds.coords and k not in ds.indexes}
    ds = ds.assign(data_vars).assign_coords(coords)
    for var in ds.variables.values():
        var.encoding = {}
    with quiet_zarr(), keep_placement():
        delayed = ds.to_zarr(os.fspath(path), mode="w-", compute=False, consolidated=True,
                             zarr_format=3)
        (compute or dask.compute)(delayed)
