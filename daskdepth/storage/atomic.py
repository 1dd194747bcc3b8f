"""Safe writes: a store appears at its target complete, or not at all.

The target is checked first (:func:`daskdepth.storage.targets.check_output`).
:class:`SafeOutput` writes to a temporary sibling of the target
(``OUTPUT.daskdepth-tmp-<pid>-<hex>``) and moves it into place with
:func:`os.replace` only when it is complete and still its own.

A job owns its temporary through a *lease* (:mod:`daskdepth.storage.leases`),
the sibling file ``OUTPUT.daskdepth-lease-<pid>-<hex>`` that names the machine
and the process and whose modification time a thread refreshes.  A later job
writing to the same target removes a temporary (and puts back an old target
moved aside) only when its lease proves the owner gone: on the same machine,
its process has ended (or its PID now belongs to another process); elsewhere,
no heartbeat for :data:`~daskdepth.storage.leases.LEASE_EXPIRY_SECONDS`.
Temporaries without a lease (user folders named alike, or left by an older
daskdepth) are never touched.

A job ended by a signal at any other moment (even between creating its
temporary and entering the ``with`` block that removes it) removes it with
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
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .leases import HEARTBEAT_SECONDS, Heartbeat, Lease, lease_alive, this_process
from .paths import UnsafeFileError, local_path, read_regular
from .targets import check_output, replace_refusal, root_attributes

#: Marker in the names of temporaries that are being written.
TMP_MARK = ".daskdepth-tmp-"
#: Marker in the name an old target gets while it is being replaced.
OLD_MARK = ".daskdepth-old-"
#: Marker in the names of the leases that say which job owns a temporary.
LEASE_MARK = ".daskdepth-lease-"
#: File in a temporary holding its job's token, checked before the temporary is moved into place.
OWNER_FILE = ".daskdepth-owner"


_LEFTOVER = re.compile(r"\.daskdepth-(tmp|old|lease)-(\d+-[0-9a-f]+)$")

#: Room a sibling's name needs after the target's name: the longest mark, a pid and 12 hex
#: digits.
SIBLING_SUFFIX = max(len(TMP_MARK), len(OLD_MARK), len(LEASE_MARK)) + 20 + 1 + 12
#: Longest file name when the file system does not say (NAME_MAX on Linux and macOS).
NAME_MAX = 255

#: Temporaries this process created (or is about to create) and has neither committed nor
#: removed, with their leases; :func:`remove_pending` removes them when a signal ends the job.
_PENDING: dict[Path, Path] = {}
_PENDING_LOCK = threading.Lock()


# --------------------------------------------------------------------------- leftovers


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


def remove_pending() -> list[Path]:
    """Remove this process's temporaries (then their leases) not yet committed or removed.

    For a job ended by a signal: whatever the moment the signal came (even
    between the creation of a temporary and the start of the ``with`` block
    whose exit removes it), the temporary was registered before it was created.
    Temporaries kept for writers that may still run (:meth:`SafeOutput.keep`)
    are not registered any more.

    Examples
    --------
    >>> remove_pending()
    []
    """
    with _PENDING_LOCK:
        pending = sorted(_PENDING.items())
        _PENDING.clear()
    removed = []
    for path, lease in pending:
        for entry in (path, lease):  # the lease last: it says whose the temporary is
            if entry.exists() or entry.is_symlink():
                _remove(entry)
                removed.append(entry)
    return removed


def _siblings(target: Path) -> dict[str, dict[str, Path]]:
    """Temporaries, old targets and leases of ``target``, by job id (``<pid>-<hex>``)."""
    found: dict[str, dict[str, Path]] = {}
    if not target.parent.is_dir():
        return found
    stem = _stem(target)
    prefix = stem + ".daskdepth-"
    for entry in target.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        m = _LEFTOVER.search(entry.name)
        if m is None or entry.name[: m.start()] != stem:
            continue
        found.setdefault(m.group(2), {})[m.group(1)] = entry
    return found


def leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Temporaries, old targets and leases of jobs writing to ``target`` that have ended.

    Only what a lease proves dead (:func:`~daskdepth.storage.leases.lease_alive`);
    see :func:`unowned` for look-alikes without a lease.

    Examples
    --------
    >>> import tempfile, os
    >>> leftovers(os.path.join(tempfile.mkdtemp(), "out.zarr"))
    []
    """
    target = local_path(target)
    found = []
    for parts in _siblings(target).values():
        lease = parts.get("lease")
        if lease is not None and not lease_alive(lease):
            found += parts.values()
    return sorted(found)


def unowned(target: str | os.PathLike[str]) -> list[Path]:
    """Entries named like temporaries of ``target`` but without a lease: never removed."""
    target = local_path(target)
    return sorted(p for parts in _siblings(target).values() if "lease" not in parts
                  for p in parts.values())


def clean_leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Remove what jobs that have ended left for ``target``; return what was removed.

    An old target moved aside by a job killed between its two renames is put
    back when nothing is at ``target``, so it is never lost.  The lease goes
    last, so a cleanup interrupted half-way is finished by the next one.
    """
    target = local_path(target)
    removed = []
    for parts in _siblings(target).values():
        lease = parts.get("lease")
        if lease is None or lease_alive(lease):
            continue
        old, tmp = parts.get("old"), parts.get("tmp")
        if old is not None:
            if not (target.exists() or target.is_symlink()):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(old, target)
            else:
                _remove(old)
                removed.append(old)
        if tmp is not None:
            _remove(tmp)
            removed.append(tmp)
        _remove(lease)
        removed.append(lease)
    return sorted(removed)


# --------------------------------------------------------------------------- safe output


class SafeOutput:
    """Write a store to a temporary sibling and move it to ``target`` when complete.

    Use as a context manager: entering removes what ended jobs left for the
    same target (:func:`clean_leftovers`), takes a lease and creates the empty
    temporary directory ``path``; call :meth:`commit` once everything is
    written there.  Leaving without a commit (an exception, Ctrl-C) removes the
    temporary and the lease, unless :meth:`keep` was called because writers
    may still be running (cluster workers that could not be stopped): then
    both stay, for a later job to remove once the lease has expired.  A job
    killed by SIGKILL leaves them too.

    Parameters
    ----------
    target : str or path-like
        Final local path; checked with :func:`~daskdepth.storage.targets.check_output`.
    overwrite : bool, default=False
        Replace an existing target (a store daskdepth wrote) on commit.
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
        self.inputs = list(inputs)
        self.target = check_output(target, inputs=inputs, overwrite=overwrite)
        self.job = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.path = self._sibling(TMP_MARK)
        self.lease = self._sibling(LEASE_MARK)
        self.token = uuid.uuid4().hex
        self.remote_writers = False
        self.committed = False
        self.kept: str | None = None
        self._heartbeat: Heartbeat | None = None

    def _sibling(self, mark: str) -> Path:
        return self.target.parent / f"{_stem(self.target)}{mark}{self.job}"

    def __enter__(self) -> SafeOutput:
        clean_leftovers(self.target)
        for entry in unowned(self.target):
            warnings.warn(f"{str(entry)!r} is named like a daskdepth temporary but no job owns "
                          "it (no lease): it is left alone; remove it if nothing writes to it",
                          UserWarning, stacklevel=2)
        # Registered before they exist: a signal handler that raises anywhere from here on
        # (even before this method returns, when __exit__ would not run) leaves them to
        # remove_pending().
        with _PENDING_LOCK:
            _PENDING[self.path] = self.lease
        try:
            self._write_lease(exclusive=True)
            self._heartbeat = Heartbeat(self.lease, HEARTBEAT_SECONDS)
            os.mkdir(self.path)
            (self.path / OWNER_FILE).write_text(self.token, encoding="ascii")
        except BaseException:
            self._discard()
            raise
        return self

    def _write_lease(self, exclusive: bool) -> None:
        text = Lease(this_process(), self.token, self.remote_writers).to_json()
        if exclusive:
            fd = os.open(self.lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        else:  # replace atomically: a reader never sees a partial lease
            part = self.path / ".daskdepth-lease.part"
            part.write_text(text, encoding="utf-8")
            os.replace(part, self.lease)

    def expect_remote_writers(self) -> None:
        """Record that cluster workers (other processes) write the temporary.

        After this job has ended, its temporary is then kept for
        :data:`~daskdepth.storage.leases.REMOTE_GRACE_SECONDS` before a later job may remove it.
        """
        self.remote_writers = True
        self._write_lease(exclusive=False)

    def keep(self, reason: str) -> None:
        """Leave the temporary and its lease in place on exit, saying ``reason``.

        For writers that could not be stopped: the lease is refreshed and marked
        as one of remote writers, so that no job removes the temporary within
        :data:`~daskdepth.storage.leases.REMOTE_GRACE_SECONDS`.
        """
        self.kept = reason
        with _PENDING_LOCK:
            _PENDING.pop(self.path, None)
        with contextlib.suppress(OSError):  # called while unwinding: never mask the cause
            if not self.remote_writers:
                self.expect_remote_writers()
            os.utime(self.lease)

    def verify(self, check: Callable[[Path], None] | None = None) -> None:
        """Refuse to commit a temporary that is not this job's, or is incomplete.

        The temporary must hold this job's token (another job may have removed
        it, and cluster workers re-created a fragment) and Zarr root metadata;
        ``check(path)`` may refuse more (missing arrays or chunks).
        """
        try:  # without blocking: whatever replaced the temporary may hold a FIFO there
            token = read_regular(self.path / OWNER_FILE, OWNER_FILE, 4096).decode("ascii",
                                                                                 "replace")
        except (OSError, UnsafeFileError):
            token = ""
        if token != self.token:
            raise OutputError(f"the temporary {str(self.path)!r} of this job was removed or "
                              "replaced while the job ran (by another job?); nothing was "
                              f"written to {str(self.target)!r}: run the job again")
        if root_attributes(self.path) is None:
            raise OutputError(f"the temporary {str(self.path)!r} has no Zarr root metadata: "
                              "the write did not complete; nothing was written to "
                              f"{str(self.target)!r}")
        if check is not None:
            check(self.path)

    def commit(self, check: Callable[[Path], None] | None = None) -> Path:
        """Verify the temporary (:meth:`verify`) and move it into place.

        An old target is first checked again (it must still be a store
        daskdepth wrote), renamed to ``<target>.daskdepth-old-<job>`` and removed
        only after the new one is in place; a job killed between the two renames
        leaves it there, and the next job puts it back.
        """
        if self.committed:
            raise RuntimeError("this output was already committed")
        target = self.target
        old = None
        if target.exists() or target.is_symlink():
            if not self.overwrite:
                raise OutputError(f"output {str(target)!r} appeared while the job ran; "
                                  "pass overwrite=True to replace it")
            reason = replace_refusal(target)
            if reason is not None:
                raise OutputError(f"refusing to overwrite {str(target)!r}: {reason}")
            old = self._sibling(OLD_MARK)
        self.verify(check)
        (self.path / OWNER_FILE).unlink()
        if old is not None:
            os.replace(target, old)
        os.replace(self.path, target)
        self.committed = True
        with _PENDING_LOCK:
            _PENDING.pop(self.path, None)
        if old is not None:
            _remove(old)
        self._release()
        _fsync_dir(target.parent)
        return target

    def _release(self) -> None:
        """Stop the heartbeat and give the lease up."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        _remove(self.lease)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.committed:
            return
        if self.kept is not None:
            if self._heartbeat is not None:
                self._heartbeat.stop()
                self._heartbeat = None
            warnings.warn(f"the temporary {str(self.path)!r} was left in place: {self.kept}; "
                          f"a later job writing to {str(self.target)!r} removes it",
                          UserWarning, stacklevel=2)
            return
        self._discard()

    def _discard(self) -> None:
        """Remove the temporary (if any), then give the lease up, and forget them."""
        _remove(self.path)
        self._release()
        with _PENDING_LOCK:
            _PENDING.pop(self.path, None)
