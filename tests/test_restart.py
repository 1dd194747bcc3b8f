"""A model fitted on a cluster whose scheduler dropped its state: said, with what to do.

A model fitted on a cluster keeps its summary in the workers' memory
(:class:`daskdepth.runtime.shards.ClusterBlock`).  Workers lost, even all of
them, cost recomputation only; ``client.restart()`` drops every key, and
distributed then fails the next scoring, or the fit that was running, with a
bare ``FuturesCancelledError``.  daskdepth raises
:class:`daskdepth.SummaryLostError` instead, which says the summary lived on
the restarted workers and how to keep a model across a restart.

In-process workers have no nanny, so ``client.restart()`` shuts them down;
new ones are started in their place, as a nanny would.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import chunked
from distributed import Client, LocalCluster

import daskdepth
import daskdepth.runtime.memory
from daskdepth.runtime.client import listen_to_phases
from daskdepth.runtime.shards import ClusterBlock

pytestmark = pytest.mark.timeout(600)

#: How long to wait for workers to come and go: a hang guard, not a timing assumption.
PATIENCE = 120.0


@pytest.fixture(autouse=True)
def always_shard(monkeypatch):
    """The summary stays on the workers however small (as in tests/test_shards.py)."""
    monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)


@pytest.fixture
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc) as client:
        yield lc, client


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def _workers_replaced(lc: LocalCluster, client: Client, restart: bool) -> None:
    """Every worker gone (after ``client.restart()`` if ``restart``), then two new ones."""
    if restart:
        client.restart(wait_for_workers=False)
    lc.scale(0)
    _until(lambda: not lc.workers, "the workers to leave")
    lc.scale(2)
    client.wait_for_workers(2, timeout=PATIENCE)


def _data() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(3000, 4))


def test_a_restart_drops_the_models_summary_and_says_how_to_keep_it(cluster, tmp_path):
    lc, client = cluster
    x = _data()
    model = daskdepth.IRW(n_directions=64, random_state=0).fit(chunked(x, 1000))
    assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
    before = model.score_samples(x[:50])
    kept = model.save(tmp_path / "kept.zarr")
    # every worker lost: the scheduler computes the summary again, the same bits
    _workers_replaced(lc, client, restart=False)
    np.testing.assert_array_equal(model.score_samples(x[:50]), before)
    # a restart drops it: no bare FuturesCancelledError, but what happened and what to do
    _workers_replaced(lc, client, restart=True)
    message = r"summary lived in the memory of the cluster's workers.*scheduler-restart.*" \
              r"save it before \(model\.save\(path\)\).*daskdepth\.load\(path\).*fitted again"
    for call in (lambda: model.score_samples(x[:50]), lambda: model.predict(x[:50]),
                 lambda: model.score_samples(chunked(x[:50], 25)),
                 lambda: model.explain(x[:5]), lambda: model.save(tmp_path / "late.zarr")):
        with pytest.raises(daskdepth.SummaryLostError, match=message):
            call()
    assert not (tmp_path / "late.zarr").exists()
    # the model saved before the restart scores as before; a new fit works
    np.testing.assert_array_equal(daskdepth.load(kept).score_samples(x[:50]), before)
    again = daskdepth.IRW(n_directions=64, random_state=0).fit(chunked(x, 1000))
    np.testing.assert_array_equal(again.score_samples(x[:50]), before)


@pytest.mark.parametrize("when", ["pilot", "offset"])
def test_a_restart_during_a_fit_is_said_in_the_fits_terms(cluster, when):
    lc, client = cluster
    x = np.random.default_rng(1).normal(size=(20_000, 4))
    restarted = []

    def restart_at(name: str, started: bool, span: str | None) -> None:
        if name == when and started and not restarted:
            restarted.append(name)
            _workers_replaced(lc, client, restart=True)

    with listen_to_phases(restart_at), \
            pytest.raises(daskdepth.SummaryLostError,
                          match=r"the fit's intermediate results.*dropped while it ran "
                                r"\(distributed cancelled them: .*\).*Fit again"):
        daskdepth.IRW(n_directions=64, tol=1e-3, random_state=0).fit(chunked(x, 5000))
    assert restarted == [when]
    # the cluster is usable again: the same fit now succeeds
    model = daskdepth.IRW(n_directions=64, tol=1e-3, random_state=0).fit(chunked(x, 5000))
    assert model.score_samples(x[:5]).shape == (5,)
