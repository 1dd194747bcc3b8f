"""daskdepth on a real cluster: a scheduler and workers as separate processes.

The processes are started with the dask CLIs on 127.0.0.1 (see
:mod:`proccluster`) and scored through both the Python API (``Client(address)``)
and the command line (``daskdepth score ... --scheduler ADDRESS``).  Fault
tests kill a worker or the scheduler in the middle of a job.  Every process is
stopped by the fixtures, also when a test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import gaussian_data
from distributed import Client, LocalCluster
from proccluster import (
    ProcessCluster,
    pressure_lines,
    slow_chunk,
    start_cluster,
    wait_for_workers,
    worker_report,
)

import daskdepth
import daskdepth.runtime.memory
import daskdepth.runtime.refusals
from daskdepth.cli.cluster import Runner
from daskdepth.cli.jobs import write_store
from daskdepth.cli.ui import UI
from daskdepth.errors import SummaryMemoryWarning
from daskdepth.runtime.keys import is_package_key, task_prefix
from daskdepth.runtime.memory import (
    WorkerMemory,
    directions_per_block,
    rows_per_chunk,
    summary_bytes,
    worker_memory,
)
from daskdepth.runtime.refusals import SUMMARY_SHARE, summary_memory_message
from daskdepth.storage import leases
from daskdepth.storage.atomic import SafeOutput, clean_leftovers, leftovers
from daskdepth.storage.leases import Lease

#: More rows than the in-memory exact path takes, so that fitting runs the
#: distributed passes (moments, pilot, histogram, refine, score).
ROWS = 200_000
FEATURES = 3
STORE_CHUNK = 25_000
DIRECTIONS = 16
TOL = 1e-3
SEED = 7
#: Seconds a job may take to fail once its scheduler is gone.
FAIL_WITHIN = 60.0

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return gaussian_data(ROWS, FEATURES, seed=SEED)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, data: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("store") / "x.zarr"
    zarr.create_array(str(path), data=data, chunks=(STORE_CHUNK, FEATURES))
    return path


def _model() -> daskdepth.AIIRW:
    return daskdepth.AIIRW(n_directions=DIRECTIONS, tol=TOL, random_state=SEED)


def _job(x: da.Array) -> tuple[daskdepth.AIIRW, np.ndarray]:
    """Fit on ``x`` and score its rows (the main job)."""
    model = _model().fit(x)
    return model, np.asarray(model.score_samples(x).compute())


@pytest.fixture(scope="module")
def baseline(store: Path) -> tuple[daskdepth.AIIRW, np.ndarray]:
    """The single-machine result (threads of this process)."""
    with dask.config.set(scheduler="threads"):
        model, depth = _job(da.from_zarr(str(store)))
    assert model.n_passes_ >= 1  # the distributed passes ran
    return model, depth


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """Scheduler and two one-thread workers (1 GiB each), shared by the module."""
    with start_cluster(tmp_path_factory.mktemp("cluster"), 2) as pc:
        yield pc


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Callable[..., ProcessCluster]]:
    """Start a cluster for one test (which may kill its processes); always stopped."""
    started: list[ProcessCluster] = []

    def start(n_workers: int, memory_limit: str = "1GiB") -> ProcessCluster:
        pc = start_cluster(tmp_path / f"cluster{len(started)}", n_workers,
                           memory_limit=memory_limit)
        started.append(pc)
        return pc

    # A client that gives up reconnecting to a dead scheduler does not reset
    # dask's global scheduler setting (distributed leaves 'dask.distributed').
    scheduler = dask.config.get("scheduler", None)
    try:
        yield start
    finally:
        for pc in started:
            pc.close()
        if scheduler is None:
            dask.config.config.pop("scheduler", None)
        else:  # pragma: no cover - the suite runs without a global scheduler
            dask.config.set(scheduler=scheduler)


def _client(pc: ProcessCluster, n_workers: int) -> Client:
    # A short timeout: a client whose scheduler is gone stops reconnecting quickly.
    client = Client(pc.address, timeout="10s")
    wait_for_workers(client, n_workers, pc)
    return client


def _prefix_states(client: Client) -> dict[str, dict[str, int]]:
    return client.run_on_scheduler(lambda dask_scheduler: {
        name: dict(prefix.states) for name, prefix in dask_scheduler.task_prefixes.items()
        if is_package_key(name)})


def _wait_for_tasks(client: Client, prefix: str, alive: Callable[[], bool],
                    timeout: float = 120.0) -> dict[str, dict[str, int]]:
    """Wait until a task of ``prefix`` has finished while the job still runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise AssertionError(f"the job ended before any {prefix} task finished")
        states = _prefix_states(client).get(prefix, {})
        if states.get("memory", 0) + states.get("released", 0) + states.get("forgotten", 0):
            return _prefix_states(client)
        time.sleep(0.05)
    raise AssertionError(f"no {prefix} task finished within {timeout} s")


class _Background:
    """Run ``fn`` in a thread, keeping its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the job did not end within {timeout} s"


def _score_cli(store: Path, out: Path, address: str, *extra: str,
               **kwargs: Any) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "daskdepth", "score", str(store), "--out", str(out),
           "--scheduler", address, "--n-directions", str(DIRECTIONS), "--tol", str(TOL),
           "--seed", str(SEED), "--quiet", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def _read_depth(path: Path) -> np.ndarray:
    with xr.open_zarr(str(path)) as ds:
        return np.asarray(ds["depth"].values)


# --------------------------------------------------------------------------- scoring


def test_python_api_on_process_cluster(cluster, store, baseline):
    base_model, base = baseline
    with _client(cluster, 2) as client:
        model, depth = _job(da.from_zarr(str(store)))
        reports = client.run(worker_report)
        prefixes = set(_prefix_states(client))
        spans = client.run_on_scheduler(lambda dask_scheduler: sorted(
            {tuple(s.name) for s in dask_scheduler.extensions["spans"].spans.values()}))
    np.testing.assert_allclose(depth, base, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(model.directions_, base_model.directions_)
    assert model.error_bound_ <= TOL
    # Both worker processes did part of the work.
    assert all(r["executed"] > 0 for r in reports.values()), reports
    # The dashboard's task stream and progress bars name the passes ...
    assert {task_prefix(v) for v in ("tally", "pilot", "count", "score")} <= prefixes, \
        prefixes
    # ... and its spans group them by phase.
    for phase in ("moments", "pilot", "histogram", "offset"):
        assert ("daskdepth", phase) in spans, spans


def test_cli_on_process_cluster(cluster, store, baseline, tmp_path):
    _, base = baseline
    out = tmp_path / "depth.zarr"
    proc = _score_cli(store, out, cluster.address)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    np.testing.assert_allclose(_read_depth(out), base, rtol=0, atol=1e-9)
    with xr.open_zarr(str(out)) as ds:
        assert ds.attrs["seed"] == SEED
        assert ds.attrs["n_samples_fit"] == ROWS


def test_same_seed_same_scores_any_workers_threads_chunks(cluster, store, baseline):
    _, base = baseline
    x = da.from_zarr(str(store))
    chunkings = [x, x.rechunk({0: 60_000}), x.rechunk({0: (ROWS - 130_001, 130_001)})]
    results = []
    with _client(cluster, 2):  # two processes, one thread each
        results += [_job(c)[1] for c in chunkings]
    # One worker with three threads, and three one-thread workers, in this process.
    for workers, threads in ((1, 3), (3, 1)):
        with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=False,
                          dashboard_address=":0") as lc, Client(lc):
            results.append(_job(chunkings[1])[1])
    # Same chunking: bit for bit; other chunkings: rounding of the moments only.
    np.testing.assert_array_equal(results[0], base)
    for got in results[1:]:
        np.testing.assert_allclose(got, base, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- faults


def test_worker_killed_mid_job(fresh_cluster, store, baseline):
    _, base = baseline
    pc = fresh_cluster(2)
    with _client(pc, 2) as client:
        job = _Background(lambda: _job(da.from_zarr(str(store))))
        _wait_for_tasks(client, task_prefix("count"), job.alive)
        pc.kill_worker("w0")  # SIGKILL to the worker and its nanny
        killed_mid_job = job.alive()
        job.join(240)
        remaining = client.scheduler_info(n_workers=-1)["workers"]
    assert killed_mid_job
    assert job.error is None, repr(job.error)
    assert len(remaining) == 1
    _, depth = job.result
    np.testing.assert_allclose(depth, base, rtol=0, atol=1e-9)


def test_worker_joins_mid_job(fresh_cluster, store, baseline):
    _, base = baseline
    pc = fresh_cluster(1)
    with _client(pc, 1) as client:
        job = _Background(lambda: _job(da.from_zarr(str(store))))
        _wait_for_tasks(client, task_prefix("tally"), job.alive)
        # Stall the only worker so that the job is still running when the new one
        # has started and connected (which takes longer than this small job).
        pc.pause_worker("w0")
        try:
            pc.add_worker("late")
            wait_for_workers(client, 2, pc)
            joined_mid_job = job.alive()
        finally:
            pc.resume_worker("w0")
        job.join(240)
        reports = client.run(worker_report)
    assert joined_mid_job
    assert job.error is None, repr(job.error)
    assert len(reports) == 2, "the late worker never connected"
    assert all(r["executed"] > 0 for r in reports.values()), f"a worker ran no task: {reports}"
    np.testing.assert_allclose(job.result[1], base, rtol=0, atol=1e-9)


def test_scheduler_lost_mid_job(fresh_cluster, store, tmp_path):
    """The scheduler dies while a Python job and a command-line job run on it."""
    pc = fresh_cluster(2)
    out = tmp_path / "depth.zarr"
    with _client(pc, 2) as client:
        proc = _score_cli(store, out, pc.address)
        try:
            _wait_for_tasks(client, task_prefix("tally"), lambda: proc.poll() is None)
            job = _Background(lambda: _job(da.from_zarr(str(store))))
            _wait_for_tasks(client, task_prefix("count"),
                            lambda: job.alive() and proc.poll() is None)
            pc.kill_scheduler()
            start = time.monotonic()
            job.join(FAIL_WITHIN)
            stdout, stderr = proc.communicate(timeout=FAIL_WITHIN)
            waited = time.monotonic() - start
        finally:
            if proc.poll() is None:  # pragma: no cover - a hang: do not leave it behind
                proc.kill()
                proc.communicate()
        client.close(timeout=5)
    # Python: a clear error, no hang.  distributed's words depend on which call met the
    # closed connection first: they name the scheduler, or its address (a closed stream).
    assert job.error is not None, "the job succeeded without a scheduler"
    assert "scheduler" in str(job.error) or pc.address in str(job.error), repr(job.error)
    # Command line: exit status 1, one error line, no output and no leftovers.
    assert proc.returncode == 1, (proc.returncode, stderr)
    # one line: distributed's own log records (tracebacks) are held back without --debug
    assert stderr.strip().splitlines() == [
        "daskdepth: error: the connection to the Dask scheduler was lost during the job (did "
        "the scheduler stop?); nothing was written"], stderr
    assert not out.exists()
    assert leftovers(out) == []
    assert waited < FAIL_WITHIN


# --------------------------------------------------------------------------- failed writes

#: Seconds each chunk of the slow writes below takes on a worker.
CHUNK_SECONDS = 1.0


def _slow_dataset(n_chunks: int = 12, bad: int = 4) -> xr.Dataset:
    """A variable whose chunks take CHUNK_SECONDS each to compute; chunk ``bad`` fails."""
    x = da.zeros(n_chunks * 100, chunks=100).map_blocks(slow_chunk, CHUNK_SECONDS, bad,
                                                         dtype=float)
    return xr.Dataset({"depth": ("sample", x)})


def test_failed_write_leaves_no_temporary(cluster, tmp_path):
    """A chunk fails while the other worker is computing the next: nothing is left behind.

    The job removes its temporary only once no worker runs a task of the write
    any more; removing it earlier let the running task re-create it with its chunk.
    """
    out = tmp_path / "out.zarr"
    with pytest.raises(RuntimeError, match="chunk 4 cannot be read"), \
            SafeOutput(out) as safe, Runner(cluster.address, UI(quiet=True)) as runner:
        write_store(runner, _slow_dataset(), safe, "writing")
    assert not runner.stray_writers
    time.sleep(3 * CHUNK_SECONDS)  # a task still running would have written by now
    assert list(tmp_path.iterdir()) == []


def test_write_losing_its_scheduler_keeps_the_temporary(fresh_cluster, tmp_path):
    """Workers cannot be told to stop: the temporary stays, leased, until they are surely done."""
    pc = fresh_cluster(2)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "out.zarr"

    def kill_when_writing() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(p.is_file() for t in out.parent.glob("out.zarr.daskdepth-tmp-*")
                   for p in (t / "depth" / "c").glob("*")):
                pc.kill_scheduler()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_writing, daemon=True)
    killer.start()
    start = time.monotonic()
    with pytest.warns(UserWarning, match="left in place: the cluster's workers may still"), \
            pytest.raises(Exception, match="scheduler"), \
            SafeOutput(out) as safe, Runner(pc.address, UI(quiet=True)) as runner:
        write_store(runner, _slow_dataset(n_chunks=40, bad=-1), safe, "writing")
    killer.join(5)
    assert time.monotonic() - start < FAIL_WITHIN
    assert runner.stray_writers and not out.exists()
    assert safe.path.exists() and Lease.read(safe.lease).remote_writers
    assert leftovers(out) == []  # the job's process still runs
    # The job's process ends (its lease now names a process that has ended) ...
    lease = json.loads(safe.lease.read_text())
    safe.lease.write_text(json.dumps({**lease, "pid": _dead_pid(), "start": "1"}))
    assert leftovers(out) == []  # ... but its workers may still write for a while
    time.sleep(2 * CHUNK_SECONDS)  # they have finished the tasks they had started
    then = time.time() - leases.REMOTE_GRACE_SECONDS - 1
    os.utime(safe.lease, (then, then))  # the grace period has passed
    assert clean_leftovers(out) == sorted([safe.path, safe.lease])
    time.sleep(2 * CHUNK_SECONDS)
    assert list(out.parent.iterdir()) == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --------------------------------------------------------------------------- memory


def test_chunk_defaults_follow_the_memory_limit(cluster):
    small, large = WorkerMemory(2**30, 4), WorkerMemory(16 * 2**30, 1)
    assert rows_per_chunk(5, small) < rows_per_chunk(5, large)
    assert directions_per_block(5, 400_000, small) < directions_per_block(5, 400_000, large)
    with _client(cluster, 2):
        mem = worker_memory()
    assert (mem.limit, mem.nthreads) == (2**30, 1)


def test_large_summary_is_reported(monkeypatch):
    small = WorkerMemory(32 * 2**20, 1)
    for module in (daskdepth.runtime.memory, daskdepth.runtime.refusals):
        monkeypatch.setattr(module, "worker_memory", lambda: small)
    x = gaussian_data(3000, 2, seed=5)
    # In memory the summary is the sorted projections: 8 bytes per row and direction,
    # 14.4 MB for 600 directions (200 would take 4.8 MB, under a quarter of 32 MiB).
    with pytest.warns(SummaryMemoryWarning, match=r"MiB \(in this process\)"):
        daskdepth.IRW(n_directions=600, tol=1e-4, random_state=0).fit(x)
    assert summary_memory_message(200, 3000, 1e-2, small) is None
    # Sharded over 8 workers of 16 MiB, each holds an eighth: no warning; over 2, a warning
    # that gives each worker's share.
    assert summary_memory_message(200, 3000, 1e-4, WorkerMemory(16 * 2**20, 1, 8)) is None
    assert "sharded over 2 workers, about" in summary_memory_message(
        200, 3000, 1e-4, WorkerMemory(16 * 2**20, 1, 2))


@pytest.mark.slow
def test_summary_larger_than_a_workers_share_is_sharded(fresh_cluster):
    """A summary of about 360 MiB on two workers of 768 MiB: each holds its share.

    Whole on every worker it would take more than a quarter of a worker's memory
    limit (the old SummaryMemoryWarning); sharded, each worker holds about half,
    no warning is raised, and fitting and scoring run with no spill, pause or
    restart, each worker's peak memory under the spill threshold.
    """
    m, tol = 3000, 1e-4
    limit = 768 * 2**20
    x = gaussian_data(100_000, 4, seed=31)
    q = gaussian_data(20_000, 4, seed=32)
    total = summary_bytes(m, x.shape[0], tol)
    assert total > SUMMARY_SHARE * limit  # larger than one worker's share
    pc = fresh_cluster(2, "768MiB")
    with _client(pc, 2) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("error", SummaryMemoryWarning)
            model = daskdepth.IRW(n_directions=m, tol=tol, random_state=0).fit(
                da.from_array(x, chunks=(25_000, 4)))
        blocks = model.summary_.blocks
        who = client.who_has([b.future for b in blocks])
        held: dict[str, int] = {}
        for b in blocks:
            for w in who[b.future.key]:
                held[w] = held.get(w, 0) + b.nbytes
        depth = model.score_samples(da.from_array(q, chunks=(5_000, 4))).compute()
        reports = client.run(worker_report)
    assert model.error_bound_ <= tol
    fitted = sum(b.nbytes for b in blocks)
    assert fitted > SUMMARY_SHARE * limit, fitted  # the measured summary, too
    assert len(held) == 2 and max(held.values()) < 0.6 * fitted, held
    assert np.isfinite(depth).all() and depth.max() <= 0.5
    print("summary (MiB):", fitted >> 20, "per worker:", [v >> 20 for v in held.values()],
          "peak worker RSS (MiB):", [r["peak_rss"] >> 20 for r in reports.values()])
    assert pressure_lines(pc) == []
    for report in reports.values():
        assert report["spilled"] == 0, reports
        assert report["peak_rss"] < 0.7 * report["memory_limit"], reports


@pytest.mark.slow
def test_store_twice_the_worker_memory_limit(fresh_cluster, tmp_path):
    """A 2 GiB store on two workers limited to 1 GiB each: no spill, pause or restart."""
    d = 32
    rows = 2**31 // (8 * d) + 4096  # a little over 2 GiB of float64
    store, out = tmp_path / "big.zarr", tmp_path / "depth.zarr"
    arr = zarr.create_array(str(store), shape=(rows, d), chunks=(2**16, d), dtype="float64",
                            compressors=None)
    step = 2**19
    for i0 in range(0, rows, step):
        i1 = min(rows, i0 + step)
        arr[i0:i1] = np.random.default_rng([3, i0]).standard_normal((i1 - i0, d))
    pc = fresh_cluster(2)
    with _client(pc, 2) as client:
        proc = subprocess.run(
            [sys.executable, "-m", "daskdepth", "score", str(store), "--out", str(out),
             "--scheduler", pc.address, "--n-directions", "8", "--tol", str(TOL),
             "--seed", "0", "--quiet"], capture_output=True, text=True, timeout=280)
        reports = client.run(worker_report)
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
    assert proc.returncode == 0, proc.stderr
    depth = _read_depth(out)
    assert depth.shape == (rows,) and np.isfinite(depth).all() and depth.max() <= 0.5
    print("peak worker RSS (MiB):", [r["peak_rss"] >> 20 for r in reports.values()])
    assert n_workers == 2
    assert pressure_lines(pc) == []
    for report in reports.values():
        assert report["spilled"] == 0, reports
        assert report["peak_rss"] < 0.7 * report["memory_limit"], reports  # spill threshold
