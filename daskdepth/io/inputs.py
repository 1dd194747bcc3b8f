"""Zarr inputs of batch jobs: a 2-D array of a store as a lazy DataArray.

:func:`open_input` opens a Zarr store (format 2 or 3) holding a single array,
a group with a named array, or an xarray-written dataset, and returns a lazy
2-D :class:`xarray.DataArray` with the sample coordinates the store has, in
row chunks sized for daskdepth's tasks (:func:`_input_chunks`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
import xarray as xr

from ..errors import InputError, MissingInputError
from ..runtime.memory import row_chunk
from ..storage.paths import (
    NotZarrError,
    UnsafeFileError,
    check_member_path,
    open_dataset,
    open_node,
)

#: Default name of the sample dimension of inputs without dimension names.
SAMPLE_DIM = "sample"
#: Default name of the feature dimension of inputs without dimension names.
FEATURE_DIM = "feature"


@dataclass
class ZarrInput:
    """A 2-D array read from a Zarr store, with where it came from.

    ``data`` is a dask-backed DataArray with dimensions (sample, feature) and
    one column chunk.
    """

    data: xr.DataArray
    path: str
    array: str | None
    zarr_format: int

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), int(self.data.shape[1]))

    @property
    def sample_dim(self) -> str:
        return str(self.data.dims[0])

    def describe(self) -> str:
        where = self.path if self.array is None else f"{self.path} (array {self.array!r})"
        return f"{where}: {self.shape[0]:,} x {self.shape[1]:,} {self.data.dtype}"


class _Located(NamedTuple):
    """The Zarr array an input names, and the group that holds it (None for a bare array)."""

    array: Any
    name: str | None
    group: Any | None
    group_path: str | None


def open_input(path: str | os.PathLike[str], array: str | None = None, *,
               storage_options: dict[str, Any] | None = None,
               sample_dim: str | None = None,
               missing_chunks: str = "raise") -> ZarrInput:
    """Open a 2-D array of a Zarr store lazily.

    Parameters
    ----------
    path : str or path-like
        A local Zarr store (format 2 or 3) or an fsspec URL to one.
    array : str, optional
        Name (or ``a/b`` path) of the array inside a group; may be omitted when
        the store is a single array or the group holds exactly one 2-D array.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    sample_dim : str, optional
        The dimension that runs over samples (default: the array's first), e.g.
        ``'time'`` for a variable stored as ``(feature, time)``.
    missing_chunks : {'raise', 'fill'}, default='raise'
        What to do when chunks of the array are missing from the store, which
        Zarr would read as its fill value (rows that may not exist, e.g. when
        the metadata claims more rows than were written): refuse, or read
        them as the fill value (for stores written without chunks of fill
        values, zarr's ``write_empty_chunks=False``).

    Returns
    -------
    ZarrInput
        ``data`` is a DataArray of dimensions (sample, feature): the store's
        dimension names when it has them (xarray datasets), with the store's
        coordinates, and ``('sample', 'feature')`` otherwise.

    Raises
    ------
    InputError
        When the store is missing or unreadable, the array is missing, or it is
        not a 2-D array of real numbers.

    Examples
    --------
    >>> import tempfile, os, numpy as np, zarr
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> _ = zarr.create_array(path, data=np.ones((10, 3)))
    >>> open_input(path).data.dims
    ('sample', 'feature')
    """
    text = os.fspath(path)
    node = _open(text, storage_options)
    found = _locate(node, text, array)
    where = text if found.name is None else f"{text}/{found.name}"
    _check_array(found.array.shape, np.dtype(found.array.dtype), where)
    if missing_chunks not in ("raise", "fill"):
        raise ValueError(f"missing_chunks must be 'raise' or 'fill', not {missing_chunks!r}")
    if missing_chunks == "raise":
        _check_chunks(found.array, text, found.name)
    data = _data_array(found, text, storage_options)
    if sample_dim is not None:
        if sample_dim not in data.dims:
            raise InputError(f"{where} has no dimension {sample_dim!r} (its dimensions: "
                             f"{', '.join(map(str, data.dims))}); name one of them with "
                             "--sample-dim")
        data = data.transpose(sample_dim, ...)
    if data.dtype.kind not in "biuf":  # decoding may change the dtype (e.g. to datetimes)
        _check_array(data.shape, data.dtype, text)
    data = data.copy(data=_input_chunks(data.data))
    return ZarrInput(data=data, path=text, array=found.name,
                     zarr_format=int(node.metadata.zarr_format))


def _open(text: str, storage_options: dict[str, Any] | None) -> Any:
    """The store's root node, or an :class:`InputError` saying why not."""
    try:
        return open_node(text, storage_options)
    except FileNotFoundError:
        raise MissingInputError(f"input {text!r} does not exist") from None
    except NotZarrError as exc:
        if exc.__cause__ is not None:  # zarr could not read it
            raise InputError(f"cannot open {text!r} as a Zarr store: {exc.__cause__}") from exc
        raise InputError(f"input {text!r} {exc.reason}") from None


def _locate(node: Any, text: str, array: str | None) -> _Located:
    """The array ``array`` names in ``node`` (or its only 2-D array), and its group."""
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

    if isinstance(node, zarr.Array):
        if array is not None:
            raise InputError(f"input {text!r} is a single array, not a group; drop --array "
                             f"{array!r}")
        return _Located(node, None, None, None)
    if array is None:
        found = _candidates(node)
        if len(found) != 1:
            listing = ", ".join(repr(n) for n in found) or "none"
            raise InputError(f"input {text!r} is a Zarr group; name the array to use with "
                             f"--array (2-D arrays in it: {listing})")
        array = found[0]
    name = array.strip("/")
    try:  # the metadata on the way (a/b: a's, its members', a/b's) before Zarr reads it
        check_member_path(text, name)
    except UnsafeFileError as exc:
        raise InputError(f"input {text!r} {exc.reason}") from None
    try:
        arr = node[name]
    except KeyError:
        arrays = ", ".join(repr(n) for n in sorted(k for k, _ in node.arrays())) or "none"
        raise MissingInputError(f"input {text!r} has no array {name!r} (arrays in it: "
                                f"{arrays})") from None
    if not isinstance(arr, zarr.Array):
        raise InputError(f"{name!r} in {text!r} is a group, not an array; name an array "
                         f"inside it, e.g. --array {name}/NAME")
    parent = name.rpartition("/")[0]
    return _Located(arr, name, node[parent] if parent else node, parent or None)


def _candidates(group: Any) -> list[str]:
    """Names of the 2-D arrays directly in ``group``."""
    return sorted(name for name, arr in group.arrays() if arr.ndim == 2)


def _data_array(found: _Located, text: str,
                storage_options: dict[str, Any] | None) -> xr.DataArray:
    """The located array as a lazy DataArray: through xarray when the store is a dataset.

    xarray decodes the variable and brings its coordinates; arrays that xarray
    cannot read get the dimension names the store records (or sample,
    feature) and the 1-D arrays of their group named like a dimension.
    """
    dims = _dims_of(found.array)
    data = None
    if found.group is not None and dims is not None:
        data = _from_xarray(text, found.group_path, found.name.rpartition("/")[2],
                            storage_options)
        if data is not None and data.ndim != 2:
            data = None
    if data is None:
        dims = dims if dims is not None and len(set(dims)) == 2 else (SAMPLE_DIM, FEATURE_DIM)
        coords = (_coords_for(found.group, dims, found.array.shape)
                  if found.group is not None else {})
        data = xr.DataArray(da.from_zarr(found.array), dims=dims, coords=coords,
                            name=found.name)
    if data.chunks is None:  # pragma: no cover - open_zarr returns dask arrays
        data = data.chunk()
    return data


def _dims_of(arr: Any) -> tuple[str, ...] | None:
    """The dimension names a Zarr array records (v3 metadata or xarray's v2 attribute)."""
    names = getattr(arr.metadata, "dimension_names", None)
    if names is None:
        names = arr.attrs.get("_ARRAY_DIMENSIONS")
    if names is None or any(n is None for n in names):
        return None
    return tuple(str(n) for n in names)


def _coords_for(group: Any, dims: tuple[str, ...], shape: tuple[int, ...]) -> dict[str, Any]:
    """1-D arrays of ``group`` named like a dimension and as long: its coordinates."""
    coords: dict[str, Any] = {}
    for dim, size in zip(dims, shape, strict=True):
        if dim in group:
            node = group[dim]
            if getattr(node, "ndim", None) == 1 and node.shape[0] == size:
                coords[dim] = np.asarray(node[:])
    return coords


def _from_xarray(path: str, group_path: str | None, name: str,
                 storage_options: dict[str, Any] | None) -> xr.DataArray | None:
    """``name`` with its decoded coordinates via xarray, or None if xarray cannot read it."""
    try:
        ds = open_dataset(path, group_path, storage_options)
    except Exception:  # not an xarray dataset (e.g. arrays without dimension names)
        return None
    if name not in ds.variables:
        return None
    return ds[name]


def _check_chunks(arr: Any, path: str, name: str | None) -> None:
    """Refuse an array with chunks missing from its store (Zarr reads them as fill values)."""
    try:
        total, present = int(arr.nchunks), int(arr.nchunks_initialized)
    except Exception:  # pragma: no cover - a store that cannot be listed is not checked
        return
    missing = total - present
    if missing <= 0:
        return
    what = f"array {name!r} of {path!r}" if name is not None else f"the array {path!r}"
    fill = arr.fill_value.item() if hasattr(arr.fill_value, "item") else arr.fill_value
    raise InputError(
        f"{missing:,} of {total:,} chunks of {what} are missing from the store (its metadata "
        f"claims shape {tuple(arr.shape)}); Zarr would read them as the fill value "
        f"{fill!r}, and rows that may not exist would be scored. Restore the chunks, "
        "or, if the writer left out chunks of fill values on purpose (zarr's "
        "write_empty_chunks=False), pass --fill-missing-chunks (missing_chunks='fill')")


def _check_array(shape: tuple[int, ...], dtype: np.dtype, where: str) -> None:
    if len(shape) != 2:
        raise InputError(f"{where} has shape {tuple(shape)}; depth needs a 2-D array "
                         "(samples x features)")
    if dtype.kind not in "biuf":
        raise InputError(f"{where} has dtype {dtype}; depth needs real numbers (bool, int or "
                         "float)")
    if shape[0] < 1 or shape[1] < 1:
        raise InputError(f"{where} has shape {tuple(shape)}; it needs at least one sample and "
                         "one feature")


def _input_chunks(x: da.Array) -> da.Array:
    """One column chunk; row chunks grown by whole store chunks to daskdepth's task size.

    Rows per chunk are those of :func:`daskdepth.runtime.memory.row_chunk` (the
    rule for in-memory input), rounded up to whole store chunks: a store chunk
    is never split, so no task reads a chunk another task reads too.
    """
    n, d = (int(s) for s in x.shape)
    first = int(x.chunks[0][0])
    rows = min(n, first * max(1, math.ceil(row_chunk(n, d) / first)))
    regular = len(set(x.chunks[0][:-1])) <= 1 and x.chunks[0][-1] <= first
    if rows == first and regular and x.numblocks[1] == 1:
        return x
    return x.rechunk({0: rows, 1: -1})
