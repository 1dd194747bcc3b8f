"""Public API: container types in and out, outlier labels, score(), pipelines, NaN policy."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import chunked, gaussian_data
from oracle import exact_depth_of_model
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import daskdepth

#: The depths computed from leaf summaries (same fit, a statistic over directions).
SUMMARY_MODELS = [daskdepth.AIIRW, daskdepth.IRW, daskdepth.Halfspace]
MODELS = [*SUMMARY_MODELS, daskdepth.HalfspaceMass]


def _model(cls, **kw):
    kw.setdefault("n_directions", 20)
    kw.setdefault("random_state", 0)
    if "tol" in cls._get_param_names():
        kw.setdefault("tol", 1e-3)
    return cls(**kw)


# --------------------------------------------------------------------------- containers


@pytest.mark.parametrize("cls", MODELS)
def test_numpy_in_numpy_out(cls, gaussian):
    model = _model(cls).fit(gaussian)
    for method in ("score_samples", "decision_function", "predict"):
        out = getattr(model, method)(gaussian[:100])
        assert type(out) is np.ndarray, method
        assert out.shape == (100,)
    assert model.predict(gaussian[:5]).dtype == np.int64


@pytest.mark.parametrize("cls", MODELS)
def test_dask_in_lazy_dask_out_same_row_chunks(cls, gaussian):
    x = chunked(gaussian, (100, 400, 1000))
    model = _model(cls).fit(x)
    ref = model.score_samples(gaussian)
    for method in ("score_samples", "decision_function", "predict"):
        out = getattr(model, method)(x)
        assert isinstance(out, da.Array), method
        assert out.chunks[0] == x.chunks[0]
        assert out.ndim == 1
    with dask.config.set(scheduler="sync"):
        lazy = model.score_samples(x)
    np.testing.assert_array_equal(lazy.compute(), ref)


def test_dask_output_is_lazy(gaussian):
    model = _model(daskdepth.AIIRW).fit(gaussian)
    calls = []

    def spy(block):
        calls.append(block.shape)
        return block

    x = chunked(gaussian, 500).map_blocks(spy, dtype=float)
    out = model.score_samples(x)
    assert calls == [] or all(c[0] == 0 for c in calls)  # meta inference only
    out.compute()
    assert sum(c[0] for c in calls) == gaussian.shape[0]


def _no_compute(*args, **kwargs):
    raise AssertionError("something was computed")


@pytest.mark.parametrize("cls", MODELS)
def test_dask_dataframe_in_lazy_dask_series_out(cls, gaussian):
    """Never computed into client memory: lazy Series aligned with the index, names kept."""
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"], index=np.arange(len(gaussian)) * 3)
    ddf = dd.from_pandas(df, npartitions=4)
    model = _model(cls).fit(ddf)
    expected = _model(cls).fit(gaussian)
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    np.testing.assert_array_equal(model.directions_, expected.directions_)
    with dask.config.set(scheduler=_no_compute):  # building the results computes nothing
        depth = model.score_samples(ddf)
        decision = model.decision_function(ddf)
        labels = model.predict(ddf)
    assert isinstance(depth, dd.Series) and depth.npartitions == 4 and depth.name == "depth"
    assert decision.name == "decision" and labels.name == "label"
    got = depth.compute()
    pd.testing.assert_index_equal(got.index, df.index)
    np.testing.assert_array_equal(got.to_numpy(), expected.score_samples(gaussian))
    np.testing.assert_array_equal(labels.compute().to_numpy(), expected.predict(gaussian))
    assert ddf.assign(depth=depth).compute()["depth"].equals(got)


def test_dask_dataframe_with_unknown_partition_lengths(gaussian):
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"])
    ddf = dd.from_pandas(df, npartitions=5)
    kept = ddf[ddf["a"] > -1]  # partition lengths unknown
    rows = df[df["a"] > -1]
    model = _model(daskdepth.AIIRW).fit(kept)  # counts them: the row sample needs them
    expected = _model(daskdepth.AIIRW).fit(rows.to_numpy())
    with dask.config.set(scheduler=_no_compute):
        depth = model.score_samples(kept)
    got = depth.compute()
    pd.testing.assert_index_equal(got.index, rows.index)
    np.testing.assert_array_equal(got.to_numpy(), expected.score_samples(rows.to_numpy()))
    labels = model.fit_predict(kept)
    assert isinstance(labels, dd.Series)
    np.testing.assert_array_equal(labels.compute().to_numpy(),
                                  expected.fit_predict(rows.to_numpy()))


def test_dask_dataframe_nan_rows_are_named_per_partition(gaussian):
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"])
    model = _model(daskdepth.AIIRW).fit(df)
    n = len(df)
    df.iloc[[n - 10, n - 5], 1] = np.nan  # in the last partition
    ddf = dd.from_pandas(df, npartitions=4)
    last = len(ddf.partitions[3].compute())  # the rows' positions within that partition
    message = (r"a partition of the input \(rows counted within it\) has 2 rows with NaN or "
               rf"inf values \(rows \[{last - 10}, {last - 5}\]\)")
    with pytest.raises(ValueError, match=message):
        model.score_samples(ddf[ddf["a"] > -100]).compute()  # positions unknown: no lengths


def test_dataframes_with_text_columns_are_refused_by_name(gaussian):
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"]).assign(city="x")
    for frame in (df, dd.from_pandas(df, npartitions=2)):
        with pytest.raises(TypeError, match=r"columns that are not real numbers: 'city'"):
            daskdepth.AIIRW().fit(frame)
    with pytest.raises(ValueError, match="is a dask Series"):
        daskdepth.AIIRW().fit(dd.from_pandas(df["a"], npartitions=2))


@pytest.mark.parametrize("cls", MODELS)
def test_pandas_dataframe_in_series_out(cls, gaussian):
    """A pandas DataFrame gives pandas Series with its index, as a dask DataFrame gives dask
    Series (NumPy before issue 25's B5; ``.to_numpy()`` gives it back)."""
    index = pd.Index(np.arange(gaussian.shape[0]) * 3 + 7, name="id")
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"], index=index)
    model = _model(cls).fit(df)
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    ref = _model(cls).fit(gaussian)
    for method, name in (("score_samples", "depth"), ("decision_function", "decision"),
                         ("predict", "label")):
        out = getattr(model, method)(df.iloc[::-1])
        assert type(out) is pd.Series and out.name == name, method
        assert out.index.equals(index[::-1])
        np.testing.assert_array_equal(out.to_numpy(),
                                      getattr(ref, method)(gaussian[::-1]))
    labels = _model(cls).fit_predict(df)
    assert type(labels) is pd.Series and labels.index.equals(index)
    if cls in (daskdepth.AIIRW, daskdepth.IRW):  # standard errors of a mean over directions
        depth, std = model.score_samples(df, return_std=True)
        assert depth.index.equals(index) and std.index.equals(index) and std.name == "depth_std"


@pytest.mark.parametrize("contamination", [None, 0.1])
def test_score_return_types_per_call_form(gaussian, contamination):
    """daskdepth.score: the depth alone; daskdepth.outliers: (depth, outlier); in X's kind."""
    index = pd.RangeIndex(1000, 1000 + gaussian.shape[0])
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"], index=index)
    xa = _dataarray(gaussian)
    forms = {"numpy": (gaussian, np.ndarray), "pandas": (df, pd.Series),
             "dask": (chunked(gaussian, 700), da.Array),
             "dask-dataframe": (dd.from_pandas(df, npartitions=3), dd.Series),
             "xarray": (xa, xr.DataArray)}
    for kind, (data, container) in forms.items():
        out = (daskdepth.score(data, random_state=0, n_directions=20, tol=1e-3)
               if contamination is None else
               daskdepth.outliers(data, random_state=0, n_directions=20, tol=1e-3,
                                  contamination=contamination))
        parts = (out,) if contamination is None else out
        assert isinstance(out, tuple) == (contamination is not None), kind
        for part in parts:
            assert isinstance(part, container), (kind, type(part))
        if kind == "pandas":
            assert all(p.index.equals(index) for p in parts)
            assert parts[0].name == "depth" and parts[-1].name in ("depth", "outlier")
        if kind == "xarray":
            assert all(p.dims == ("time",) for p in parts)


def _dataarray(x: np.ndarray) -> xr.DataArray:
    n, d = x.shape
    return xr.DataArray(
        x, dims=("time", "band"),
        coords={"time": np.arange(n) * 10, "band": [f"b{i}" for i in range(d)],
                "station": ("time", np.arange(n) % 7), "flag": 3},
        name="reflectance",
    )


@pytest.mark.parametrize("cls", MODELS)
def test_dataarray_in_dataarray_out(cls, gaussian):
    xa = _dataarray(gaussian)
    model = _model(cls).fit(xa)
    assert list(model.feature_names_in_) == ["b0", "b1", "b2"]
    out = model.score_samples(xa)
    assert isinstance(out, xr.DataArray)
    assert out.dims == ("time",)
    np.testing.assert_array_equal(out["time"].values, xa["time"].values)
    np.testing.assert_array_equal(out["station"].values, xa["station"].values)
    assert "band" not in out.coords
    assert isinstance(out.data, np.ndarray)
    np.testing.assert_array_equal(out.values, model.score_samples(gaussian))
    labels = model.predict(xa)
    assert isinstance(labels, xr.DataArray) and set(np.unique(labels.values)) <= {-1, 1}


def test_chunked_dataarray_stays_lazy(gaussian):
    xa = _dataarray(gaussian).chunk({"time": 300})
    model = _model(daskdepth.AIIRW).fit(xa)
    out = model.score_samples(xa)
    assert isinstance(out, xr.DataArray) and isinstance(out.data, da.Array)
    assert out.chunks[0] == xa.chunks[0]
    np.testing.assert_array_equal(out.compute().values, model.score_samples(gaussian))
    np.testing.assert_array_equal(out["time"].values, xa["time"].values)


# --------------------------------------------------------------------------- outliers


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_decision_function_is_score_minus_offset(cls, kind, gaussian):
    x = gaussian if kind == "numpy" else chunked(gaussian, 400)
    model = _model(cls).fit(x)
    s = np.asarray(model.score_samples(x))
    dfn = np.asarray(model.decision_function(x))
    np.testing.assert_array_equal(dfn, s - model.offset_)
    labels = np.asarray(model.predict(x))
    np.testing.assert_array_equal(labels, np.where(dfn >= 0, 1, -1))


@pytest.mark.parametrize("cls", MODELS)
def test_predict_flags_planted_outliers(cls):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, 3))
    far = rng.normal(size=(20, 3))
    far = 100 * far / np.linalg.norm(far, axis=1, keepdims=True)
    model = _model(cls, n_directions=100, contamination=0.05).fit(np.vstack([x, far]))
    labels = model.predict(np.vstack([far, np.zeros((1, 3))]))
    assert set(np.unique(labels)) <= {-1, 1}
    assert (labels[:20] == -1).all()
    assert labels[20] == 1


@pytest.mark.parametrize("contamination", [0.05, 0.2])
@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_fit_predict_labels_contamination_share(kind, contamination):
    x = gaussian_data(4000, 2, seed=3)
    model = _model(daskdepth.AIIRW, contamination=contamination)
    labels = np.asarray(model.fit_predict(x if kind == "numpy" else chunked(x, 1000)))
    frac = (labels == -1).mean()
    assert abs(frac - contamination) < 0.01
    # fit_predict agrees with predict on the same fitted model.
    np.testing.assert_array_equal(labels, model.predict(x))


def test_fit_predict_dask_is_lazy_with_row_chunks():
    x = chunked(gaussian_data(3000, 2, seed=4), (1000, 500, 1500))
    out = _model(daskdepth.IRW).fit_predict(x)
    assert isinstance(out, da.Array)
    assert out.chunks[0] == x.chunks[0]


@pytest.mark.parametrize("method", ["fit", "fit_predict"])
def test_offset_rank_on_distributed_path(method):
    # offset_ comes from a row sample: within 0.01 in rank of the exact quantile.
    x = np.random.default_rng(7).standard_t(5, size=(100_000, 2))
    contamination = 0.1
    model = _model(daskdepth.AIIRW, contamination=contamination)
    getattr(model, method)(chunked(x, 25_000))
    assert model.n_passes_ >= 1
    depth = model.score_samples(x)
    frac = (depth < model.offset_).mean()
    assert abs(frac - contamination) < 0.01


# --------------------------------------------------------------------------- score()


@pytest.mark.parametrize("depth,cls", [("ai-irw", daskdepth.AIIRW), ("irw", daskdepth.IRW),
                                       ("halfspace", daskdepth.Halfspace)])
def test_score_equals_estimator(gaussian, depth, cls):
    got = daskdepth.score(gaussian, depth=depth, n_directions=30, tol=1e-3, random_state=4)
    model = cls(n_directions=30, tol=1e-3, random_state=4).fit(gaussian)
    np.testing.assert_array_equal(got, model.score_samples(gaussian))
    other = daskdepth.score(gaussian, depth=depth, n_directions=30, tol=1e-3, random_state=5)
    assert not np.array_equal(got, other)


def test_score_with_reference(gaussian):
    ref = gaussian_data(800, 3, seed=9)
    got = daskdepth.score(gaussian, ref, n_directions=30, random_state=1)
    model = daskdepth.AIIRW(n_directions=30, random_state=1).fit(ref)
    np.testing.assert_array_equal(got, model.score_samples(gaussian))
    assert model.n_samples_fit_ == 800
    assert np.abs(got - exact_depth_of_model(model, ref, gaussian)).max() <= (
        model.error_bound_ + 1e-12)
    lazy = daskdepth.score(chunked(gaussian, 500), chunked(ref, 300), n_directions=30,
                           random_state=1)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (500, 500, 500)
    np.testing.assert_allclose(lazy.compute(), got, rtol=0, atol=1e-12)


def test_score_reference_with_other_features_names_reference_and_x(gaussian, monkeypatch):
    import daskdepth.estimators.depths as depths

    monkeypatch.setattr(depths, "fit_depth", _no_compute)  # refused before fitting
    with pytest.raises(ValueError) as exc:
        daskdepth.score(gaussian, gaussian[:, :2])
    assert str(exc.value).startswith("X has 3 features but reference has 2;")
    assert "AIIRW" not in str(exc.value)


@pytest.mark.parametrize("kind", ["numpy", "dask", "xarray"])
def test_outliers_flags_outliers(gaussian, kind):
    X = {"numpy": gaussian, "dask": chunked(gaussian, 500),
         "xarray": _dataarray(gaussian)}[kind]
    depth, outlier = daskdepth.outliers(X, contamination=0.05, n_directions=30, random_state=2)
    model = daskdepth.AIIRW(n_directions=30, random_state=2, contamination=0.05).fit(X)
    assert type(outlier) is type(depth)
    if kind == "dask":
        assert outlier.chunks == depth.chunks  # lazy, same row chunks
    np.testing.assert_array_equal(np.asarray(outlier), np.asarray(model.predict(X)) == -1)
    np.testing.assert_array_equal(np.asarray(depth), np.asarray(model.score_samples(X)))
    assert np.asarray(outlier).dtype == bool
    with pytest.raises(ValueError, match="'auto' .* has no meaning for a depth"):
        daskdepth.outliers(X, contamination="auto")
    # score() has one return type: the depths; a contamination names the function to call.
    with pytest.raises(TypeError, match=r"daskdepth\.outliers\(X, contamination=\.\.\.\)"):
        daskdepth.score(X, contamination=0.05)
    assert type(daskdepth.score(X, contamination=None, n_directions=30, random_state=2)) \
        is type(depth)


def test_score_passes_covariance(gaussian):
    cov = np.diag([1.0, 4.0, 9.0])
    got = daskdepth.score(gaussian, covariance=cov, n_directions=30, random_state=1)
    model = daskdepth.AIIRW(covariance=cov, n_directions=30, random_state=1).fit(gaussian)
    np.testing.assert_array_equal(model.covariance_, cov)
    np.testing.assert_array_equal(got, model.score_samples(gaussian))
    default = daskdepth.score(gaussian, n_directions=30, random_state=1)
    assert not np.array_equal(got, default)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_default_number_of_directions(d):
    x = gaussian_data(300, d, seed=d)
    for cls in SUMMARY_MODELS:
        model = cls(random_state=0).fit(x)
        assert model.directions_.shape == (100 * d, d)
        assert model.n_directions_ == 100 * d


def test_fitted_attributes(gaussian):
    model = _model(daskdepth.AIIRW).fit(gaussian)
    np.testing.assert_allclose(model.location_, gaussian.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(model.covariance_, np.cov(gaussian.T), rtol=1e-10)
    assert model.n_features_in_ == 3
    assert model.n_samples_fit_ == gaussian.shape[0]
    assert model.covariance_rank_ == 3
    assert model.n_passes_ == 0
    assert 0 <= model.error_bound_ <= 1e-3
    assert isinstance(model.summary_, daskdepth.DepthSummary)
    # AI-IRW directions whiten: each has unit variance under the fitted covariance.
    var = np.einsum("ij,jk,ik->i", model.directions_, model.covariance_, model.directions_)
    np.testing.assert_allclose(var, 1.0, rtol=1e-8)
    irw = _model(daskdepth.IRW).fit(gaussian)
    np.testing.assert_allclose(np.linalg.norm(irw.directions_, axis=1), 1.0, rtol=1e-12)


# --------------------------------------------------------------------------- rank, NaN


def test_rank_deficient_covariance_warns_and_scores():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(1000, 2)) * [1.0, 3.0]
    x = np.column_stack([base, base[:, 0] + base[:, 1]])
    with pytest.warns(daskdepth.CovarianceRankWarning, match="rank 2"):
        model = _model(daskdepth.AIIRW, n_directions=50).fit(x)
    assert model.covariance_rank_ == 2
    null = np.array([1.0, 1.0, -1.0]) / np.sqrt(3)
    norms = np.linalg.norm(model.directions_, axis=1)
    assert np.abs(model.directions_ @ null).max() <= 1e-9 * norms.max()
    d = model.score_samples(x)
    assert np.isfinite(d).all() and d.max() > 0.4
    exact = exact_depth_of_model(model, x, x)
    assert np.abs(d - exact).max() <= model.error_bound_ + 1e-12
    # A point off the subspace gets the depth of its projection onto it only.
    new = rng.normal(size=(50, 2))
    q = np.column_stack([new, new[:, 0] + new[:, 1]])
    # Interpolated depths move with the ~1e-16 rounding of <null, v>: allow 1e-10.
    np.testing.assert_allclose(model.score_samples(q + 10 * null), model.score_samples(q),
                               rtol=0, atol=1e-10)


def test_full_rank_does_not_warn(gaussian):
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        _model(daskdepth.AIIRW).fit(gaussian)


# The half-space mass samples rows by global index: dropping rows changes its draws
# (tests/test_halfspace.py checks its NaN handling).
@pytest.mark.parametrize("cls", SUMMARY_MODELS)
@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_nan_policy_omit(cls, kind, gaussian):
    x = gaussian.copy()
    bad = [0, 7, 8, 500, 1499]
    x[bad[:3], 1] = np.nan
    x[bad[3], 0] = np.inf
    x[bad[4], 2] = -np.inf
    clean = np.delete(x, bad, axis=0)
    inp = x if kind == "numpy" else chunked(x, 400)
    model = _model(cls, nan_policy="omit").fit(inp)
    ref = _model(cls).fit(clean)
    assert model.n_samples_fit_ == clean.shape[0]
    np.testing.assert_allclose(model.location_, ref.location_, rtol=1e-12)
    np.testing.assert_allclose(model.directions_, ref.directions_, rtol=1e-9)
    d = np.asarray(model.score_samples(inp))
    assert np.isnan(d[bad]).all()
    good = np.delete(d, bad)
    assert np.isfinite(good).all()
    np.testing.assert_allclose(good, ref.score_samples(clean), rtol=0, atol=1e-12)


def test_nan_policy_omit_distributed_path():
    x = gaussian_data(70_000, 2, seed=6)
    x[[3, 40_000, 69_999]] = np.nan
    model = _model(daskdepth.AIIRW, nan_policy="omit").fit(chunked(x, 20_000))
    assert model.n_passes_ >= 1
    assert model.n_samples_fit_ == 69_997
    d = model.score_samples(chunked(x, 20_000)).compute()
    assert np.isnan(d[[3, 40_000, 69_999]]).all()
    assert np.isfinite(d).sum() == 69_997
    exact = exact_depth_of_model(model, x, x[:2000][np.isfinite(x[:2000]).all(axis=1)])
    got = d[:2000][np.isfinite(x[:2000]).all(axis=1)]
    assert np.abs(got - exact).max() <= model.error_bound_ + 1e-12


# --------------------------------------------------------------------------- pipelines


def test_sklearn_pipeline(gaussian):
    pipe = make_pipeline(StandardScaler(), daskdepth.AIIRW(n_directions=30, random_state=0))
    pipe.fit(gaussian)
    scaled = StandardScaler().fit_transform(gaussian)
    direct = daskdepth.AIIRW(n_directions=30, random_state=0).fit(scaled)
    np.testing.assert_allclose(pipe.score_samples(gaussian), direct.score_samples(scaled),
                               rtol=0, atol=1e-12)
    labels = pipe.predict(gaussian)
    assert set(np.unique(labels)) == {-1, 1}


def test_dask_ml_pipeline(gaussian):
    dask_ml_preprocessing = pytest.importorskip("dask_ml.preprocessing")
    x = chunked(gaussian, 500)
    pipe = make_pipeline(dask_ml_preprocessing.StandardScaler(),
                         daskdepth.AIIRW(n_directions=30, random_state=0))
    pipe.fit(x)
    out = pipe.score_samples(x)
    assert isinstance(out, da.Array) and out.chunks[0] == x.chunks[0]
    scaled = (gaussian - gaussian.mean(axis=0)) / gaussian.std(axis=0)
    direct = daskdepth.AIIRW(n_directions=30, random_state=0).fit(scaled)
    np.testing.assert_allclose(out.compute(), direct.score_samples(scaled), rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- feature names


def test_feature_names_checked_as_scikit_learn_does():
    """scikit-learn's own check: reordered, renamed or missing columns raise its errors."""
    from sklearn.utils.estimator_checks import (  # only this test needs the check
        check_dataframe_column_names_consistency,
    )

    for cls in MODELS:
        check_dataframe_column_names_consistency(cls.__name__, _model(cls))


@pytest.mark.parametrize("cls", MODELS)
def test_reordered_or_renamed_columns_are_refused(cls, gaussian):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(gaussian, columns=["a", "b", "c"])
    model = _model(cls).fit(df)
    bad = [(df[["c", "b", "a"]], "must be in the same order as they were in fit"),
           (df.rename(columns={"a": "x"}), "unseen at fit time:\n- x\n"),
           (df[["a", "b"]], "seen at fit time, yet now missing:\n- c\n")]
    for frame, pattern in bad:
        for method in (model.score_samples, model.decision_function, model.predict):
            with pytest.raises(ValueError, match=pattern):
                method(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(model.score_samples(df), model.score_samples(df.copy()))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        model.score_samples(gaussian)
    with pytest.warns(UserWarning, match="X has feature names, but .* fitted without"):
        _model(cls).fit(gaussian).score_samples(df)


def test_xarray_feature_coordinates_are_checked(gaussian):
    xa = xr.DataArray(gaussian, dims=("time", "feature"), coords={"feature": ["a", "b", "c"]})
    model = _model(daskdepth.AIIRW).fit(xa)
    with pytest.raises(ValueError, match="same order"):
        model.score_samples(xa.isel(feature=[2, 1, 0]))
    with pytest.raises(ValueError, match="unseen at fit time"):
        model.score_samples(xa.assign_coords(feature=["a", "b", "z"]))
    lazy = xa.chunk({"time": 500})
    np.testing.assert_array_equal(model.score_samples(lazy).values, model.score_samples(xa).values)


# --------------------------------------------------------------------------- namespace


def test_package_namespace_is_the_public_api():
    """``import daskdepth`` shows its API only, not its imports (issue 25, B6)."""
    fresh = daskdepth
    for helper in ("Any", "annotations", "importlib"):
        assert not hasattr(fresh, helper), helper
    assert dir(fresh) == sorted(fresh.__all__)
    for name in fresh.__all__:
        assert getattr(fresh, name) is not None, name
    assert "outlier_auroc" in fresh.__all__
    with pytest.raises(AttributeError, match="no attribute 'Any'"):
        fresh.Any  # noqa: B018
    # The public exceptions and warnings are the package's; a summary is not an entry point.
    from daskdepth import errors

    public = [name for name, obj in vars(errors).items()
              if isinstance(obj, type) and issubclass(obj, Exception)
              and obj.__module__ == errors.__name__]
    assert len(public) == 15, public
    for name in public:
        assert name in fresh.__all__ and getattr(fresh, name) is getattr(errors, name)
    assert "DepthSummary" not in fresh.__all__ and fresh.DepthSummary is not None
    assert {"Projection", "outliers"} <= set(fresh.__all__)


# --------------------------------------------------------------------------- evaluation


def _labelled(seed=0):
    rng = np.random.default_rng(seed)
    x = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(15, 2)) * 0.5 + [4.0, -4.0]])
    return x, np.r_[np.zeros(300, int), np.ones(15, int)]  # 1 = anomaly


def test_outlier_auroc_ranks_low_depth_as_anomalous():
    """scoring='roc_auc' ranks central rows as positives (1 - AUROC); outlier_auroc does not
    (issue 25, B9)."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    x, y = _labelled()
    model = _model(daskdepth.AIIRW).fit(x)
    auc = daskdepth.outlier_auroc(model, x, y)
    assert auc == roc_auc_score(y, -model.score_samples(x)) > 0.95
    # the label conventions give the same value: 0/1, booleans, scikit-learn's -1/1, pandas
    for labels in (y.astype(bool), 1 - 2 * y, y.astype(float), pd.Series(y)):
        assert daskdepth.outlier_auroc(model, x, labels) == auc
    # any input score_samples takes: dask and pandas (computed), DataArray
    assert daskdepth.outlier_auroc(model, chunked(x, 100), y) == auc
    frame_model = _model(daskdepth.AIIRW).fit(pd.DataFrame(x, columns=["a", "b"]))
    assert daskdepth.outlier_auroc(frame_model, pd.DataFrame(x, columns=["a", "b"]), y) == auc
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    good = cross_val_score(_model(daskdepth.AIIRW), x, y, cv=folds,
                           scoring=daskdepth.outlier_auroc)
    inverted = cross_val_score(_model(daskdepth.AIIRW), x, y, cv=folds, scoring="roc_auc")
    assert good.min() > 0.9 and inverted.max() < 0.1
    np.testing.assert_allclose(good + inverted, 1)


def test_outlier_auroc_refuses_unclear_labels_and_missing_depths():
    x, y = _labelled()
    model = _model(daskdepth.IRW).fit(x)
    for labels, pattern in (
            (np.where(y == 1, 2, 0), r"y must mark the anomalies.*y holds \[0, 2\]"),
            (np.r_[y[:-1], -1], r"y holds \[-1, 0, 1\]"),
            (np.zeros_like(y), r"one label only \(0 in all 315 rows\)"),
            (np.ones_like(y), r"one label only"),
            (np.r_[y[:-1], np.nan], r"NaN or inf labels"),
            (np.array(["a"] * 315), r"dtype <U1"),
            (y[-20:], r"20 labels but X has 315 rows")):
        with pytest.raises(ValueError, match=pattern):
            daskdepth.outlier_auroc(model, x, labels)
    omit = _model(daskdepth.IRW, nan_policy="omit").fit(x)
    holes = x.copy()
    holes[[3, 9]] = np.nan
    with pytest.raises(ValueError, match=r"2 rows of X have no depth .*rows \[3, 9\].*drop them"):
        daskdepth.outlier_auroc(omit, holes, y)


def test_warnings_point_at_the_users_call():
    """Fit and scoring warnings name the caller's line, whatever path led to them."""
    x = np.random.default_rng(0).normal(size=(600, 3))
    flat = np.c_[x, x[:, 0]]  # a singular covariance
    named = pd.DataFrame(x, columns=list("abc"))
    big = np.arange(2**62, 2**62 + 600, dtype=np.int64)
    ids = pd.DataFrame({"id": big, "code": big[::-1]})  # ids beyond float64's integers
    fitted = daskdepth.IRW(n_directions=5, random_state=0).fit(named)
    calls = [
        (daskdepth.CovarianceRankWarning,
         lambda: daskdepth.AIIRW(n_directions=5, random_state=0).fit(flat)),
        (daskdepth.CovarianceRankWarning,
         lambda: daskdepth.AIIRW(n_directions=5, random_state=0).fit(chunked(flat, 200))),
        (daskdepth.CovarianceRankWarning,
         lambda: daskdepth.score(flat, n_directions=5, random_state=0)),
        (UserWarning, lambda: fitted.score_samples(x)),
        (UserWarning, lambda: fitted.predict(x)),
        (UserWarning, lambda: daskdepth.IRW(n_directions=5, random_state=0).fit(ids)),
    ]
    for category, call in calls:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        ours = [w for w in seen if issubclass(w.category, category)]
        assert ours, category
        assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
