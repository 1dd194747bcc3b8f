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

An existing target is replaced in one step where the platform allows it
(:func:`exchange`: Linux's ``renameat2`` with ``RENAME_EXCHANGE`` swaps the
temporary and the target): a job killed at any moment leaves the old store or
the new one at the target, never nothing.  Elsewhere the old target is moved
aside first, and a job killed between the two renames leaves it aside for the
next job to put back.

Jobs that read a store, change it and write it back (``daskdepth update``)
hold :class:`ExclusiveLock` on it meanwhile, so that two such jobs run one
after the other and neither loses what the other wrote.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .leases import HEARTBEAT_SECONDS, Heartbeat, Lease, Owner, lease_alive, this_process
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


# --------------------------------------------------------------------------- exchange


#: ``renameat2``'s flag that swaps two paths, and the "current directory" descriptor.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2() -> Any:
    """libc's ``renameat2`` (Linux, glibc 2.28 or later); None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap the existing paths ``a`` and ``b`` in one step; False where that cannot be done.

    Linux's ``renameat2(..., RENAME_EXCHANGE)``: at every moment each path
    names one of the two entries, so a job killed at any point leaves one of
    them at ``b``.  False (nothing changed) on other platforms, without
    ``renameat2``, or on a file system that does not support the exchange.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "a").mkdir(); (d / "b").mkdir(); _ = (d / "a" / "x").write_text("new")
    >>> exchange(d / "a", d / "b") in (True, False)
    True
    """
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


# --------------------------------------------------------------------------- exclusive lock


#: Marker in the name of the lock of a store that a job reads, changes and writes back.
LOCK_MARK = ".daskdepth-lock"


class StoreBusyError(OSError):
    """Another job holds the :class:`ExclusiveLock` of a store (``holder``: who, if known)."""

    def __init__(self, message: str, holder: Owner | None) -> None:
        super().__init__(message)
        self.holder = holder


class ExclusiveLock:
    """Hold a store exclusively while a job reads, changes and writes it back.

    The lock is the file ``<target>.daskdepth-lock`` beside the store, locked
    with ``flock`` (the system releases it when the process ends, however it
    ends: no stale lock outlives a killed job) and holding the job's lease
    (:class:`~daskdepth.storage.leases.Lease`: host, process, start time), which
    says who holds it.  Where ``flock`` is missing, the file is created
    exclusively and a lease whose job has ended
    (:func:`~daskdepth.storage.leases.lease_alive`) is broken.

    Parameters
    ----------
    target : path-like
        The store (a local path).
    wait : float, default=0
        Seconds to wait for another job to release it; then (or at once)
        :class:`StoreBusyError`.
    poll : float, default=0.2
        Seconds between two tries while waiting.

    Examples
    --------
    >>> import tempfile, os
    >>> target = os.path.join(tempfile.mkdtemp(), "model.zarr")
    >>> with ExclusiveLock(target):
    ...     try:
    ...         ExclusiveLock(target).__enter__()
    ...     except StoreBusyError as exc:
    ...         print("busy")
    busy
    >>> os.listdir(os.path.dirname(target))
    []
    """

    def __init__(self, target: str | os.PathLike[str], *, wait: float = 0.0,
                 poll: float = 0.2) -> None:
        self.target = local_path(target)
        self.path = self.target.parent / f"{_stem(self.target)}{LOCK_MARK}"
        self.wait = float(wait)
        self.poll = float(poll)
        self._fd: int | None = None

    def _try(self) -> bool:
        """Take the lock if it is free; whether it was taken."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self._try_exclusive()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:  # the holder before may have removed the file: then lock the new one
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return self._try()
        os.ftruncate(fd, 0)
        os.write(fd, Lease(this_process(), uuid.uuid4().hex, False).to_json().encode())
        self._fd = fd
        return True

    def _try_exclusive(self) -> bool:  # pragma: no cover - platforms without flock
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if not lease_alive(self.path):
                _remove(self.path)
            return False
        os.write(fd, Lease(this_process(), uuid.uuid4().hex, False).to_json().encode())
        self._fd = fd
        return True

    def holder(self) -> Owner | None:
        """Who holds the lock, as its file says (None when it cannot be read)."""
        lease = Lease.read(self.path)
        return lease.owner if lease is not None else None

    def __enter__(self) -> ExclusiveLock:
        deadline = time.monotonic() + self.wait
        while not self._try():
            if time.monotonic() >= deadline:
                owner = self.holder()
                who = (f"process {owner.pid} on {owner.host}" if owner is not None
                       else "another process")
                waited = f" (waited {self.wait:g} s)" if self.wait > 0 else ""
                raise StoreBusyError(
                    f"{str(self.target)!r} is being updated by another job ({who}){waited}; "
                    "it was left as it is: run again once that job has finished, or wait "
                    "for it (--wait SECONDS)", owner)
            time.sleep(self.poll)
        return self

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # before the lock goes: a waiting job then locks a new file
        os.close(fd)


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
        daskdepth wrote), then swapped with the temporary in one step
        (:func:`exchange`) and removed; where that cannot be done, it is
        renamed to ``<target>.daskdepth-old-<job>`` and removed only after the
        new one is in place (a job killed between the two renames leaves it
        there, and the next job puts it back).
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
        if old is not None and exchange(self.path, target):
            # one step: the old target now has the temporary's name (still registered, so a
            # signal from here on removes it, and a later job removes it after a SIGKILL)
            self.committed = True
            _remove(self.path)
        else:
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
