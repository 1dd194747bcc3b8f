"""Safe writes: a store appears at its target complete, or not at all.

:func:`check_output` refuses targets that are not safe to write (a URL, the
input or a path inside it, also when reached under another path such as a bind
mount; an existing path without ``overwrite``; with ``overwrite``, anything but
a store daskdepth wrote).  :class:`SafeOutput` writes to a temporary sibling of
the target (``OUTPUT.daskdepth-tmp-<pid>-<hex>``) and moves it into place with
:func:`os.replace` only when it is complete and still its own.

A job owns its temporary through a *lease*, the sibling file
``OUTPUT.daskdepth-lease-<pid>-<hex>`` that names the machine (host name, boot
id, PID namespace) and the process (PID and start time) and whose modification
time a thread refreshes every :data:`HEARTBEAT_SECONDS`.  A later job writing to
the same target removes a temporary (and puts back an old target moved aside)
only when its lease proves the owner gone: on the same machine, its process has
ended (or its PID now belongs to another process); elsewhere, no heartbeat for
:data:`LEASE_EXPIRY_SECONDS`.  Temporaries without a lease (user folders named
alike, or left by an older daskdepth) are never touched.

A job ended by a signal at any other moment (even between creating its
temporary and entering the ``with`` block that removes it) removes it with
:func:`remove_pending`, since every temporary is registered before it exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .paths import (
    MAX_METADATA_BYTES,
    ZARR_METADATA,
    UnsafeFileError,
    check_regular,
    is_url,
    local_path,
    local_target,
    read_regular,
)

#: Marker in the names of temporaries that are being written.
TMP_MARK = ".daskdepth-tmp-"
#: Marker in the name an old target gets while it is being replaced.
OLD_MARK = ".daskdepth-old-"
#: Marker in the names of the leases that say which job owns a temporary.
LEASE_MARK = ".daskdepth-lease-"
#: File in a temporary holding its job's token, checked before the temporary is moved into place.
OWNER_FILE = ".daskdepth-owner"
#: Seconds between two refreshes of a lease's modification time.
HEARTBEAT_SECONDS = 30.0
#: A lease of another machine without heartbeat for this long belongs to a dead job.
LEASE_EXPIRY_SECONDS = 15 * 60.0
#: After a job whose temporary cluster workers write has ended, its temporary is kept this
#: long (from the last heartbeat): the workers may still be finishing their tasks.
REMOTE_GRACE_SECONDS = 120.0

#: Attribute of the root group that marks an output store written by daskdepth, and its value.
OUTPUT_ATTR = "daskdepth_output"
OUTPUT_VERSION = 1
#: Root-group attribute of a saved model (a JSON document whose ``format`` is MODEL_FORMAT).
MODEL_ATTR = "daskdepth"
MODEL_FORMAT = "daskdepth-model"


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


# --------------------------------------------------------------------------- output checks


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
            raise OutputError(f"output {text!r} already exists; pass --overwrite (or "
                              "overwrite=True) to replace it")
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


def _read_json(path: Path) -> Any:
    """The JSON in ``path`` (None when missing, too large, not a regular file or not JSON).

    Read with :func:`~daskdepth.storage.paths.read_regular`: a FIFO or ``/dev/zero``
    in its place is not read (callers refuse those first, with a message).
    """
    try:
        return json.loads(read_regular(path, path.name, MAX_METADATA_BYTES).decode("utf-8"))
    except (OSError, ValueError):  # UnsafeFileError is a ValueError
        return None


def root_attributes(path: Path) -> dict[str, Any] | None:
    """The attributes of the Zarr store at ``path`` (format 3 or 2); None when it is not one."""
    meta = _read_json(path / "zarr.json")
    if isinstance(meta, dict) and "zarr_format" in meta:
        attrs = meta.get("attributes", {})
        return attrs if isinstance(attrs, dict) else {}
    if (path / ".zgroup").is_file() or (path / ".zarray").is_file():
        attrs = _read_json(path / ".zattrs") if (path / ".zattrs").exists() else {}
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
    meta = _read_json(path / "zarr.json")
    return isinstance(meta, dict) and meta.get("node_type") == "array"


def _is_node(path: Path) -> bool:
    """A directory holding Zarr metadata (an array or group of the store)."""
    return (not path.is_symlink() and path.is_dir()
            and any((path / m).is_file() for m in ("zarr.json", ".zarray", ".zgroup")))


# --------------------------------------------------------------------------- ownership


@dataclasses.dataclass(frozen=True)
class Owner:
    """Who writes a temporary: the machine (host, boot id, PID namespace) and the process."""

    host: str
    boot_id: str
    pid_ns: str
    pid: int
    start: str  # start time of the process (clock ticks after boot), "" when unknown

    def same_machine(self, other: Owner) -> bool:
        """Whether PIDs of ``other`` can be checked here (same host, boot and PID namespace)."""
        return (bool(self.boot_id) and bool(self.pid_ns) and self.host == other.host
                and self.boot_id == other.boot_id and self.pid_ns == other.pid_ns)


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """Start time of process ``pid`` from ``/proc`` (Linux), "" when unknown."""
    stat = _read_small(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_ns(pid: int | str = "self") -> str:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid")
    return ""


def this_process() -> Owner:
    """The :class:`Owner` of the running process."""
    pid = os.getpid()
    return Owner(socket.gethostname(), _read_small("/proc/sys/kernel/random/boot_id"),
                 _pid_ns(), pid, _start_time(pid))


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (True when it cannot be told)."""
    if os.name == "nt":  # pragma: no cover - os.kill would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


@dataclasses.dataclass(frozen=True)
class Lease:
    """A lease's content: its owner, the job's token, and whether remote workers write."""

    owner: Owner
    token: str
    remote_writers: bool

    def to_json(self) -> str:
        return json.dumps({"lease": 1, **dataclasses.asdict(self.owner), "token": self.token,
                           "remote_writers": self.remote_writers})

    @classmethod
    def read(cls, path: Path) -> Lease | None:
        """The lease at ``path``; None when missing, unreadable or malformed."""
        doc = _read_json(path)
        try:
            owner = Owner(str(doc["host"]), str(doc["boot_id"]), str(doc["pid_ns"]),
                          int(doc["pid"]), str(doc["start"]))
            return cls(owner, str(doc["token"]), bool(doc["remote_writers"]))
        except (TypeError, KeyError, ValueError):
            return None


def lease_alive(path: Path, now: float | None = None) -> bool:
    """Whether the job holding the lease at ``path`` may still be writing.

    On the owner's machine, the process must be running with the same start
    time (a reused PID is another process); when the start time cannot be
    read, a heartbeat within :data:`LEASE_EXPIRY_SECONDS` is required too.
    After the process has ended, a temporary that cluster workers wrote stays
    :data:`REMOTE_GRACE_SECONDS` after the last heartbeat.  For another
    machine, only the heartbeat tells.  A lease being written (unreadable) is
    alive while fresh.
    """
    now = time.time() if now is None else now
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return False
    lease = Lease.read(path)
    if lease is None or not lease.owner.same_machine(this_process()):
        return age < LEASE_EXPIRY_SECONDS
    owner = lease.owner
    if _pid_alive(owner.pid):
        start = _start_time(owner.pid)
        if owner.start and start:
            if start == owner.start:
                return True
        elif age < LEASE_EXPIRY_SECONDS:
            return True
    return lease.remote_writers and age < REMOTE_GRACE_SECONDS


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

    Only what a lease proves dead (:func:`lease_alive`); see :func:`unowned`
    for look-alikes without a lease.

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


class _Heartbeat:
    """A daemon thread refreshing a lease's modification time."""

    def __init__(self, path: Path, interval: float) -> None:
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="daskdepth-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


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
        Final local path; checked with :func:`check_output`.
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
        self._heartbeat: _Heartbeat | None = None

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
            self._heartbeat = _Heartbeat(self.lease, HEARTBEAT_SECONDS)
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
        :data:`REMOTE_GRACE_SECONDS` before a later job may remove it.
        """
        self.remote_writers = True
        self._write_lease(exclusive=False)

    def keep(self, reason: str) -> None:
        """Leave the temporary and its lease in place on exit, saying ``reason``.

        For writers that could not be stopped: the lease is refreshed and marked
        as one of remote writers, so that no job removes the temporary within
        :data:`REMOTE_GRACE_SECONDS`.
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
                                  "pass --overwrite (or overwrite=True) to replace it")
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
