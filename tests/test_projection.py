"""Projection depth: exact medians and MADs against NumPy, on every path, and its interfaces."""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import DISTRIBUTED_ROWS, cauchy_data, chunked, gaussian_data, tie_data
from distributed import Client, LocalCluster
from hypothesis import given
from hypothesis import strategies as st
from oracle import project, projection_depth

import daskdepth
from daskdepth.cli import main
from daskdepth.estimators import make_estimator
from daskdepth.passes import ranks
from daskdepth.passes.ranks import order_statistics

SYNC = ["--scheduler", "synchronous"]


def _check_against_oracle(model, reference, points):
    """The model's medians, MADs and depths are NumPy's, bit for bit, on its directions."""
    med, mad, depth = projection_depth(reference, points, model.location_, model.directions_)
    np.testing.assert_array_equal(model.medians_, med)
    np.testing.assert_array_equal(model.mads_, mad)
    np.testing.assert_array_equal(np.asarray(model.score_samples(points)), depth)


@pytest.mark.parametrize("data", [gaussian_data(1001, 3, seed=1), gaussian_data(1000, 3, seed=2),
                                  tie_data(800, 3, seed=3), cauchy_data(600, 2, seed=4)])
def test_in_memory_equals_numpy(data):
    model = daskdepth.Projection(n_directions=40, random_state=0).fit(data)
    assert model.n_passes_ == 0 and model.error_bound_ == 0.0
    points = np.vstack([data[:50], gaussian_data(20, data.shape[1], seed=9) * 3])
    _check_against_oracle(model, data, points)
    # The training rows' depths, counted while fitting, are those of scoring them afresh.
    np.testing.assert_array_equal(model.score_samples(data),
                                  model.score_samples(data.copy() + 0.0))


def test_passes_with_odd_chunks_equal_numpy_and_each_other():
    x = gaussian_data(DISTRIBUTED_ROWS + 1, 3, seed=5)
    x[:30_000] = np.round(x[:30_000], 1)  # heavy ties around the medians
    kw = dict(n_directions=24, random_state=3)
    a = daskdepth.Projection(**kw).fit(chunked(x, 7_001))
    b = daskdepth.Projection(**kw).fit(chunked(x, (50_000, 20_001)))
    assert a.n_passes_ >= 2  # the row sample is not every row: the medians took passes
    np.testing.assert_array_equal(a.medians_, b.medians_)
    np.testing.assert_array_equal(a.mads_, b.mads_)
    points = x[::997]
    _check_against_oracle(a, x, points)
    np.testing.assert_array_equal(a.score_samples(chunked(points, 13)).compute(),
                                  b.score_samples(points))


@given(n=st.integers(2, 400), levels=st.integers(1, 6), share=st.floats(0.05, 0.9),
       seed=st.integers(0, 2**16), centred=st.booleans())
def test_order_statistics_pass_path(n, levels, share, seed, centred):
    """The passes' selection (brackets from a part of the rows) is np.partition's."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, levels + 1, size=(n, 2)) + rng.normal(size=(n, 2)) * (seed % 3 == 0)
    directions = rng.normal(size=(3, 2))
    location = x.mean(axis=0)
    sample = x[rng.random(n) < share]
    if sample.shape[0] in (0, n):
        sample = x[: max(1, n // 2)] if n > 2 else x[:1]
    wanted = tuple(sorted({(n - 1) // 2, n // 2, 0, n - 1}))
    p = project(x, location, directions).T
    centres = np.median(p, axis=1) if centred else None
    values = np.abs(p - centres[:, None]) if centred else p
    old = (ranks.NBINS, ranks.COLLECT_MAX)
    ranks.NBINS, ranks.COLLECT_MAX = 4, 4  # many narrowing passes on small data
    try:
        got, passes = order_statistics(chunked(x, max(1, n // 3)), location, directions,
                                       sample, n, wanted, centres, "t0", "median")
    finally:
        ranks.NBINS, ranks.COLLECT_MAX = old
    np.testing.assert_array_equal(got, np.sort(values, axis=1)[:, list(wanted)])
    assert passes >= 1


def test_zero_mad_is_the_limit_without_warnings():
    """More than half the rows at one point: MAD 0 on every direction."""
    x = np.vstack([np.ones((600, 2)), gaussian_data(400, 2, seed=6)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = daskdepth.Projection(n_directions=20, random_state=1).fit(x)
        depth = model.score_samples(np.array([[1.0, 1.0], [1.0, 1.5], [0.0, 0.0]]))
    assert (model.mads_ == 0).all()
    assert depth.tolist() == [1.0, 0.0, 0.0]
    assert not np.isnan(model.score_samples(x)).any()
    _check_against_oracle(model, x, x[590:610])


def test_nan_rows_are_left_out_under_omit():
    x = gaussian_data(500, 3, seed=7)
    x[[3, 100]] = np.nan
    model = daskdepth.Projection(n_directions=20, random_state=2, nan_policy="omit").fit(x)
    depth = model.score_samples(x)
    assert np.isnan(depth[[3, 100]]).all() and not np.isnan(np.delete(depth, [3, 100])).any()
    finite = x[np.isfinite(x).all(axis=1)]
    _check_against_oracle(model, finite, finite[:40])
    with pytest.raises(ValueError, match="NaN or inf"):
        daskdepth.Projection(n_directions=20).fit(x)


def test_translation_and_scaling_invariance():
    x = gaussian_data(700, 3, seed=8)
    kw = dict(n_directions=50, random_state=4)
    a = daskdepth.Projection(**kw).fit(x).score_samples(x)
    b = daskdepth.Projection(**kw).fit(3.0 * x + 5.0).score_samples(3.0 * x + 5.0)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    c = daskdepth.Projection(affine_invariant=True, covariance="mcd", **kw).fit(x)
    assert c._whitens() and c.basis_.shape == (3, 3)
    _check_against_oracle(c, x, x[:30])


def test_sklearn_api_and_one_call_functions():
    x = gaussian_data(400, 2, seed=10)
    model = daskdepth.Projection(n_directions=30, random_state=0, contamination=0.05).fit(x)
    labels = model.predict(x)
    assert (labels == -1).sum() == 20
    np.testing.assert_array_equal(model.decision_function(x), model.score_samples(x)
                                  - model.offset_)
    np.testing.assert_array_equal(daskdepth.score(x, depth="projection", n_directions=30,
                                                  random_state=0), model.score_samples(x))
    depth, outlier = daskdepth.outliers(x, depth="projection", n_directions=30, random_state=0,
                                        contamination=0.05)
    np.testing.assert_array_equal(outlier, labels == -1)
    ds = xr.Dataset({"X": (("time", "feature"), x)})
    out = daskdepth.score_dataset(ds, "X", depth="projection", n_directions=30, random_state=0)
    assert out.depth.attrs["long_name"] == "projection depth"
    assert out.depth.attrs["method"] == "projection" and out.depth.attrs["error_bound"] == 0.0
    # The defaults other depths take pass; other values of what it does not take are refused.
    assert type(make_estimator("projection", tol=1e-4, frame="correlation")).__name__ == \
        "Projection"
    with pytest.raises(ValueError, match=r"tol=0\.001 does not apply to depth='projection' "
                                         r"\(the projection depth's medians and MADs are exact"):
        make_estimator("projection", tol=1e-3)
    with pytest.raises(ValueError, match="support_fraction=0.7 applies only with "
                                         "covariance='mcd'"):
        daskdepth.Projection(affine_invariant=True, support_fraction=0.7).fit(x)
    with pytest.raises(ValueError, match="'auto'"):
        daskdepth.Projection(n_directions="auto").fit(x)


def test_save_and_load_round_trip(tmp_path):
    x = gaussian_data(600, 3, seed=11)
    model = daskdepth.Projection(n_directions=25, random_state=5, affine_invariant=True).fit(x)
    path = model.save(tmp_path / "p.zarr")
    loaded = daskdepth.load(path)
    assert type(loaded) is daskdepth.Projection and loaded.get_params() == model.get_params()
    for name in ("medians_", "mads_", "directions_", "location_", "basis_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    np.testing.assert_array_equal(loaded.score_samples(x), model.score_samples(x))
    assert loaded.offset_ == model.offset_


def test_two_worker_cluster_gives_the_same_bits():
    x = gaussian_data(DISTRIBUTED_ROWS, 3, seed=12)
    kw = dict(n_directions=16, random_state=6)
    with dask.config.set(scheduler="threads"):
        local = daskdepth.Projection(**kw).fit(chunked(x, 10_000))
        expected = local.score_samples(x[:5000])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        remote = daskdepth.Projection(**kw).fit(chunked(x, 9_999))
        got = remote.score_samples(chunked(x[:5000], 1_001)).compute()
    np.testing.assert_array_equal(remote.medians_, local.medians_)
    np.testing.assert_array_equal(remote.mads_, local.mads_)
    np.testing.assert_array_equal(got, expected)


def test_cli_fit_apply_and_score(tmp_path, capsys):
    x = gaussian_data(900, 3, seed=13)
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=x, chunks=(250, 3))
    common = ["--seed", "7", "--n-directions", "30", "-q", *SYNC]
    assert main(["score", str(src), "--out", str(tmp_path / "s.zarr"), "--depth", "projection",
                 *common]) == 0
    model = daskdepth.Projection(n_directions=30, random_state=7).fit(x)
    out = xr.open_zarr(str(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(out["depth"].values, model.score_samples(x))
    assert main(["fit", str(src), "--model", str(tmp_path / "m.zarr"), "--depth", "projection",
                 "--affine-invariant", *common]) == 0
    assert main(["apply", str(tmp_path / "m.zarr"), str(src), "--out", str(tmp_path / "a.zarr"),
                 "-q", *SYNC]) == 0
    whitened = daskdepth.Projection(n_directions=30, random_state=7,
                                    affine_invariant=True).fit(x)
    np.testing.assert_array_equal(xr.open_zarr(str(tmp_path / "a.zarr"))["depth"].values,
                                  whitened.score_samples(x))
    capsys.readouterr()
    assert main(["score", str(src), "--out", str(tmp_path / "t.zarr"), "--depth", "projection",
                 "--tol", "0.01", *common]) == 2
    assert "--tol 0.01 does not apply to --depth projection" in capsys.readouterr().err
