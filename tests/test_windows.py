"""``window=``: the most recent batches only, the oldest batch's counts subtracted exactly.

A window that drops its oldest batch holds what a fresh model started from
the same template and fed the batches it keeps holds: the same bits.
"""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
from conftest import chunked
from oracle import exact_depth, exact_halfspace_depth

import daskdepth
from daskdepth.summary.streaming import STREAM_SAMPLE, history_bytes

TOL = 0.02

pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _batches(k: int, rows: int = 400, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(rows + 10 * b, 2)) * (1 + 0.2 * b) + 0.3 * b for b in range(k)]


def _state(model, points):
    return (model.score_samples(points).tobytes(), model.error_bound_, model.offset_,
            model.n_samples_fit_, model.batch_rows_.tolist(), model._sample_depth.tobytes())


@pytest.mark.parametrize("cls", [daskdepth.IRW, daskdepth.Halfspace])
def test_dropping_the_oldest_batch_equals_a_fresh_stream_of_the_kept_ones(cls):
    rng = np.random.default_rng(1)
    reference = cls(n_directions=10, tol=TOL, random_state=0).fit(rng.normal(size=(2000, 2)))
    batches = _batches(7)
    points = np.concatenate([rng.normal(size=(150, 2)) * 3, [[1e6, 1e6], [-1e6, 0.0]]])
    window = 3
    model = daskdepth.template(reference).set_params(window=window)
    for k, batch in enumerate(batches, 1):
        model.partial_fit(batch)
        kept = batches[max(0, k - window):k]
        fresh = daskdepth.template(reference)
        for b in kept:
            fresh.partial_fit(b)
        assert _state(model, points) == _state(fresh, points), k
        assert model.n_batches_ == k and len(model._stream.history) == min(k, window)
        union = np.concatenate(kept)
        oracle = exact_halfspace_depth if cls is daskdepth.Halfspace else exact_depth
        exact = oracle(union, points, model.location_, model.directions_)
        assert np.abs(model.score_samples(points) - exact).max() <= model.error_bound_ + 1e-12


def test_the_first_fit_is_the_first_batch_of_the_window():
    batches = _batches(4)
    model = daskdepth.AIIRW(n_directions=12, tol=TOL, random_state=0, window=2)
    q = np.random.default_rng(2).normal(size=(100, 2)) * 2
    for k, b in enumerate(batches, 1):
        model.partial_fit(b)
        # a first batch of leaves on fewer rows than the row limit holds its rows: the
        # window drops the first batch's rows with its counts (and plans its leaves again on
        # the rows it keeps when its bound passes REPLAN_BOUND x tol: the drift here)
        kept = np.concatenate(batches[max(0, k - 2):k])
        np.testing.assert_array_equal(model._stream.rows, kept)
        exact = exact_depth(kept, q, model.location_, model.directions_)
        assert np.abs(model.score_samples(q) - exact).max() <= model.error_bound_ + 1e-12
    assert model.batch_rows_.tolist() == [420, 430] and model.n_samples_fit_ == 850


def test_window_of_dask_batches_on_a_sharded_cluster_has_the_same_bits(monkeypatch):
    from distributed import Client, LocalCluster

    import daskdepth.runtime.memory
    from daskdepth.runtime.shards import ClusterBlock

    batches = _batches(4, rows=1500)
    q = np.random.default_rng(3).normal(size=(120, 2)) * 2

    def run():
        model = daskdepth.IRW(n_directions=40, tol=TOL, random_state=0, window=2)
        for b in batches:
            model.partial_fit(chunked(b, 500))
        return model, model.score_samples(q)

    with dask.config.set(scheduler="threads"):
        local, depth = run()
    monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        model, got = run()
        assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
        np.testing.assert_array_equal(got, depth)
        assert model.offset_ == local.offset_ and model.error_bound_ == local.error_bound_


def test_history_is_bounded_and_stated():
    batches = _batches(5)
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0, window=2)
    for b in batches:
        model.partial_fit(b)
    st = model._stream
    assert len(st.history) == len(st.history_rows) == len(st.history_samples) == 2
    leaves = sum(b.n_leaves for b in model.summary_.blocks)
    kept = sum(c.counts.nbytes + c.ext.nbytes for batch in st.history for c in batch)
    # 8 bytes per leaf (at most: the base leaves, without the added end keys) and 16 per
    # direction per batch; each batch's row sample at most STREAM_SAMPLE rows
    assert kept <= 2 * (8 * leaves + 16 * 6)
    assert all(s.size <= STREAM_SAMPLE for s in st.history_samples)
    assert history_bytes(leaves, 6, 2) == 8 * leaves + 16 * 6 + STREAM_SAMPLE * 24  # d = 2


def test_window_changed_after_the_first_batch_is_refused():
    batches = _batches(3)
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).partial_fit(batches[0])
    model.partial_fit(batches[1])
    model.set_params(window=2)
    with pytest.raises(ValueError, match=r"window=2 was set after this model's first batch.*"
                                         r"template"):
        model.partial_fit(batches[2])
    assert model.n_samples_fit_ == 810
    model.set_params(window=0)
    with pytest.raises(ValueError, match="window"):
        model.partial_fit(batches[2])
    with pytest.raises(ValueError, match="window"):
        daskdepth.IRW(window=-1).partial_fit(batches[0])


def test_window_of_one_keeps_only_the_last_batch():
    batches = _batches(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0, window=1)
        for b in batches:
            model.partial_fit(b)
    assert model.n_samples_fit_ == 420 and model.batch_rows_.tolist() == [420]
    exact = exact_depth(batches[2], batches[2][:50], model.location_, model.directions_)
    assert np.abs(model.score_samples(batches[2][:50]) - exact).max() <= model.error_bound_ + 1e-12
