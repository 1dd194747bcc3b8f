"""The model format: a fitted estimator as a Zarr group of arrays and one JSON document.

A saved model is a Zarr (format 3) group whose attribute ``daskdepth`` is a
JSON document::

    {"format": "daskdepth-model", "format_version": 7,
     "estimator": "AIIRW", "params": {...}, "unstored_params": {...},
     "state": {...}, "classes": {...}, "arrays": {...}, "nodes": {...},
     "versions": {...}, "created": "...", "metadata": {...}, "checksum": "..."}

``params`` are the constructor parameters and ``state`` every fitted attribute
(``location_``, ``covariance_``, ``directions_``, ``summary_``, ...), both as
JSON values written by the object codec (:mod:`daskdepth.storage.codec`): NumPy
arrays are references ``{"kind": "array", "path": ...}`` to arrays of the
group, daskdepth's dataclasses are stored field by field under their
``module:qualname``, and the direction blocks of a summary as byte ranges of
one array, read block by block (:mod:`daskdepth.storage.blockstore`), or, for
sorted projections on fewer features than directions, as the reference rows
they were fitted on (``8 d n`` bytes instead of ``8 m n``), the blocks rebuilt
from them by the fit's kernel when the model is read (the same bits).
``unstored_params`` names the parameters that could not be stored without
pickle (saved as their defaults).  ``classes`` records the fields of every
stored dataclass and ``arrays`` the dtype, shape and SHA-256 of every array.

What the checksums cover (format version 6).  Every Zarr metadata file of the
store is covered, so that a changed shape, dtype, codec, chunk grid or fill
value, an added attribute or mere padding is refused before anything of the
store is trusted:

* ``nodes`` maps the path of every metadata file below the root (each group's
  and array's ``zarr.json``, e.g. ``state/directions_/zarr.json``) to the
  SHA-256 of its bytes, hashed in pieces (:func:`~daskdepth.storage.paths.file_digest`).
  The loader refuses a file whose bytes do not match, a listed file that is
  missing, any other metadata file (a Zarr format 2 ``.zarray`` too), and an
  array of ``arrays`` whose ``zarr.json`` is not listed.
* The root ``zarr.json`` holds the document, which holds the checksum: the
  checksum is the SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII,
  :func:`document_checksum`) of the whole root metadata, its Zarr fields
  (``zarr_format``, ``node_type``) and every attribute, with the ``checksum``
  entry taken out of the document, and nothing else; so it covers the
  document (``nodes`` and the blocks' byte ranges and checksums among its
  numbers) and anything added beside it.  The bytes of the root file must
  moreover be exactly the JSON that daskdepth writes for that metadata
  (``json.dumps(metadata, indent=2)``, as Zarr writes it too): padding or
  any other re-formatting is refused.

A model that follows a stream (``partial_fit``, format version 7) also holds
``n_batches_``, ``batch_rows_`` (the rows of each batch it holds) and
``_stream``: the stream's base keys, its content-keyed row sample and, with
``window``, each held batch's counts per base leaf, extremes and own sample, and
the rows it holds while it started small (``rows``, ``n x d``; a store written
before that field loads without them)
(:class:`~daskdepth.summary.streaming.StreamState`), so that a loaded model
goes on (``partial_fit``, its window dropping the oldest batch) with the bits
of the one saved; the loader checks them against each other and the summary
(:func:`daskdepth.io.models.check_fitted`).  A store of an older format loads
as a stream of one batch.

Formats 3 to 5 have no ``nodes``; their checksum is that of the canonical JSON
of the document alone (less ``checksum``), and their other metadata files are
checked by size and against the document (an array's declared shape and
dtype), not by a checksum.  A store that was modified or truncated, or that was
written by a daskdepth whose summaries have another layout (or live in another
module), is refused with a clear message instead of scoring wrongly.

Checksums only catch accidents and naive edits: anyone can recompute them.
Reading therefore trusts nothing in a store.  Before Zarr opens a local store
(also one a ``file://`` or ``local://`` URL reaches), every file in it must be
a regular file of at most :data:`~daskdepth.storage.paths.MAX_METADATA_BYTES`
(:func:`~daskdepth.storage.paths.check_store_files`; a FIFO would block the read
for ever, ``/dev/zero`` never end): a symbolic link is followed only to a
regular file (git-annex and DVC keep files so; its content is checked against
the checksums like any other), and a link to a folder, a device or nothing is
refused; the chunk files a block reads later are checked again then.  The
document's size, keys and value kinds are checked, arrays are compared with
the manifest (dtype, shape, every chunk present, a cap on the total size,
each axis against the model's own n, d and m) *before* they are read, only the summary classes of
:data:`~daskdepth.storage.codec.MODEL_CLASSES` can be named, and string fields
are decoded without trusting their declared width.  A block's byte range, and
the dtype, shape and place of each of its arrays, are checked against the block
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
import re
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import dask
import numpy as np
from sklearn.exceptions import NotFittedError

from .._version import __version__
from ..errors import ModelFormatError
from .atomic import SafeOutput
from .blockstore import BlockReader, BlockSource, BlockWriter, rebuilt_summaries
from .codec import (
    ARRAY_KINDS,
    MAX_STRING_CHARS,
    NODE_METADATA_BYTES,
    Writer,
    corrupted,
    is_count,
    malformed,
    unsafe_store,
)
from .paths import (
    MAX_METADATA_BYTES,
    NotZarrError,
    UnsafeFileError,
    check_regular,
    check_store_files,
    file_digest,
    is_url,
    local_path,
    local_target,
    open_node,
    quiet_zarr,
    read_regular,
    read_store_file,
    store_file_digest,
)
from .targets import MODEL_ATTR, MODEL_FORMAT, stored_document

#: Version of the stored layout; a reader refuses newer ones and those older than
#: :data:`MIN_FORMAT_VERSION`.
#: 2: the document carries a checksum of itself; every chunk is written.
#: 3: a summary's direction blocks stored one after the other, read block by block.
#: 4: each block's SHA-256 also covers its place (index, directions ``j0 .. j1``, row
#: count), its direction rows and the summary's location
#: (:func:`~daskdepth.storage.blockstore.block_binding`).
#: 5: a summary of sorted projections with fewer features than directions stores its
#: reference rows instead of its blocks (:func:`~daskdepth.storage.blockstore.stores_rows`).
#: 6: the checksum covers every metadata file: ``nodes`` (the SHA-256 of each
#: ``zarr.json`` below the root) and the whole root metadata (:func:`document_checksum`).
#: 7: a model that follows a stream (``partial_fit``) keeps its state: ``n_batches_``,
#: ``batch_rows_`` (rows per batch held) and ``_stream`` (its base keys, row samples and,
#: with ``window``, each held batch's counts per base leaf), so that a loaded model goes on
#: as the one saved.  Older stores load as a stream of one batch.
FORMAT_VERSION = 7
#: First format version whose checksum covers every metadata file (``nodes``, the root's).
NODES_FROM_VERSION = 6
#: First format version that may hold the state of a stream (:data:`STREAM_STATE`).
STREAM_FROM_VERSION = 7
#: Fitted attributes of a model that follows a stream (``partial_fit``, format version 7).
STREAM_STATE = ("n_batches_", "batch_rows_", "_stream", "_bound_warned")
#: Where a stream's arrays are: those of its window's history may be as long as the summary's
#: leaf keys (bounded by the bytes of its block data), not by ``n``, ``d`` or ``m``.
STREAM_HISTORY = "state/stream/history/"
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
#: Keys of the model document.
DOCUMENT_KEYS = frozenset({"format", "format_version", "estimator", "params", "unstored_params",
                           "state", "classes", "arrays", "nodes", "versions", "created",
                           "metadata", "checksum"})
#: Default cap on the memory a model's arrays may take once read; the environment
#: variable ``DASKDEPTH_MAX_MODEL_BYTES`` or ``max_bytes`` sets another.
MAX_MODEL_BYTES = 4 * 2**30
#: What the root ``zarr.json`` (the model document) may take: a base for the parameters,
#: versions, classes and the caller's metadata, plus a share per direction (the
#: description of its block) and per feature (its name); checked with ``stat`` before
#: anything parses it (:func:`root_metadata_bytes`).
ROOT_BASE_BYTES = 2 * 2**20
ROOT_DIRECTION_BYTES = 2 * 2**10
ROOT_FEATURE_BYTES = 6 * MAX_STRING_CHARS + 64
#: Largest ``metadata`` (as JSON) :func:`save_model` keeps with a model.
MAX_USER_METADATA_BYTES = 2**20
#: Where a model's directions are: their array's metadata says the model's ``m`` and ``d``.
DIRECTIONS_ARRAY = "state/directions_"
#: The training rows' depths (``_train_depth``): NaN rows too, with ``nan_policy="omit"``.
TRAIN_DEPTH_ARRAY = "state/train_depth"


# --------------------------------------------------------------------------- versions


def versions() -> dict[str, str]:
    """Versions of daskdepth and of the libraries that shape its results."""
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

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


def document_checksum(doc: dict[str, Any], root: dict[str, Any] | None = None) -> str:
    """The checksum of the model document ``doc``, held by the root metadata ``root``.

    The SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of
    ``doc`` less ``checksum`` for format versions before
    :data:`NODES_FROM_VERSION`; from it on, of the whole root metadata
    ``root`` (its Zarr fields and every attribute) with ``doc`` less
    ``checksum`` as its :data:`ATTR` attribute.  ``root`` defaults to what
    :func:`save_model` writes: ``{"attributes": {ATTR: doc}, "zarr_format": 3,
    "node_type": "group"}``.

    Examples
    --------
    >>> document_checksum({"b": 1, "a": [1.5, "x"], "checksum": "ignored"})[:12]
    '27edd5497e48'
    >>> doc = {"format_version": 6, "checksum": "ignored"}
    >>> document_checksum(doc) == document_checksum(doc, root_metadata(doc))
    True
    >>> root = root_metadata(doc)
    >>> root["attributes"]["added"] = 1
    >>> document_checksum(doc) == document_checksum(doc, root)
    False
    """
    body: Any = {k: v for k, v in doc.items() if k != "checksum"}
    version = doc.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) \
            and version >= NODES_FROM_VERSION:
        meta = dict(root_metadata(doc) if root is None else root)
        attrs = meta.get("attributes")
        if not isinstance(attrs, dict):
            raise TypeError("the root metadata's attributes are not a mapping")
        meta["attributes"] = {**attrs, ATTR: body}
        body = meta
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def root_metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """The root ``zarr.json`` metadata of a saved model whose document is ``doc``."""
    return {"attributes": {ATTR: doc}, "zarr_format": 3, "node_type": "group"}


def root_bytes(meta: Any) -> bytes:
    """The bytes of the root ``zarr.json`` holding ``meta``, as daskdepth (and Zarr) write them.

    Examples
    --------
    >>> root_bytes({"zarr_format": 3})
    b'{\\n  "zarr_format": 3\\n}'
    """
    return json.dumps(meta, indent=2).encode("utf-8")


def node_digests(root: Path) -> dict[str, str]:
    """SHA-256 of every Zarr metadata file of the local store ``root`` below its root.

    Keyed by the file's path relative to ``root`` (with ``/``), sorted; the
    ``nodes`` of a model document (format version 6), which its checksum covers.
    """
    found: list[str] = []
    check_store_files(root, MAX_METADATA_BYTES, metadata_bytes=NODE_METADATA_BYTES,
                      metadata=found)
    return {name: file_digest(root / name, f"a file {name!r}", NODE_METADATA_BYTES)
            for name in sorted(found) if "/" in name}


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


def _encode_params(model: Any, writer: Writer) -> tuple[dict[str, Any], dict[str, str]]:
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


def _encode_state(state: dict[str, Any], writer: Writer) -> dict[str, Any]:
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
    ValueError
        ``metadata`` takes more than :data:`MAX_USER_METADATA_BYTES` as JSON, or
        ``model`` holds no rows (a :func:`daskdepth.template` not fed yet).
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
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

    _check_saveable(model)
    state = _fitted_state(model)
    if state.get("n_samples_fit_") == 0:  # daskdepth.template: a frame without rows
        raise ValueError(f"this {type(model).__name__} holds no rows yet (a template): a saved "
                         "model must hold rows; save it after its first partial_fit, or save "
                         "the model it was made from and call daskdepth.template(model) after "
                         "loading that")
    kept = json.dumps(metadata or {}, default=_json_default)
    if len(kept) > MAX_USER_METADATA_BYTES:
        raise ValueError(f"metadata takes {len(kept):,} bytes as JSON, more than the "
                         f"{MAX_USER_METADATA_BYTES:,} a model keeps; keep large information "
                         "in a file of its own and store its path in the metadata")
    with SafeOutput(path, overwrite=overwrite) as out, quiet_zarr():
        # mode "a": the directory exists and holds SafeOutput's owner file
        group = zarr.open_group(str(out.path), mode="a", zarr_format=3)
        writer = BlockWriter(group)
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
            # every group's and array's zarr.json (all are written by now)
            "nodes": node_digests(out.path),
            "versions": versions(),
            "created": utc_now(),
            "metadata": json.loads(kept),
        }
        # also fails on NaN before the store is moved into place
        doc["checksum"] = document_checksum(doc)
        group.attrs[ATTR] = doc
        # the root metadata in the form the loader requires, whatever Zarr's json_indent
        meta = json.loads(read_regular(out.path / "zarr.json", "zarr.json"))
        (out.path / "zarr.json").write_bytes(root_bytes(meta))
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
        root = local_target(path)
        if root is not None and (root / DIRECTIONS_ARRAY).is_dir():  # a model's root: capped
            check_regular(root / "zarr.json", "a file 'zarr.json'", root_metadata_bytes(root))
        node = open_node(path, storage_options)
    except UnsafeFileError as exc:  # not read: a FIFO would block, /dev/zero never end
        raise ModelFormatError(f"the store {os.fspath(path)!r} {exc.reason}: restore it from a "
                               "copy or remove it") from None
    except (FileNotFoundError, NotZarrError):
        return False
    return stored_document(node) is not None


class _Arrays:
    """The arrays of a model store, each opened by its path (the root group is not opened).

    Zarr reads an array's ``zarr.json`` when it is opened here; the loader has
    checked the file against ``nodes`` (format version 6) before.  A missing
    array is a ``KeyError``, as for a Zarr group.
    """

    def __init__(self, store: str, storage_options: dict[str, Any] | None) -> None:
        self.store = store
        self.storage_options = storage_options

    def __getitem__(self, path: str) -> Any:
        import zarr  # deferred: slow to import, and `import daskdepth` does not need it

        try:
            node = open_node(self.store.rstrip("/") + "/" + path, self.storage_options)
        except (FileNotFoundError, NotZarrError) as exc:
            if isinstance(exc, UnsafeFileError):
                raise
            raise KeyError(path) from None
        if not isinstance(node, zarr.Array):
            raise KeyError(path)
        return node


def _root_document(where: str, root: Path | None,
                   storage_options: dict[str, Any] | None) -> tuple[bytes, Any]:
    """The bytes of a model store's root ``zarr.json`` (capped) and its JSON, parsed once.

    Raises what :func:`_open_model` says for a store without one (nothing
    there, not a Zarr store, no model document).
    """
    try:
        if root is not None:
            if not root.exists():
                raise FileNotFoundError(where)
            cap = root_metadata_bytes(root) if root.is_dir() else MAX_METADATA_BYTES
            raw = read_regular(root / "zarr.json", "a file 'zarr.json'", cap)
        else:
            raw = read_store_file(where, "zarr.json", storage_options, MAX_METADATA_BYTES)
    except UnsafeFileError as exc:
        raise unsafe_store(where, exc) from None
    except (FileNotFoundError, NotADirectoryError):
        raw = None
    if raw is None:  # no zarr.json: say what is there instead (Zarr's own words)
        try:
            node = open_node(where, storage_options)
        except FileNotFoundError:
            raise FileNotFoundError(f"no model at {where!r}: the path does not exist") from None
        except UnsafeFileError as exc:
            raise unsafe_store(where, exc) from None
        except NotZarrError:
            raise ModelFormatError(f"{where!r} is not a daskdepth model (not a Zarr store)") \
                from None
        raise ModelFormatError(f"{where!r} is not a daskdepth model (it has no {ATTR!r} model "
                               "attributes" + ("" if stored_document(node) is None else
                                               " in a Zarr format 3 root group") + ")")
    try:
        return raw, json.loads(raw)
    except (ValueError, RecursionError):
        raise ModelFormatError(f"{where!r} is not a daskdepth model (not a Zarr store: its "
                               "zarr.json is not JSON)") from None


def _open_model(path: str | os.PathLike[str],
                storage_options: dict[str, Any] | None) -> _Opened:
    """Open a model store and check its document: size, format, version, keys, checksums.

    The root ``zarr.json`` is read once (capped) and parsed here, not by Zarr;
    from format version 6 it must match the checksum and be in the form
    written (:func:`root_bytes`), and every other metadata file must match its
    digest in ``nodes`` (:func:`_check_nodes`), before anything else of the
    store is read.
    """
    where = os.fspath(path)
    root = local_target(where)  # also for a file:// or local:// URL (fsspec reads it locally)
    found: list[str] = []
    if root is not None:
        if root.is_dir():  # every file, before any is read (a FIFO, /dev/zero, a huge file)
            try:
                check_store_files(root, MAX_METADATA_BYTES, metadata_bytes=NODE_METADATA_BYTES,
                                  root_bytes=root_metadata_bytes(root), metadata=found)
            except UnsafeFileError as exc:
                raise unsafe_store(where, exc) from None
            except OSError as exc:
                raise ModelFormatError(f"the model store {where!r} cannot be listed ({exc})") \
                    from None
    raw, meta = _root_document(where, root, storage_options)
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    doc = attrs.get(ATTR) if isinstance(attrs, dict) else None
    if not (isinstance(doc, dict) and doc.get("format") == MODEL_FORMAT
            and meta.get("node_type") == "group"):
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
        expected = document_checksum(doc, meta)
    except (TypeError, ValueError, RecursionError) as exc:
        raise malformed(where, exc) from None
    if doc.get("checksum") != expected:
        raise corrupted(where, "its attributes (the root metadata file 'zarr.json') do not "
                               "match their checksum (they were edited or truncated); save the "
                               "model again or restore the store from a copy")
    if version >= NODES_FROM_VERSION:
        written = root_bytes(meta)
        if raw != written:
            raise corrupted(where, f"its root metadata file 'zarr.json' is not as daskdepth "
                                   f"wrote it ({len(raw):,} bytes where the same metadata "
                                   f"takes {len(written):,}: padded or re-formatted); save "
                                   "the model again or restore the store from a copy")
        del written
    if version >= NODES_FROM_VERSION or "nodes" in doc:  # required from format 6 on
        _check_nodes(doc, where, found if root is not None else None, storage_options)
    del raw
    store = where if is_url(where) else str(local_path(where))
    return _Opened(_Arrays(store, storage_options), doc, where)


_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _check_nodes(doc: dict[str, Any], where: str, found: list[str] | None,
                 storage_options: dict[str, Any] | None) -> None:
    """Refuse a store whose metadata files are not exactly those ``nodes`` lists, unchanged.

    ``found``: the metadata files of a local store (relative paths, the root's
    included), or None for a remote store (then the listed files only are
    read).  Each listed file is hashed in pieces (capped at
    :data:`~daskdepth.storage.codec.NODE_METADATA_BYTES`); every array of the
    manifest must have its ``zarr.json`` listed.
    """
    def refuse(what: str) -> ModelFormatError:
        return corrupted(where, f"{what}; save the model again or restore the store from a "
                                "copy")

    nodes = doc.get("nodes")
    if not (isinstance(nodes, dict) and all(
            isinstance(k, str) and isinstance(v, str) and _DIGEST.match(v)
            and k.endswith("/zarr.json") and not k.startswith("/")
            and all(part not in ("", ".", "..") for part in k.split("/"))
            for k, v in nodes.items())):
        raise refuse("its list of metadata files ('nodes') is not a mapping of relative "
                     "paths of zarr.json files to SHA-256 digests")
    arrays = doc.get("arrays")
    for path in arrays if isinstance(arrays, dict) else ():
        if f"{path}/zarr.json" not in nodes:
            raise refuse(f"the metadata file of array {path!r} is not covered by its "
                         "checksums")
    if found is not None:
        extra = sorted(set(found) - set(nodes) - {"zarr.json"})
        if extra:
            raise refuse(f"it holds the metadata file {extra[0]!r}, which the model does not "
                         "list (added after it was saved)")
    for name, expected in nodes.items():
        try:
            digest = store_file_digest(where, name, storage_options, NODE_METADATA_BYTES)
        except FileNotFoundError:
            node = name[:-len("/zarr.json")]
            what = f"array {node!r} is missing" if isinstance(arrays, dict) and node in arrays \
                else "a metadata file is missing"
            raise refuse(f"{what} (no {name!r})") from None
        except UnsafeFileError as exc:
            raise unsafe_store(where, exc) from None
        except OSError as exc:
            raise refuse(f"its metadata file {name!r} cannot be read ({exc})") from None
        if digest != expected:
            raise refuse(f"its metadata file {name!r} does not match its checksum (it was "
                         "edited: a shape, dtype, codec, fill value or attribute changed, or "
                         "it was padded)")


def root_metadata_bytes(root: Path) -> int:
    """What the root ``zarr.json`` of the model store ``root`` may take (bytes).

    :data:`ROOT_BASE_BYTES`, plus :data:`ROOT_DIRECTION_BYTES` per direction and
    :data:`ROOT_FEATURE_BYTES` per feature, the ``(m, d)`` its directions'
    array declares (its own metadata, a small file read with a cap; the
    declaration is compared with the document later); at most
    :data:`~daskdepth.storage.paths.MAX_METADATA_BYTES`.  Only the base when
    the directions' metadata cannot be read (the store is refused later).
    """
    try:
        meta = json.loads(read_regular(root / DIRECTIONS_ARRAY / "zarr.json", "zarr.json",
                                       NODE_METADATA_BYTES))
        m, d = meta["shape"]
    except (OSError, ValueError, KeyError, TypeError):  # UnsafeFileError is a ValueError
        return ROOT_BASE_BYTES
    if not (is_count(m) and is_count(d)):
        return ROOT_BASE_BYTES
    return min(MAX_METADATA_BYTES,
               ROOT_BASE_BYTES + m * ROOT_DIRECTION_BYTES + d * ROOT_FEATURE_BYTES)


def _block_data(node: Any, depth: int = 0) -> set[str]:
    """Paths of the block data arrays a document's node refers to (read block by block)."""
    found: set[str] = set()
    if depth > 64:
        return found
    if isinstance(node, dict):
        blocks = node.get("blocks")
        if isinstance(blocks, dict) and isinstance(blocks.get("data"), str):
            found.add(blocks["data"])
        for value in node.values():
            found |= _block_data(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            found |= _block_data(value, depth + 1)
    return found


def _check_declared_shapes(doc: dict[str, Any], where: str) -> None:
    """Refuse arrays declared longer than the model's own ``n``, ``d`` and ``m`` allow.

    Before any array is read: every array a model reads whole (all but the
    block data, read block by block) is at most ``max(n, d, m)`` long along
    each axis (``location_`` d, ``directions_`` m x d, ``_sample_depth`` at most
    n, ``subsample_indices_`` m x at most n, ...), with ``n``
    (``n_samples_fit_``), ``d`` (``n_features_in_``) and ``m``
    (``n_directions_``) taken from the document.  One exception: with
    ``nan_policy="omit"``, ``_train_depth`` holds a depth (NaN) for every
    training row left out too, whose number the document does not say; it
    is bounded by the cap on all arrays (:func:`_check_manifest`) only.
    """
    state = doc["state"]
    sizes = []
    for key in ("n_samples_fit_", "n_features_in_", "n_directions_"):
        value = state.get(key) if isinstance(state, dict) else None
        if not (is_count(value) and value >= 1):
            raise corrupted(where, f"{key} is {value!r}, not a positive integer")
        sizes.append(value)
    n, d, m = sizes
    longest = max(n, d, m)
    lazy = _block_data(state)
    # a window's per-batch counts: one per leaf key, at most one per 8 bytes of block data
    keys = max([longest] + [doc["arrays"][p]["shape"][0] // 8 for p in lazy
                            if p in doc["arrays"] and doc["arrays"][p]["shape"]])
    params = doc["params"]
    if isinstance(params, dict) and params.get("nan_policy") == "omit":
        # one depth per training row, those left out (NaN) included: their number is not
        # in the document (bounded by the cap on the arrays' total size only)
        lazy.add(TRAIN_DEPTH_ARRAY)
    for path, spec in doc["arrays"].items():
        if path.startswith(STREAM_HISTORY) and all(k <= keys for k in spec["shape"]):
            continue
        if path not in lazy and any(k > longest for k in spec["shape"]):
            raise corrupted(where, f"array {path!r} declares shape {tuple(spec['shape'])}, "
                                   f"longer than a model of {n} rows, {d} features and {m} "
                                   f"directions holds (at most {longest} along each axis); "
                                   "save the model again or restore the store from a copy")


def _check_rebuilt(doc: dict[str, Any], where: str, max_bytes: int) -> None:
    """Refuse reference rows of a shape other than the summary's ``n x d``, before reading.

    A summary whose sorted blocks are rebuilt from its rows (format version 5)
    must declare rows of exactly ``n`` (``n_samples_fit_``, also its blocks'
    row count) by ``d`` (its directions' width), with more directions ``m``
    than features; the ``8 m n`` bytes of the blocks rebuilt count against
    the cap on a model's memory with the arrays (:func:`_check_manifest`).
    """
    manifest = doc["arrays"]
    n = doc["state"]["n_samples_fit_"]
    total = sum(np.dtype(spec["dtype"]).itemsize * math.prod(spec["shape"])
                for spec in manifest.values())
    for fields in rebuilt_summaries(doc["state"]):
        paths = []
        for name in ("rows", "directions"):
            ref = fields.get(name)
            path = ref.get("path") if isinstance(ref, dict) and ref.get("kind") == "array" \
                else None
            if path not in manifest:
                raise corrupted(where, f"its summary's {name} to rebuild its blocks from are not "
                                       "an array it lists; save the model again or restore the "
                                       "store from a copy")
            paths.append(path)
        rows, directions = (manifest[p]["shape"] for p in paths)
        rebuild = fields["blocks"]["rebuild"]
        count = rebuild.get("n") if isinstance(rebuild, dict) else None
        if len(directions) != 2 or count != n or rows != [n, directions[1]] \
                or directions[1] >= directions[0]:
            raise corrupted(where, f"array {paths[0]!r} declares shape {tuple(rows)}, not the "
                                   f"{n} rows by the {directions[1:2] or '?'} features of its "
                                   f"summary (of {directions[:1] or '?'} directions) that its "
                                   "blocks are rebuilt from; save the model again or restore "
                                   "the store from a copy")
        total += 8 * directions[0] * n
    if total > max_bytes:
        raise ModelFormatError(
            f"the model {where!r} declares {total / 2**30:.2f} GiB of arrays and sorted "
            f"projections, more than the {max_bytes / 2**30:.2f} GiB a model may take; if you "
            "trust it, set DASKDEPTH_MAX_MODEL_BYTES (or pass max_bytes) to a larger number of "
            "bytes")


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
        if doc["format_version"] < STREAM_FROM_VERSION and any(
                k in doc["state"] for k in STREAM_STATE):
            raise corrupted(where, f"it holds the state of a stream, which format version "
                                   f"{doc['format_version']} does not; save the model again or "
                                   "restore the store from a copy")
        _check_manifest(doc["arrays"], where, _max_bytes(max_bytes))
        _check_declared_shapes(doc, where)
        _check_rebuilt(doc, where, _max_bytes(max_bytes))
        store = where if is_url(where) else str(local_path(where))
        reader = BlockReader(opened.group, doc["arrays"], doc["classes"], where,
                             BlockSource(store, storage_options, "", doc["checksum"]),
                             doc["format_version"], doc.get("nodes") or {})
        params = {k: reader.value(v) for k, v in doc["params"].items()}
        state = {k: reader.value(v) for k, v in doc["state"].items()}
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            RecursionError) as exc:
        raise malformed(where, exc) from None
    return StoredModel(where=where, estimator=name, params=params, state=state)
