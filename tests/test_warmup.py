"""Kernels ready in every worker before a fit's first pass (daskdepth/estimators/warmup.py)."""

from __future__ import annotations

import dask.array as da
import pytest
from distributed import Client, LocalCluster

import daskdepth
from daskdepth.estimators.warmup import (
    MINI_DIRECTIONS,
    _warm_here,
    fit_kind,
    miniature,
    warm_workers,
)
from daskdepth.kernels._jit import load_cached, overload_counts
from daskdepth.runtime.client import listen_to_phases, phase, unheard_phases


@pytest.mark.slow
def test_a_cold_cluster_compiles_before_the_passes_and_nothing_during_them(tmp_path,
                                                                           monkeypatch):
    # An empty kernel cache shared by two worker processes, as on a fresh machine.
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(tmp_path / "cache"))
    # (data and seed for which the fit refines: the same on any cluster, as its bits)
    x = da.random.RandomState(0).standard_normal((800_000, 2), chunks=(100_000, 2))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as lc, Client(lc) as client:
        x = x.persist()
        model = daskdepth.IRW(n_directions=20, tol=1e-4, random_state=0)
        ready = warm_workers(model, 2)
        first, second = (ready[addr] for addr in sorted(ready))
        assert first["miniature"] and first["compiled"] > 0 and first["loaded"] == 0
        # the second worker reads what the first compiled into the shared cache
        assert second["miniature"] and second["compiled"] == 0
        assert second["loaded"] >= first["compiled"]
        before = client.run(overload_counts)
        model.fit(x)
        assert model.n_passes_ == 2  # every phase ran: the histogram and the refinement
        model.score_samples(x).compute()
        # no kernel was compiled (nor loaded) by the fit or the scoring themselves
        assert client.run(overload_counts) == before
        again = warm_workers(model, 2)  # once per process and kind of fit
        assert not any(r["miniature"] or r["compiled"] or r["loaded"] for r in again.values())


def test_a_failing_miniature_leaves_the_kernels_to_the_job():
    class Refusing(daskdepth.IRW):
        def fit(self, X, y=None, **kw):
            raise RuntimeError("refused")

    done = _warm_here(Refusing(), 2, "a kind of its own", client_pid=-1)
    assert done["miniature"] is False and done["compiled"] == 0


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


def test_cached_kernels_load_once():
    load_cached()
    assert load_cached() == 0  # every cached signature is already in this process


def test_phases_of_a_job_run_for_its_own_purpose_are_not_heard():
    heard = []
    with listen_to_phases(lambda name, started, _: heard.append((name, started))):
        with unheard_phases(), phase("moments", tasks=False):
            pass
        with phase("pilot", tasks=False):
            pass
    assert heard == [("pilot", True), ("pilot", False)]
