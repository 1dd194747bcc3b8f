"""model.explain: least-deep directions against the oracle, planted outliers, containers, CLI.

The per-direction depths are checked against :mod:`tests.oracle` (exact
summaries: equal; leaf summaries: within the certified bound, and the very
values the score is made of); the planted-feature test checks that the
contributions name the feature the outliers were moved along; results are
compared bit for bit across NumPy, dask with odd chunks and a 2-worker cluster.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import chunked, planted_outliers
from distributed import Client, LocalCluster
from oracle import direction_depths, project

import daskdepth
from daskdepth.cli.main import main
from daskdepth.storage.paths import quiet_zarr

FIELDS = ("direction", "depth", "side", "contribution")


def _oracle_top(model, reference: np.ndarray, points: np.ndarray, k: int):
    """Directions of smallest exact univariate depth, depths, sides.

    Ties go to the direction along which the point is farthest out in standard
    deviations of the reference projections, then to the smaller index.
    """
    depths = direction_depths(reference, points, model.location_, model.directions_)
    m = depths.shape[1]
    pr = project(reference, model.location_, model.directions_)
    pq = project(points, model.location_, model.directions_)
    v = model.directions_
    sigma = np.sqrt(np.einsum("jf,fg,jg->j", v, model.covariance_, v))
    far = np.abs(pq) / sigma
    index = np.broadcast_to(np.arange(m), depths.shape)
    order = np.lexsort((index, -far, depths), axis=1)[:, :k]
    le = (pr[None, :, :] <= pq[:, None, :]).sum(axis=1)
    ge = (pr[None, :, :] >= pq[:, None, :]).sum(axis=1)
    side = np.sign(le - ge)
    return order, np.take_along_axis(depths, order, 1), np.take_along_axis(side, order, 1)


MODELS = {
    "irw": lambda **kw: daskdepth.IRW(random_state=0, **kw),
    "ai-irw": lambda **kw: daskdepth.AIIRW(random_state=0, **kw),
    "halfspace": lambda **kw: daskdepth.Halfspace(random_state=0, **kw),
    "halfspace-ai": lambda **kw: daskdepth.Halfspace(random_state=0, affine_invariant=True, **kw),
}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("tol", [0.0, 0.01])
def test_planted_feature_is_named(name, tol):
    reference, outliers = planted_outliers(3000, 5, feature=3)
    model = MODELS[name](tol=tol).fit(reference)
    why = model.explain(outliers)
    share = float((why.top_feature() == 3).mean())
    assert share >= 0.95, share
    # outliers lie above the median along their least-deep directions, pushed by feature 3
    assert (why.contribution[:, 3] > 0).all()
    assert (why.depth[:, 0] <= why.depth[:, 1]).all()


@pytest.mark.parametrize("name", ["irw", "ai-irw", "halfspace"])
def test_exact_summary_matches_the_oracle(name):
    rng = np.random.default_rng(2)
    reference = np.round(rng.normal(size=(400, 3)), 1)  # ties between rows and points
    points = np.concatenate([np.round(rng.normal(size=(60, 3)), 1), reference[:20]])
    model = MODELS[name](tol=0.0, n_directions=50).fit(reference)
    why = model.explain(points, n_top=4)
    order, depth, side = _oracle_top(model, reference, points, 4)
    assert why.error_bound == 0.0
    np.testing.assert_array_equal(why.direction, order)
    np.testing.assert_allclose(why.depth, depth, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(why.side, side)


@pytest.mark.parametrize("name", ["irw", "halfspace"])
def test_leaf_summary_gives_the_scores_own_values_within_the_bound(name):
    reference, outliers = planted_outliers(3000, 3, feature=0, seed=4)
    points = np.concatenate([reference[:100] + 0.01, outliers[:50]])
    model = MODELS[name](tol=0.01, n_directions=60).fit(chunked(reference, 700))
    assert "leaves" in repr(model.summary_)
    m = model.n_directions_
    why = model.explain(points, n_top=m)  # every direction: the score's own values
    exact = direction_depths(reference, points, model.location_, model.directions_)
    bounds = model.summary_.direction_errors()
    err = np.abs(np.take_along_axis(exact, why.direction, 1) - why.depth)
    assert (err <= bounds[why.direction] + 1e-12).all()
    assert why.error_bound == pytest.approx(bounds.max())
    score = model.score_samples(points)
    if name == "halfspace":
        np.testing.assert_array_equal(score, why.depth[:, 0])
    else:
        np.testing.assert_allclose(why.depth.mean(axis=1), score, rtol=1e-12)
    assert (np.sort(why.direction, axis=1) == np.arange(m)).all()


def test_contributions_add_up_to_the_signed_standardised_distance():
    reference, outliers = planted_outliers(2000, 4, feature=1, seed=5)
    model = daskdepth.AIIRW(random_state=1).fit(reference)
    why = model.explain(outliers, n_top=3)
    v = model.directions_[why.direction]  # (rows, k, d)
    proj = np.einsum("rkd,rd->rk", v, outliers - model.location_)
    sigma = np.sqrt(np.einsum("rkd,de,rke->rk", v, model.covariance_, v))
    w = np.maximum(0.5 - why.depth, 0)
    w = w / w.sum(axis=1, keepdims=True)
    total = (w * why.side * proj / sigma).sum(axis=1)
    np.testing.assert_allclose(why.contribution.sum(axis=1), total, rtol=1e-10)
    # a feature at the location contributes nothing
    at = outliers.copy()
    at[:, 0] = model.location_[0]
    assert (model.explain(at).contribution[:, 0] == 0).all()


def test_contributions_of_ai_irw_do_not_change_with_feature_units():
    reference, outliers = planted_outliers(1500, 3, feature=2, seed=6)
    scale = np.array([1000.0, 0.001, 3.0])
    a = daskdepth.AIIRW(random_state=0, frame="invariant").fit(reference).explain(outliers)
    b = daskdepth.AIIRW(random_state=0, frame="invariant").fit(reference * scale + 7).explain(
        outliers * scale + 7)
    np.testing.assert_array_equal(a.direction, b.direction)
    np.testing.assert_allclose(a.contribution, b.contribution, rtol=1e-6, atol=1e-9)
    # the axes are unit vectors in feature space
    np.testing.assert_allclose(np.linalg.norm(a.axes, axis=1), 1.0)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as c:
        yield c


@pytest.mark.parametrize("tol", [0.0, 0.01])
def test_same_bits_numpy_dask_and_cluster(tol, cluster):
    reference, outliers = planted_outliers(3000, 4, feature=2, seed=7)
    points = np.concatenate([reference[::7], outliers])
    points[3, 1] = np.nan
    model = daskdepth.IRW(random_state=0, tol=tol, nan_policy="omit").fit(reference)
    base = model.explain(points, n_top=3)
    assert base.direction[3].tolist() == [-1, -1, -1] and np.isnan(base.contribution[3]).all()
    lazy = model.explain(chunked(points, (97, 1, 233, points.shape[0] - 331)), n_top=3)
    assert lazy.direction.chunks[0] == (97, 1, 233, points.shape[0] - 331)
    chunk_keys = [k for k in lazy.direction.__dask_graph__() if isinstance(k, tuple)
                  and k[0].startswith("daskdepth-why-")]
    assert len(chunk_keys) == 4  # one task per row chunk
    with Client(cluster):
        spread = model.explain(chunked(points, 111), n_top=3)
        spread = {f: getattr(spread, f).compute() for f in FIELDS}
    for f in FIELDS:
        want = getattr(base, f)
        np.testing.assert_array_equal(getattr(lazy, f).compute(), want)
        np.testing.assert_array_equal(spread[f], want)
        assert getattr(lazy, f).dtype == want.dtype


def test_containers_keep_index_columns_and_coordinates():
    reference, outliers = planted_outliers(1000, 3, feature=1, seed=8)
    names = ["a", "b", "c"]
    frame = pd.DataFrame(reference, columns=names)
    model = daskdepth.AIIRW(random_state=0).fit(frame)
    query = pd.DataFrame(outliers, columns=names, index=np.arange(200) * 5)
    why = model.explain(query, n_top=2)
    assert list(why.contribution.columns) == names
    assert (why.contribution.index == query.index).all()
    assert why.direction.shape == (200, 2) and why.direction.dtypes.iloc[0] == np.int64
    assert (why.contribution.idxmax(axis=1) == "b").mean() >= 0.95
    dask_frame = pytest.importorskip("dask.dataframe").from_pandas(query, npartitions=3)
    lazy_frame = model.explain(dask_frame, n_top=2)
    pd.testing.assert_frame_equal(lazy_frame.contribution.compute(), why.contribution)
    np.testing.assert_array_equal(lazy_frame.direction.compute().to_numpy(),
                                  why.direction.to_numpy())
    arr = xr.DataArray(outliers, dims=("sample", "feature"),
                       coords={"sample": np.arange(200) * 2, "feature": names,
                               "when": ("sample", np.arange(200) + 0.5)})
    ds = model.explain(arr, n_top=2)
    assert isinstance(ds, xr.Dataset)
    assert ds["explain_direction"].dims == ("sample", "top")
    assert ds["contribution"].dims == ("sample", "feature")
    assert list(ds["feature"].values) == names and "when" in ds.coords
    np.testing.assert_array_equal(ds["contribution"].values, why.contribution.to_numpy())
    lazy = model.explain(arr.chunk({"sample": 64}), n_top=2)
    assert lazy["contribution"].chunks[0] == (64, 64, 64, 8)
    np.testing.assert_array_equal(lazy["explain_depth"].values, ds["explain_depth"].values)


def test_top_feature_names_the_columns_of_a_frame():
    # It gave positions for DataFrame rows; a DataFrame's user asks for column names.
    reference, outliers = planted_outliers(1000, 3, feature=1, seed=8)
    names = ["a", "b", "c"]
    model = daskdepth.AIIRW(random_state=0, nan_policy="omit").fit(
        pd.DataFrame(reference, columns=names))
    rows = outliers[:20].copy()
    rows[4] = np.nan  # not scored
    query = pd.DataFrame(rows, columns=names, index=np.arange(20) * 5)
    why = model.explain(query)
    top = why.top_feature()
    assert isinstance(top, pd.Series) and (top.index == query.index).all()
    expected = why.contribution.drop(index=20).idxmax(axis=1)
    assert top.drop(index=20).tolist() == expected.tolist()
    assert (top.drop(index=20) == "b").mean() >= 0.9 and pd.isna(top[20])
    lazy = model.explain(pytest.importorskip("dask.dataframe").from_pandas(query, npartitions=3))
    pd.testing.assert_series_equal(lazy.top_feature(), top)
    # NumPy rows of a model fitted with names: the names (positions without names)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        named = model.explain(rows).top_feature()
    assert named[4] is None and np.delete(named, 4).tolist() == top.drop(index=20).tolist()
    plain = daskdepth.AIIRW(random_state=0, nan_policy="omit").fit(reference)
    positions = plain.explain(rows).top_feature()
    assert positions.dtype == np.int64 and positions[4] == -1
    assert [names[p] for p in np.delete(positions, 4)] == top.drop(index=20).tolist()


def test_refusals_and_n_top_beyond_the_directions():
    X = np.random.default_rng(0).normal(size=(200, 2))
    with pytest.raises(TypeError, match="explanations exist for AIIRW, IRW, Halfspace"):
        daskdepth.HalfspaceMass(random_state=0).fit(X).explain(X)
    model = daskdepth.IRW(n_directions=3, random_state=0).fit(X)
    with pytest.raises(ValueError, match="n_top=0: pass a positive integer"):
        model.explain(X, n_top=0)
    every = model.explain(X[:5], n_top=3)
    # n_top beyond the model's directions reports every direction (no empty slots), and
    # allocates nothing for the slots beyond them: 10**9 once asked for 10**9 per row
    for n_top in (5, 10**4, 10**9, np.int64(2**62)):
        why = model.explain(X[:5], n_top=n_top)
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(why, name), getattr(every, name))
    assert (np.sort(every.direction, axis=1) == np.arange(3)).all()
    lazy = model.explain(chunked(X[:5], 2), n_top=10**9)
    assert lazy.direction.shape == (5, 3)
    np.testing.assert_array_equal(lazy.direction.compute(), every.direction)
    with pytest.raises(ValueError, match="features"):
        model.explain(np.zeros((2, 3)))


def test_cli_explain_beyond_the_directions_writes_them_all(tmp_path):
    rows = np.random.default_rng(1).normal(size=(300, 3))
    with quiet_zarr():
        xr.Dataset({"X": (("sample", "feature"), rows)}).to_zarr(str(tmp_path / "in.zarr"))
    assert main(["score", str(tmp_path / "in.zarr"), "--out", str(tmp_path / "out.zarr"),
                 "--depth", "irw", "--n-directions", "4", "--seed", "0", "--explain", "1000",
                 "-q"]) == 0
    with quiet_zarr():
        out = xr.open_zarr(str(tmp_path / "out.zarr"))
    assert out.sizes["top"] == 4
    assert (np.sort(out["explain_direction"].values, axis=1) == np.arange(4)).all()


def test_cli_writes_explanations_chunked_like_depth(tmp_path):
    reference, outliers = planted_outliers(1200, 3, feature=0, seed=9)
    rows = np.concatenate([reference, outliers])
    ds = xr.Dataset({"X": (("sample", "feature"), rows)},
                    coords={"sample": np.arange(rows.shape[0]), "feature": ["p", "q", "r"]})
    ds["X"].encoding = {"chunks": (500, 3)}
    with quiet_zarr():
        ds.to_zarr(str(tmp_path / "in.zarr"))
    assert main(["fit", str(tmp_path / "in.zarr"), "--model", str(tmp_path / "m.zarr"),
                 "--seed", "3", "-q"]) == 0
    assert main(["apply", str(tmp_path / "m.zarr"), str(tmp_path / "in.zarr"), "--out",
                 str(tmp_path / "out.zarr"), "--explain", "2", "-q"]) == 0
    with quiet_zarr():
        out = xr.open_zarr(str(tmp_path / "out.zarr"))
    assert out["explain_direction"].dims == ("sample", "top")
    assert out["contribution"].dims == ("sample", "feature")
    assert out["contribution"].chunks[0] == out["depth"].chunks[0]
    model = daskdepth.load(tmp_path / "m.zarr")
    why = model.explain(xr.DataArray(rows, dims=("sample", "feature"),
                                     coords={"feature": ["p", "q", "r"]}), n_top=2)
    for name in ("explain_direction", "explain_depth", "explain_side", "contribution"):
        np.testing.assert_array_equal(out[name].values, why[name].values)
    assert main(["score", str(tmp_path / "in.zarr"), "--out", str(tmp_path / "o2.zarr"),
                 "--explain", "0"]) != 0
    assert main(["fit", str(tmp_path / "in.zarr"), "--model", str(tmp_path / "m2.zarr"),
                 "--explain", "2", "-q"]) != 0


def test_plot_draws_the_contributions_and_the_profile():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import daskdepth.plot

    reference, outliers = planted_outliers(800, 3, feature=1, seed=10)
    model = daskdepth.Halfspace(random_state=0).fit(reference)
    bars, profile = daskdepth.plot.explain(model, outliers[0])
    why = model.explain(outliers[:1])
    heights = [p.get_width() for p in bars.patches]
    np.testing.assert_array_equal(heights, why.contribution[0])
    j = int(why.direction[0, 0])
    p = float((outliers[0] - model.location_) @ model.directions_[j])
    assert any(len(line.get_xdata()) == 2 and np.allclose(line.get_xdata(), [p, p])
               for line in profile.get_lines())
    plt.close("all")


def test_sharded_summary_on_cluster_gives_the_same_bits(cluster, monkeypatch):
    """A summary sharded by direction block: slots per shard, merged; a fit kept on the cluster."""
    import daskdepth.runtime.memory

    monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)  # shard any summary
    rng = np.random.default_rng(11)
    reference = rng.normal(size=(72_000, 3))
    points = np.concatenate([rng.normal(size=(900, 3)), reference[:300]])
    points[:100, 1] += 7.0
    model = daskdepth.Halfspace(random_state=0, tol=0.01, n_directions=80).fit(
        chunked(reference, 18_000))
    base = model.explain(points, n_top=4)
    with Client(cluster):
        lazy = model.explain(chunked(points, (400, 1, 799)), n_top=4)
        graph = dict(lazy.direction.__dask_graph__())
        shard_tasks = [k for k in graph if isinstance(k, tuple)
                       and str(k[0]).startswith("daskdepth-why-") and str(k[0]).endswith("shard")]
        assert len(shard_tasks) == 3 * 2  # one per (row chunk, worker)
        got = {f: getattr(lazy, f).compute() for f in FIELDS}
        fitted = daskdepth.Halfspace(random_state=0, tol=0.01, n_directions=80).fit(
            chunked(reference, 18_000))
        on_cluster = fitted.explain(chunked(points, 500), n_top=4)
        on_cluster = {f: getattr(on_cluster, f).compute() for f in FIELDS}
    for f in FIELDS:
        np.testing.assert_array_equal(got[f], getattr(base, f))
        np.testing.assert_array_equal(on_cluster[f], getattr(base, f))
    np.testing.assert_array_equal(base.depth[:, 0], model.score_samples(points))


def test_saved_model_explains_the_same(tmp_path):
    reference, outliers = planted_outliers(2000, 3, feature=1, seed=12)
    model = daskdepth.AIIRW(random_state=0, tol=0.01).fit(chunked(reference, 500))
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    a, b = model.explain(outliers), loaded.explain(chunked(outliers, 70))
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(b, f).compute(), getattr(a, f))
