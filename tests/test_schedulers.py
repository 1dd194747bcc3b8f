"""Same depths on every Dask scheduler, and recognisable task names."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import dask
import numpy as np
import pytest
from conftest import DISTRIBUTED_ROWS, chunked, gaussian_data
from dask.base import tokenize
from dask.utils import key_split
from distributed import Client, LocalCluster
from distributed.diagnostics.progress_stream import progress_quads

import daskdepth
from daskdepth.runtime.keys import VERBS, is_package_key, key_name, task_prefix

TOL = 1e-3


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as c:
        yield c


def _fit_score(x, q, *, depth="ai-irw", m=20, tol=TOL, rows=500):
    cls = daskdepth.AIIRW if depth == "ai-irw" else daskdepth.IRW
    model = cls(n_directions=m, tol=tol, random_state=3).fit(chunked(x, rows))
    out = model.score_samples(chunked(q, max(1, q.shape[0] // 3)))
    return model, out.compute()


@pytest.fixture(scope="module")
def small():
    x = gaussian_data(2000, 3, seed=10)
    return x, x[:600]


@pytest.fixture(scope="module")
def small_baseline(small):
    with dask.config.set(scheduler="sync"):
        return _fit_score(*small)


@pytest.fixture(scope="module")
def process_pool():
    # One pool for the whole module: dask would otherwise spawn fresh processes
    # for every compute call of a fit.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _pids(block):
    return np.full(block.shape[0], os.getpid())


@pytest.mark.parametrize("scheduler", ["threads", "sync", "processes"])
def test_in_memory_path_local_schedulers(small, small_baseline, scheduler, process_pool):
    base_model, base = small_baseline
    extra = {"pool": process_pool} if scheduler == "processes" else {}
    with dask.config.set(scheduler=scheduler, **extra):
        model, got = _fit_score(*small)
        pids = chunked(small[1], 100).map_blocks(_pids, drop_axis=1, dtype=int).compute()
    assert (set(pids) != {os.getpid()}) == (scheduler == "processes")
    assert model.n_passes_ == 0
    np.testing.assert_allclose(got, base, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.directions_, base_model.directions_, rtol=1e-12)


def test_in_memory_path_distributed_client(small, small_baseline, cluster):
    _, base = small_baseline
    with Client(cluster):
        model, got = _fit_score(*small)
        # Outputs of NumPy input come back as NumPy through the client as well.
        local = model.score_samples(small[1])
    assert isinstance(local, np.ndarray)
    np.testing.assert_allclose(got, base, rtol=0, atol=1e-12)
    np.testing.assert_allclose(local, base, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def big():
    x = gaussian_data(DISTRIBUTED_ROWS, 2, seed=11)
    return x, x[:4000]


@pytest.fixture(scope="module")
def big_baseline(big):
    with dask.config.set(scheduler="threads"):
        return _fit_score(*big, rows=10_000)


@pytest.mark.parametrize("scheduler", ["sync", "distributed"])
def test_distributed_path_schedulers(big, big_baseline, scheduler, cluster):
    base_model, base = big_baseline
    assert base_model.n_passes_ >= 1
    if scheduler == "distributed":
        with Client(cluster):
            model, got = _fit_score(*big, rows=10_000)
    else:
        with dask.config.set(scheduler=scheduler):
            model, got = _fit_score(*big, rows=10_000)
    assert model.n_passes_ >= 1
    assert np.abs(got - base).max() <= 2 * TOL
    # The row sample, and with it the pilot trees, is keyed on row indices only.
    assert model.error_bound_ <= TOL


def test_distributed_client_small_processes_cluster():
    # A real multi-process cluster: summaries travel to workers by pickling.
    x = gaussian_data(400, 2, seed=12)
    with dask.config.set(scheduler="sync"):
        _, base = _fit_score(x, x, m=8, rows=100)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as c, Client(c):
        _, got = _fit_score(x, x, m=8, rows=100)
    np.testing.assert_allclose(got, base, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- task names


def test_score_graph_keys_are_named():
    x = gaussian_data(1000, 2, seed=13)
    model = daskdepth.AIIRW(n_directions=10, random_state=0).fit(x)
    out = model.score_samples(chunked(x, 250))
    graph = out.__dask_graph__()
    names = {key_split(k) for k in graph}
    assert task_prefix("score") in names
    assert {key_split(k) for k in out.__dask_keys__()} == {task_prefix("score")}
    assert len(out.__dask_keys__()) == 4
    # Only the input array and daskdepth's own tasks are in the graph.
    assert all(is_package_key(k) or key_split(k) == "array" for k in graph), names


def test_fit_graph_keys_are_named(cluster):
    # The passes of a distributed-path fit run under <verb>-daskdepth-* task names.
    x = gaussian_data(DISTRIBUTED_ROWS, 2, seed=14)
    with Client(cluster) as client:
        daskdepth.IRW(n_directions=8, tol=TOL, random_state=0).fit(chunked(x, 35_000))
        prefixes = set(client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
    assert {task_prefix(v) for v in ("tally", "dedup", "count", "build")} <= \
        prefixes, prefixes


def test_every_key_on_a_cluster_is_named_by_its_verb(cluster):
    """No group named after a type (BlockSummary, DepthSummary, ndarray): scatters are named."""
    x = gaussian_data(DISTRIBUTED_ROWS, 2, seed=15)
    with Client(cluster) as client:
        model = daskdepth.AIIRW(n_directions=8, tol=TOL, random_state=0).fit(chunked(x, 35_000))
        model.score_samples(chunked(x[:1000], 500)).compute()
        prefixes = set(client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
    ours = {task_prefix(v) for v in VERBS}
    assert {task_prefix(v) for v in ("pick", "bin", "share")} <= prefixes, prefixes
    # Besides ours: the input's own chunks, and dask's key that gathers a computed result.
    others = {p for p in prefixes - ours if not p.startswith("finalize")}
    assert others <= {"array"}, others


def test_progress_panel_shows_every_verb_whole():
    """The dashboard's progress panel cuts group names over 15 characters: verbs are short."""
    names = [key_split(key_name(v, tokenize(v), 0)) for v in VERBS]
    assert names == [task_prefix(v) for v in VERBS]
    counts = {n: 1 for n in names}
    quads = progress_quads({state: counts for state in (
        "all", "memory", "erred", "released", "processing", "queued")}, nrows=len(names))
    for verb, shown in zip(VERBS, (quads["show-name"][quads["name"].index(n)] for n in names),
                           strict=True):
        assert shown == f"daskdepth-{verb}" and verb.isalpha(), shown


# --------------------------------------------------------------------------- stale keys


def test_score_keys_differ_for_different_models():
    # Regression: score keys once hashed id(summary_), which CPython reuses after a
    # refit, so a distributed scheduler holding an earlier persisted result with the
    # same key names returned stale depths.
    rng = np.random.default_rng(0)
    x = chunked(rng.normal(size=(400, 2)), 100)
    model = daskdepth.IRW(n_directions=4, tol=0, random_state=0)
    seen: dict[str, np.ndarray] = {}
    for _ in range(300):
        model.fit(rng.normal(size=(50, 2)))
        out = model.score_samples(x)
        name, depth = out.name, out.compute()
        del out  # keep no reference to the summary, as after persist() on a cluster
        if name in seen:
            np.testing.assert_array_equal(depth, seen[name])
        seen[name] = depth
