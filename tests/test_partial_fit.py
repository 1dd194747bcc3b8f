"""``partial_fit``: batches counted into the first fit's leaves, the bound kept certified.

After any sequence of batches, the depths are those of an exact in-memory
oracle on the union of the batches, in the first batch's frame and directions,
within ``error_bound_``; the bound may grow under drift, never silently.
"""

from __future__ import annotations

import warnings
import zlib

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import chunked
from oracle import exact_depth, exact_halfspace_depth

import daskdepth
from daskdepth.summary.leaves import BlockLeaves
from daskdepth.summary.sorted import BlockSorted

M = 12
TOL = 0.02


def _oracle(model, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
    ref = rows[np.isfinite(rows).all(axis=1)]
    fn = exact_halfspace_depth if isinstance(model, daskdepth.Halfspace) else exact_depth
    return fn(ref, points, model.location_, model.directions_)


def _stream(kind: str, batches: int, rows: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        if kind == "stationary":
            x = rng.normal(size=(rows, 3))
        elif kind == "drifting":
            x = rng.normal(size=(rows, 3)) + 0.6 * b
        elif kind == "heavy":
            x = rng.standard_t(1.5, size=(rows, 3))
        else:  # tied: few distinct values
            x = np.round(rng.normal(size=(rows, 3)) * 2) / 2
        out.append(x)
    return out


def _points(batches: list[np.ndarray]) -> np.ndarray:
    rng = np.random.default_rng(99)
    union = np.concatenate(batches)
    return np.concatenate([union[::37], rng.normal(size=(60, 3)) * 3,
                           union[:5] + 1e6, union[:5] - 1e6])


def _beyond_all(model, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Points whose projections lie beyond every row's on every direction (by a margin)."""
    ref = rows[np.isfinite(rows).all(axis=1)]
    p = (points - model.location_) @ model.directions_.T
    r = (ref - model.location_) @ model.directions_.T
    lo, hi = r.min(axis=0), r.max(axis=0)
    margin = 1e-9 * (hi - lo + 1.0)
    return ((p > hi + margin) | (p < lo - margin)).all(axis=1)


MODELS = {
    "irw": lambda: daskdepth.IRW(n_directions=M, tol=TOL, random_state=1),
    "ai-irw": lambda: daskdepth.AIIRW(n_directions=M, tol=TOL, random_state=1),
    "halfspace": lambda: daskdepth.Halfspace(n_directions=M, tol=TOL, random_state=1),
}


@pytest.mark.parametrize("kind", ["stationary", "drifting", "heavy", "tied"])
@pytest.mark.parametrize("depth", list(MODELS))
def test_depths_within_the_bound_of_the_exact_union_after_every_batch(depth, kind):
    # crc32, not hash(): str hashes change with every process (PYTHONHASHSEED)
    batches = _stream(kind, 5, 400, seed=zlib.crc32(kind.encode()) % 1000)
    points = _points(batches)
    model = MODELS[depth]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        for b, batch in enumerate(batches):
            model.partial_fit(batch)
            union = np.concatenate(batches[:b + 1])
            assert model.n_samples_fit_ == union.shape[0]
            got = model.score_samples(points)
            err = np.abs(got - _oracle(model, union, points))
            assert err.max() <= model.error_bound_ + 1e-12, (b, err.max(), model.error_bound_)
            # points beyond every row on every direction stay exact (keys at the new
            # extremes); a point 1e6 away in each feature can still project inside
            # the rows on a direction whose coefficients nearly cancel
            beyond = _beyond_all(model, union, points)
            assert beyond[-10:].sum() >= 5
            assert (err[beyond] == 0).all()
    assert model.n_batches_ == 5
    assert model.batch_rows_.tolist() == [400] * 5
    if kind == "stationary":
        assert model.error_bound_ <= 2 * TOL


def test_large_first_fit_in_leaves_and_dask_batches():
    rng = np.random.default_rng(3)
    first = rng.normal(size=(20_000, 2))
    later = [rng.normal(size=(3000, 2)) * 1.3 for _ in range(3)]
    model = daskdepth.AIIRW(n_directions=8, tol=5e-3, random_state=0)
    model.partial_fit(chunked(first, 5000))
    assert all(isinstance(b, BlockLeaves) for b in model.summary_.blocks)
    for batch in later:
        model.partial_fit(chunked(batch, 1000))
    union = np.concatenate([first, *later])
    points = np.concatenate([union[::101], rng.normal(size=(50, 2)) * 4])
    err = np.abs(model.score_samples(points) - _oracle(model, union, points))
    assert err.max() <= model.error_bound_ + 1e-12
    assert model.n_samples_fit_ == union.shape[0]


def test_small_first_fit_is_exact_then_leaves_with_exact_counts():
    rng = np.random.default_rng(4)
    x0, x1 = rng.normal(size=(120, 2)), rng.normal(size=(120, 2))  # 120 rows: exact
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).partial_fit(x0)
    fitted = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).fit(x0)
    assert all(isinstance(b, BlockSorted) for b in model.summary_.blocks)
    # the first call is fit: the same bits
    assert (model.score_samples(x1) == fitted.score_samples(x1)).all()
    assert model.offset_ == fitted.offset_
    model.partial_fit(x1)
    assert all(isinstance(b, BlockLeaves) for b in model.summary_.blocks)
    union = np.concatenate([x0, x1])
    err = np.abs(model.score_samples(union) - _oracle(model, union, union))
    assert err.max() <= model.error_bound_ + 1e-12 and 0 < model.error_bound_ <= 0.1


@pytest.mark.parametrize("depth", list(MODELS))
def test_stationary_stream_keeps_the_bound_within_twice_tol_after_50_batches(depth):
    rng = np.random.default_rng(5)
    model = MODELS[depth]().set_params(n_directions=4)
    model.partial_fit(rng.normal(size=(2000, 2)))
    bounds = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.StreamBoundWarning)
        for _ in range(50):
            model.partial_fit(rng.normal(size=(200, 2)))
            bounds.append(model.error_bound_)
    assert max(bounds) <= 2 * TOL
    assert model.n_batches_ == 51 and model.n_samples_fit_ == 2000 + 50 * 200


def test_drift_warns_once_naming_fit_and_the_bound_stays_certified():
    rng = np.random.default_rng(6)
    first = rng.normal(size=(1000, 2))
    # a stream's own first batch of 1,000 rows holds them and plans its leaves again on the
    # drifted rows; a template's stream holds none, so its leaves stay the first fit's
    model = daskdepth.template(daskdepth.IRW(n_directions=8, tol=TOL, random_state=0)
                               .partial_fit(first)).partial_fit(first)
    batches = [rng.normal(size=(1000, 2)) * 0.05 + 0.3 for _ in range(3)]
    with pytest.warns(daskdepth.StreamBoundWarning, match=r"fit a model on recent data") as rec:
        for batch in batches:
            model.partial_fit(batch)
    assert len([w for w in rec if issubclass(w.category, daskdepth.StreamBoundWarning)]) == 1
    assert model.error_bound_ > 2 * TOL
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.StreamBoundWarning)  # once per model
        model.partial_fit(batches[0])
    assert model.n_batches_ == 5


def test_offset_follows_the_union_so_predict_stays_meaningful():
    rng = np.random.default_rng(7)
    model = daskdepth.AIIRW(n_directions=20, tol=TOL, contamination=0.1, random_state=0)
    model.partial_fit(rng.normal(size=(2000, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        for _ in range(3):
            model.partial_fit(rng.normal(size=(2000, 2)) * 3.0)  # the reference widens
    union_like = np.concatenate([rng.normal(size=(2000, 2)),
                                 rng.normal(size=(6000, 2)) * 3.0])
    flagged = float((model.predict(union_like) == -1).mean())
    assert 0.05 <= flagged <= 0.15
    assert model._sample_depth.size == daskdepth.summary.streaming.STREAM_SAMPLE


def test_dask_batch_is_read_once_and_not_before_the_pass():
    rng = np.random.default_rng(8)
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0)
    model.partial_fit(rng.normal(size=(1000, 2)))
    values = rng.normal(size=(4000, 2))
    reads: list[int] = []

    def tap(block, block_info=None):
        reads.append(block_info[0]["chunk-location"][0])
        return block

    batch = da.from_array(values, chunks=(1000, 2)).map_blocks(tap, dtype=np.float64)
    assert reads == []
    with dask.config.set(scheduler="sync"):
        model.partial_fit(batch)
    assert sorted(reads) == [0, 1, 2, 3]  # every chunk read once, counts and sample together
    twin = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0)
    twin.partial_fit(np.random.default_rng(8).normal(size=(1000, 2)))
    twin.partial_fit(values)
    q = rng.normal(size=(50, 2))
    assert (model.score_samples(q) == twin.score_samples(q)).all()
    assert model.offset_ == twin.offset_


def test_pandas_and_xarray_batches_keep_the_feature_names():
    rng = np.random.default_rng(9)
    frame = pd.DataFrame(rng.normal(size=(500, 2)), columns=["a", "b"])
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).partial_fit(frame)
    later = xr.DataArray(rng.normal(size=(400, 2)), dims=("sample", "feature"),
                         coords={"feature": ["a", "b"]})
    model.partial_fit(later)
    assert list(model.feature_names_in_) == ["a", "b"] and model.n_samples_fit_ == 900
    with pytest.raises(ValueError, match="feature names"):
        model.partial_fit(frame.rename(columns={"a": "z"}))
    with pytest.raises(ValueError, match="expecting 2 features"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scikit-learn's: no feature names
        model.partial_fit(rng.normal(size=(10, 3)))
    assert model.n_samples_fit_ == 900


def test_non_finite_rows_are_refused_or_omitted_as_fit_does():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(600, 2))
    bad = rng.normal(size=(300, 2))
    bad[[3, 17]] = np.nan
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).partial_fit(x)
    before = model.score_samples(x[:20])
    with pytest.raises(ValueError, match="2 rows"):
        model.partial_fit(chunked(bad, 100))  # dask: found by the pass, nothing changed
    assert model.n_samples_fit_ == 600 and (model.score_samples(x[:20]) == before).all()
    # an exact (sorted) first fit is left exact too: the refused batch changes nothing
    small = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0).partial_fit(x[:100])
    state = dict(small.__dict__)
    with pytest.raises(ValueError, match="2 rows"):
        small.partial_fit(chunked(bad, 100))
    assert small.__dict__.keys() == state.keys()
    assert all(small.__dict__[k] is v for k, v in state.items() if k != "_stream")
    assert all(isinstance(b, BlockSorted) for b in small.summary_.blocks)
    assert small._stream.bounds is None
    omit = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0, nan_policy="omit")
    omit.partial_fit(x).partial_fit(chunked(bad, 100))
    assert omit.n_samples_fit_ == 898 and omit.batch_rows_.tolist() == [600, 298]


@pytest.mark.parametrize("cls", [daskdepth.Projection, daskdepth.HalfspaceMass])
def test_depths_whose_summaries_do_not_add_refuse_with_the_reason(cls):
    model = cls(random_state=0)
    assert not hasattr(model, "partial_fit")  # scikit-learn's checks see none
    with pytest.raises(AttributeError, match=r"has no partial_fit: .*do not add over batches.*"
                                        r"\(fit\).*ai-irw, irw, halfspace"):
        model.partial_fit(np.random.default_rng(0).normal(size=(100, 2)))
    assert not cls.capabilities.partial_fit
    assert daskdepth.IRW.capabilities.partial_fit and daskdepth.Halfspace.capabilities.partial_fit


def test_fit_after_partial_fit_starts_afresh():
    rng = np.random.default_rng(11)
    model = daskdepth.IRW(n_directions=6, tol=TOL, random_state=0)
    model.partial_fit(rng.normal(size=(500, 2))).partial_fit(rng.normal(size=(500, 2)))
    model.fit(rng.normal(size=(500, 2)))
    assert not hasattr(model, "n_batches_") and "_stream" not in model.__dict__


def test_model_fitted_by_fit_takes_batches_too():
    rng = np.random.default_rng(12)
    x0, x1 = rng.normal(size=(3000, 2)), rng.normal(size=(1000, 2))
    model = daskdepth.Halfspace(n_directions=10, tol=TOL, random_state=0).fit(x0)
    model.partial_fit(x1)
    union = np.concatenate([x0, x1])
    err = np.abs(model.score_samples(union[::7]) - _oracle(model, union, union[::7]))
    assert err.max() <= model.error_bound_ + 1e-12
    assert model.n_batches_ == 2 and model.batch_rows_.tolist() == [3000, 1000]


@pytest.mark.timeout(600)
# an exact (sorted) first fit and one in leaves, sharded on the workers; a small summary copied
# to every worker (the rows folded where they are) and brought back
@pytest.mark.parametrize(("first_rows", "sharded"), [(150, True), (12_000, True), (12_000, False)])
def test_cluster_with_sharded_summaries_updates_in_place_with_the_same_bits(monkeypatch,
                                                                          first_rows, sharded):
    from distributed import Client, LocalCluster

    import daskdepth.runtime.memory
    from daskdepth.runtime.shards import ClusterBlock

    rng = np.random.default_rng(13)
    batches = [rng.normal(size=(first_rows, 3)),
               *(rng.normal(size=(2000, 3)) + 0.2 * b for b in range(3))]
    q = np.concatenate([batches[-1][:200], rng.normal(size=(100, 3)) * 5])

    def run() -> tuple[np.ndarray, float, float]:
        model = daskdepth.AIIRW(n_directions=70, tol=TOL, random_state=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
            for batch in batches:
                model.partial_fit(chunked(batch, 1000))
        return model, model.score_samples(q)

    with dask.config.set(scheduler="threads"):
        local, local_depth = run()
    if sharded:
        monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)  # shard them all
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        model, depth = run()
        assert all(isinstance(b, ClusterBlock) == sharded for b in model.summary_.blocks)
        assert len(model.summary_.blocks) == 3
        np.testing.assert_array_equal(depth, local_depth)
        assert model.error_bound_ == local.error_bound_ and model.offset_ == local.offset_
        assert model.n_samples_fit_ == local.n_samples_fit_ == first_rows + 6000


def test_drift_test_compares_new_rows_with_the_rows_the_model_holds():
    rng = np.random.default_rng(14)
    model = daskdepth.IRW(n_directions=50, tol=TOL, random_state=0)
    for _ in range(4):
        model.partial_fit(rng.normal(size=(1500, 3)))
    assert model._sample_depth.shape == (daskdepth.summary.streaming.STREAM_SAMPLE,)
    assert not daskdepth.drift(model, rng.normal(size=(3000, 3))).drifted(0.001)
    assert daskdepth.drift(model, rng.normal(size=(3000, 3)) + 0.5).drifted(0.001)


@pytest.mark.parametrize("batch", ["one row", "beyond", "one value"])
def test_few_rows_in_few_leaves_are_recovered_and_take_more_batches(batch):
    # a template fed a single row, a batch beyond all the first fit's keys, or one value
    # repeated: long runs of empty leaves at a direction's ends
    rng = np.random.default_rng(15)
    reference = daskdepth.IRW(n_directions=10, tol=TOL, random_state=0).fit(
        rng.normal(size=(3000, 2)))
    first = {"one row": rng.normal(size=(1, 2)), "beyond": rng.normal(size=(50, 2)) + 100.0,
             "one value": np.ones((30, 2))}[batch]
    model = daskdepth.template(reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        model.partial_fit(first)
        later = rng.normal(size=(7, 2))
        model.partial_fit(later)
    union = np.concatenate([first, later])
    points = np.concatenate([union, rng.normal(size=(40, 2)) * 50])
    err = np.abs(model.score_samples(points) - _oracle(model, union, points))
    assert err.max() <= model.error_bound_ + 1e-12 and model.n_samples_fit_ == union.shape[0]
