"""Projection.explain: least-deep directions against NumPy, planted outliers, every path.

The projection depth's univariate depth along ``v_j`` is ``1 / (1 + |p_j -
med_j| / mad_j)``; its minimum over the directions is the depth, so the first
reported depth must be ``score_samples`` bit for bit.  The directions, depths
and sides are checked against a plain NumPy reference (:mod:`tests.oracle`),
the contributions against their definition, and the results bit for bit
across NumPy, dask with odd chunks, a 2-worker cluster, a saved model and the
command line.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import chunked, gaussian_data, planted_outliers, tie_data
from distributed import Client, LocalCluster
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import project, projection_depth

import daskdepth
from daskdepth.cli.main import main
from daskdepth.storage.paths import quiet_zarr

FIELDS = ("direction", "depth", "side", "contribution")


def _oracle_top(model, reference: np.ndarray, points: np.ndarray, k: int):
    """NumPy's directions of largest outlyingness ``|q_j - med_j| / mad_j``, their depths
    ``1 / (1 + o)`` and sides.

    Ties go to the direction along which the point is farthest from the
    location in standard deviations of the reference projections, then to the
    smaller index.
    """
    v = model.directions_
    med, mad, _ = projection_depth(reference, points, model.location_, v)
    q = project(points, model.location_, v)
    dev = np.abs(q - med)
    ratio = np.where(mad > 0, dev / np.where(mad > 0, mad, 1.0), np.where(dev > 0, np.inf, 0.0))
    depths = 1.0 / (1.0 + ratio)
    sigma = np.sqrt(np.einsum("jf,fg,jg->j", v, model.covariance_, v))
    far = np.abs(q) / sigma
    index = np.broadcast_to(np.arange(v.shape[0]), depths.shape)
    order = np.lexsort((index, -far, -ratio), axis=1)[:, :k]
    side = np.sign(q - med).astype(np.int8)
    return (order, np.take_along_axis(depths, order, 1), np.take_along_axis(side, order, 1))


@pytest.mark.parametrize("affine", [False, True])
def test_planted_feature_is_named(affine):
    reference, outliers = planted_outliers(3000, 5, feature=3)
    model = daskdepth.Projection(random_state=0, affine_invariant=affine).fit(reference)
    why = model.explain(outliers)
    share = float((why.top_feature() == 3).mean())
    assert share >= 0.95, share
    assert (why.contribution[:, 3] > 0).all()
    assert (why.depth[:, 0] <= why.depth[:, 1]).all() and (why.depth[:, 1] <= why.depth[:, 2]).all()
    assert why.error_bound == 0.0


@pytest.mark.parametrize("data", [gaussian_data(601, 3, seed=1), tie_data(500, 3, seed=2)])
def test_equals_numpy_and_the_least_deep_depth_is_the_score(data):
    model = daskdepth.Projection(n_directions=40, random_state=0).fit(data)
    points = np.vstack([data[:60], gaussian_data(40, 3, seed=9) * 3])
    why = model.explain(points, n_top=5)
    order, depth, side = _oracle_top(model, data, points, 5)
    np.testing.assert_array_equal(why.direction, order)
    np.testing.assert_array_equal(why.depth, depth)
    np.testing.assert_array_equal(why.side, side)
    np.testing.assert_array_equal(why.depth[:, 0], model.score_samples(points))
    # every direction: the depths are each direction's own, the minimum first
    every = model.explain(points, n_top=model.n_directions_)
    assert (np.sort(every.direction, axis=1) == np.arange(model.n_directions_)).all()
    np.testing.assert_array_equal(every.depth.min(axis=1), model.score_samples(points))


def test_zero_mad_ties_and_the_median():
    """More than half the reference rows at one point: every MAD is 0.

    A row at that point has depth 1 along every direction (side 0); any other
    row has depth 0 along every direction, and the tie goes to the direction
    along which it lies farthest out, then to the smaller index.
    """
    rng = np.random.default_rng(3)
    reference = rng.normal(size=(400, 3))
    reference[:250] = [0.5, -1.0, 2.0]
    model = daskdepth.Projection(n_directions=25, random_state=0).fit(reference)
    assert (model.mads_ == 0).all()
    points = np.vstack([[[0.5, -1.0, 2.0]], rng.normal(size=(30, 3)) * 4])
    why = model.explain(points, n_top=4)
    order, depth, side = _oracle_top(model, reference, points, 4)
    np.testing.assert_array_equal(why.direction, order)
    np.testing.assert_array_equal(why.depth, depth)
    np.testing.assert_array_equal(why.side, side)
    assert (why.depth[0] == 1.0).all() and (why.side[0] == 0).all()
    assert (why.depth[1:] == 0.0).all()
    np.testing.assert_array_equal(why.depth[:, 0], model.score_samples(points))
    # at the median of every direction: equal weights, no side, nothing contributes
    assert (why.contribution[0] == 0).all()
    assert np.isfinite(why.contribution).all()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), levels=st.integers(1, 4), k=st.integers(1, 7),
       share=st.floats(0.0, 0.8))
def test_ties_on_a_lattice_equal_numpy(seed, levels, k, share):
    """Lattice rows (many equal outlyingnesses), a share of them at one point (zero MADs)."""
    rng = np.random.default_rng(seed)
    reference = rng.integers(0, levels + 1, size=(60, 2)).astype(np.float64)
    reference[:int(share * 60)] = [1.0, 0.0]
    model = daskdepth.Projection(n_directions=6, random_state=seed % 7).fit(reference)
    points = np.vstack([reference[:10], rng.integers(-1, levels + 2, size=(10, 2))])
    why = model.explain(points, n_top=k)
    order, depth, side = _oracle_top(model, reference, points, min(k, 6))
    np.testing.assert_array_equal(why.direction[:, :6], order)
    np.testing.assert_array_equal(why.depth[:, :6], depth)
    np.testing.assert_array_equal(why.side[:, :6], side)
    np.testing.assert_array_equal(why.depth[:, 0], model.score_samples(points))


def test_equal_outlyingness_along_repeated_directions_breaks_ties_by_distance_then_index():
    """Directions repeated and rows on a lattice: many exactly equal outlyingnesses."""
    from daskdepth.summary.explain import least_deep
    from daskdepth.summary.projection import ProjectionSummary

    rng = np.random.default_rng(4)
    base = np.array([[1, 0], [0, 1], [1, 1], [-1, 0], [0, -1], [2, 0]], dtype=np.float64)
    for _ in range(200):
        m = int(rng.integers(1, 9))
        v = base[rng.integers(0, 6, size=m)]
        med = rng.integers(-2, 3, size=m).astype(np.float64)
        mad = rng.integers(0, 3, size=m).astype(np.float64)
        scales = rng.integers(0, 3, size=m).astype(np.float64)
        x = rng.integers(-3, 4, size=(20, 2)).astype(np.float64)
        k = int(rng.integers(1, m + 1))
        summary = ProjectionSummary(np.zeros(2), v, med, mad, 10)
        top = least_deep(summary, x, k, scales=scales)
        q = x @ v.T
        dev = np.abs(q - med)
        ratio = np.where(mad > 0, dev / np.where(mad > 0, mad, 1.0),
                         np.where(dev > 0, np.inf, 0.0))
        inv = np.divide(1.0, scales, out=np.zeros(m), where=scales > 0)
        index = np.broadcast_to(np.arange(m), q.shape)
        order = np.lexsort((index, -(np.abs(q) * inv), -ratio), axis=1)[:, :k]
        np.testing.assert_array_equal(top.direction, order)
        np.testing.assert_array_equal(top.depth,
                                      np.take_along_axis(1.0 / (1.0 + ratio), order, 1))
        np.testing.assert_array_equal(top.side, np.take_along_axis(np.sign(q - med), order, 1))


def test_contributions_add_up_to_the_signed_standardised_distance():
    reference, outliers = planted_outliers(2000, 4, feature=1, seed=5)
    model = daskdepth.Projection(random_state=1).fit(reference)
    points = np.vstack([outliers, reference[:100]])
    why = model.explain(points, n_top=3)
    v = model.directions_[why.direction]  # (rows, k, d)
    proj = np.einsum("rkd,rd->rk", v, points - model.location_)
    sigma = np.sqrt(np.einsum("rkd,de,rke->rk", v, model.covariance_, v))
    w = 1.0 - why.depth  # the projection depth's weights: up to 1, at the median
    w = w / w.sum(axis=1, keepdims=True)
    total = (w * why.side * proj / sigma).sum(axis=1)
    np.testing.assert_allclose(why.contribution.sum(axis=1), total, rtol=1e-10, atol=1e-12)
    at = points.copy()
    at[:, 0] = model.location_[0]
    assert (model.explain(at).contribution[:, 0] == 0).all()


def test_affine_invariant_contributions_do_not_change_with_feature_units():
    reference, outliers = planted_outliers(1500, 3, feature=2, seed=6)
    scale = np.array([1000.0, 0.001, 3.0])
    a = daskdepth.Projection(random_state=0, affine_invariant=True).fit(reference)
    b = daskdepth.Projection(random_state=0, affine_invariant=True).fit(reference * scale + 7)
    wa, wb = a.explain(outliers), b.explain(outliers * scale + 7)
    np.testing.assert_array_equal(wa.direction, wb.direction)
    np.testing.assert_allclose(wa.contribution, wb.contribution, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(wa.axes, axis=1), 1.0)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as c:
        yield c


def test_same_bits_numpy_dask_and_cluster(cluster):
    reference, outliers = planted_outliers(3000, 4, feature=2, seed=7)
    points = np.concatenate([reference[::7], outliers, reference[:5]])  # with duplicates
    points[3, 1] = np.nan
    model = daskdepth.Projection(random_state=0, nan_policy="omit").fit(reference)
    base = model.explain(points, n_top=3)
    assert base.direction[3].tolist() == [-1, -1, -1] and np.isnan(base.contribution[3]).all()
    odd = (97, 1, 233, points.shape[0] - 331)
    lazy = model.explain(chunked(points, odd), n_top=3)
    assert lazy.direction.chunks[0] == odd
    keys = [k for k in lazy.direction.__dask_graph__()
            if isinstance(k, tuple) and k[0].startswith("daskdepth-why-")]
    assert len(keys) == 4  # one task per row chunk
    with Client(cluster):
        spread = model.explain(chunked(points, 111), n_top=3)
        spread = {f: getattr(spread, f).compute() for f in FIELDS}
        local = model.explain(points, n_top=3)
    for f in FIELDS:
        want = getattr(base, f)
        np.testing.assert_array_equal(getattr(lazy, f).compute(), want)
        np.testing.assert_array_equal(spread[f], want)
        np.testing.assert_array_equal(getattr(local, f), want)
        assert getattr(lazy, f).dtype == want.dtype
    ok = ~np.isnan(points).any(axis=1)
    np.testing.assert_array_equal(base.depth[ok, 0], model.score_samples(points)[ok])


def test_saved_model_and_containers(tmp_path):
    reference, outliers = planted_outliers(1000, 3, feature=1, seed=8)
    model = daskdepth.Projection(random_state=0, affine_invariant=True).fit(reference)
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    a, b = model.explain(outliers), loaded.explain(chunked(outliers, 70))
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(b, f).compute(), getattr(a, f))
    arr = xr.DataArray(outliers, dims=("sample", "feature"))
    ds = model.explain(arr.chunk({"sample": 64}), n_top=3)
    assert ds["contribution"].chunks[0] == (64, 64, 64, 8)
    np.testing.assert_array_equal(ds["explain_direction"].values, a.direction)
    np.testing.assert_array_equal(ds["contribution"].values, a.contribution)


def test_cli_score_and_apply_write_the_explanations(tmp_path):
    reference, outliers = planted_outliers(900, 3, feature=0, seed=9)
    rows = np.concatenate([reference, outliers])
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=rows, chunks=(250, 3))
    common = ["--seed", "7", "--n-directions", "30", "-q", "--scheduler", "synchronous"]
    assert main(["score", str(src), "--out", str(tmp_path / "s.zarr"), "--depth", "projection",
                 "--explain", "2", *common]) == 0
    model = daskdepth.Projection(n_directions=30, random_state=7).fit(rows)
    why = model.explain(rows, n_top=2)
    with quiet_zarr():
        out = xr.open_zarr(str(tmp_path / "s.zarr"))
    assert out["explain_direction"].dims[1] == "top"
    assert out["contribution"].chunks[0] == out["depth"].chunks[0]
    for name, f in zip(("explain_direction", "explain_depth", "explain_side"), FIELDS,
                       strict=False):
        np.testing.assert_array_equal(out[name].values, getattr(why, f))
    np.testing.assert_array_equal(out["depth"].values, why.depth[:, 0])
    # the spreads come from covariance_, whose last bits follow the fit's row chunks
    np.testing.assert_allclose(out["contribution"].values, why.contribution, rtol=1e-12,
                               atol=1e-14)
    assert main(["fit", str(src), "--model", str(tmp_path / "m.zarr"), "--depth", "projection",
                 "--affine-invariant", *common]) == 0
    assert main(["apply", str(tmp_path / "m.zarr"), str(src), "--out",
                 str(tmp_path / "a.zarr"), "--explain", "3", "-q"]) == 0
    whitened = daskdepth.load(tmp_path / "m.zarr").explain(rows, n_top=3)
    with quiet_zarr():
        applied = xr.open_zarr(str(tmp_path / "a.zarr"))
    np.testing.assert_array_equal(applied["contribution"].values, whitened.contribution)
    np.testing.assert_array_equal(applied["explain_depth"].values, whitened.depth)
    assert (np.argmax(whitened.contribution[900:], axis=1) == 0).mean() >= 0.95


def test_plot_draws_the_contributions_and_the_profile():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import daskdepth.plot

    reference, outliers = planted_outliers(800, 3, feature=1, seed=10)
    model = daskdepth.Projection(random_state=0).fit(reference)
    bars, profile = daskdepth.plot.explain(model, outliers[0])
    why = model.explain(outliers[:1])
    np.testing.assert_array_equal([p.get_width() for p in bars.patches], why.contribution[0])
    j = int(why.direction[0, 0])
    p = float((outliers[0] - model.location_) @ model.directions_[j])
    assert any(len(line.get_xdata()) == 2 and np.allclose(line.get_xdata(), [p, p])
               for line in profile.get_lines())
    curve = max(profile.get_lines(), key=lambda line: len(line.get_xdata()))
    t, depth = curve.get_xdata(), curve.get_ydata()
    med, mad = model.medians_[j], model.mads_[j]
    np.testing.assert_allclose(depth, 1.0 / (1.0 + np.abs(t - med) / mad), rtol=1e-12)
    assert t.min() <= min(p, med - 4 * mad) and t.max() >= max(p, med + 4 * mad)
    plt.close("all")
