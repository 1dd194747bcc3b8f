"""Kernels ready in every worker before a fit's first pass (daskdepth/estimators/warmup.py)."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskdepth
from daskdepth.errors import ClusterSettingWarning
from daskdepth.estimators import warmup
from daskdepth.estimators.warmup import (
    MINI_DIRECTIONS,
    fit_kind,
    miniature,
    miniature_job,
    warm_workers,
)
from daskdepth.kernels._jit import compiled_here
from daskdepth.runtime.client import (
    TASK_PROFILER,
    listen_to_phases,
    phase,
    profiler_can_deadlock,
    unheard_phases,
)
from daskdepth.runtime.warm import compile_apart, warm_here


@pytest.mark.slow
def test_a_cold_cluster_compiles_apart_and_nothing_in_the_workers(tmp_path, monkeypatch):
    # An empty kernel cache shared by two worker processes, as on a fresh machine.
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(tmp_path / "cache"))
    # (data and seed for which the fit refines: the same on any cluster, as its bits)
    x = da.random.RandomState(0).standard_normal((800_000, 2), chunks=(100_000, 2))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as lc, Client(lc) as client:
        x = x.persist()
        model = daskdepth.IRW(n_directions=20, tol=1e-4, random_state=0)
        ready = warm_workers(model, 2)
        # both warm up at once: one had the kernels compiled by a process apart while
        # the other waited on the cache's lock, then found the record (the cache is shared)
        assert sorted(r["how"] for r in ready.values()) == ["cached", "compiled apart"]
        assert sum(client.run(lambda: sum(compiled_here().values())).values()) == 0
        # pilot leaves too heavy on purpose (as the miniature's): sampling noise alone is
        # absorbed without a refinement (fitting.summaries.finish_block's ``spare``)
        model._pilot_overfull = 3.0
        model.fit(x)
        assert model.n_passes_ == 2  # every phase ran: the histogram and the refinement
        model.score_samples(x).compute()
        # the workers loaded every kernel of the fit and the scoring from the cache
        assert client.run(lambda: sum(compiled_here().values())) == {a: 0 for a in ready}
        loaded = client.run(lambda: sum(sum(k.stats.cache_hits.values())
                                        for k in __import__("daskdepth.kernels._jit",
                                                            fromlist=["_"])._KERNELS))
        assert all(n > 0 for n in loaded.values())
        # the miniature was unpickled only in the process that compiled: the workers
        # imported what the passes need, not the estimators or scikit-learn
        imported = client.run(lambda: sorted(
            m for m in ("sklearn", "daskdepth.estimators") if m in __import__("sys").modules))
        assert imported == {a: [] for a in ready}
        again = warm_workers(model, 2)  # once per process and kind of fit
        assert [r["how"] for r in again.values()] == ["ready"] * 2


class Refusing(daskdepth.IRW):
    """An estimator whose miniature fails."""

    def fit(self, X, y=None, **kw):
        raise RuntimeError("refused")


def test_a_failing_miniature_leaves_the_kernels_to_the_job(tmp_path):
    marker = tmp_path / "ready-x"
    how = compile_apart(miniature_job(Refusing(), 2), marker)
    assert how.startswith("not compiled apart (exit status 1: RuntimeError: refused")
    assert not marker.exists()  # the cache does not claim what it does not hold


def test_the_process_apart_caches_and_says_so(tmp_path):
    import os

    from daskdepth.kernels._jit import kernel_cache_dir

    folder = kernel_cache_dir()  # the process apart checks and uses the same cache
    if folder is None:
        pytest.skip("no kernel cache in this environment")
    marker = folder / f"ready-test-{os.getpid()}"
    try:
        assert compile_apart(miniature_job(daskdepth.IRW(), 2), marker) == "compiled apart"
        assert "IRW with 2 features" in marker.read_text()
    finally:
        marker.unlink(missing_ok=True)
    # a record outside the cache it used is not written
    assert compile_apart(miniature_job(daskdepth.IRW(), 2), tmp_path / "ready-y") \
        .startswith("not compiled apart")
    assert not (tmp_path / "ready-y").exists()


def test_nothing_is_compiled_in_the_clients_own_process():
    import os

    done = warm_here(miniature_job(Refusing(), 2), "a kind of its own", client_pid=os.getpid())
    assert done["how"] == "ready"


def test_without_a_cluster_nothing_is_warmed():
    assert warm_workers(daskdepth.IRW(), 3) == {}


def test_the_miniature_keeps_what_decides_the_kernels():
    mini = miniature(daskdepth.AIIRW(covariance="mcd", n_directions="auto", tol=0.0, verbose=2))
    assert mini.get_params()["covariance"] == "mcd"
    assert mini.get_params()["n_directions"] == MINI_DIRECTIONS  # 'auto' is drawn on the client
    assert mini.get_params()["tol"] == 0.0
    assert mini.get_params()["verbose"] == 0
    assert fit_kind(daskdepth.AIIRW(covariance="mcd"), 4) != fit_kind(daskdepth.AIIRW(), 4)
    assert fit_kind(daskdepth.AIIRW(tol=0.0), 4) != fit_kind(daskdepth.AIIRW(), 4)
    assert fit_kind(daskdepth.AIIRW(n_directions=9, random_state=1), 4) == fit_kind(
        daskdepth.AIIRW(), 4)


def test_phases_of_a_job_run_for_its_own_purpose_are_not_heard():
    heard = []
    with listen_to_phases(lambda name, started, _: heard.append((name, started))):
        with unheard_phases(), phase("moments", tasks=False):
            pass
        with phase("pilot", tasks=False):
            pass
    assert heard == [("pilot", True), ("pilot", False)]


def test_without_a_kernel_cache_the_miniature_runs_in_the_worker(monkeypatch):
    import daskdepth.runtime.warm as warm

    monkeypatch.setattr(warm, "ready_marker", lambda kind: None)
    job = miniature_job(daskdepth.IRW(), 2)
    done = warm_here(job, "a kind without a cache", client_pid=-1)
    assert done["how"] == "compiled here"
    # once per process and kind of fit
    again = warm_here(job, "a kind without a cache", client_pid=-1)
    assert again["how"] == "ready"


def _profiled(client) -> set[bool]:
    return set(client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks)
               .values())


@pytest.mark.parametrize("profiler", [True, False])
@pytest.mark.parametrize("how", ["started here", "by address", "keep"])
def test_the_deadlock_prone_profiler_is_turned_off_here_or_warned_of_once(profiler, how,
                                                                         monkeypatch):
    """Python 3.11: a local cluster of this process loses its task profiler, without a word;
    workers this process did not start are warned of once, with the one-time fix.

    The warning had come on every run of a script with ``Client()``, with advice for the
    workers' start that such a script cannot act on after the fact.
    """
    monkeypatch.setattr(warmup, "_warned", set())
    x = np.random.default_rng(0).normal(size=(300, 2))
    choice = {"daskdepth.task-profiler": "keep"} if how == "keep" else {}
    # on (or off), but sampling once an hour: on 3.11 it could deadlock this very test
    with dask.config.set({TASK_PROFILER: profiler, "distributed.worker.profile.interval": "1h",
                          "distributed.worker.profile.cycle": "2h", **choice}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         dashboard_address=":0") as lc, \
            Client(lc.scheduler_address if how == "by address" else lc) as client, \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        daskdepth.IRW(n_directions=10, random_state=0).fit(x)
        daskdepth.IRW(n_directions=10, random_state=1).fit(x)  # the same workers: once
        profiled = _profiled(client)
    at_risk = profiler and profiler_can_deadlock()
    turned_off = at_risk and how == "started here"
    assert profiled == {profiler and not turned_off}
    ours = [w for w in seen if issubclass(w.category, ClusterSettingWarning)]
    assert len(ours) == int(at_risk and not turned_off), [str(w.message) for w in seen]
    if ours:
        message = str(ours[0].message)
        assert "\n" not in message  # the command line prints a warning's first line
        assert message.startswith("2 of 2 workers ("), message
        assert ("Turn it off once for good where the workers start: a dask config file they "
                "read (e.g. ~/.config/dask/distributed.yaml) with 'distributed: {worker: "
                "{profile: {enabled: false}}}', or DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="
                "False in their environment") in message
        assert ("to silence it: warnings.filterwarnings('ignore', "
                "category=daskdepth.ClusterSettingWarning)") in message
        assert ours[0].filename == __file__  # points at the user's fit
