"""Where stores are: local paths and fsspec URLs, and the one way to open a Zarr store.

:func:`open_node` is the only place that opens a Zarr store (an input, a saved
model); :func:`open_dataset` the only place that opens one with xarray.  Both
read with :func:`quiet_zarr`, which hides warnings that say nothing about the
user's data.  Callers turn the two failures of :func:`open_node`
(:class:`FileNotFoundError`, :class:`NotZarrError`) into their own messages.
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xarray as xr


class NotZarrError(ValueError):
    """Something is at the path, but it is not a readable Zarr store.

    Internal: callers turn it into an :class:`~daskdepth.errors.InputError` or
    a :class:`~daskdepth.errors.ModelFormatError` with their own wording;
    ``reason`` completes a sentence that starts with the path, and
    ``__cause__`` is zarr's error when zarr could not read the store.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for fsspec URLs such as ``s3://bucket/x.zarr`` (``file://`` is local).

    Examples
    --------
    >>> is_url("s3://bucket/x.zarr"), is_url("file:///tmp/x.zarr"), is_url("x.zarr")
    (True, False, False)
    """
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike[str]) -> Path:
    """Absolute local path for a path or ``file://`` URL (symbolic links resolved).

    Raises
    ------
    OSError
        (``errno.ELOOP``) when symbolic links on the path form a loop.
    """
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://"):]
    try:
        return Path(text).expanduser().resolve()
    except RuntimeError as exc:  # Python < 3.13: "Symlink loop from ..."
        error = OSError(f"{text!r} is a loop of symbolic links ({exc}); point the links at a "
                        "real file or directory")
        error.errno = errno.ELOOP
        raise error from None


def local_target(path: str | os.PathLike[str]) -> Path | None:
    """The local path a path or URL reaches (``file://``, ``local://``, also chained), or None.

    Examples
    --------
    >>> str(local_target("simplecache::local:///data/x.zarr")), local_target("s3://b/x.zarr")
    ('/data/x.zarr', None)
    """
    text = os.fspath(path)
    if not is_url(text):
        return local_path(text)
    for part in text.split("::"):
        protocol, sep, rest = part.partition("://")
        if sep and protocol.lower() in ("file", "local"):
            return local_path(rest)
    return None


def is_zarr_store(path: Path) -> bool:
    """True when ``path`` looks like a local Zarr store (format 2 or 3)."""
    if not path.is_dir():
        return False
    return any((path / name).exists() for name in ("zarr.json", ".zgroup", ".zarray"))


@contextlib.contextmanager
def quiet_zarr() -> Iterator[None]:
    """Silence zarr/xarray warnings that say nothing about the user's data."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        warnings.filterwarnings("ignore",
                                message=".*Consolidated metadata is currently not part.*")
        warnings.filterwarnings("ignore",
                                message=".*Failed to open Zarr store with consolidated.*")
        # the owner file of a temporary being written (daskdepth.storage.atomic.OWNER_FILE)
        warnings.filterwarnings("ignore", message=r".*\.daskdepth-owner is not recognized.*")
        yield


def open_node(path: str | os.PathLike[str],
              storage_options: dict[str, Any] | None = None) -> Any:
    """Open the Zarr array or group at ``path`` read-only.

    Parameters
    ----------
    path : str or path-like
        A local path, a ``file://`` URL or an fsspec URL.
    storage_options : dict, optional
        Passed to fsspec for URLs (ignored for local paths).

    Returns
    -------
    zarr.Array or zarr.Group

    Raises
    ------
    FileNotFoundError
        Nothing is at ``path``.
    NotZarrError
        Something is there, but it is not a readable Zarr store.
    """
    import zarr  # deferred: ~0.3 s to import, and `import daskdepth` does not need it

    text = os.fspath(path)
    if is_url(text):
        store: Any = text
        options = storage_options
    else:
        local = local_path(text)
        if not local.exists():
            raise FileNotFoundError(f"{text!r} does not exist")
        if not is_zarr_store(local):
            kind = "a directory" if local.is_dir() else "a file"
            raise NotZarrError(f"is {kind} but not a Zarr store (no zarr.json, .zgroup or "
                               ".zarray in it)")
        store, options = str(local), None
    try:
        with quiet_zarr():
            return zarr.open(store, mode="r", storage_options=options)
    except FileNotFoundError:
        raise FileNotFoundError(f"{text!r} does not exist") from None
    except Exception as exc:  # zarr raises many kinds for unreadable stores
        raise NotZarrError("cannot be opened as a Zarr store") from exc


def open_dataset(path: str | os.PathLike[str], group: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> xr.Dataset:
    """Open a Zarr store (or one of its groups) lazily as an xarray Dataset.

    Consolidated metadata is used when the store has it.  Raises what
    :func:`xarray.open_zarr` raises for stores that are not xarray datasets.
    """
    with quiet_zarr():
        return xr.open_zarr(os.fspath(path), group=group, storage_options=storage_options,
                            consolidated=None)
