"""The block byte store of saved models: a summary's direction blocks, read block by block.

The direction blocks of a summary are written one after the other, each
block's arrays as one byte range of the ``uint8`` array ``.../blocks/data``
(:class:`BlockWriter`; its scalars in the model document), with a SHA-256 per
block (over its :func:`block_binding`, which ties it to its place, direction
rows and the summary's location, then its bytes) and each direction's error
bound in ``.../blocks/errors``: a summary held on a cluster is saved with one
block on the client at a time.  Reading (:class:`BlockReader`) checks each
block's byte range and the dtype, shape and place of each of its arrays
against the block data's manifest entry, and returns :class:`StoredBlock`
handles that read their block when it is needed (on the client, or on the
worker that scores with it), so a model is loaded without reading its summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import threading
from numbers import Integral
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import ModelFormatError
from ..kernels.routing import PAD
from ..summary.blocks import BlockHandle, BlockMeta, is_block, is_handle
from ..summary.depth import DepthSummary
from ..summary.guide import GUIDE_MAX
from ..summary.sorted import BlockSorted, rebuild_sorted
from .codec import (
    ARRAY_KINDS,
    NODE_METADATA_BYTES,
    Reader,
    Writer,
    allowed_class,
    class_name,
    construct,
    corrupted,
    is_count,
    is_scalar,
    json_scalar,
    unsafe_store,
)
from .paths import (
    MAX_METADATA_BYTES,
    UnsafeFileError,
    check_regular,
    local_target,
    open_node,
    quiet_zarr,
    store_file_digest,
)
from .targets import stored_document

#: Chunk size of a model's block data (bytes): a loaded model reads one block
#: with one range read, touching about ``block bytes / SEGMENT_CHUNK_BYTES + 1`` chunks.
SEGMENT_CHUNK_BYTES = 2**20

#: Alignment of each array in a block's byte range (numba kernels read them in place).
SEGMENT_ALIGN = 8
#: First format version whose blocks' checksums cover their :func:`block_binding`.
BOUND_FROM_VERSION = 4
#: First format version that may store a sorted summary's reference rows instead of
#: its blocks (:func:`stores_rows`), the blocks rebuilt from them when read.
REBUILD_FROM_VERSION = 5


def stores_rows(summary: Any) -> bool:
    """Whether a saved ``summary`` keeps its reference rows instead of its blocks' bytes.

    A :class:`~daskdepth.summary.depth.DepthSummary` of sorted projections that
    holds the ``n`` rows they were fitted on (``rows``, ``n x d``), with fewer
    features than directions: the rows take ``8 d n`` bytes, the sorted
    projections ``8 m n``.  Its blocks are rebuilt from the rows when the
    model is read (:func:`~daskdepth.summary.sorted.rebuild_sorted`, the
    same kernel as the fit: the same bits).  Blocks held elsewhere (on a
    cluster's workers) are not read to save it.

    Examples
    --------
    >>> rows = np.zeros((4, 1))
    >>> block, _ = BlockSorted.fit(np.zeros((1, 4)), np.ones((2, 1)), 0, 2)
    >>> stores_rows(DepthSummary(np.zeros(1), np.ones((2, 1)), [block], 4, rows=rows))
    True
    >>> stores_rows(DepthSummary(np.zeros(1), np.ones((2, 1)), [block], 4))
    False
    """
    if not isinstance(summary, DepthSummary) or not isinstance(summary.rows, np.ndarray):
        return False
    m, d = summary.directions.shape
    return (d < m and summary.rows.shape == (summary.n, d) and bool(summary.blocks)
            and all(is_handle(b) or type(b) is BlockSorted for b in summary.blocks))


def rebuilt_summaries(node: Any, depth: int = 0) -> list[dict[str, Any]]:
    """The fields of every stored summary of a document's node whose blocks are rebuilt.

    Each is the JSON ``fields`` of a summary whose ``blocks`` are
    ``{"kind": "list", "rebuild": {"n": ..., "items": [[j0, j1], ...]}}`` and
    whose ``rows`` refer to an array: what
    :func:`daskdepth.storage.modelformat.read_model` checks against the
    model's ``n`` and the summary's directions before reading any array.
    """
    found: list[dict[str, Any]] = []
    if depth > 64:
        return found
    if isinstance(node, dict):
        fields = node.get("fields") if node.get("kind") == "dataclass" else None
        blocks = fields.get("blocks") if isinstance(fields, dict) else None
        if isinstance(blocks, dict) and "rebuild" in blocks:
            found.append(fields)
        for value in node.values():
            found += rebuilt_summaries(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            found += rebuilt_summaries(value, depth + 1)
    return found


class _Rebuild(list):
    """Where the blocks of a summary read from its rows go, until the summary is built.

    Holds the row count and direction ranges the store names; the reader's
    :meth:`BlockReader.built` checks them against the summary and rebuilds
    the sorted blocks in their place.
    """

    def __init__(self, n: int, ranges: list[tuple[int, int]]) -> None:
        super().__init__()
        self.n = n
        self.ranges = ranges


def little_endian(arr: np.ndarray) -> np.ndarray:
    """``arr`` C-contiguous and little-endian (a copy only when it is not)."""
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
        values = little_endian(np.asarray(arr, dtype=np.float64))
        digest.update(json.dumps(list(values.shape)).encode("ascii"))
        digest.update(values.tobytes())
    return digest.digest()


def segment_size(spec: dict[str, Any], nbytes: int, refuse: Any) -> tuple[np.dtype, list[int]]:
    """Dtype and shape of an array stored in a block's bytes, checked to lie within them."""
    shape, offset = spec.get("shape"), spec.get("offset")
    try:
        dtype = np.dtype(spec["dtype"]) if isinstance(spec.get("dtype"), str) else None
    except TypeError:
        dtype = None
    if (set(spec) != {"kind", "offset", "dtype", "shape"} or dtype is None
            or dtype.kind not in ARRAY_KINDS or dtype.itemsize > 8 or dtype.str != spec["dtype"]
            or dtype.byteorder == ">" or not isinstance(shape, list) or not 1 <= len(shape) <= 2
            or not all(is_count(k) for k in shape) or not is_count(offset)
            or offset % SEGMENT_ALIGN
            or offset + dtype.itemsize * math.prod(shape) > nbytes):
        raise refuse("a block's array is not a numeric array of at most two dimensions "
                     "within the block's bytes")
    return dtype, shape


# --------------------------------------------------------------------------- handles


class BlockSource(NamedTuple):
    """Where a saved model's block data is: the store, its fsspec options, the data array."""

    where: str
    storage_options: dict[str, Any] | None
    data: str
    #: The model document's checksum when the model was read: a store replaced since
    #: (a new fit saved over it) has another, which says why its blocks no longer match.
    generation: str = ""
    #: SHA-256 of the block data's ``zarr.json`` (format version 6), checked at each block
    #: read before Zarr reads the file; '' for older formats (its size is capped only).
    metadata: str = ""


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
            folder = local_target(_join(where, self.source.data))  # also local:// URLs
            name = f"{self.source.data}/zarr.json"
            if self.source.metadata:  # hashed (capped) at each block read, parsed once
                digest = store_file_digest(where, name, self.source.storage_options,
                                           NODE_METADATA_BYTES)
                if digest != self.source.metadata:
                    raise corrupted(where, f"its metadata file {name!r} does not match its "
                                           "checksum (it was edited or padded); save the "
                                           "model again or restore the store from a copy")
            elif folder is not None:  # checked (capped) at each block read, parsed once
                check_regular(folder / "zarr.json", "a zarr.json of its block data",
                              NODE_METADATA_BYTES)
            node = _data_node(_join(where, self.source.data), folder,
                              self.source.storage_options)
            if folder is not None:
                _check_chunk_files(node, folder, item["offset"], item["nbytes"])
        except UnsafeFileError as exc:
            raise unsafe_store(where, exc) from None
        except ModelFormatError:
            raise
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
                dtype, shape = segment_size(spec, raw.size, lambda what: corrupted(where, what))
                start = int(spec["offset"])
                count = math.prod(shape)
                values[name] = raw[start:start + count * dtype.itemsize].view(dtype).reshape(
                    shape)
        block = construct(allowed_class(self.cls), values)
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


#: Block data arrays of local stores opened in this process, by the identity of their
#: ``zarr.json`` (path, device, inode, size, modification time): a model reading its
#: blocks one by one parses that metadata once, not at each block.
_DATA_NODES: dict[tuple[Any, ...], Any] = {}
_DATA_NODES_MAX = 32
_DATA_NODES_LOCK = threading.Lock()


def _data_node(address: str, folder: Path | None,
               storage_options: dict[str, Any] | None) -> Any:
    """The block data array at ``address``: opened once per version of a local store's metadata.

    A store replaced since (another ``zarr.json``: new inode, size or time) is
    opened again; remote stores are opened at each call.
    """
    if folder is None:
        return open_node(address, storage_options)
    st = os.stat(folder / "zarr.json")
    key = (str(folder), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _DATA_NODES_LOCK:  # held while opening: blocks read at once open it once
        node = _DATA_NODES.get(key)
        if node is None:
            node = open_node(address, storage_options)
            while len(_DATA_NODES) >= _DATA_NODES_MAX:
                del _DATA_NODES[next(iter(_DATA_NODES))]
            _DATA_NODES[key] = node
    return node


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
                                    "block data", MAX_METADATA_BYTES)
            except FileNotFoundError:
                raise UnsafeFileError("has a chunk file of its block data that is a symbolic "
                                      "link to nothing") from None


def _join(where: str, path: str) -> str:
    return where.rstrip("/") + "/" + path


# --------------------------------------------------------------------------- writing and reading


class BlockWriter(Writer):
    """A :class:`~daskdepth.storage.codec.Writer` that stores a summary's blocks as byte ranges."""

    def field(self, obj: Any, name: str, path: str) -> Any:
        value = getattr(obj, name)
        if isinstance(obj, DepthSummary) and name in ("blocks", "rows"):
            if stores_rows(obj):
                if name == "rows":
                    return self.value(value, path)
                for block in value:  # a summary its cluster dropped is refused as before
                    check = getattr(block, "check", None)
                    if callable(check):
                        check()
                # the blocks' places only: rebuilt from the rows when read
                return {"kind": "list", "rebuild": {
                    "n": int(obj.n), "items": [[int(b.j0), int(b.j1)] for b in value]}}
            if name == "rows":  # the blocks' bytes are stored, not the rows
                return None
        if (name == "blocks" and isinstance(value, list) and value
                and all(is_block(v) for v in value) and isinstance(getattr(obj, "n", None),
                                                                  Integral)):
            # a summary's direction blocks, with the row count their error bounds need
            # and the directions and centring their checksums cover
            return {"kind": "list", "blocks": self.blocks(value, path, int(obj.n),
                                                          obj.directions, obj.location)}
        return super().field(obj, name, path)

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
            name = self.register(type(block))
            errors.append(np.asarray(block.direction_errors(n), dtype=np.float64))
            data.align()
            start = data.size
            digest = hashlib.sha256(block_binding(index, int(block.j0), int(block.j1), n,
                                                  directions[block.j0:block.j1], location))
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(block):
                v = getattr(block, f.name)
                if isinstance(v, np.ndarray) and v.dtype.kind in "biuf" and v.ndim >= 1:
                    raw = little_endian(v)
                    offset = data.add(raw.tobytes(), digest)
                    fields[f.name] = {"kind": "segment", "offset": offset - start,
                                      "dtype": raw.dtype.str, "shape": list(raw.shape)}
                elif is_scalar(v):
                    fields[f.name] = json_scalar(v)
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


class BlockReader(Reader):
    """A :class:`~daskdepth.storage.codec.Reader` that reads a summary's blocks as handles.

    ``source`` says where the store is (for the handles to read their blocks
    later), ``version`` is the model's format version and ``nodes`` the
    SHA-256 of its metadata files (format version 6: a block data's
    ``zarr.json`` is checked against it at each block read).
    """

    def __init__(self, group: Any, manifest: dict[str, Any], classes: dict[str, list[str]],
                 where: str, source: BlockSource, version: int,
                 nodes: dict[str, str] | None = None) -> None:
        super().__init__(group, manifest, classes, where)
        self.source = source
        self.version = version
        self.nodes = nodes or {}

    def built(self, obj: Any) -> Any:
        if isinstance(obj, DepthSummary):
            if isinstance(obj.blocks, _Rebuild):
                obj.blocks = self.rebuilt_blocks(obj, obj.blocks)
            elif obj.rows is not None:
                raise self.corrupt("its summary holds reference rows beside stored blocks")
            self.bind(obj)
        return obj

    def rebuild(self, node: Any) -> list[Any]:
        """The places of blocks to rebuild from the summary's rows (format version 5)."""
        if self.version < REBUILD_FROM_VERSION:
            raise self.corrupt(f"its summary's blocks are to be rebuilt from its rows, which "
                               f"format version {self.version} does not do")
        if not isinstance(node, dict) or set(node) != {"n", "items"}:
            raise self.corrupt("its summary's blocks to rebuild are not described as a row "
                               "count and items")
        n, items = node["n"], node["items"]
        if not (is_count(n) and n >= 1 and isinstance(items, list) and items):
            raise self.corrupt("its summary's blocks to rebuild have no row count or no items")
        ranges = []
        start = 0
        for item in items:
            if not (isinstance(item, list) and len(item) == 2 and all(is_count(k) for k in item)
                    and item[0] == start and item[1] > start):
                raise self.corrupt("its summary's blocks to rebuild do not follow each other "
                                   "over its directions")
            ranges.append((item[0], item[1]))
            start = item[1]
        return _Rebuild(n, ranges)

    def rebuilt_blocks(self, summary: DepthSummary, pending: _Rebuild) -> list[BlockSorted]:
        """The sorted blocks of ``summary`` rebuilt from its rows, checked before the kernel runs.

        Its row count, location, directions and rows are checked
        (:meth:`~daskdepth.summary.depth.DepthSummary.validate_frame`: the rows
        ``n x d`` finite float64), and the blocks' places against its
        directions, before :func:`~daskdepth.summary.sorted.rebuild_sorted`
        reads any of them.
        """
        if summary.rows is None:
            raise self.corrupt("its summary's blocks are to be rebuilt from rows it does not "
                               "hold")
        if summary.n != pending.n:
            raise self.corrupt(f"its summary's blocks to rebuild are for {pending.n} rows, the "
                               f"summary's {summary.n!r}")
        try:
            summary.validate_frame()
        except ValueError as exc:
            raise self.corrupt(f"its summary is invalid: {exc}") from None
        m, d = summary.directions.shape
        if pending.ranges[-1][1] != m or d >= m:
            raise self.corrupt(f"its summary's blocks to rebuild cover {pending.ranges[-1][1]} "
                               f"directions of {m} (of {d} features)")
        return rebuild_sorted(summary.rows, summary.location, summary.directions, pending.ranges)

    def bind(self, summary: DepthSummary) -> None:
        """Give each stored block of ``summary`` the :func:`block_binding` its checksum covers."""
        for block in summary.blocks if isinstance(summary.blocks, list) else ():
            if not isinstance(block, StoredBlock):
                continue
            block.bound = self.version >= BOUND_FROM_VERSION
            if not block.bound:
                continue
            try:
                block.binding = block_binding(block.index, block.j0, block.j1, summary.n,
                                              summary.directions[block.j0:block.j1],
                                              summary.location)
            except (TypeError, ValueError, IndexError):
                block.binding = None  # odd directions: refused by the summary's validation

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
        if not is_count(n) or n < 1:
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
        if not (is_count(offset) and is_count(nbytes) and offset + nbytes <= size):
            raise self.corrupt(f"a block's bytes lie beyond the end of {data!r}")
        if not (isinstance(digest, str) and len(digest) == 64):
            raise self.corrupt("a block's checksum is not a SHA-256")
        fields = item["fields"]
        if not isinstance(fields, dict) or sorted(fields) != sorted(self.classes[item["class"]]):
            raise self.corrupt("a block's fields are not those of its class")
        eager: dict[str, Any] = {}
        for name, spec in fields.items():
            if isinstance(spec, dict) and spec.get("kind") == "segment":
                segment_size(spec, nbytes, self.corrupt)
            elif is_scalar(spec) and not isinstance(spec, str):
                eager[name] = spec
            else:
                raise self.corrupt(f"a block's field {name!r} is neither an array in its bytes "
                                   "nor a number")
        for name in ("j0", "j1"):
            if not is_count(eager.get(name)):
                raise self.corrupt(f"a block's {name} is not a non-negative integer")
        if eager["j1"] <= eager["j0"]:
            raise self.corrupt("a block holds no direction")
        mb = eager["j1"] - eager["j0"]
        end = 0
        for name, spec in fields.items():  # before anything of the block is read
            if not isinstance(spec, dict):
                continue
            shape = spec["shape"]
            end = max(end, spec["offset"] + np.dtype(spec["dtype"]).itemsize * math.prod(shape))
            if cls is BlockSorted:
                ok = name != "values" or shape == [mb, n]
            else:  # leaf keys, tabulated scores, counts: at most n + PAD per direction,
                #    the routing table at most GUIDE_MAX + 2 cells per direction
                ok = math.prod(shape) <= mb * (max(n, GUIDE_MAX) + PAD + 2) * 2
            if not ok:
                raise self.corrupt(f"a block's array {name!r} declares shape {tuple(shape)}, "
                                   f"more than {mb} directions of {n} rows hold")
        if nbytes != end:  # the writer stores the arrays, nothing after them
            raise self.corrupt(f"a block's byte range ({nbytes} bytes) is not that of its "
                               f"arrays ({end} bytes)")
        return StoredBlock(self.source._replace(data=data,
                                                metadata=self.nodes.get(f"{data}/zarr.json", "")),
                           item, class_name(cls), eager, n, index)
