"""Safe writes: a store appears at its target complete, or not at all.

:func:`check_output` refuses targets that are not safe to write (a URL, the
input or a path inside it, an existing path without ``overwrite``, a directory
that is not a Zarr store).  :class:`SafeOutput` writes to a temporary sibling
of the target (``OUTPUT.daskdepth-tmp-<pid>-<hex>``) and moves it into place
with :func:`os.replace` only when it is complete.  A job killed at any moment
leaves nothing at the target, or the old target intact when it was being
replaced; the next job writing to the same target removes such leftovers (and
puts back an old target that a killed job had moved aside but not yet
replaced).  A job ended by a signal at any other moment (even between creating
its temporary and entering the ``with`` block that removes it) removes it with
:func:`remove_pending`, since every temporary is registered before it exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .paths import is_url, is_zarr_store, local_path

#: Marker in the names of temporaries that are being written.
TMP_MARK = ".daskdepth-tmp-"
#: Marker in the name an old target gets while it is being replaced.
OLD_MARK = ".daskdepth-old-"

_LEFTOVER = re.compile(r"\.daskdepth-(tmp|old)-(\d+)-[0-9a-f]+$")

#: Room a sibling's name needs after the target's name: the mark, a pid and 12 hex digits.
SIBLING_SUFFIX = len(TMP_MARK) + 20 + 1 + 12
#: Longest file name when the file system does not say (NAME_MAX on Linux and macOS).
NAME_MAX = 255

#: Temporaries this process created (or is about to create) and has neither committed nor
#: removed; :func:`remove_pending` removes them when a signal ends the job.
_PENDING: set[Path] = set()
_PENDING_LOCK = threading.Lock()


def check_output(out: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = (),
                 overwrite: bool = False) -> Path:
    """Resolve ``out`` and refuse it when writing there would not be safe.

    Refused: a URL (outputs are local for now); a path that is, contains, or
    lies inside one of the ``inputs``; an existing path without ``overwrite``;
    with ``overwrite``, an existing path that is not a Zarr store (so that a
    typo cannot replace an unrelated directory); a missing parent directory.

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
            raise OutputError(f"output {text!r} already exists; pass --overwrite (or "
                              "overwrite=True) to replace it")
        if not (is_zarr_store(target) or (target.is_dir() and not any(target.iterdir()))):
            raise OutputError(f"refusing to overwrite {text!r}: it is not a Zarr store")
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {text!r}: directory {str(target.parent)!r} does not "
                          "exist")
    return target


def _check_apart(target: Path, text: str, src: str | os.PathLike[str]) -> None:
    """Refuse a target that is, contains or lies inside the (local) input ``src``."""
    src_text = os.fspath(src)
    if is_url(src_text):
        return
    source = local_path(src_text)
    if target == source:
        raise OutputError(f"output {text!r} is the input; write the result to another path")
    if source in target.parents:
        raise OutputError(f"output {text!r} lies inside the input {src_text!r}; write the "
                          "result outside it")
    if target in source.parents:
        raise OutputError(f"output {text!r} contains the input {src_text!r}; write the "
                          "result elsewhere")


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


def _fsync_dir(path: Path) -> None:
    """Flush a directory's entries (the renames) to disk, where the platform allows."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # e.g. Windows, or no such directory yet
        return NAME_MAX


def _stem(target: Path) -> str:
    """The start of the names of ``target``'s siblings: its name, shortened when too long.

    A legal name of up to NAME_MAX characters leaves no room for a sibling's suffix;
    such names are cut and made unique again with a hash of the whole name.

    Examples
    --------
    >>> _stem(Path("/tmp/out.zarr"))
    'out.zarr'
    >>> len(_stem(Path("/tmp") / ("x" * 250))) + SIBLING_SUFFIX <= 255
    True
    """
    name = target.name
    room = _name_max(target.parent) - SIBLING_SUFFIX
    if len(name.encode()) <= room:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    keep = name.encode()[:max(0, room - 13)].decode(errors="ignore")
    return f"{keep}~{digest}"


def _sibling(target: Path, mark: str) -> Path:
    """A fresh name next to ``target`` that tells who made it: ``<target><mark><pid>-<hex>``."""
    return target.parent / f"{_stem(target)}{mark}{os.getpid()}-{uuid.uuid4().hex[:12]}"


def remove_pending() -> list[Path]:
    """Remove this process's temporaries that were neither committed nor removed yet.

    For a job ended by a signal: whatever the moment the signal came (even
    between the creation of a temporary and the start of the ``with`` block
    whose exit removes it), the temporary was registered before it was created.

    Examples
    --------
    >>> remove_pending()
    []
    """
    with _PENDING_LOCK:
        pending = sorted(_PENDING)
        _PENDING.clear()
    removed = []
    for path in pending:
        if path.exists() or path.is_symlink():
            _remove(path)
            removed.append(path)
    return removed


def leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Temporaries of earlier jobs writing to ``target`` whose process has ended.

    Examples
    --------
    >>> import tempfile, os
    >>> leftovers(os.path.join(tempfile.mkdtemp(), "out.zarr"))
    []
    """
    target = local_path(target)
    if not target.parent.is_dir():
        return []
    found = []
    stem = _stem(target)
    prefix = stem + ".daskdepth-"
    for entry in target.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        m = _LEFTOVER.search(entry.name)
        if m is None or entry.name[: m.start()] != stem:
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
        self.path = _sibling(self.target, TMP_MARK)
        self.committed = False

    def __enter__(self) -> SafeOutput:
        clean_leftovers(self.target)
        # Registered before it exists: a signal handler that raises anywhere from here on
        # (even before this method returns, when __exit__ would not run) leaves it to
        # remove_pending().
        with _PENDING_LOCK:
            _PENDING.add(self.path)
        try:
            os.mkdir(self.path)
        except BaseException:
            self._discard()
            raise
        return self

    def _discard(self) -> None:
        """Remove the temporary (if any) and forget it."""
        _remove(self.path)
        with _PENDING_LOCK:
            _PENDING.discard(self.path)

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
            old = _sibling(target, OLD_MARK)
            os.replace(target, old)
        os.replace(self.path, target)
        self.committed = True
        with _PENDING_LOCK:
            _PENDING.discard(self.path)
        if old is not None:
            _remove(old)
        _fsync_dir(target.parent)
        return target

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.committed:
            self._discard()
