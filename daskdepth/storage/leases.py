"""Process leases: which job owns a temporary, and whether that job may still be writing.

A lease is a small JSON file that names the machine (host name, boot id, PID
namespace) and the process (PID and start time) of a job, and whose
modification time a thread (:class:`Heartbeat`) refreshes every
:data:`HEARTBEAT_SECONDS`.  :func:`lease_alive` says whether its job may still
be writing: on the same machine, while its process runs (a reused PID is
another process); elsewhere, while it has a heartbeat within
:data:`LEASE_EXPIRY_SECONDS`; and, for a job whose cluster workers write,
:data:`REMOTE_GRACE_SECONDS` after that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
from pathlib import Path

from .paths import read_json

#: Seconds between two refreshes of a lease's modification time.
HEARTBEAT_SECONDS = 30.0
#: A lease of another machine without heartbeat for this long belongs to a dead job.
LEASE_EXPIRY_SECONDS = 15 * 60.0
#: After a job whose temporary cluster workers write has ended, its temporary is kept this
#: long (from the last heartbeat): the workers may still be finishing their tasks.
REMOTE_GRACE_SECONDS = 120.0


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
        doc = read_json(path)
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


class Heartbeat:
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
