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
import hashlib
import json
import os
import stat
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


#: Largest metadata file (``zarr.json``, ``.zattrs``, ...) daskdepth reads, and largest file
#: of a saved model's store: more is not a store daskdepth wrote (and /dev/zero never ends).
MAX_METADATA_BYTES = 64 * 2**20
#: Files of a Zarr store's own metadata, at any level.
ZARR_METADATA = (".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json")


class UnsafeFileError(NotZarrError):
    """A file of a store is not a regular file (a FIFO, a device, ...) or is too large to read.

    Reading it could block for ever (a FIFO) or never end (``/dev/zero``), so
    it is refused before it is opened; ``reason`` completes a sentence that
    starts with the store's path.
    """


def _kind(mode: int) -> str:
    """What a file of mode ``mode`` is, for messages."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _check_stat(st: os.stat_result, name: str, max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(f"has {name} that is {_kind(st.st_mode)}, not a regular file; "
                              "daskdepth does not read it")
    if st.st_size > max_bytes:
        raise UnsafeFileError(f"has {name} of {st.st_size:,} bytes, more than the "
                              f"{max_bytes:,} such a file of a store may take")


def check_regular(path: Path, name: str, max_bytes: int = MAX_METADATA_BYTES) -> None:
    """Refuse ``path`` unless it is (or links to) a regular file of at most ``max_bytes``.

    ``name`` says which file it is in the message (e.g. ``"a zarr.json"``).
    Only ``stat`` is used: nothing is opened.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path`` (or a symbolic link to nothing).
    UnsafeFileError
        A FIFO, device, socket or directory, or a larger file.
    """
    _check_stat(os.stat(path), name, max_bytes)


def read_regular(path: Path, name: str, max_bytes: int = MAX_METADATA_BYTES) -> bytes:
    """The bytes of the regular file ``path``, read without blocking on a FIFO and capped.

    Opened with ``O_NONBLOCK`` (a FIFO without writer then opens at once
    instead of waiting for ever) and checked with ``fstat`` on what was
    opened: a FIFO, device or socket is refused (nothing read), and at most
    ``max_bytes + 1`` bytes are read, so ``/dev/zero`` or a file that grows
    while read is refused too.  Symbolic links are followed (to a regular
    file, as stores kept by git-annex or DVC have them).

    Raises
    ------
    OSError
        ``path`` cannot be opened (FileNotFoundError when missing).
    UnsafeFileError
        Not a regular file, or more than ``max_bytes``.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        _check_stat(os.fstat(fd), name, max_bytes)
        parts = []
        left = max_bytes + 1
        while left > 0:
            part = os.read(fd, min(left, 2**20))
            if not part:
                break
            parts.append(part)
            left -= len(part)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"has {name} of more than {max_bytes:,} bytes (it grew while "
                              "read)")
    return data


#: Files are hashed in pieces of this many bytes (:func:`file_digest`: memory bounded).
DIGEST_PIECE_BYTES = 2**20


def file_digest(path: Path, name: str, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """SHA-256 (hex) of the regular file ``path``, read in pieces without blocking and capped.

    Opened and checked as :func:`read_regular` does (a FIFO, device or socket
    is refused before anything is read, and so is a file of more than
    ``max_bytes``, also one that grows while read); hashed
    :data:`DIGEST_PIECE_BYTES` at a time, so that the memory it takes is one
    piece whatever the file's size.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "zarr.json"
    >>> _ = f.write_bytes(b"{}")
    >>> file_digest(f, "a zarr.json") == hashlib.sha256(b"{}").hexdigest()
    True
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        _check_stat(os.fstat(fd), name, max_bytes)
        digest = hashlib.sha256()
        size = 0
        while size <= max_bytes:
            part = os.read(fd, min(max_bytes + 1 - size, DIGEST_PIECE_BYTES))
            if not part:
                break
            digest.update(part)
            size += len(part)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise UnsafeFileError(f"has {name} of more than {max_bytes:,} bytes (it grew while "
                              "read)")
    return digest.hexdigest()


def read_store_file(where: str, name: str, storage_options: dict[str, Any] | None = None,
                    max_bytes: int = MAX_METADATA_BYTES) -> bytes:
    """The bytes of the file ``name`` (a path relative to the store) of the store ``where``.

    A local store (also one a ``file://`` or ``local://`` URL reaches) is read
    with :func:`read_regular`; a remote one through fsspec, its size asked
    first and refused above ``max_bytes`` (and what comes back checked again).

    Raises
    ------
    FileNotFoundError
        No such file.
    UnsafeFileError
        Not a regular file, or more than ``max_bytes``.
    """
    local = local_target(where)
    what = f"a file {name!r}"
    if local is not None:
        return read_regular(local / name, what, max_bytes)
    import fsspec  # deferred: only remote stores need it

    fs, root = fsspec.core.url_to_fs(where, **(storage_options or {}))
    path = root.rstrip("/") + "/" + name
    size = fs.size(path)
    if size is not None and size > max_bytes:
        raise UnsafeFileError(f"has {what} of {size:,} bytes, more than the {max_bytes:,} "
                              "such a file of a store may take")
    data = fs.cat_file(path)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"has {what} of more than {max_bytes:,} bytes")
    return bytes(data)


def store_file_digest(where: str, name: str, storage_options: dict[str, Any] | None = None,
                      max_bytes: int = MAX_METADATA_BYTES) -> str:
    """SHA-256 (hex) of the file ``name`` of the store ``where`` (local: :func:`file_digest`)."""
    local = local_target(where)
    if local is not None:
        return file_digest(local / name, f"a file {name!r}", max_bytes)
    return hashlib.sha256(read_store_file(where, name, storage_options, max_bytes)).hexdigest()


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (None when missing, too large, not a regular file or not JSON).

    Read with :func:`read_regular`: a FIFO or ``/dev/zero`` in its place is not
    read (callers refuse those first, with a message).
    """
    try:
        return json.loads(read_regular(path, path.name, MAX_METADATA_BYTES).decode("utf-8"))
    except (OSError, ValueError):  # UnsafeFileError is a ValueError
        return None


def check_store_files(root: Path, max_bytes: int = MAX_METADATA_BYTES, *,
                      metadata_bytes: int | None = None, root_bytes: int | None = None,
                      metadata: list[str] | None = None) -> int:
    """Refuse a local store holding anything but folders and regular files of at most ``max_bytes``.

    ``metadata_bytes``: a smaller cap on the Zarr metadata files
    (:data:`ZARR_METADATA`) below the root, ``root_bytes`` on those of the
    root (a saved model knows how large they may be).

    What a saved model may hold, checked (with ``lstat`` and ``stat``, nothing
    opened) before Zarr reads any of it: a FIFO would block the read for ever,
    ``/dev/zero`` never end, a huge file fill the memory.  A symbolic link is
    followed when it leads to a regular file (tools such as git-annex or DVC
    keep files as links into their own store; the content is then checked
    against the model's checksums as any other); a link to a folder, a device,
    a FIFO or nothing is refused, as is a loop.  Returns the number of files;
    ``metadata``, when given, receives the path (relative to ``root``, with
    ``/``) of every Zarr metadata file found, the root's included.

    Raises
    ------
    UnsafeFileError
        Naming the first offending file, relative to ``root``.
    """
    count = 0
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                path = Path(entry.path)
                name = f"a file {str(path.relative_to(root))!r}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                    continue
                if entry.is_symlink():
                    try:
                        st = os.stat(path)
                    except OSError:
                        raise UnsafeFileError(f"has {name} that is a symbolic link to nothing "
                                              "(or a loop)") from None
                    if not stat.S_ISREG(st.st_mode):
                        raise UnsafeFileError(f"has {name} that is a symbolic link to "
                                              f"{_kind(st.st_mode)}; a store holds only folders "
                                              "and regular files")
                else:
                    st = entry.stat(follow_symlinks=False)
                cap = max_bytes
                if entry.name in ZARR_METADATA:
                    own = root_bytes if folder == root else metadata_bytes
                    cap = min(cap, own) if own is not None else cap
                    if metadata is not None:
                        metadata.append(path.relative_to(root).as_posix())
                _check_stat(st, name, cap)
                count += 1
    return count


def check_root_metadata(root: Path, member: str = "") -> None:
    """Refuse a local store whose top-level metadata files are not regular or too large.

    Run before Zarr opens the store (it reads them whole, and would block on a
    FIFO); ``member``: the folder ``root`` is in the store, for the message.
    """
    for meta in ZARR_METADATA:
        path = root / meta
        name = f"a {member}/{meta}" if member else f"a {meta}"
        if os.path.lexists(path):
            try:
                check_regular(path, name)
            except FileNotFoundError:
                raise UnsafeFileError(f"has {name} that is a symbolic link to nothing") \
                    from None


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
        Something is there, but it is not a readable Zarr store;
        :class:`UnsafeFileError` when the metadata of a local store (also
        one a ``file://`` or ``local://`` URL reaches) or of the members of
        its root group is not a regular file or too large (checked before
        Zarr reads it: a FIFO would block for ever); members further down
        are checked by :func:`check_member_path`.
    """
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

    text = os.fspath(path)
    local = local_target(text)
    if local is not None:  # a local path, or a URL that reaches one (file://, local://)
        if not local.exists():
            raise FileNotFoundError(f"{text!r} does not exist")
        if not is_zarr_store(local):
            kind = "a directory" if local.is_dir() else "a file"
            raise NotZarrError(f"is {kind} but not a Zarr store (no zarr.json, .zgroup or "
                               ".zarray in it)")
        check_root_metadata(local)
    if is_url(text):
        store: Any = text
        options = storage_options
    else:
        store, options = str(local), None
    try:
        with quiet_zarr():
            node = zarr.open(store, mode="r", storage_options=options)
    except FileNotFoundError:
        raise FileNotFoundError(f"{text!r} does not exist") from None
    except Exception as exc:  # zarr raises many kinds for unreadable stores
        raise NotZarrError("cannot be opened as a Zarr store") from exc
    if local is not None and isinstance(node, zarr.Group):
        # its members' metadata too (listing them reads it): one level, a few stat calls
        check_members(local)
    return node


def check_members(folder: Path, member: str = "") -> None:
    """Refuse the metadata of the direct members of the local group ``folder`` (not read).

    Listing a group's members reads each member's metadata: each must be a
    regular file of at most :data:`MAX_METADATA_BYTES` (:func:`check_root_metadata`).
    ``member``: where ``folder`` is in the store, for the messages.
    """
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                check_root_metadata(Path(entry.path),
                                    f"{member}/{entry.name}" if member else entry.name)


def _is_group(folder: Path) -> bool:
    """Whether the (checked) metadata of ``folder`` says it is a Zarr group."""
    if (folder / ".zgroup").is_file():
        return True
    meta = read_json(folder / "zarr.json")
    return isinstance(meta, dict) and meta.get("node_type") == "group"


def check_member_path(path: str | os.PathLike[str], member: str | None) -> None:
    """Refuse a local store whose metadata on the way to ``member`` is unsafe to read.

    Opening ``a/b/c`` in a group reads the metadata of the root, ``a``,
    ``a/b`` and ``a/b/c`` (and listing a group on the way reads its members'): each is
    checked as the root's is (:func:`check_root_metadata`: a regular file of at
    most :data:`MAX_METADATA_BYTES`, not a FIFO or a device) before Zarr or
    xarray reads it.  Nothing is checked for remote stores.

    Raises
    ------
    UnsafeFileError
        Naming the first offending file, relative to the store.
    """
    root = local_target(path)
    if root is None or not root.is_dir():
        return
    check_root_metadata(root)
    if _is_group(root):
        check_members(root)
    folder, name = root, ""
    for part in [p for p in str(member or "").strip("/").split("/") if p]:
        if part in (".", ".."):
            return  # not a member name: Zarr refuses it
        folder, name = folder / part, f"{name}/{part}" if name else part
        if not folder.is_dir():
            return  # no such member: the caller says so
        check_root_metadata(folder, name)
        if _is_group(folder):
            check_members(folder, name)


def open_dataset(path: str | os.PathLike[str], group: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> xr.Dataset:
    """Open a Zarr store (or one of its groups) lazily as an xarray Dataset.

    Consolidated metadata is used when the store has it.  Raises what
    :func:`xarray.open_zarr` raises for stores that are not xarray datasets,
    and :class:`UnsafeFileError` for a local store (also one a ``file://`` or
    ``local://`` URL reaches) whose metadata on the way to ``group`` is not a
    regular file or too large (:func:`check_member_path`).
    """
    check_member_path(path, group)
    with quiet_zarr():
        return xr.open_zarr(os.fspath(path), group=group, storage_options=storage_options,
                            consolidated=None)
