"""Which targets a job may write, and which stores daskdepth wrote.

:func:`check_output` refuses targets that are not safe to write (a URL, the
input or a path inside it, also when reached under another path such as a bind
mount; an existing path without ``overwrite``; with ``overwrite``, anything but
a store daskdepth wrote, :func:`replace_refusal`).  A store daskdepth wrote
carries a marker in its root attributes: :data:`OUTPUT_ATTR` for an output,
the model document under :data:`MODEL_ATTR` for a saved model
(:func:`stored_document`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .paths import (
    ZARR_METADATA,
    UnsafeFileError,
    check_regular,
    is_url,
    local_path,
    local_target,
    read_json,
)

#: Attribute of the root group that marks an output store written by daskdepth, and its value.
OUTPUT_ATTR = "daskdepth_output"
OUTPUT_VERSION = 1
#: Root-group attribute of a saved model (a JSON document whose ``format`` is MODEL_FORMAT).
MODEL_ATTR = "daskdepth"
MODEL_FORMAT = "daskdepth-model"


def check_output(out: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = (),
                 overwrite: bool = False) -> Path:
    """Resolve ``out`` and refuse it when writing there would not be safe.

    Refused: a URL (outputs are local for now); a path that is, contains, or
    lies inside one of the ``inputs``, compared by path and by file identity
    (device and inode, so a bind mount or an NFS alias of the input is the
    input); an existing path without ``overwrite``; with ``overwrite``, an
    existing path that is not an empty directory or a store daskdepth wrote
    (:func:`replace_refusal`); a missing parent directory.

    Raises
    ------
    OutputError
        Naming the rule and the way out.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> check_output(os.path.join(d, "out.zarr")).name
    'out.zarr'
    """
    text = os.fspath(out)
    if is_url(text):
        raise OutputError(f"output {text!r} is a URL; outputs must be local paths for now")
    target = local_path(text)
    for src in inputs:
        _check_apart(target, text, src)
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise OutputError(f"output {text!r} already exists; pass overwrite=True "
                              "to replace it")
        reason = replace_refusal(target)
        if reason is not None:
            raise OutputError(f"refusing to overwrite {text!r}: {reason}; remove it yourself "
                              "or write to another path")
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {text!r}: directory {str(target.parent)!r} does not "
                          "exist")
    return target


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _same(a: Path, b: Path, b_id: tuple[int, int] | None) -> bool:
    """Whether ``a`` is ``b``: the same resolved path, or the same file (device and inode)."""
    return a == b or (b_id is not None and _identity(a) == b_id)


def _check_apart(target: Path, text: str, src: str | os.PathLike[str]) -> None:
    """Refuse a target that is, contains or lies inside the (local) input ``src``."""
    src_text = os.fspath(src)
    source = local_target(src_text)
    if source is None:  # a remote input cannot be a local output
        return
    src_id = _identity(source)
    if _same(target, source, src_id):
        raise OutputError(f"output {text!r} is the input {src_text!r} (the same directory, "
                          "maybe under another path); write the result to another path")
    if any(_same(p, source, src_id) for p in target.parents):
        raise OutputError(f"output {text!r} lies inside the input {src_text!r}; write the "
                          "result outside it")
    target_id = _identity(target)
    if any(_same(p, target, target_id) for p in source.parents):
        raise OutputError(f"output {text!r} contains the input {src_text!r}; write the "
                          "result elsewhere")


def root_attributes(path: Path) -> dict[str, Any] | None:
    """The attributes of the Zarr store at ``path`` (format 3 or 2); None when it is not one."""
    meta = read_json(path / "zarr.json")
    if isinstance(meta, dict) and "zarr_format" in meta:
        attrs = meta.get("attributes", {})
        return attrs if isinstance(attrs, dict) else {}
    if (path / ".zgroup").is_file() or (path / ".zarray").is_file():
        attrs = read_json(path / ".zattrs") if (path / ".zattrs").exists() else {}
        return attrs if isinstance(attrs, dict) else {}
    return None


#: Root attributes of the outputs of daskdepth before they carried OUTPUT_ATTR.
_LEGACY_OUTPUT = ("title", "daskdepth depth scores")


def written_by_daskdepth(attrs: dict[str, Any]) -> bool:
    """Whether a store's root attributes carry daskdepth's marker (an output or a model).

    Outputs written before the marker existed are recognised by their title
    and ``daskdepth_version`` attribute.
    """
    model = attrs.get(MODEL_ATTR)
    legacy = attrs.get(_LEGACY_OUTPUT[0]) == _LEGACY_OUTPUT[1] and "daskdepth_version" in attrs
    return (attrs.get(OUTPUT_ATTR) == OUTPUT_VERSION or legacy
            or (isinstance(model, dict) and model.get("format") == MODEL_FORMAT))


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def replace_refusal(target: Path) -> str | None:
    """Why the existing ``target`` may not be replaced; None when it may.

    It may when it is an empty directory, or a Zarr store whose root carries
    daskdepth's marker (:data:`OUTPUT_ATTR`, or a model document) and whose
    top level holds nothing but Zarr metadata and Zarr nodes.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> replace_refusal(d) is None
    True
    >>> _ = (d / "notes.txt").write_text("keep")
    >>> replace_refusal(d)
    "it is not a Zarr store (it holds 'notes.txt')"
    """
    if target.is_symlink() or not target.is_dir():
        return "it is a file, not a directory" if target.exists() else "it is a symbolic link"
    entries = sorted(os.listdir(target))
    if not entries:
        return None
    for meta in ZARR_METADATA:  # before anything is read: a FIFO blocks, /dev/zero never ends
        if os.path.lexists(target / meta):
            try:
                check_regular(target / meta, f"a {meta}")
            except (OSError, UnsafeFileError) as exc:
                what = getattr(exc, "reason", None) or f"has a {meta} that cannot be read"
                return f"it {what}"
    attrs = root_attributes(target)
    if attrs is None:
        return f"it is not a Zarr store (it holds {_listing(entries)})"
    if not written_by_daskdepth(attrs):
        return (f"it is a Zarr store that daskdepth did not write (its root attributes have "
                f"no {OUTPUT_ATTR!r} marker nor a model document)")
    chunk = _CHUNK_KEY if (target / ".zarray").is_file() or _is_array(target) else None
    foreign = [e for e in entries if e not in ZARR_METADATA and not _is_node(target / e)
               and not (chunk is not None and chunk.match(e))]
    if foreign:
        return f"it also holds {_listing(foreign)}, which daskdepth did not write"
    return None


#: Top-level names of the chunks of a store whose root is an array (formats 3 and 2).
_CHUNK_KEY = re.compile(r"^(c|\d+([./]\d+)*)$")


def _is_array(path: Path) -> bool:
    meta = read_json(path / "zarr.json")
    return isinstance(meta, dict) and meta.get("node_type") == "array"


def _is_node(path: Path) -> bool:
    """A directory holding Zarr metadata (an array or group of the store)."""
    return (not path.is_symlink() and path.is_dir()
            and any((path / m).is_file() for m in ("zarr.json", ".zarray", ".zgroup")))


def stored_document(node: Any) -> dict[str, Any] | None:
    """The model document of an opened Zarr node, or None when it is not a saved model."""
    import zarr  # deferred: slow to import, and `import daskdepth` does not need it

    doc = dict(node.attrs).get(MODEL_ATTR) if isinstance(node, zarr.Group) else None
    if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
        return None
    return doc
