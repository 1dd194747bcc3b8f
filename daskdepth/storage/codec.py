"""The object codec of saved models: Python values as JSON nodes, arrays in a Zarr group.

A :class:`Writer` turns a value into a JSON node, writing its arrays to a Zarr
group as it goes: scalars (non-finite floats as ``{"kind": "float"}``), NumPy
arrays (references ``{"kind": "array", "path": ...}``, or the values of a
string array), lists, tuples and dicts, daskdepth's dataclasses field by field
under their ``module:qualname``, and lists of dataclasses of one class column by
column (one concatenated array per field).  It records the dtype, shape and
SHA-256 of every array (``manifest``) and the fields of every dataclass
(``classes``).  A :class:`Reader` rebuilds the values, comparing each array
with the manifest before and after it is read, and constructs only the classes
of :data:`MODEL_CLASSES` with the fields they have now.  Both have hooks for
what a subclass stores its own way (:mod:`daskdepth.storage.blockstore`: a
summary's direction blocks).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import math
from numbers import Integral, Real
from typing import Any, NamedTuple

import numpy as np

from ..errors import ModelFormatError
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves
from ..summary.sorted import BlockSorted
from ..summary.streaming import BatchCounts, RowSample, StreamState
from .paths import UnsafeFileError, quiet_zarr

#: Stored arrays are chunked along their first axis into chunks of about this many bytes.
ARRAY_CHUNK_BYTES = 8 * 2**20
#: Arrays are hashed in pieces of this many bytes (:func:`checksum`: no whole copy).
CHECKSUM_PIECE_BYTES = 2**20
#: The dataclasses a model may hold, by the ``module:qualname`` it stores them under: filled
#: by :func:`daskdepth.estimators.register` from each registered depth's ``summary_types``,
#: and checked when a model is written too.  The direction blocks are here from the start:
#: a worker reads a loaded model's blocks one by one without importing the estimators; so is
#: the state of a stream (``partial_fit``: its base keys, row samples and, with a window, the
#: counts of each batch kept; format version 7), which any depth with ``partial_fit`` holds.
MODEL_CLASSES: dict[str, type] = {f"{c.__module__}:{c.__qualname__}": c
                                  for c in (BlockLeaves, BlockSorted, StreamState, RowSample,
                                            BatchCounts)}
#: Fields added to a class of :data:`MODEL_CLASSES` since format version 4, with the
#: value a store written before them gets (its class record lacks them).
#: ``DepthSummary.rows`` (format 5): the reference rows its sorted blocks are rebuilt from.
ADDED_FIELDS: dict[str, dict[str, Any]] = {f"{DepthSummary.__module__}:DepthSummary":
                                           {"rows": None},
                                           # a stream's held rows (format 7, added in it)
                                           f"{StreamState.__module__}:StreamState":
                                           {"rows": None}}
#: Array dtypes a model may hold (what the writer stores: booleans, integers, floats).
ARRAY_KINDS = "biuf"
#: Widest string a string field may declare (characters).
MAX_STRING_CHARS = 4096
#: Largest Zarr metadata file of a saved model below its root: an array's or a group's
#: ``zarr.json`` (shape, dtype, chunks, codecs) takes about a kilobyte.  Checked with
#: ``stat`` before it is read, when the model is read and before each lazy block read.
NODE_METADATA_BYTES = 64 * 2**10


# --------------------------------------------------------------------------- errors


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


# --------------------------------------------------------------------------- values


def class_name(cls: type) -> str:
    """The ``module:qualname`` a class is stored under."""
    return f"{cls.__module__}:{cls.__qualname__}"


def allowed_class(name: str) -> type:
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


def construct(cls: type, values: dict[str, Any]) -> Any:
    """An instance of the dataclass ``cls`` with the field ``values`` (``init=False`` ones too)."""
    init = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.init}
    obj = cls(**init)
    for f in dataclasses.fields(cls):
        if not f.init:
            object.__setattr__(obj, f.name, values[f.name])
    return obj


def json_scalar(value: Any) -> Any:
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


def is_scalar(value: Any) -> bool:
    """Whether :func:`json_scalar` stores ``value``."""
    try:
        json_scalar(value)
    except TypeError:
        return False
    return True


def is_count(value: Any) -> bool:
    """A non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checksum(arr: np.ndarray) -> str:
    """SHA-256 of an array's values, little-endian and C-ordered.

    Hashed in pieces of about :data:`CHECKSUM_PIECE_BYTES`: no copy of the
    whole array is made (a big-endian or non-contiguous array is converted
    one piece at a time).

    Examples
    --------
    >>> import hashlib
    >>> a = np.arange(5.0)
    >>> checksum(a) == hashlib.sha256(a.tobytes()).hexdigest() == checksum(a.astype(">f8"))
    True
    """
    arr = np.asarray(arr)
    flat = arr.reshape(-1) if arr.flags.c_contiguous else arr.ravel(order="C")
    digest = hashlib.sha256()
    step = max(1, CHECKSUM_PIECE_BYTES // max(1, flat.itemsize))
    for start in range(0, flat.size, step):
        piece = np.ascontiguousarray(flat[start:start + step])
        if piece.dtype.byteorder == ">":
            piece = piece.astype(piece.dtype.newbyteorder("<"))
        digest.update(piece.view(np.uint8))
    return digest.hexdigest()


def array_chunks(arr: np.ndarray) -> tuple[int, ...]:
    """Chunks of about :data:`ARRAY_CHUNK_BYTES` along the first axis (at least one row)."""
    if arr.ndim == 0:
        return ()
    row = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    rows = max(1, min(int(arr.shape[0]), ARRAY_CHUNK_BYTES // row))
    return (rows, *(max(1, s) for s in arr.shape[1:]))


# --------------------------------------------------------------------------- encoding


class _Written(NamedTuple):
    """An array the writer stored, and where (kept alive so its ``id`` stays unique)."""

    array: np.ndarray
    path: str


class Writer:
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
        self.group.create_array(path, data=arr, chunks=array_chunks(arr),
                                config={"write_empty_chunks": True})
        self.manifest[path] = {"dtype": arr.dtype.str, "shape": list(arr.shape),
                               "sha256": checksum(arr)}

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
        if is_scalar(value):
            return json_scalar(value)
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

    def register(self, cls: type) -> str:
        name = class_name(cls)
        if MODEL_CLASSES.get(name) is not cls:  # saved, it could not be loaded
            allowed = ", ".join(c.__qualname__ for c in MODEL_CLASSES.values())
            raise TypeError(f"a {cls.__qualname__} is not among the classes a model may hold "
                            f"({allowed}): add it to its depth's summary_types")
        self.classes[name] = [f.name for f in dataclasses.fields(cls)]
        return name

    def dataclass(self, obj: Any, path: str) -> dict[str, Any]:
        name = self.register(type(obj))
        fields = {f.name: self.field(obj, f.name, f"{path}/{f.name}")
                  for f in dataclasses.fields(obj)}
        return {"kind": "dataclass", "class": name, "fields": fields}

    def field(self, obj: Any, name: str, path: str) -> Any:
        """The node of the field ``name`` of the dataclass ``obj``.

        A hook: a subclass stores some fields its own way
        (:class:`daskdepth.storage.blockstore.BlockWriter`, a summary's blocks).
        """
        return self.value(getattr(obj, name), path)

    def table(self, items: list[Any], path: str) -> dict[str, Any]:
        """Dataclasses of one class, stored column by column."""
        name = self.register(type(items[0]))
        columns = {f.name: self.column([getattr(o, f.name) for o in items], f"{path}/{f.name}")
                   for f in dataclasses.fields(items[0])}
        return {"class": name, "length": len(items), "columns": columns}

    def column(self, values: list[Any], path: str) -> dict[str, Any]:
        if all(is_scalar(v) for v in values):
            return {"kind": "values", "values": [json_scalar(v) for v in values]}
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


# --------------------------------------------------------------------------- decoding


class Reader:
    """Rebuilds Python values from JSON nodes, reading and checking arrays of ``group``."""

    def __init__(self, group: Any, manifest: dict[str, Any], classes: dict[str, list[str]],
                 where: str) -> None:
        self.group = group
        self.manifest = manifest
        self.classes = classes
        self.where = where
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
        if checksum(arr) != spec["sha256"]:
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
            fields = node["fields"]
            if not isinstance(fields, dict) or sorted(fields) != sorted(self.classes[
                    node["class"]]):
                raise self.corrupt(f"the fields of a {cls.__name__} are not those of its class")
            values = dict(ADDED_FIELDS.get(node["class"], {}))
            values.update({k: self.value(v) for k, v in fields.items()})
            return self.built(construct(cls, values))
        if kind in ("list", "tuple"):
            if "blocks" in node:
                items = self.blocks(node["blocks"])
            elif "rebuild" in node:
                items = self.rebuild(node["rebuild"])
            elif "table" in node:
                items = self.table(node["table"])
            else:
                items = [self.value(v) for v in node["items"]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {k: self.value(v) for k, v in node["items"].items()}
        raise self.corrupt(f"unknown value kind {kind!r}")

    def built(self, obj: Any) -> Any:
        """A hook for a dataclass just decoded (a subclass may complete it); returns it."""
        return obj

    def blocks(self, node: Any) -> list[Any]:
        """A hook for a list stored as blocks (:mod:`~daskdepth.storage.blockstore` has them)."""
        raise self.corrupt("it holds direction blocks where none are expected")

    def rebuild(self, node: Any) -> list[Any]:
        """A hook for blocks rebuilt from stored rows (:mod:`~daskdepth.storage.blockstore`)."""
        raise self.corrupt("it holds direction blocks to rebuild where none are expected")

    def check_class(self, name: str) -> type:
        cls = allowed_class(name)
        stored = self.classes.get(name)
        current = [f.name for f in dataclasses.fields(cls)]
        added = ADDED_FIELDS.get(name, {})
        if stored != current and stored != [f for f in current if f not in added]:
            raise ModelFormatError(
                f"the model's {name.partition(':')[2]} has fields {stored}, but this daskdepth's "
                f"has {current}: it was saved by a daskdepth with another summary layout; load "
                "it with that version or refit the model"
            )
        return cls

    def table(self, table: dict[str, Any]) -> list[Any]:
        cls = self.check_class(table["class"])
        n = int(table["length"])
        columns = {k: self.column(v, n) for k, v in table["columns"].items()}
        return [construct(cls, {k: col[i] for k, col in columns.items()}) for i in range(n)]

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
