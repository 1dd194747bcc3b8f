"""Zarr input and output for batch jobs: reading arrays, safe writes of results.

Reading: :func:`open_input` opens a Zarr store (format 2 or 3) holding a
single array, a group with a named array, or an xarray-written dataset, and
returns a lazy 2-D :class:`xarray.DataArray` with the sample coordinates the
store has.

Writing: :class:`SafeOutput` writes a store to a temporary sibling of the
target (``OUTPUT.daskdepth-tmp-<pid>-<hex>``) and moves it into place with
:func:`os.replace` only when it is complete.  A job killed at any moment leaves
nothing at the target, or the old target intact when it was being replaced;
the next job writing to the same target removes such leftovers (and puts back
an old target that a killed job had moved aside but not yet replaced).

This module knows nothing about depth: it moves arrays between Zarr stores
and dask.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

#: Marker in the names of temporaries that are being written.
TMP_MARK = ".daskdepth-tmp-"
#: Marker in the name an old target gets while it is being replaced.
OLD_MARK = ".daskdepth-old-"
#: Default name of the sample dimension of inputs without dimension names.
SAMPLE_DIM = "sample"
#: Default name of the feature dimension of inputs without dimension names.
FEATURE_DIM = "feature"
#: Row chunks of inputs are grown (by whole store chunks) to at least this many bytes.
MIN_CHUNK_BYTES = 16 * 2**20

_LEFTOVER = re.compile(r"\.daskdepth-(tmp|old)-(\d+)-[0-9a-f]+$")


class InputError(ValueError):
    """The input store is missing, unreadable, or does not hold a usable 2-D array."""


class OutputError(ValueError):
    """The output path cannot be written under the safety rules."""


# --------------------------------------------------------------------------- paths


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for fsspec URLs such as ``s3://bucket/x.zarr`` (``file://`` is local)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike[str]) -> Path:
    """Absolute local path for a path or ``file://`` URL (symbolic links resolved)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://"):]
    return Path(text).expanduser().resolve()


def is_zarr_store(path: Path) -> bool:
    """True when ``path`` looks like a local Zarr store (format 2 or 3)."""
    if not path.is_dir():
        return False
    return any((path / name).exists() for name in ("zarr.json", ".zgroup", ".zarray"))


# --------------------------------------------------------------------------- reading


@dataclass
class ZarrInput:
    """A 2-D array read from a Zarr store, with where it came from.

    ``data`` is a dask-backed DataArray with dimensions (sample, feature) and
    one column chunk.
    """

    data: Any
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


@contextlib.contextmanager
def quiet_zarr() -> Iterator[None]:
    """Silence zarr/xarray warnings that say nothing about the user's data."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        warnings.filterwarnings("ignore",
                                message=".*Consolidated metadata is currently not part.*")
        warnings.filterwarnings("ignore",
                                message=".*Failed to open Zarr store with consolidated.*")
        yield


def _dims_of(arr: Any) -> tuple[str, ...] | None:
    names = getattr(arr.metadata, "dimension_names", None)
    if names is None:
        names = arr.attrs.get("_ARRAY_DIMENSIONS")
    if names is None or any(n is None for n in names):
        return None
    return tuple(str(n) for n in names)


def _open_node(path: str, storage_options: dict[str, Any] | None) -> Any:
    import zarr

    if not is_url(path):
        p = local_path(path)
        if not p.exists():
            raise InputError(f"input {path!r} does not exist")
        if not is_zarr_store(p):
            kind = "a directory" if p.is_dir() else "a file"
            raise InputError(f"input {path!r} is {kind} but not a Zarr store (no zarr.json, "
                             ".zgroup or .zarray in it)")
        store: Any = str(p)
        opts = None
    else:
        store, opts = path, storage_options
    try:
        with quiet_zarr():
            return zarr.open(store, mode="r", storage_options=opts)
    except FileNotFoundError as exc:
        raise InputError(f"input {path!r} does not exist") from exc
    except Exception as exc:  # zarr raises many kinds for unreadable stores
        raise InputError(f"cannot open {path!r} as a Zarr store: {exc}") from exc


def _candidates(group: Any) -> list[str]:
    """Names of the 2-D arrays directly in ``group``."""
    return sorted(name for name, arr in group.arrays() if arr.ndim == 2)


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
                 storage_options: dict[str, Any] | None) -> Any | None:
    """``name`` with its decoded coordinates via xarray, or None if xarray cannot read it."""
    import xarray as xr

    try:
        with quiet_zarr():
            ds = xr.open_zarr(path, group=group_path, storage_options=storage_options,
                              consolidated=None)
    except Exception:  # not an xarray dataset (e.g. arrays without dimension names)
        return None
    if name not in ds.variables:
        return None
    return ds[name]


def open_input(path: str | os.PathLike[str], array: str | None = None, *,
               storage_options: dict[str, Any] | None = None) -> ZarrInput:
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
    >>> from daskdepth._io import open_input
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> _ = zarr.create_array(path, data=np.zeros((10, 3)))
    >>> open_input(path).data.dims
    ('sample', 'feature')
    """
    import xarray as xr
    import zarr

    text = os.fspath(path)
    node = _open_node(text, storage_options)
    zarr_format = int(node.metadata.zarr_format)
    name = array
    if isinstance(node, zarr.Array):
        if array is not None:
            raise InputError(f"input {text!r} is a single array, not a group; drop --array "
                             f"{array!r}")
        arr, group, group_path = node, None, None
    else:
        if name is None:
            found = _candidates(node)
            if len(found) != 1:
                listing = ", ".join(repr(n) for n in found) or "none"
                raise InputError(
                    f"input {text!r} is a Zarr group; name the array to use with --array "
                    f"(2-D arrays in it: {listing})"
                )
            name = found[0]
        name = name.strip("/")
        try:
            arr = node[name]
        except KeyError:
            arrays = ", ".join(repr(n) for n in sorted(k for k, _ in node.arrays())) or "none"
            raise InputError(f"input {text!r} has no array {name!r} (arrays in it: "
                             f"{arrays})") from None
        if not isinstance(arr, zarr.Array):
            raise InputError(f"{name!r} in {text!r} is a group, not an array; name an array "
                             "inside it, e.g. --array {name}/NAME".replace("{name}", name))
        parent, _, leaf = name.rpartition("/")
        group = node[parent] if parent else node
        group_path = parent or None

    _check_array(arr.shape, np.dtype(arr.dtype), text if name is None else f"{text}/{name}")
    dims = _dims_of(arr)
    data = None
    if group is not None and dims is not None:
        data = _from_xarray(text, group_path, name.rpartition("/")[2], storage_options)
        if data is not None and data.ndim != 2:
            data = None
    if data is None:
        darr = da.from_zarr(arr)
        dims = dims if dims is not None and len(set(dims)) == 2 else (SAMPLE_DIM, FEATURE_DIM)
        coords = _coords_for(group, dims, arr.shape) if group is not None else {}
        data = xr.DataArray(darr, dims=dims, coords=coords, name=name)
    if data.chunks is None:  # pragma: no cover - open_zarr returns dask arrays
        data = data.chunk()
    if data.dtype.kind not in "biuf":  # decoding may change the dtype (e.g. to datetimes)
        _check_array(data.shape, data.dtype, text)
    data = data.copy(data=_input_chunks(data.data))
    return ZarrInput(data=data, path=text, array=name, zarr_format=zarr_format)


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
    """One column chunk; row chunks grown by whole store chunks to a useful size.

    Rows per chunk aim at ``MIN_CHUNK_BYTES`` but at most a quarter of the
    rows per core, so small inputs still spread over the cores; store chunks
    are never split.
    """
    n, d = (int(s) for s in x.shape)
    first = int(x.chunks[0][0])
    want = min(max(1, MIN_CHUNK_BYTES // (8 * d)),
               max(1024, math.ceil(n / (4 * (os.cpu_count() or 1)))))
    rows = min(n, first * max(1, math.ceil(want / first)))
    regular = len(set(x.chunks[0][:-1])) <= 1 and x.chunks[0][-1] <= first
    if rows == first and regular and x.numblocks[1] == 1:
        return x
    return x.rechunk({0: rows, 1: -1})


# --------------------------------------------------------------------------- writing


def check_output(out: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = (),
                 overwrite: bool = False) -> Path:
    """Resolve ``out`` and refuse it when writing there would not be safe.

    Refused: a URL (outputs are local for now); a path that is, contains, or
    lies inside one of the ``inputs``; an existing path without ``overwrite``;
    with ``overwrite``, an existing path that is not a Zarr store (so that a
    typo cannot replace an unrelated directory); a missing parent directory.

    Examples
    --------
    >>> import tempfile, os
    >>> from daskdepth._io import check_output
    >>> d = tempfile.mkdtemp()
    >>> check_output(os.path.join(d, "out.zarr")).name
    'out.zarr'
    """
    text = os.fspath(out)
    if is_url(text):
        raise OutputError(f"output {text!r} is a URL; outputs must be local paths for now")
    target = local_path(text)
    for src in inputs:
        src_text = os.fspath(src)
        if is_url(src_text):
            continue
        source = local_path(src_text)
        if target == source:
            raise OutputError(f"output {text!r} is the input; write the result to another "
                              "path")
        if source in target.parents:
            raise OutputError(f"output {text!r} lies inside the input {src_text!r}; write the "
                              "result outside it")
        if target in source.parents:
            raise OutputError(f"output {text!r} contains the input {src_text!r}; write the "
                              "result elsewhere")
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise OutputError(f"output {text!r} already exists; pass --overwrite (or "
                              "overwrite=True) to replace it")
        if not (is_zarr_store(target) or (target.is_dir() and not any(target.iterdir()))):
            raise OutputError(f"refusing to overwrite {text!r}: it is not a Zarr store")
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {text!r}: directory {str(target.parent)!r} does not "
                          "exist")
    return target


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still be writing (True when it cannot be told)."""
    if pid == os.getpid():
        return True  # our own temporaries are cleaned up by their SafeOutput
    if os.name == "nt":  # pragma: no cover - os.kill would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # pragma: no cover - e.g. platforms without signals
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Temporaries of earlier jobs writing to ``target`` whose process has ended.

    Examples
    --------
    >>> import tempfile, os
    >>> from daskdepth._io import leftovers
    >>> leftovers(os.path.join(tempfile.mkdtemp(), "out.zarr"))
    []
    """
    target = local_path(target)
    if not target.parent.is_dir():
        return []
    found = []
    prefix = target.name + ".daskdepth-"
    for entry in target.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        m = _LEFTOVER.search(entry.name)
        if m is None or entry.name[: m.start()] != target.name:
            continue
        if not _pid_alive(int(m.group(2))):
            found.append(entry)
    return sorted(found)


def clean_leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Remove leftovers of killed jobs for ``target``; return what was removed.

    An old target moved aside by a job killed between its two renames is put
    back when nothing is at ``target``, so it is never lost.
    """
    target = local_path(target)
    removed = []
    for entry in leftovers(target):
        if OLD_MARK in entry.name and not (target.exists() or target.is_symlink()):
            os.replace(entry, target)
            continue
        _remove(entry)
        removed.append(entry)
    return removed


class SafeOutput:
    """Write a store to a temporary sibling and move it to ``target`` when complete.

    Use as a context manager: entering removes leftovers of killed jobs for
    the same target and creates the empty temporary directory ``path``; call
    :meth:`commit` once everything is written there.  Leaving without a commit
    (an exception, Ctrl-C) removes the temporary.  A job killed by SIGKILL
    leaves it, named ``<target>.daskdepth-tmp-<pid>-<hex>``, for the next job on
    the same target to remove.

    Parameters
    ----------
    target : str or path-like
        Final local path; checked with :func:`check_output`.
    overwrite : bool, default=False
        Replace an existing target (a Zarr store) on commit.
    inputs : sequence of paths
        Inputs of the job, which the target must neither be nor contain nor lie in.

    Examples
    --------
    >>> import tempfile, os
    >>> from daskdepth._io import SafeOutput
    >>> target = os.path.join(tempfile.mkdtemp(), "out.zarr")
    >>> with SafeOutput(target) as out:
    ...     _ = (out.path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    ...     before = os.path.exists(target)
    ...     _ = out.commit()
    >>> before, os.path.exists(os.path.join(target, "zarr.json"))
    (False, True)
    """

    def __init__(self, target: str | os.PathLike[str], *, overwrite: bool = False,
                 inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
        self.overwrite = overwrite
        self.target = check_output(target, inputs=inputs, overwrite=overwrite)
        self.path = self.target.parent / (
            f"{self.target.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:12]}")
        self.committed = False

    def __enter__(self) -> SafeOutput:
        clean_leftovers(self.target)
        os.mkdir(self.path)
        return self

    def commit(self) -> Path:
        """Move the temporary into place (replacing an old target when allowed).

        With an old target, it is first renamed to ``<target>.daskdepth-old-...``
        and removed only after the new one is in place; a job killed between the
        two renames leaves it there, and the next job puts it back.
        """
        if self.committed:
            raise RuntimeError("this output was already committed")
        target = self.target
        old = None
        if target.exists() or target.is_symlink():
            if not self.overwrite:
                raise OutputError(f"output {str(target)!r} appeared while the job ran; "
                                  "pass --overwrite (or overwrite=True) to replace it")
            old = target.parent / (
                f"{target.name}{OLD_MARK}{os.getpid()}-{uuid.uuid4().hex[:12]}")
            os.replace(target, old)
        os.replace(self.path, target)
        self.committed = True
        if old is not None:
            _remove(old)
        _fsync_dir(target.parent)
        return target

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.committed:
            _remove(self.path)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def uniform_chunks(x: da.Array) -> da.Array:
    """Rechunk a 1-D array so every chunk but the last has the same size (Zarr needs it)."""
    c = x.chunks[0]
    if len(c) <= 1 or (len(set(c[:-1])) == 1 and c[-1] <= c[0]):
        return x
    return x.rechunk({0: max(c)})


def write_dataset(ds: Any, path: str | os.PathLike[str], *,
                  compute: Callable[[Any], Any] | None = None) -> None:
    """Write ``ds`` as a consolidated Zarr v3 store into the (empty) directory ``path``.

    ``compute`` runs the delayed write (default :func:`dask.compute`), e.g.
    with a progress bar.
    """
    import xarray as xr

    ds = ds.copy(deep=False)  # encodings are reset below, not on the caller's variables
    fixed = {}
    for name, var in ds.variables.items():
        if isinstance(var.data, da.Array) and var.ndim == 1:
            fixed[name] = xr.Variable(var.dims, uniform_chunks(var.data), var.attrs)
    data_vars = {k: v for k, v in fixed.items() if k in ds.data_vars}
    coords = {k: v for k, v in fixed.items() if k in ds.coords and k not in ds.indexes}
    ds = ds.assign(data_vars).assign_coords(coords)
    for var in ds.variables.values():
        var.encoding = {}
    with quiet_zarr():
        delayed = ds.to_zarr(os.fspath(path), mode="w-", compute=False, consolidated=True,
                             zarr_format=3)
        (compute or dask.compute)(delayed)

