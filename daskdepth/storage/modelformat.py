"""The model format: a fitted estimator as a Zarr group of arrays and one JSON document.

A saved model is a Zarr (format 3) group whose attribute ``daskdepth`` is a
JSON document::

    {"format": "daskdepth-model", "format_version": 4,
     "estimator": "AIIRW", "params": {...}, "unstored_params": {...},
     "state": {...}, "classes": {...}, "arrays": {...}, "versions": {...},
     "created": "...", "metadata": {...}}

``params`` are the constructor parameters and ``state`` every fitted attribute
(``location_``, ``covariance_``, ``directions_``, ``summary_``, ...), both as
JSON values in which NumPy arrays are references ``{"kind": "array", "path":
...}`` to arrays of the group; ``unstored_params`` names the parameters that
could not be stored without pickle (saved as their defaults).  Dataclasses of
daskdepth (the depth summary and its blocks) are stored field by field under
their ``module:qualname``.  The direction blocks of a summary are written one
after the other, each block's arrays as one byte range of the ``uint8`` array
``.../blocks/data`` (its scalars in the document), with a SHA-256 per block
(over its :func:`block_binding`, which ties it to its place, direction rows and
the summary's location, then its bytes) and each direction's error bound in
``.../blocks/errors``: a summary held on a
cluster is saved with one block on the client at a time, and
:func:`read_model` returns :class:`StoredBlock` handles that read their block
when it is needed (on the client, or on the worker that scores with it), so a
model is loaded without reading its summary.  Other lists of dataclasses of
one class are stored column by column (one concatenated array per field).
``classes`` records the fields of every stored dataclass and ``arrays`` the
dtype, shape and SHA-256 of every array; ``checksum`` is the SHA-256 of the
canonical JSON of the rest of the document, so that its numbers (the blocks'
byte ranges and checksums among them) are covered too.  A store that was modified or
truncated, or that was written by a daskdepth whose summaries have another
layout (or live in another module), is refused with a clear message instead of
scoring wrongly.

Checksums only catch accidents and naive edits: anyone can recompute them.
Reading therefore trusts nothing in a store.  Before Zarr opens a local store,
every file in it must be a regular file of at most :data:`MAX_DOCUMENT_BYTES`
(:func:`~daskdepth.storage.paths.check_store_files`; a FIFO would block the read
for ever, ``/dev/zero`` never end): a symbolic link is followed only to a
regular file (git-annex and DVC keep files so; its content is checked against
the checksums like any other), and a link to a folder, a device or nothing is
refused; the chunk files a block reads later are checked again then.  The
document's size, keys and
value kinds are checked, arrays are compared with the manifest (dtype, shape,
every chunk present, a cap on the total size) *before* they are read, only the
summary classes of :data:`MODEL_CLASSES` can be named, and string fields are
decoded without trusting their declared width.  A block's byte range, and the
dtype, shape and place of each of its arrays, are checked against the block
data's manifest entry when the model is read, and its bytes against the
block's SHA-256 when it is read; a block read lazily is then validated
(:meth:`BlockLeaves.validate <daskdepth.summary.leaves.BlockLeaves.validate>`,
its error bounds equal to the stored ones) before any kernel reads it.  The
loader (:func:`daskdepth.io.models.load_model`) validates the parameters as
``fit`` would and every fitted structure (:meth:`DepthSummary.validate
<daskdepth.summary.depth.DepthSummary.validate>`) before any kernel reads it.

This module knows estimators only by duck typing (``get_params``, ``vars``,
``summary_``, the class name): :func:`save_model` encodes any fitted daskdepth
estimator, and :func:`read_model` decodes a store into the estimator's name,
parameters and state, for :func:`daskdepth.io.models.load_model` to rebuild it
from the allow-list of estimator classes.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib
import inspect
import json
import math
import os
import platform
import warnings
from numbers import Integral, Real
from pathlib import Path
from typing import Any, NamedTuple

import dask
import numpy as np
from sklearn.exceptions import NotFittedError

from .._version import __version__
from ..errors import ModelFormatError
from ..summary.blocks import BlockHandle, BlockMeta, is_block, is_handle
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves
from ..summary.mass import MassSummary
from ..summary.sorted import BlockSorted
from .atomic import SafeOutput
from .paths import (
    NotZarrError,
    UnsafeFileError,
    check_regular,
    check_store_files,
    is_url,
    local_path,
    open_node,
    quiet_zarr,
)
from .targets import MODEL_ATTR, MODEL_FORMAT, stored_document

#: Version of the stored layout; a reader refuses newer ones and those older than
#: :data:`MIN_FORMAT_VERSION`.
#: 2: the document carries a checksum of itself; every chunk is written.
#: 3: a summary's direction blocks stored one after the other, read block by block.
#: 4: each block's SHA-256 also covers its place (index, directions ``j0 .. j1``, row
#: count), its direction rows and the summary's location (:func:`block_binding`).
FORMAT_VERSION = 4
#: Oldest layout this daskdepth reads (3: blocks' checksums cover their bytes only).
MIN_FORMAT_VERSION = 3
#: Why this daskdepth no longer reads the older layouts.
OLDER_LAYOUTS = {
    1: "its attributes are not covered by a checksum",
    2: "its summary is stored column by column, not block by block",
}
#: Value of the ``format`` key of a saved model.
FORMAT_NAME = MODEL_FORMAT
#: Attribute of the Zarr group that holds the JSON document.
ATTR = MODEL_ATTR
#: Stored arrays are chunked along their first axis into chunks of about this many bytes.
ARRAY_CHUNK_BYTES = 8 * 2**20
#: Keys of the model document.
DOCUMENT_KEYS = frozenset({"format", "format_version", "estimator", "params", "unstored_params",
                           "state", "classes", "arrays", "versions", "created", "metadata",
                           "checksum"})
#: The dataclasses a model may hold, by the ``module:qualname`` it stores them under.
MODEL_CLASSES: dict[str, type] = {f"{c.__module__}:{c.__qualname__}": c
                                  for c in (DepthSummary, BlockLeaves, BlockSorted,
                                            MassSummary)}
#: Largest root metadata file (the document) read, for local stores.
MAX_DOCUMENT_BYTES = 64 * 2**20
#: Default cap on the memory a model's arrays may take once read; the environment
#: variable ``DASKDEPTH_MAX_MODEL_BYTES`` or ``max_bytes`` sets another.
MAX_MODEL_BYTES = 4 * 2**30
#: Array dtypes a model may hold (what the writer stores: booleans, integers, floats).
ARRAY_KINDS = "biuf"
#: Widest string a string field may declare (characters).
MAX_STRING_CHARS = 4096


# --------------------------------------------------------------------------- versions


def versions() -> dict[str, str]:
    """Versions of daskdepth and of the libraries that shape its results."""
    import zarr  # deferred: ~0.3 s to import, and `import daskdepth` does not need it

    out = {"daskdepth": __version__, "dask": dask.__version__, "numpy": np.__version__,
           "zarr": zarr.__version__, "python": platform.python_version()}
    for mod in ("distributed", "xarray", "numba", "scipy", "sklearn"):
        try:
            out[mod] = importlib.import_module(mod).__version__
        except Exception:  # pragma: no cover - optional or broken installs
            pass
    return out


def utc_now() -> str:
    """Current time as an ISO 8601 UTC timestamp (seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def corrupted(where: str, what: str) -> ModelFormatError:
    """The error for a model store whose content is wrong: ``what`` says how."""
    return ModelFormatError(f"the model store {where!r} is corrupted: {what}")


def unsafe_store(where: str, exc: UnsafeFileError) -> ModelFormatError:
    """The error for a model store holding a FIFO, a device, a huge file, ... (nothing read)."""
    return ModelFormatError(f"the model store {where!r} {exc.reason}; a saved model holds only "
                            "folders and regular files: restore the store from a copy or save "
                            "the model again")


def malformed(where: str, exc: BaseException) -> ModelFormatError:
    """The error for a model document with missing or ill-typed entries."""
    return corrupted(where, f"its attributes are incomplete or malformed "
                            f"({type(exc).__name__}: {exc})")


# --------------------------------------------------------------------------- encoding


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _allowed_class(name: str) -> type:
    """The dataclass of :data:`MODEL_CLASSES` stored as ``module:qualname`` (nothing else)."""
    cls = MODEL_CLASSES.get(name) if isinstance(name, str) else None
    if cls is not None:
        return cls
    module = name.partition(":")[0] if isinstance(name, str) else ""
    if not (module == "daskdepth" or module.startswith("daskdepth.")):
        raise ModelFormatError(f"the model refers to class {name!r}, which is not part of "
                               "daskdepth; refusing to load it")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.partition(":")[2].split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        raise ModelFormatError(
            f"the model refers to {name!r}, which this daskdepth does not have: it was saved "
            "by a daskdepth with another summary layout; load it with that version or refit "
            "the model"
        ) from None
    allowed = ", ".join(c.__qualname__ for c in MODEL_CLASSES.values())
    raise ModelFormatError(f"the model refers to {name!r}, which is not a class a model holds "
                           f"({allowed}); refusing to load it")


def _json_scalar(value: Any) -> Any:
    """A JSON-safe copy of a scalar, or raise TypeError."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        f = float(value)
        return f if math.isfinite(f) else {"kind": "float", "value": repr(f)}
    raise TypeError(type(value).__name__)


def _is_scalar(value: Any) -> bool:
    try:
        _json_scalar(value)
    except TypeError:
        return False
    return True


class _Written(NamedTuple):
    """An array the writer stored, and where (kept alive so its ``id`` stays unique)."""

    array: np.ndarray
    path: str


class _Writer:
    """Turns Python values into JSON nodes, writing arrays to ``group`` as it goes.

    ``manifest`` records the dtype, shape and SHA-256 of every array written.
    """

    def __init__(self, group: Any) -> None:
        self.group = group
        self.manifest: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, list[str]] = {}
        self._seen: dict[int, _Written] = {}

    def write(self, arr: np.ndarray, path: str) -> None:
        arr = np.ascontiguousarray(arr)
        # every chunk, even one of fill values: readers refuse missing chunks
        self.group.create_array(path, data=arr, chunks=_chunks(arr),
                                config={"write_empty_chunks": True})
        self.manifest[path] = {"dtype": arr.dtype.str, "shape": list(arr.shape),
                               "sha256": _checksum(arr)}

    def array(self, arr: np.ndarray, path: str) -> dict[str, Any]:
        seen = self._seen.get(id(arr))
        if seen is not None and seen.array is arr:  # the same array again: one copy
            return {"kind": "array", "path": seen.path}
        if arr.dtype.kind == "O" or arr.dtype.kind in "US":
            values = arr.tolist()
            flat = np.asarray(arr, dtype=object).ravel()
            if all(isinstance(v, str) for v in flat):
                return {"kind": "strings", "values": values, "dtype": arr.dtype.str}
            raise TypeError(f"an object array at {path!r} holds non-string values")
        if arr.dtype.kind not in "biufc":
            raise TypeError(f"an array of dtype {arr.dtype} at {path!r}")
        self.write(arr, path)
        self._seen[id(arr)] = _Written(arr, path)
        return {"kind": "array", "path": path}

    def value(self, value: Any, path: str) -> Any:
        if _is_scalar(value):
            return _json_scalar(value)
        if isinstance(value, np.ndarray):
            return self.array(value, path)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.dataclass(value, path)
        if isinstance(value, (list, tuple)):
            items = list(value)
            kind = "list" if isinstance(value, list) else "tuple"
            if items and all(dataclasses.is_dataclass(v) and type(v) is type(items[0])
                             for v in items):
                return {"kind": kind, "table": self.table(items, path)}
            return {"kind": kind, "items": [self.value(v, f"{path}/{i}")
                                            for i, v in enumerate(items)]}
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {"kind": "dict", "items": {k: self.value(v, f"{path}/{k}")
                                              for k, v in value.items()}}
        raise TypeError(f"cannot store a value of type {type(value).__name__} at {path!r} "
                        "without pickle")

    def _register(self, cls: type) -> str:
        name = _class_name(cls)
        self.classes[name] = [f.name for f in dataclasses.fields(cls)]
        return name

    def dataclass(self, obj: Any, path: str) -> dict[str, Any]:
        name = self._register(type(obj))
        fields = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if (f.name == "blocks" and isinstance(value, list) and value
                    and all(is_block(v) for v in value) and isinstance(getattr(obj, "n", None),
                                                                      Integral)):
                # a summary's direction blocks, with the row count their error bounds need
                # and the directions and centring their checksums cover
                fields[f.name] = {"kind": "list",
                                  "blocks": self.blocks(value, f"{path}/{f.name}", int(obj.n),
                                                        obj.directions, obj.location)}
            else:
                fields[f.name] = self.value(value, f"{path}/{f.name}")
        return {"kind": "dataclass", "class": name, "fields": fields}

    def blocks(self, items: list[Any], path: str, n: int, directions: np.ndarray,
               location: np.ndarray) -> dict[str, Any]:
        """Direction blocks one after the other: each block's arrays are one byte range.

        A block held elsewhere (a handle) is loaded, written and dropped before
        the next, so a summary sharded over a cluster is saved with one block
        in memory at a time.  Each block's arrays are consecutive (8-byte
        aligned) in the ``uint8`` array ``{path}/data``, with a SHA-256 per
        block, so that a loaded model reads one block with one range read; its
        scalars are in the document, and every direction's error bound for the
        ``n`` rows in ``{path}/errors`` (read with the model: the certified
        bound is checked without reading the blocks).  Each block's SHA-256
        starts with its :func:`block_binding`, so that a block cannot be moved
        to other directions, nor the directions or centring edited, without
        recomputing it.
        """
        data = _Segments(self.group, f"{path}/data")
        out = []
        errors = []
        for index, item in enumerate(items):
            block = item.load() if is_handle(item) else item
            name = self._register(type(block))
            errors.append(np.asarray(block.direction_errors(n), dtype=np.float64))
            data.align()
            start = data.size
            digest = hashlib.sha256(block_binding(index, int(block.j0), int(block.j1), n,
                                                  directions[block.j0:block.j1], location))
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(block):
                v = getattr(block, f.name)
                if isinstance(v, np.ndarray) and v.dtype.kind in "biuf" and v.ndim >= 1:
                    raw = _little_endian(v)
                    offset = data.add(raw.tobytes(), digest)
                    fields[f.name] = {"kind": "segment", "offset": offset - start,
                                      "dtype": raw.dtype.str, "shape": list(raw.shape)}
                elif _is_scalar(v):
                    fields[f.name] = _json_scalar(v)
                else:
                    raise TypeError(f"a direction block's field {f.name!r} holds a "
                                    f"{type(v).__name__}, which cannot be stored")
            out.append({"class": name, "fields": fields, "offset": start,
                        "nbytes": data.size - start, "sha256": digest.hexdigest()})
            del block
        self.manifest[data.path] = data.close()
        flat = np.concatenate(errors) if errors else np.zeros(0)
        return {"data": data.path, "errors": self.array(flat, f"{path}/errors"), "n": int(n),
                "items": out}

    def table(self, items: list[Any], path: str) -> dict[str, Any]:
        """Dataclasses of one class, stored column by column."""
        name = self._register(type(items[0]))
        columns = {f.name: self.column([getattr(o, f.name) for o in items], f"{path}/{f.name}")
                   for f in dataclasses.fields(items[0])}
        return {"class": name, "length": len(items), "columns": columns}

    def column(self, values: list[Any], path: str) -> dict[str, Any]:
        if all(_is_scalar(v) for v in values):
            return {"kind": "values", "values": [_json_scalar(v) for v in values]}
        present = [v is not None for v in values]
        if not all(present):
            kept = [v for v in values if v is not None]
            return {"kind": "optional", "present": present, "column": self.column(kept, path)}
        first = values[0]
        if all(dataclasses.is_dataclass(v) and type(v) is type(first) for v in values):
            return {"kind": "table", "table": self.table(values, path)}
        if all(isinstance(v, np.ndarray) and v.ndim >= 1 and v.dtype == first.dtype
               and v.shape[1:] == first.shape[1:] and v.dtype.kind in "biufc"
               for v in values):
            lengths = [int(v.shape[0]) for v in values]
            stacked = np.concatenate(values) if values else first[:0]
            return {"kind": "ragged", "lengths": lengths,
                    "array": self.array(stacked, path)}
        return {"kind": "items", "items": [self.value(v, f"{path}/{i}")
                                           for i, v in enumerate(values)]}


#: Chunk size of a model's block data (bytes): a loaded model reads one block
#: with one range read, touching about ``block bytes / SEGMENT_CHUNK_BYTES + 1`` chunks.
SEGMENT_CHUNK_BYTES = 2**20


#: Alignment of each array in a block's byte range (numba kernels read them in place).
SEGMENT_ALIGN = 8


def _little_endian(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    return arr.astype(arr.dtype.newbyteorder("<")) if arr.dtype.byteorder == ">" else arr


class _Segments:
    """Byte ranges appended to one ``uint8`` Zarr array, written in whole chunks as they come."""

    def __init__(self, group: Any, path: str, chunk: int = SEGMENT_CHUNK_BYTES) -> None:
        self.path = path
        self.chunk = chunk
        # every chunk, even one of zeros: readers refuse missing chunks
        self.array = group.create_array(path, shape=(0,), chunks=(chunk,), dtype="uint8",
                                        config={"write_empty_chunks": True})
        self.buffer = bytearray()
        self.flushed = 0
        self.digest = hashlib.sha256()

    @property
    def size(self) -> int:
        return self.flushed + len(self.buffer)

    def align(self) -> None:
        """Pad to :data:`SEGMENT_ALIGN` (between blocks)."""
        pad = b"\0" * (-self.size % SEGMENT_ALIGN)
        self.buffer += pad
        self.digest.update(pad)

    def add(self, raw: bytes, digest: Any) -> int:
        """Append ``raw`` (after padding to :data:`SEGMENT_ALIGN`); returns its offset."""
        pad = -self.size % SEGMENT_ALIGN
        for part in (b"\0" * pad, raw):
            self.buffer += part
            self.digest.update(part)
            digest.update(part)
        offset = self.size - len(raw)
        self._flush(whole=True)
        return offset

    def _flush(self, whole: bool) -> None:
        k = len(self.buffer) // self.chunk * self.chunk if whole else len(self.buffer)
        if k == 0:
            return
        self.array.resize((self.flushed + k,))
        # A copy: zarr may keep a view of what it writes, and the buffer is resized next.
        self.array[self.flushed:self.flushed + k] = np.frombuffer(bytes(self.buffer[:k]),
                                                                  np.uint8)
        del self.buffer[:k]
        self.flushed += k

    def close(self) -> dict[str, Any]:
        """Write what is left; the manifest entry of the whole array."""
        self._flush(whole=False)
        return {"dtype": "|u1", "shape": [self.flushed], "sha256": self.digest.hexdigest()}


def _checksum(arr: np.ndarray) -> str:
    data = np.ascontiguousarray(arr)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return hashlib.sha256(data.tobytes()).hexdigest()


def block_binding(index: int, j0: int, j1: int, n: int, directions: np.ndarray,
                  location: np.ndarray) -> bytes:
    """What a stored block's SHA-256 covers before its bytes (format version 4).

    The SHA-256 of the block's place in its summary (``index``, its directions
    ``j0 .. j1``, the row count ``n``), of its direction rows and of the
    summary's location, little-endian: a block's leaves or sorted projections
    only score right with these directions and this centring, so a block
    swapped with or copied onto another's directions, or directions or a
    location edited, no longer match the checksums.  (Anyone can recompute
    them: this catches accidents and edits that do not.)

    Examples
    --------
    >>> len(block_binding(0, 0, 2, 10, np.eye(2), np.zeros(2)))
    32
    """
    digest = hashlib.sha256(b"daskdepth block\0")
    digest.update(json.dumps([int(index), int(j0), int(j1), int(n)]).encode("ascii"))
    for arr in (directions, location):
        values = _little_endian(np.asarray(arr, dtype=np.float64))
        digest.update(json.dumps(list(values.shape)).encode("ascii"))
        digest.update(values.tobytes())
    return digest.digest()


def document_checksum(doc: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of ``doc`` less ``checksum``.

    Examples
    --------
    >>> document_checksum({"b": 1, "a": [1.5, "x"], "checksum": "ignored"})[:12]
    '27edd5497e48'
    """
    body = {k: v for k, v in doc.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# --------------------------------------------------------------------------- decoding


class _Reader:
    """Rebuilds Python values from JSON nodes, reading and checking arrays of ``group``."""

    def __init__(self, group: Any, manifest: dict[str, Any], classes: dict[str, list[str]],
                 where: str, source: BlockSource | None = None,
                 version: int = FORMAT_VERSION) -> None:
        self.group = group
        self.manifest = manifest
        self.classes = classes
        self.where = where
        self.source = source
        self.version = version
        self._cache: dict[str, np.ndarray] = {}

    def corrupt(self, what: str) -> ModelFormatError:
        return corrupted(self.where, f"{what}; save the model again or restore the store from "
                                     "a copy")

    def spec(self, path: Any) -> dict[str, Any]:
        """The manifest entry of the array at ``path``."""
        spec = self.manifest.get(path) if isinstance(path, str) else None
        if spec is None:
            raise self.corrupt(f"array {path!r} is not listed in its attributes")
        return spec

    def array(self, path: str) -> np.ndarray:
        """The array at ``path``, checked against the manifest before and after it is read."""
        if path in self._cache:
            return self._cache[path]
        spec, node = self.opened(path)
        try:
            with quiet_zarr():
                arr = np.asarray(node[...])
        except Exception as exc:
            raise self.corrupt(f"array {path!r} cannot be read ({exc})") from None
        if list(arr.shape) != list(spec["shape"]) or arr.dtype.str != spec["dtype"]:
            raise self.corrupt(f"array {path!r} has shape {arr.shape} and dtype {arr.dtype.str},"
                               f" expected {tuple(spec['shape'])} and {spec['dtype']}")
        if _checksum(arr) != spec["sha256"]:
            raise self.corrupt(f"array {path!r} does not match its checksum")
        arr = np.ascontiguousarray(arr)
        self._cache[path] = arr
        return arr

    def opened(self, path: str) -> tuple[dict[str, Any], Any]:
        """The manifest entry and Zarr array at ``path``, compared before anything is read."""
        spec = self.spec(path)
        try:
            node = self.group[path]
        except KeyError:
            raise self.corrupt(f"array {path!r} is missing") from None
        except Exception as exc:
            raise self.corrupt(f"array {path!r} cannot be opened ({exc})") from None
        # What the store declares must be what the manifest says, before anything is read:
        # a shape edited in the array's metadata must not make it allocate.
        shape, dtype = tuple(getattr(node, "shape", ())), getattr(node, "dtype", None)
        try:
            declared = np.dtype(dtype).str if dtype is not None else None
        except TypeError:
            declared = None
        if list(shape) != list(spec["shape"]) or declared != spec["dtype"]:
            raise self.corrupt(f"array {path!r} is declared with shape {shape} and dtype "
                               f"{declared}, but its attributes say {tuple(spec['shape'])} and "
                               f"{spec['dtype']}")
        try:
            missing = int(node.nchunks) - int(node.nchunks_initialized)
        except Exception as exc:
            raise self.corrupt(f"array {path!r} cannot be listed ({exc})") from None
        if missing:
            raise self.corrupt(f"{missing} of {node.nchunks} chunks of array {path!r} are "
                               "missing")
        return spec, node

    def strings(self, node: dict[str, Any]) -> np.ndarray:
        """A string array from JSON, without trusting its declared width."""
        values = node["values"]
        flat = np.asarray(values, dtype=object).ravel()
        if not all(isinstance(v, str) for v in flat):
            raise self.corrupt("a string field holds values that are not strings")
        dtype = np.dtype(node["dtype"])
        if dtype.kind == "O":
            return np.asarray(values, dtype=object)
        if dtype.kind != "U" or dtype.itemsize // 4 > MAX_STRING_CHARS:
            raise self.corrupt(f"a string field declares the dtype {dtype.str}")
        return np.asarray(values, dtype=dtype)

    def value(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        kind = node.get("kind")
        if kind == "float":
            return float(node["value"])
        if kind == "array":
            return self.array(node["path"])
        if kind == "strings":
            return self.strings(node)
        if kind == "dataclass":
            cls = self.check_class(node["class"])
            obj = _construct(cls, {k: self.value(v) for k, v in node["fields"].items()})
            if isinstance(obj, DepthSummary):
                self.bind(obj)
            return obj
        if kind in ("list", "tuple"):
            if "blocks" in node:
                items = self.blocks(node["blocks"])
            elif "table" in node:
                items = self.table(node["table"])
            else:
                items = [self.value(v) for v in node["items"]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {k: self.value(v) for k, v in node["items"].items()}
        raise self.corrupt(f"unknown value kind {kind!r}")

    def bind(self, summary: DepthSummary) -> None:
        """Give each stored block of ``summary`` the :func:`block_binding` its checksum covers."""
        for block in summary.blocks if isinstance(summary.blocks, list) else ():
            if not isinstance(block, StoredBlock):
                continue
            block.bound = self.version >= 4
            if not block.bound:
                continue
            try:
                block.binding = block_binding(block.index, block.j0, block.j1, summary.n,
                                              summary.directions[block.j0:block.j1],
                                              summary.location)
            except (TypeError, ValueError, IndexError):
                block.binding = None  # odd directions: refused by the summary's validation

    def check_class(self, name: str) -> type:
        cls = _allowed_class(name)
        stored = self.classes.get(name)
        current = [f.name for f in dataclasses.fields(cls)]
        if stored != current:
            raise ModelFormatError(
                f"the model's {name.partition(':')[2]} has fields {stored}, but this daskdepth's "
                f"has {current}: it was saved by a daskdepth with another summary layout; load "
                "it with that version or refit the model"
            )
        return cls

    def blocks(self, node: dict[str, Any]) -> list[StoredBlock]:
        """Handles of the saved direction blocks: their places checked here, bytes read later.

        Before anything of the block data is read: the data array against its
        manifest entry (dtype, shape, every chunk present), each block's byte
        range within it, and each of its arrays' dtype (a numeric kind of at most
        8 bytes), shape (at most two dimensions) and place within the block's
        range; the directions' error bounds are read (a small array, checked
        against its checksum) and cut per block.
        """
        if not isinstance(node, dict) or set(node) != {"data", "errors", "n", "items"}:
            raise self.corrupt("its summary's blocks are not described as block data, error "
                               "bounds, a row count and items")
        data = node["data"]
        spec, _ = self.opened(data)
        if spec["dtype"] != "|u1" or len(spec["shape"]) != 1:
            raise self.corrupt(f"array {data!r} is not a byte array")
        size = spec["shape"][0]
        n = node["n"]
        if not _is_count(n) or n < 1:
            raise self.corrupt("its summary's row count is not a positive integer")
        errors = self.value(node["errors"])
        if not (isinstance(errors, np.ndarray) and errors.dtype == np.float64
                and errors.ndim == 1):
            raise self.corrupt("its summary's error bounds are not a float64 vector")
        items = node["items"]
        if not isinstance(items, list):
            raise self.corrupt("its summary's blocks are not a list")
        out = []
        start = 0
        for i, item in enumerate(items):
            block = self.stored_block(item, data, size, n, i)
            if block.j0 != start or block.j1 > errors.size:
                raise self.corrupt("its summary's blocks do not follow each other over the "
                                   "directions of its error bounds")
            start = block.j1
            block.meta = BlockMeta(block.j0, block.j1, block.nbytes, n,
                                   errors[block.j0:block.j1].copy(), -1)
            out.append(block)
        if start != errors.size:
            raise self.corrupt(f"its summary's blocks cover {start} directions, its error "
                               f"bounds {errors.size}")
        return out

    def stored_block(self, item: Any, data: str, size: int, n: int, index: int) -> StoredBlock:
        """One block's handle, its byte range and arrays' places checked (nothing read)."""
        if not isinstance(item, dict) or set(item) != {"class", "fields", "offset", "nbytes",
                                                       "sha256"}:
            raise self.corrupt("a block of its summary is not described as a class, fields, "
                               "a byte range and a checksum")
        cls = self.check_class(item["class"])
        offset, nbytes, digest = item["offset"], item["nbytes"], item["sha256"]
        if not (_is_count(offset) and _is_count(nbytes) and offset + nbytes <= size):
            raise self.corrupt(f"a block's bytes lie beyond the end of {data!r}")
        if not (isinstance(digest, str) and len(digest) == 64):
            raise self.corrupt("a block's checksum is not a SHA-256")
        fields = item["fields"]
        if not isinstance(fields, dict) or sorted(fields) != sorted(self.classes[item["class"]]):
            raise self.corrupt("a block's fields are not those of its class")
        eager: dict[str, Any] = {}
        for name, spec in fields.items():
            if isinstance(spec, dict) and spec.get("kind") == "segment":
                _segment_size(spec, nbytes, self.corrupt)
            elif _is_scalar(spec) and not isinstance(spec, str):
                eager[name] = spec
            else:
                raise self.corrupt(f"a block's field {name!r} is neither an array in its bytes "
                                   "nor a number")
        for name in ("j0", "j1"):
            if not _is_count(eager.get(name)):
                raise self.corrupt(f"a block's {name} is not a non-negative integer")
        if eager["j1"] <= eager["j0"]:
            raise self.corrupt("a block holds no direction")
        return StoredBlock(self.source_for(data), item, _class_name(cls), eager, n, index)

    def source_for(self, data: str) -> BlockSource:
        if self.source is None:  # pragma: no cover - read_model always gives one
            raise self.corrupt("its blocks cannot be read lazily from here")
        return self.source._replace(data=data)

    def table(self, table: dict[str, Any]) -> list[Any]:
        cls = self.check_class(table["class"])
        n = int(table["length"])
        columns = {k: self.column(v, n) for k, v in table["columns"].items()}
        return [_construct(cls, {k: col[i] for k, col in columns.items()}) for i in range(n)]

    def column(self, node: dict[str, Any], n: int) -> list[Any]:
        kind = node["kind"]
        if kind == "values":
            out = [self.value(v) for v in node["values"]]
        elif kind == "optional":
            present = node["present"]
            kept = iter(self.column(node["column"], sum(map(bool, present))))
            out = [next(kept) if p else None for p in present]
        elif kind == "table":
            out = self.table(node["table"])
        elif kind == "ragged":
            lengths = node["lengths"]
            if not (isinstance(lengths, list) and all(
                    isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in lengths)):
                raise self.corrupt("a column's lengths are not non-negative integers")
            ref = node["array"]
            shape = self.spec(ref.get("path") if isinstance(ref, dict) else None)["shape"]
            if not shape or sum(lengths) != shape[0]:  # checked before the array is read
                raise self.corrupt("a column's lengths do not add up to its array")
            stacked = self.value(ref)
            bounds = np.cumsum([0, *lengths])
            out = [stacked[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        elif kind == "items":
            out = [self.value(v) for v in node["items"]]
        else:
            raise self.corrupt(f"unknown column kind {kind!r}")
        if len(out) != n:
            raise self.corrupt(f"a column has {len(out)} values for {n} rows")
        return out


def _is_count(value: Any) -> bool:
    """A non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _segment_size(spec: dict[str, Any], nbytes: int, refuse: Any) -> tuple[np.dtype, list[int]]:
    """Dtype and shape of an array stored in a block's bytes, checked to lie within them."""
    shape, offset = spec.get("shape"), spec.get("offset")
    try:
        dtype = np.dtype(spec["dtype"]) if isinstance(spec.get("dtype"), str) else None
    except TypeError:
        dtype = None
    if (set(spec) != {"kind", "offset", "dtype", "shape"} or dtype is None
            or dtype.kind not in ARRAY_KINDS or dtype.itemsize > 8 or dtype.str != spec["dtype"]
            or dtype.byteorder == ">" or not isinstance(shape, list) or not 1 <= len(shape) <= 2
            or not all(_is_count(k) for k in shape) or not _is_count(offset)
            or offset % SEGMENT_ALIGN
            or offset + dtype.itemsize * math.prod(shape) > nbytes):
        raise refuse("a block's array is not a numeric array of at most two dimensions "
                     "within the block's bytes")
    return dtype, shape


def _construct(cls: type, values: dict[str, Any]) -> Any:
    init = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.init}
    obj = cls(**init)
    for f in dataclasses.fields(cls):
        if not f.init:
            object.__setattr__(obj, f.name, values[f.name])
    return obj


class BlockSource(NamedTuple):
    """Where a saved model's block data is: the store, its fsspec options, the data array."""

    where: str
    storage_options: dict[str, Any] | None
    data: str
    #: The model document's checksum when the model was read: a store replaced since
    #: (a new fit saved over it) has another, which says why its blocks no longer match.
    generation: str = ""


class StoredBlock(BlockHandle):
    """A direction block of a saved model, read from the store when it is needed.

    Holds the store's address and the block's place in it (no arrays), so it
    is cheap to keep on the client and to send to a worker, which then reads
    the block itself (:func:`daskdepth.runtime.shards.hold`).  ``load`` reads
    the block's byte range with one range read, checks its SHA-256, builds the
    block and validates it (:meth:`BlockLeaves.validate
    <daskdepth.summary.leaves.BlockLeaves.validate>`, its directions and error
    bounds those the model was read with) before returning it: a modified or
    truncated store is refused then, as it would be at load time.
    """

    def __init__(self, source: BlockSource, item: dict[str, Any], cls: str,
                 eager: dict[str, Any], n: int, index: int) -> None:
        super().__init__(int(eager["j0"]), int(eager["j1"]), int(item["nbytes"]))
        self.source = source
        self.item = item
        self.cls = cls
        self.eager = eager
        self.n = int(n)
        self.index = int(index)
        #: Whether the block's checksum covers a :func:`block_binding` (format version 4),
        #: and the binding, given by the reader once the summary's directions are read.
        self.bound = False
        self.binding: bytes | None = None

    def load(self) -> Any:
        try:
            return self._load()
        except ModelFormatError:
            why = _replaced(self.source)
            if why:
                raise ModelFormatError(why) from None
            raise

    def _load(self) -> Any:
        where = self.source.where
        item = self.item
        try:
            node = open_node(_join(where, self.source.data), self.source.storage_options)
            if not is_url(where):
                _check_chunk_files(node, local_path(_join(where, self.source.data)),
                                   item["offset"], item["nbytes"])
        except UnsafeFileError as exc:
            raise unsafe_store(where, exc) from None
        except Exception as exc:
            raise corrupted(where, f"the block data {self.source.data!r} cannot be read "
                                   f"({exc}); save the model again or restore the store "
                                   "from a copy") from None
        try:
            with quiet_zarr():
                raw = np.asarray(node[item["offset"]:item["offset"] + item["nbytes"]])
        except Exception as exc:
            raise corrupted(where, f"the block data {self.source.data!r} cannot be read "
                                   f"({exc}); save the model again or restore the store "
                                   "from a copy") from None
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        if self.bound and self.binding is None:
            raise corrupted(where, f"block {self.index} of its summary is not tied to its "
                                   "directions; save the model again or restore the store "
                                   "from a copy")
        digest = hashlib.sha256(self.binding or b"")
        digest.update(raw)
        if raw.size != item["nbytes"] or digest.hexdigest() != item["sha256"]:
            raise corrupted(where, f"block {self.index} of {self.source.data!r} does not match "
                                   "its checksum (or not its directions and location); save "
                                   "the model again or restore the store from a copy")
        values = dict(self.eager)
        for name, spec in item["fields"].items():
            if isinstance(spec, dict) and spec.get("kind") == "segment":
                dtype, shape = _segment_size(spec, raw.size, lambda what: corrupted(where, what))
                start = int(spec["offset"])
                count = math.prod(shape)
                values[name] = raw[start:start + count * dtype.itemsize].view(dtype).reshape(
                    shape)
        block = _construct(_allowed_class(self.cls), values)
        try:
            block.validate(self.n)
            errors = block.direction_errors(self.n)
        except (ValueError, TypeError, AttributeError) as exc:
            raise corrupted(where, f"its summary is invalid: block {self.index}: {exc}") from None
        if (block.j0, block.j1) != (self.j0, self.j1) or not (
                self.meta is not None and np.array_equal(errors, self.meta.errors)):
            raise corrupted(where, f"its summary is invalid: block {self.index} does not have "
                                   "the directions or error bounds the model was read with")
        return block


def _replaced(source: BlockSource) -> str:
    """Why a block of a loaded model fails because its store changed; '' when it did not.

    Compares the store's document checksum now with the one the model was
    read with: a ``fit --overwrite`` (or ``save(overwrite=True)``) in the
    meantime moved another model into place, whose blocks are not the ones
    the loaded model holds handles of.
    """
    where = source.where
    if not source.generation:
        return ""
    try:
        node = open_node(where, source.storage_options)
    except FileNotFoundError:
        return (f"the model store {where!r} no longer exists: it was removed or moved since "
                "the model was loaded; load the model again from where it is now")
    except Exception:  # unreadable in another way: the caller's error says it
        return ""
    doc = stored_document(node)
    if doc is not None and doc.get("checksum") == source.generation:
        return ""
    return (f"the model store {where!r} was replaced since the model was loaded (by a new "
            "fit or save?): its blocks are not those of the loaded model; load it again")


def _check_chunk_files(node: Any, folder: Path, offset: int, nbytes: int) -> None:
    """Refuse the chunk files a block's byte range reads unless they are regular files.

    The store's files were all checked when the model was read; this checks
    again those a block reads later (possibly on a worker, after the store
    changed), before Zarr opens them.
    """
    chunk = int(node.chunks[0]) if node.chunks else 0
    if chunk <= 0 or nbytes <= 0:
        return
    encoding = node.metadata.chunk_key_encoding
    for k in range(offset // chunk, (offset + nbytes - 1) // chunk + 1):
        path = folder / encoding.encode_chunk_key((k,))
        if os.path.lexists(path):
            try:
                check_regular(path, f"a chunk file {encoding.encode_chunk_key((k,))!r} of its "
                                    "block data", MAX_DOCUMENT_BYTES)
            except FileNotFoundError:
                raise UnsafeFileError("has a chunk file of its block data that is a symbolic "
                                      "link to nothing") from None


def _join(where: str, path: str) -> str:
    return where.rstrip("/") + "/" + path


# --------------------------------------------------------------------------- saving


def _check_saveable(model: Any) -> None:
    """Refuse objects that are not daskdepth estimators (without importing their classes)."""
    cls = type(model)
    if not (cls.__module__.startswith("daskdepth.") and callable(getattr(model, "get_params",
                                                                         None))):
        raise TypeError(f"can only save daskdepth estimators (AIIRW, IRW, ...), got "
                        f"{cls.__name__}")


def _fitted_state(model: Any) -> dict[str, Any]:
    """Every attribute that is not a constructor parameter: what ``fit`` set."""
    params = set(model.get_params(deep=False))
    state = {k: v for k, v in vars(model).items() if k not in params and not k.startswith("__")}
    if "summary_" not in state:
        raise NotFittedError(f"this {type(model).__name__} is not fitted yet; call fit before "
                             "save")
    return state


def _encode_params(model: Any, writer: _Writer) -> tuple[dict[str, Any], dict[str, str]]:
    """The constructor parameters as JSON nodes, and those stored as their defaults (repr)."""
    params = model.get_params(deep=False)
    defaults = {k: p.default for k, p in inspect.signature(type(model).__init__).parameters.items()}
    out: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    for name, value in params.items():
        try:
            out[name] = writer.value(value, f"params/{name}")
        except TypeError:
            # e.g. a RandomState: the fitted state is complete without it
            dropped[name] = repr(value)
            default = defaults.get(name, None)
            out[name] = writer.value(None if default is inspect.Parameter.empty else default,
                                     f"params/{name}")
    return out, dropped


def _encode_state(state: dict[str, Any], writer: _Writer) -> dict[str, Any]:
    encoded = {}
    for key, value in state.items():
        try:
            encoded[key] = writer.value(value, f"state/{key.lstrip('_') or key}")
        except TypeError as exc:
            raise TypeError(f"cannot save attribute {key!r} of the model: {exc}") from None
    return encoded


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON")


def _chunks(arr: np.ndarray) -> tuple[int, ...]:
    """Chunks of about :data:`ARRAY_CHUNK_BYTES` along the first axis (at least one row)."""
    if arr.ndim == 0:
        return ()
    row = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    rows = max(1, min(int(arr.shape[0]), ARRAY_CHUNK_BYTES // row))
    return (rows, *(max(1, s) for s in arr.shape[1:]))


def save_model(model: Any, path: str | os.PathLike[str], *, overwrite: bool = False,
               metadata: dict[str, Any] | None = None) -> Path:
    """Save a fitted daskdepth estimator (:class:`~daskdepth.AIIRW`, :class:`~daskdepth.IRW`).

    The store is written to a temporary sibling and moved into place when
    complete, so an interrupted save leaves no partial model at ``path``.

    Parameters
    ----------
    model : fitted daskdepth estimator
        Read through ``get_params``, its fitted attributes (``vars``, which
        must include ``summary_``) and its class name.
    path : str or path-like
        Local directory to create (by convention ending in ``.zarr``).
    overwrite : bool, default=False
        Replace an existing model or Zarr store at ``path``.
    metadata : dict, optional
        JSON-compatible information kept with the model (e.g. the input it
        was fitted on); returned by :func:`read_attributes`.

    Returns
    -------
    pathlib.Path
        The absolute path of the saved model.

    Raises
    ------
    TypeError
        ``model`` is not a daskdepth estimator, or holds a value that cannot
        be stored without pickle.
    sklearn.exceptions.NotFittedError
        ``model`` is not fitted.
    OutputError
        ``path`` exists (without ``overwrite``) or is not safe to write.

    Examples
    --------
    >>> import os, tempfile, numpy as np, daskdepth
    >>> X = np.random.default_rng(0).normal(size=(300, 2))
    >>> model = daskdepth.AIIRW(random_state=0).fit(X)
    >>> path = save_model(model, os.path.join(tempfile.mkdtemp(), "model.zarr"))
    >>> loaded = daskdepth.load(path)
    >>> bool((loaded.score_samples(X) == model.score_samples(X)).all())
    True
    """
    import zarr  # deferred: ~0.3 s to import, and `import daskdepth` does not need it

    _check_saveable(model)
    state = _fitted_state(model)
    with SafeOutput(path, overwrite=overwrite) as out, quiet_zarr():
        # mode "a": the directory exists and holds SafeOutput's owner file
        group = zarr.open_group(str(out.path), mode="a", zarr_format=3)
        writer = _Writer(group)
        params, dropped = _encode_params(model, writer)
        encoded_state = _encode_state(state, writer)
        if dropped:
            warnings.warn(
                "parameters " + ", ".join(f"{k}={v}" for k, v in dropped.items()) + " cannot be "
                "stored without pickle; the saved model has their defaults (its fitted state is "
                "complete: it scores identically)", UserWarning, stacklevel=3)
        doc = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "estimator": type(model).__name__,
            "params": params,
            "unstored_params": dropped,
            "state": encoded_state,
            "classes": writer.classes,
            "arrays": writer.manifest,
            "versions": versions(),
            "created": utc_now(),
            "metadata": json.loads(json.dumps(metadata or {}, default=_json_default)),
        }
        # also fails on NaN before the store is moved into place
        doc["checksum"] = document_checksum(doc)
        group.attrs[ATTR] = doc
        return out.commit()


# --------------------------------------------------------------------------- reading


class _Opened(NamedTuple):
    """A model store opened for reading, its checked JSON document, and the path as given."""

    group: Any
    document: dict[str, Any]
    where: str


def is_model(path: str | os.PathLike[str],
             storage_options: dict[str, Any] | None = None) -> bool:
    """Whether ``path`` holds a daskdepth model (of any format version, intact or not).

    Raises
    ------
    ModelFormatError
        The store's root metadata is a FIFO, a device or too large (not read).
    """
    try:
        node = open_node(path, storage_options)
    except UnsafeFileError as exc:  # not read: a FIFO would block, /dev/zero never end
        raise ModelFormatError(f"the store {os.fspath(path)!r} {exc.reason}: restore it from a "
                               "copy or remove it") from None
    except (FileNotFoundError, NotZarrError):
        return False
    return stored_document(node) is not None


def _open_model(path: str | os.PathLike[str],
                storage_options: dict[str, Any] | None) -> _Opened:
    """Open a model store and check its document: size, format, version, keys, checksum."""
    where = os.fspath(path)
    if not is_url(where):
        root = local_path(where)
        if root.is_dir():  # every file, before Zarr opens any (a FIFO, /dev/zero, a huge file)
            try:
                check_store_files(root, MAX_DOCUMENT_BYTES)
            except UnsafeFileError as exc:
                raise unsafe_store(where, exc) from None
            except OSError as exc:
                raise ModelFormatError(f"the model store {where!r} cannot be listed ({exc})") \
                    from None
    try:
        node = open_node(where, storage_options)
    except FileNotFoundError:
        raise FileNotFoundError(f"no model at {where!r}: the path does not exist") from None
    except UnsafeFileError as exc:
        raise unsafe_store(where, exc) from None
    except NotZarrError:
        raise ModelFormatError(f"{where!r} is not a daskdepth model (not a Zarr store)") from None
    doc = stored_document(node)
    if doc is None:
        raise ModelFormatError(f"{where!r} is not a daskdepth model (it has no "
                               f"{ATTR!r} model attributes)")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise corrupted(where, f"its format version {version!r} is not a positive integer")
    writer = doc.get("versions", {}).get("daskdepth") if isinstance(doc.get("versions"),
                                                                    dict) else None
    if version > FORMAT_VERSION:
        raise ModelFormatError(
            f"the model {where!r} has format version {version}, written by daskdepth "
            f"{writer or 'a newer version'}; this daskdepth reads format version "
            f"{FORMAT_VERSION}: upgrade daskdepth"
        )
    if version < MIN_FORMAT_VERSION:
        raise ModelFormatError(
            f"the model {where!r} has format version {version} (written by daskdepth "
            f"{writer or 'an older version'}), an older layout that this daskdepth no longer "
            f"reads: {OLDER_LAYOUTS.get(version, 'another layout')}. Refit the model and save "
            f"it again (format version {FORMAT_VERSION})"
        )
    unknown = sorted(str(k) for k in doc if k not in DOCUMENT_KEYS)
    if unknown:
        raise corrupted(where, f"its attributes have unknown entries {unknown}")
    try:
        expected = document_checksum(doc)
    except (TypeError, ValueError) as exc:
        raise malformed(where, exc) from None
    if doc.get("checksum") != expected:
        raise corrupted(where, "its attributes do not match their checksum (they were edited "
                               "or truncated); save the model again or restore the store from "
                               "a copy")
    return _Opened(node, doc, where)


def _max_bytes(max_bytes: int | None) -> int:
    """The cap on a model's arrays: ``max_bytes``, else the environment's, else the default."""
    if max_bytes is not None:
        return int(max_bytes)
    text = os.environ.get("DASKDEPTH_MAX_MODEL_BYTES", "")
    return int(text) if text.strip().isdigit() else MAX_MODEL_BYTES


def _check_manifest(manifest: Any, where: str, max_bytes: int) -> None:
    """Refuse a manifest with odd entries, or one declaring more memory than allowed."""
    if not isinstance(manifest, dict):
        raise corrupted(where, "its array manifest is not a mapping")
    total = 0
    for path, spec in manifest.items():
        ok = isinstance(spec, dict) and set(spec) == {"dtype", "shape", "sha256"}
        shape = spec.get("shape") if ok else None
        try:
            dtype = np.dtype(spec["dtype"]) if ok and isinstance(spec["dtype"], str) else None
        except TypeError:
            dtype = None
        if (dtype is None or dtype.kind not in ARRAY_KINDS or dtype.itemsize > 8
                or dtype.str != spec["dtype"] or not isinstance(shape, list) or len(shape) > 2
                or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0
                           for k in shape)):
            raise corrupted(where, f"its manifest entry for {path!r} is not a dtype, shape and "
                                   "checksum of a numeric array of at most two dimensions")
        total += dtype.itemsize * math.prod(shape)
    if total > max_bytes:
        raise ModelFormatError(
            f"the model {where!r} declares {total / 2**30:.2f} GiB of arrays, more than the "
            f"{max_bytes / 2**30:.2f} GiB a model may take; if you trust it, set "
            "DASKDEPTH_MAX_MODEL_BYTES (or pass max_bytes) to a larger number of bytes")


def read_attributes(path: str | os.PathLike[str],
                    storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of a saved model (parameters, versions, metadata, ...).

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a daskdepth model or needs a newer daskdepth.
    """
    return _open_model(path, storage_options).document


@dataclasses.dataclass(frozen=True)
class StoredModel:
    """A saved model, decoded: what a loader needs to rebuild the estimator."""

    #: The path as given, for messages.
    where: str
    #: Class name of the estimator, e.g. ``'AIIRW'`` (not yet checked against any allow-list).
    estimator: str
    #: Constructor parameters.
    params: dict[str, Any]
    #: Fitted attributes, to set on the constructed estimator.
    state: dict[str, Any]


def read_model(path: str | os.PathLike[str],
               storage_options: dict[str, Any] | None = None,
               max_bytes: int | None = None) -> StoredModel:
    """Read, check and decode a saved model: every array against its checksum.

    Parameters
    ----------
    path : str or path-like
        Local path or fsspec URL of the saved model.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    max_bytes : int, optional
        Refuse a model whose arrays would take more memory (default
        :data:`MAX_MODEL_BYTES`, or the environment variable
        ``DASKDEPTH_MAX_MODEL_BYTES``).

    Returns
    -------
    StoredModel

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a daskdepth model, is corrupted (missing or modified
        arrays or attributes), names a class outside daskdepth or a dataclass
        of another layout, or was written by a newer daskdepth.
    """
    opened = _open_model(path, storage_options)
    doc, where = opened.document, opened.where
    try:
        name = doc["estimator"]
        if not isinstance(name, str):
            raise TypeError(f"the estimator name is a {type(name).__name__}")
        _check_manifest(doc["arrays"], where, _max_bytes(max_bytes))
        store = where if is_url(where) else str(local_path(where))
        reader = _Reader(opened.group, doc["arrays"], doc["classes"], where,
                         BlockSource(store, storage_options, "", doc["checksum"]),
                         doc["format_version"])
        params = {k: reader.value(v) for k, v in doc["params"].items()}
        state = {k: reader.value(v) for k, v in doc["state"].items()}
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            RecursionError) as exc:
        raise malformed(where, exc) from None
    return StoredModel(where=where, estimator=name, params=params, state=state)
