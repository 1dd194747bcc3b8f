"""Saving fitted models as Zarr groups and loading them back, without pickle.

A saved model is a Zarr (format 3) group whose attribute ``daskdepth`` is a
JSON document::

    {"format": "daskdepth-model", "format_version": 1,
     "estimator": "AIIRW", "params": {...}, "state": {...},
     "classes": {...}, "arrays": {...}, "versions": {...}, "created": "...",
     "metadata": {...}}

``params`` are the constructor parameters and ``state`` every fitted attribute
(``location_``, ``covariance_``, ``directions_``, ``summary_``, ...), both as
JSON values in which NumPy arrays are references ``{"kind": "array", "path":
...}`` to arrays of the group.  Dataclasses of daskdepth (the
:class:`~daskdepth.DepthSummary` and its blocks) are stored field by field; a
list of dataclasses of one class is stored column by column (one concatenated
array per field), so a model with thousands of direction blocks is still a
handful of arrays.  ``classes`` records the fields of every stored dataclass
and ``arrays`` the dtype, shape and SHA-256 of every array, so that a store
that was modified or truncated, or that was written by a daskdepth whose
summaries have another layout, is refused with a clear message instead of
scoring wrongly.
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
from typing import Any

import numpy as np

from ._io import SafeOutput, is_url, local_path, quiet_zarr

#: Version of the stored layout; a reader refuses stores with a larger one.
FORMAT_VERSION = 1
#: Value of the ``format`` key of a saved model.
FORMAT_NAME = "daskdepth-model"
#: Attribute of the Zarr group that holds the JSON document.
ATTR = "daskdepth"


class ModelFormatError(ValueError):
    """A store is not a daskdepth model, is corrupted, or needs a newer daskdepth."""


# --------------------------------------------------------------------------- versions


def versions() -> dict[str, str]:
    """Versions of daskdepth and of the libraries that shape its results."""
    import dask
    import zarr

    from . import __version__

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


# --------------------------------------------------------------------------- encoding


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(name: str) -> type:
    """A dataclass of the daskdepth package from ``module:qualname`` (nothing else)."""
    module, _, qualname = name.partition(":")
    if not (module == "daskdepth" or module.startswith("daskdepth.")) or not qualname:
        raise ModelFormatError(f"the model refers to class {name!r}, which is not part of "
                               "daskdepth; refusing to load it")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise ModelFormatError(
            f"the model refers to {name!r}, which this daskdepth does not have; load it "
            "with the daskdepth version that saved it, or refit"
        ) from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise ModelFormatError(f"{name!r} is not a daskdepth dataclass")
    return obj


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


class _Writer:
    """Turns Python values into JSON nodes and arrays (written to ``group`` at the end)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.classes: dict[str, list[str]] = {}
        self._seen: dict[int, tuple[np.ndarray, str]] = {}

    def array(self, arr: np.ndarray, path: str) -> dict[str, Any]:
        key = id(arr)
        if key in self._seen and self._seen[key][0] is arr:
            return {"kind": "array", "path": self._seen[key][1]}
        if arr.dtype.kind == "O" or arr.dtype.kind in "US":
            values = arr.tolist()
            flat = np.asarray(arr, dtype=object).ravel()
            if all(isinstance(v, str) for v in flat):
                return {"kind": "strings", "values": values, "dtype": arr.dtype.str}
            raise TypeError(f"an object array at {path!r} holds non-string values")
        if arr.dtype.kind not in "biufc":
            raise TypeError(f"an array of dtype {arr.dtype} at {path!r}")
        self.arrays[path] = np.ascontiguousarray(arr)
        self._seen[key] = (arr, path)
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
        return {"kind": "dataclass", "class": name,
                "fields": {f.name: self.value(getattr(obj, f.name), f"{path}/{f.name}")
                           for f in dataclasses.fields(obj)}}

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


def _checksum(arr: np.ndarray) -> str:
    data = np.ascontiguousarray(arr)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return hashlib.sha256(data.tobytes()).hexdigest()


# --------------------------------------------------------------------------- decoding


class _Reader:
    """Rebuilds Python values from JSON nodes, reading and checking arrays of ``group``."""

    def __init__(self, group: Any, manifest: dict[str, Any], classes: dict[str, list[str]],
                 where: str) -> None:
        self.group = group
        self.manifest = manifest
        self.classes = classes
        self.where = where
        self._cache: dict[str, np.ndarray] = {}

    def corrupt(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"the model store {self.where!r} is corrupted: {what}; save the "
                                "model again or restore the store from a copy")

    def array(self, path: str) -> np.ndarray:
        if path in self._cache:
            return self._cache[path]
        spec = self.manifest.get(path)
        if spec is None:
            raise self.corrupt(f"array {path!r} is not listed in its attributes")
        try:
            node = self.group[path]
            with quiet_zarr():
                arr = np.asarray(node[...])
        except KeyError:
            raise self.corrupt(f"array {path!r} is missing") from None
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

    def value(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        kind = node.get("kind")
        if kind == "float":
            return float(node["value"])
        if kind == "array":
            return self.array(node["path"])
        if kind == "strings":
            return np.asarray(node["values"], dtype=np.dtype(node["dtype"]))
        if kind == "dataclass":
            cls = self.check_class(node["class"])
            return _construct(cls, {k: self.value(v) for k, v in node["fields"].items()})
        if kind in ("list", "tuple"):
            items = self.table(node["table"]) if "table" in node else [
                self.value(v) for v in node["items"]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {k: self.value(v) for k, v in node["items"].items()}
        raise self.corrupt(f"unknown value kind {kind!r}")

    def check_class(self, name: str) -> type:
        cls = _resolve_class(name)
        stored = self.classes.get(name)
        current = [f.name for f in dataclasses.fields(cls)]
        if stored != current:
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
            stacked = self.value(node["array"])
            lengths = [int(k) for k in node["lengths"]]
            if sum(lengths) != stacked.shape[0]:
                raise self.corrupt("a column's lengths do not add up to its array")
            bounds = np.cumsum([0, *lengths])
            out = [stacked[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        elif kind == "items":
            out = [self.value(v) for v in node["items"]]
        else:
            raise self.corrupt(f"unknown column kind {kind!r}")
        if len(out) != n:
            raise self.corrupt(f"a column has {len(out)} values for {n} rows")
        return out


def _construct(cls: type, values: dict[str, Any]) -> Any:
    init = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.init}
    obj = cls(**init)
    for f in dataclasses.fields(cls):
        if not f.init:
            object.__setattr__(obj, f.name, values[f.name])
    return obj


# --------------------------------------------------------------------------- models


def _estimator_classes() -> dict[str, type]:
    from . import _estimators

    base = _estimators._DepthDetector
    return {name: obj for name, obj in vars(_estimators).items()
            if isinstance(obj, type) and issubclass(obj, base) and obj is not base
            and not name.startswith("_")}


def _encode_params(model: Any, writer: _Writer) -> tuple[dict[str, Any], dict[str, str]]:
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


def _fitted_state(model: Any) -> dict[str, Any]:
    params = set(model.get_params(deep=False))
    state = {k: v for k, v in vars(model).items() if k not in params and not k.startswith("__")}
    if "summary_" not in state:
        from sklearn.exceptions import NotFittedError

        raise NotFittedError(f"this {type(model).__name__} is not fitted yet; call fit before "
                             "save")
    return state


def save_model(model: Any, path: str | os.PathLike[str], *, overwrite: bool = False,
               metadata: dict[str, Any] | None = None) -> Path:
    """Save a fitted :class:`~daskdepth.AIIRW` or :class:`~daskdepth.IRW` as a Zarr group.

    The store is written to a temporary sibling and moved into place when
    complete, so an interrupted save leaves no partial model at ``path``.

    Parameters
    ----------
    model : fitted AIIRW or IRW
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

    Examples
    --------
    >>> import os, tempfile, numpy as np, daskdepth
    >>> X = np.random.default_rng(0).normal(size=(300, 2))
    >>> model = daskdepth.AIIRW(random_state=0).fit(X)
    >>> path = model.save(os.path.join(tempfile.mkdtemp(), "model.zarr"))
    >>> loaded = daskdepth.load(path)
    >>> bool((loaded.score_samples(X) == model.score_samples(X)).all())
    True
    """
    import zarr

    classes = _estimator_classes()
    name = type(model).__name__
    if classes.get(name) is not type(model):
        raise TypeError(f"can only save daskdepth estimators ({', '.join(sorted(classes))}), "
                        f"got {type(model).__name__}")
    state = _fitted_state(model)
    writer = _Writer()
    params, dropped = _encode_params(model, writer)
    encoded_state = {}
    for key, value in state.items():
        try:
            encoded_state[key] = writer.value(value, f"state/{key.lstrip('_') or key}")
        except TypeError as exc:
            raise TypeError(f"cannot save attribute {key!r} of the model: {exc}") from None
    if dropped:
        warnings.warn(
            "parameters " + ", ".join(f"{k}={v}" for k, v in dropped.items()) + " cannot be "
            "stored without pickle; the saved model has their defaults (its fitted state is "
            "complete: it scores identically)", UserWarning, stacklevel=3)
    manifest = {p: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _checksum(a)}
                for p, a in writer.arrays.items()}
    doc = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "estimator": name,
        "params": params,
        "unstored_params": dropped,
        "state": encoded_state,
        "classes": writer.classes,
        "arrays": manifest,
        "versions": versions(),
        "created": utc_now(),
        "metadata": json.loads(json.dumps(metadata or {}, default=_json_default)),
    }
    json.dumps(doc, allow_nan=False)  # fail before writing anything
    with SafeOutput(path, overwrite=overwrite) as out, quiet_zarr():
        group = zarr.open_group(str(out.path), mode="w", zarr_format=3)
        for apath, arr in writer.arrays.items():
            group.create_array(apath, data=arr, chunks=_chunks(arr))
        group.attrs[ATTR] = doc
        return out.commit()


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON")


def _chunks(arr: np.ndarray) -> tuple[int, ...]:
    """Chunks of about 8 MiB along the first axis (at least one row)."""
    if arr.ndim == 0:
        return ()
    row = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    rows = max(1, min(int(arr.shape[0]), (8 * 2**20) // row))
    return (rows, *(max(1, s) for s in arr.shape[1:]))


def _open_group(path: str | os.PathLike[str],
                storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    import zarr

    text = os.fspath(path)
    if not is_url(text):
        p = local_path(text)
        if not p.exists():
            raise FileNotFoundError(f"no model at {text!r}: the path does not exist")
        store: Any = str(p)
    else:
        store = text
    try:
        with quiet_zarr():
            node = zarr.open(store, mode="r", storage_options=storage_options if is_url(text)
                             else None)
    except Exception as exc:  # zarr raises several kinds, some of them FileNotFoundError
        if is_url(text) and isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(f"no model at {text!r}: the path does not exist") from None
        raise ModelFormatError(f"{text!r} is not a daskdepth model (not a Zarr store)") from None
    return node, text


def read_attributes(path: str | os.PathLike[str], *,
                    storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of a saved model (parameters, versions, metadata, ...).

    Raises :class:`ModelFormatError` when ``path`` is not a daskdepth model or
    needs a newer daskdepth.
    """
    import zarr

    node, text = _open_group(path, storage_options)
    doc = dict(node.attrs).get(ATTR) if isinstance(node, zarr.Group) else None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise ModelFormatError(f"{text!r} is not a daskdepth model (it has no "
                               f"{ATTR!r} model attributes)")
    version = doc.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise ModelFormatError(f"the model store {text!r} is corrupted: its format version "
                               f"{version!r} is not a positive integer")
    if version > FORMAT_VERSION:
        writer = doc.get("versions", {}).get("daskdepth", "a newer version")
        raise ModelFormatError(
            f"the model {text!r} has format version {version}, written by daskdepth {writer}; "
            f"this daskdepth reads format versions up to {FORMAT_VERSION}: upgrade daskdepth"
        )
    return doc


def load_model(path: str | os.PathLike[str], *,
               storage_options: dict[str, Any] | None = None) -> Any:
    """Load a model saved with ``model.save(path)``.

    Parameters
    ----------
    path : str or path-like
        Local path or fsspec URL of the saved model.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    AIIRW or IRW
        A fitted model that scores identically to the saved one.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a daskdepth model, is corrupted (missing or modified
        arrays or attributes), or was written by a newer daskdepth.

    Examples
    --------
    >>> import os, tempfile, numpy as np, daskdepth
    >>> X = np.random.default_rng(1).normal(size=(200, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "irw.zarr")
    >>> _ = daskdepth.IRW(n_directions=50, random_state=0).fit(X).save(path)
    >>> model = daskdepth.load(path)
    >>> type(model).__name__, model.n_directions_
    ('IRW', 50)
    """
    doc = read_attributes(path, storage_options=storage_options)
    group, text = _open_group(path, storage_options)
    try:
        classes = _estimator_classes()
        name = doc["estimator"]
        if name not in classes:
            raise ModelFormatError(f"the model {text!r} is a {name!r}, which this daskdepth "
                                   f"does not have ({', '.join(sorted(classes))})")
        reader = _Reader(group, doc["arrays"], doc["classes"], text)
        params = {k: reader.value(v) for k, v in doc["params"].items()}
        try:
            model = classes[name](**params)
        except TypeError as exc:
            raise ModelFormatError(f"the model {text!r} has parameters this daskdepth's {name} "
                                   f"does not take ({exc}); load it with the version that "
                                   "saved it") from None
        for key, node in doc["state"].items():
            setattr(model, key, reader.value(node))
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelFormatError(f"the model store {text!r} is corrupted: its attributes are "
                               f"incomplete or malformed ({type(exc).__name__}: {exc})") from None
    _check_consistency(model, text)
    return model


def _check_consistency(model: Any, where: str) -> None:
    """Cheap cross-checks between the fitted attributes."""
    def bad(what: str) -> ModelFormatError:
        return ModelFormatError(f"the model store {where!r} is corrupted: {what}")

    summary = getattr(model, "summary_", None)
    if summary is None:
        raise bad("it has no summary_")
    d = getattr(model, "n_features_in_", None)
    directions = np.asarray(getattr(model, "directions_", np.empty((0, 0))))
    if directions.ndim != 2 or directions.shape[1] != d:
        raise bad(f"directions_ has shape {directions.shape} for {d} features")
    if getattr(model, "n_directions_", directions.shape[0]) != directions.shape[0]:
        raise bad("n_directions_ does not match directions_")
    if getattr(summary, "n", None) != getattr(model, "n_samples_fit_", None):
        raise bad("the summary's row count does not match n_samples_fit_")
