"""A real Dask cluster for tests: scheduler and workers as separate processes.

Each process is started with the ``dask`` command line (``python -m dask
scheduler`` / ``python -m dask worker``) in its own process group on
127.0.0.1, logs to a file, and is stopped by signalling its whole group (a
worker's nanny and worker process together), so that nothing outlives a test,
also when it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Seconds to wait for the scheduler file or for workers to connect.
START_TIMEOUT = 90.0
#: Seconds a process gets to exit after SIGTERM before it is killed.
STOP_GRACE = 10.0


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the cluster processes: this one, single-threaded numerics."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1"})
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    # Workers import this module to run the probes below.
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    if extra:
        env.update(extra)
    return env


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group of ``proc`` (ignored when it is gone)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM the group of ``proc``; SIGKILL it if it has not exited after ``grace``."""
    if proc.poll() is None:
        kill_group(proc, signal.SIGCONT)  # a paused process would not see SIGTERM
        kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    # Children (a nanny's worker) may outlive their parent: kill what is left.
    kill_group(proc, signal.SIGKILL)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
        pass


class ProcessCluster:
    """Scheduler and workers started with the dask CLIs, stopped on exit.

    Parameters
    ----------
    workdir : Path
        Directory for the scheduler file, logs and worker directories.
    protocol_args : sequence of str
        Extra arguments for both CLIs (e.g. ``--protocol tls`` and certificates).
    env : dict, optional
        Extra environment variables for the processes.
    """

    def __init__(self, workdir: Path, protocol_args: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.protocol_args = list(protocol_args)
        self.env = subprocess_env(env)
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.address = ""
        self._logs: list[Any] = []

    # ---------------------------------------------------------------- processes

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        f = open(self.workdir / log, "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(f)
        return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=f,
                                stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                start_new_session=True)

    @property
    def scheduler_file(self) -> Path:
        return self.workdir / "scheduler.json"

    def start_scheduler(self) -> str:
        """Start the scheduler; returns its address once it is listening."""
        self.scheduler_file.unlink(missing_ok=True)
        self.scheduler = self._spawn(
            ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(self.scheduler_file), *self.protocol_args],
            "scheduler.log")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"the scheduler exited:\n{self.log('scheduler')}")
            try:
                self.address = json.loads(self.scheduler_file.read_text())["address"]
                return self.address
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        raise TimeoutError(f"no scheduler file after {START_TIMEOUT} s:\n"
                           f"{self.log('scheduler')}")

    def add_worker(self, name: str, *, nthreads: int = 1, memory_limit: str = "1GiB",
                   nanny: bool = True, extra: Sequence[str] = ()) -> subprocess.Popen:
        """Start a worker named ``name`` (it connects in the background)."""
        args = ["worker", self.address, "--name", name, "--nthreads", str(nthreads),
                "--memory-limit", memory_limit, "--no-dashboard",
                "--local-directory", str(self.workdir / name), *self.protocol_args, *extra]
        if not nanny:
            args.append("--no-nanny")
        proc = self._spawn(args, f"{name}.log")
        self.workers[name] = proc
        return proc

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker and its nanny (a lost machine, not a restart)."""
        proc = self.workers[name]
        kill_group(proc, signal.SIGKILL)
        proc.wait(STOP_GRACE)

    def pause_worker(self, name: str) -> None:
        """SIGSTOP a worker and its nanny (a worker that stalls)."""
        kill_group(self.workers[name], signal.SIGSTOP)

    def resume_worker(self, name: str) -> None:
        """SIGCONT a paused worker."""
        kill_group(self.workers[name], signal.SIGCONT)

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler."""
        assert self.scheduler is not None
        kill_group(self.scheduler, signal.SIGKILL)
        self.scheduler.wait(STOP_GRACE)

    def log(self, name: str) -> str:
        """Text logged so far by the process ``name`` ('scheduler' or a worker)."""
        for f in self._logs:
            f.flush()
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        """Stop every process (workers first) and close the logs."""
        for proc in self.workers.values():
            stop(proc)
        if self.scheduler is not None:
            stop(self.scheduler)
        for f in self._logs:
            f.close()
        self._logs.clear()

    def __enter__(self) -> ProcessCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_cluster(workdir: Path, n_workers: int, *, nthreads: int = 1,
                  memory_limit: str = "1GiB", protocol_args: Sequence[str] = (),
                  env: dict[str, str] | None = None) -> ProcessCluster:
    """A started :class:`ProcessCluster` with ``n_workers`` workers named ``w0``, ``w1``...

    The caller closes it (use it as a context manager); it is closed here when
    starting fails.
    """
    cluster = ProcessCluster(workdir, protocol_args, env)
    try:
        cluster.start_scheduler()
        for i in range(n_workers):
            cluster.add_worker(f"w{i}", nthreads=nthreads, memory_limit=memory_limit)
    except BaseException:
        cluster.close()
        raise
    return cluster


def wait_for_workers(client: Any, n: int, cluster: ProcessCluster | None = None,
                     timeout: float = START_TIMEOUT) -> None:
    """Wait until ``n`` workers are connected, with the logs in the error."""
    try:
        client.wait_for_workers(n, timeout=timeout)
    except TimeoutError:
        if cluster is None:
            raise
        logs = "\n".join(f"--- {k}\n{cluster.log(k)[-2000:]}" for k in cluster.workers)
        raise TimeoutError(f"{n} workers did not connect in {timeout} s\n{logs}") from None


# --------------------------------------------------------------------------- probes

#: Log lines of a worker or nanny that mean memory pressure (spilling, pausing,
#: a restart by the nanny).
PRESSURE_MARKS = ("Start spilling", "Pausing worker", "memory budget", "Restarting worker")


def worker_report(dask_worker: Any) -> dict[str, Any]:
    """Peak memory, spilling and activity of a worker (run it with ``client.run``).

    ``peak_rss`` is the largest resident set of the worker process since it
    started (``getrusage``), so it includes every moment of a job; ``spilled``
    counts the keys written to disk by the spill buffer.
    """
    import resource

    spilled = sum(v for k, v in dask_worker.digests_total.items()
                  if isinstance(k, tuple) and "disk-write" in k and k[-1] == "count")
    return {
        "pid": os.getpid(),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "memory_limit": int(dask_worker.memory_manager.memory_limit or 0),
        "spilled": int(spilled),
        "status": dask_worker.status.name,
        "executed": int(dask_worker.state.executed_count),
    }


def pressure_lines(cluster: ProcessCluster) -> list[str]:
    """Log lines of the workers (and nannies) that report memory pressure."""
    lines = []
    for name in cluster.workers:
        lines += [ln for ln in cluster.log(name).splitlines()
                  if any(mark in ln for mark in PRESSURE_MARKS)]
    return lines


def slow_chunk(block: Any, delay: float, bad: int, block_info: Any = None) -> Any:
    """A chunk of a test computation: chunk ``bad`` fails, the others take ``delay`` s."""
    index = block_info[0]["chunk-location"][0]
    if index == bad:
        raise RuntimeError(f"chunk {index} cannot be read")
    time.sleep(delay)
    return block
