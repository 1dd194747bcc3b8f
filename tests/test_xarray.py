"""xarray in, xarray out: score_dataset, DataArray scoring and feature names."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import daskdepth


def _dataset(n: int = 500, d: int = 3, seed: int = 0, chunks: int | None = None) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) @ (np.eye(d) + 0.4 * rng.normal(size=(d, d)))
    data = da.from_array(x, chunks=(chunks, d)) if chunks else x
    return xr.Dataset(
        {"X": (("time", "feature"), data), "quality": (("time",), rng.integers(0, 3, n))},
        coords={"time": np.arange(n) * 60, "feature": [f"f{i}" for i in range(d)],
                "site": ("time", np.where(np.arange(n) < n // 2, "north", "south")),
                "campaign": "2026"},
        attrs={"title": "weather", "units": "mixed"},
    )


def test_score_dataset_matches_the_estimator():
    ds = _dataset()
    out = daskdepth.score_dataset(ds, "X", n_directions=50, random_state=0)
    expected = daskdepth.AIIRW(n_directions=50, random_state=0).fit(ds["X"].values)
    assert isinstance(out, xr.Dataset) and list(out.data_vars) == ["depth"]
    assert out["depth"].dims == ("time",)
    np.testing.assert_array_equal(out["depth"].values,
                                  expected.score_samples(ds["X"].values))


def test_coordinates_and_attrs_are_kept():
    ds = _dataset()
    out = daskdepth.score_dataset(ds, "X", random_state=0)
    np.testing.assert_array_equal(out["time"].values, ds["time"].values)
    np.testing.assert_array_equal(out["site"].values, ds["site"].values)
    assert out["campaign"].item() == "2026"
    assert "feature" not in out.coords
    assert out.attrs == ds.attrs
    attrs = out["depth"].attrs
    assert attrs["method"] == "ai-irw" and attrs["n_directions"] == 300
    assert attrs["seed"] == 0 and attrs["tol"] == 1e-4 and attrs["error_bound"] <= 1e-4
    assert attrs["feature_names"] == ["f0", "f1", "f2"]
    assert attrs["source_variable"] == "X" and attrs["covariance"] == "sample"


def test_dask_backed_dataset_stays_lazy_with_its_chunks():
    ds = _dataset(chunks=100)
    out = daskdepth.score_dataset(ds, "X", depth="irw", random_state=0, contamination=0.1)
    assert isinstance(out["depth"].data, da.Array)
    assert out["depth"].data.chunks == ((100,) * 5,)
    assert isinstance(out["outlier"].data, da.Array)
    eager = daskdepth.score_dataset(ds.compute(), "X", depth="irw", random_state=0,
                                    contamination=0.1)
    np.testing.assert_array_equal(out["depth"].values, eager["depth"].values)
    assert out["depth"].attrs["method"] == "irw" and "covariance" not in out["depth"].attrs


def test_outlier_flags_follow_contamination():
    ds = _dataset(1000)
    out = daskdepth.score_dataset(ds, "X", random_state=0, contamination=0.05)
    flags = out["outlier"]
    assert flags.dtype == bool and flags.dims == ("time",)
    assert 40 <= int(flags.sum()) <= 60
    offset = flags.attrs["offset"]
    np.testing.assert_array_equal(flags.values, out["depth"].values < offset)
    assert flags.attrs["contamination"] == 0.05


def test_reference_dataset_and_fitted_model():
    ds, ref = _dataset(300, seed=1), _dataset(800, seed=2)
    out = daskdepth.score_dataset(ds, "X", ref, n_directions=40, random_state=3)
    expected = daskdepth.score(ds["X"].values, ref["X"].values, n_directions=40,
                               random_state=3)
    np.testing.assert_array_equal(out["depth"].values, expected)
    model = daskdepth.AIIRW(n_directions=40, random_state=3).fit(ref["X"])
    with_model = daskdepth.score_dataset(ds, "X", model=model)
    np.testing.assert_array_equal(with_model["depth"].values, expected)
    da_ref = daskdepth.score_dataset(ds, "X", ref["X"], n_directions=40, random_state=3)
    np.testing.assert_array_equal(da_ref["depth"].values, expected)


def test_support_fraction_reaches_the_estimator():
    ds = _dataset()
    out = daskdepth.score_dataset(ds, "X", covariance="mcd", support_fraction=0.75,
                                  n_directions=40, random_state=1)
    expected = daskdepth.score(ds["X"].values, covariance="mcd", support_fraction=0.75,
                               n_directions=40, random_state=1)
    np.testing.assert_array_equal(out["depth"].values, expected)
    assert out["depth"].attrs["support_fraction"] == 0.75
    with pytest.raises(ValueError, match="does not apply to depth='irw'"):
        daskdepth.score_dataset(ds, "X", depth="irw", support_fraction=0.75)


def test_sample_dim_not_first():
    ds = _dataset()
    flipped = ds.transpose("feature", "time")
    assert flipped["X"].dims == ("feature", "time")
    out = daskdepth.score_dataset(flipped, "X", sample_dim="time", random_state=0)
    base = daskdepth.score_dataset(ds, "X", random_state=0)
    np.testing.assert_array_equal(out["depth"].values, base["depth"].values)


def test_merge_and_name():
    ds = _dataset()
    out = daskdepth.score_dataset(ds, "X", random_state=0, name="aiirw", merge=True)
    assert set(out.data_vars) == {"X", "quality", "aiirw"}
    assert out.attrs == ds.attrs


def test_score_dataset_errors():
    ds = _dataset()
    with pytest.raises(KeyError, match=r"no variable 'Y' \(variables: 'X', 'quality'\)"):
        daskdepth.score_dataset(ds, "Y")
    with pytest.raises(ValueError, match="has dimensions \\('time',\\)"):
        daskdepth.score_dataset(ds, "quality")
    with pytest.raises(TypeError, match="xarray.Dataset"):
        daskdepth.score_dataset(ds["X"], "X")
    with pytest.raises(ValueError, match="no dimension 'space'"):
        daskdepth.score_dataset(ds, "X", sample_dim="space")
    with pytest.raises(ValueError, match="depth must be"):
        daskdepth.score_dataset(ds, "X", depth="tukey")
    with pytest.raises(ValueError, match="contamination"):
        daskdepth.score_dataset(ds, "X", contamination=0.9)


def test_dataset_passed_to_score_points_to_score_dataset():
    with pytest.raises(TypeError, match="score_dataset"):
        daskdepth.score(_dataset())


# --------------------------------------------------------------------------- DataArrays


@pytest.mark.parametrize("cls", [daskdepth.AIIRW, daskdepth.IRW])
def test_feature_coordinate_becomes_feature_names(cls):
    X = _dataset()["X"]
    model = cls(random_state=0).fit(X)
    assert list(model.feature_names_in_) == ["f0", "f1", "f2"]
    model.fit(X.values)  # refitting on unnamed data forgets them
    assert not hasattr(model, "feature_names_in_")


def test_numeric_feature_coordinate_gives_no_names():
    X = _dataset()["X"].assign_coords(feature=[10, 20, 30])
    assert not hasattr(daskdepth.IRW(random_state=0).fit(X), "feature_names_in_")


def test_score_on_dataarray_keeps_sample_coords():
    X = _dataset(chunks=250)["X"]
    out = daskdepth.score(X, random_state=0)
    assert isinstance(out, xr.DataArray) and out.dims == ("time",) and out.name == "depth"
    assert isinstance(out.data, da.Array) and out.data.chunks == ((250, 250),)
    np.testing.assert_array_equal(out["time"].values, X["time"].values)
    np.testing.assert_array_equal(out["site"].values, X["site"].values)


def test_valid_range_covers_in_sample_depths():
    """A reference row counts on both sides of itself; tied rows more: depths above 1/2."""
    rng = np.random.default_rng(0)
    counts = rng.poisson(0.3, size=(2000, 3)).astype(float)  # sparse counts: heavy ties
    out = daskdepth.score_dataset(xr.Dataset({"X": (("time", "feature"), counts)}), "X",
                                  random_state=0)
    low, high = out["depth"].attrs["valid_range"]
    depth = out["depth"].values
    assert depth.max() > 0.5
    assert low <= depth.min() and depth.max() <= high


# --------------------------------------------------------------------------- orientation
# Which dimension of a DataArray holds the samples (issue 25, B4): sample_dim=, else the
# dimension names 'sample' / 'feature', else the first -- refused where the shape says
# otherwise.


def _features_first(names=("feature", "sample"), n=500, d=3, chunks=None):
    x = _dataset(n, d)["X"].values
    data = da.from_array(x.T, chunks=(d, chunks)) if chunks else x.T
    return x, xr.DataArray(data, dims=names,
                           coords={names[0]: [f"f{i}" for i in range(d)],
                                   names[1]: np.arange(n) * 60,
                                   "site": (names[1], np.arange(n) % 4)})


@pytest.mark.parametrize("cls", [daskdepth.AIIRW, daskdepth.HalfspaceMass])
def test_dims_named_feature_sample_are_read_by_name(cls, recwarn):
    x, xa = _features_first()
    model = cls(n_directions=30, random_state=0).fit(xa)
    assert model.n_features_in_ == 3 and model.n_samples_fit_ == 500
    assert list(model.feature_names_in_) == ["f0", "f1", "f2"]
    assert not [w for w in recwarn if issubclass(w.category, daskdepth.CovarianceRankWarning)]
    out = model.score_samples(xa)
    assert isinstance(out, xr.DataArray) and out.dims == ("sample",)
    np.testing.assert_array_equal(out["sample"].values, xa["sample"].values)
    np.testing.assert_array_equal(out["site"].values, xa["site"].values)
    plain = cls(n_directions=30, random_state=0).fit(x)
    np.testing.assert_array_equal(out.values, plain.score_samples(x))
    assert model.predict(xa).dims == ("sample",)
    # the other name alone is enough: ('feature', 'time') and ('time', 'feature')
    renamed = xa.rename(sample="time")
    np.testing.assert_array_equal(model.score_samples(renamed).values, out.values)
    np.testing.assert_array_equal(model.score_samples(renamed.T).values, out.values)


def test_ambiguous_orientation_is_refused_and_sample_dim_decides():
    x, xa = _features_first(("band", "pixel"))
    with pytest.raises(ValueError, match=r"dimensions \('band', 'pixel'\) of shape \(3, 500\).*"
                                         r"ambiguous.*sample_dim='pixel'"):
        daskdepth.AIIRW(random_state=0).fit(xa)
    model = daskdepth.AIIRW(n_directions=30, random_state=0).fit(xa, sample_dim="pixel")
    assert model.n_features_in_ == 3
    # scoring: the model's 3 features lie along 'band', so the first dimension is not samples
    for method in ("score_samples", "decision_function", "predict"):
        with pytest.raises(ValueError, match=r"3 features run along 'band'.*sample_dim='pixel'"):
            getattr(model, method)(xa)
    out = model.score_samples(xa, sample_dim="pixel")
    assert out.dims == ("pixel",)
    np.testing.assert_array_equal(
        out.values, daskdepth.AIIRW(n_directions=30, random_state=0).fit(x).score_samples(x))
    assert model.fit_predict(xa, sample_dim="pixel").dims == ("pixel",)
    # a few rows along the first dimension, with the model's features along the second: fine
    few = xr.DataArray(x[:2], dims=("band", "pixel"), coords={"pixel": ["f0", "f1", "f2"]})
    assert model.score_samples(few).dims == ("band",)


def test_sample_dim_errors():
    x, xa = _features_first()
    with pytest.raises(ValueError, match=r"no dimension 'time'.*sample_dim="):
        daskdepth.AIIRW().fit(xa, sample_dim="time")
    with pytest.raises(TypeError, match=r"sample_dim='sample' applies to an xarray.DataArray"):
        daskdepth.AIIRW().fit(x, sample_dim="sample")


def test_score_reads_the_orientation_and_keeps_coordinates():
    x, xa = _features_first()
    out = daskdepth.score(xa, n_directions=30, random_state=0)
    assert out.dims == ("sample",) and out.name == "depth"
    np.testing.assert_array_equal(out["site"].values, xa["site"].values)
    np.testing.assert_array_equal(out.values,
                                  daskdepth.score(x, n_directions=30, random_state=0))
    _, unnamed = _features_first(("band", "pixel"))
    with pytest.raises(ValueError, match="sample_dim='pixel'"):
        daskdepth.score(unnamed)
    depth, outlier = daskdepth.outliers(unnamed, n_directions=30, random_state=0,
                                        sample_dim="pixel", contamination=0.1)
    assert depth.dims == outlier.dims == ("pixel",) and outlier.name == "outlier"
    np.testing.assert_array_equal(depth.values, out.values)
    # a reference and points to score, both features-first
    few = unnamed.isel(pixel=slice(0, 4))
    with_ref = daskdepth.score(few, unnamed, n_directions=30, random_state=0, sample_dim="pixel")
    np.testing.assert_array_equal(with_ref.values, out.values[:4])
    # a NumPy reference with a features-first DataArray to score, and the other way round
    # (names on one side only warn, as in scikit-learn)
    with pytest.warns(UserWarning, match="X has feature names, but AIIRW was fitted without"):
        mixed = daskdepth.score(few, x, n_directions=30, random_state=0, sample_dim="pixel")
    np.testing.assert_array_equal(mixed.values, out.values[:4])
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        back = daskdepth.score(x[:4], unnamed, n_directions=30, random_state=0,
                               sample_dim="pixel")
    np.testing.assert_array_equal(back, out.values[:4])


def test_dask_backed_features_first_stays_lazy():
    x, xa = _features_first(chunks=100)
    model = daskdepth.AIIRW(n_directions=30, random_state=0).fit(xa)
    out = model.score_samples(xa)
    assert isinstance(out.data, da.Array) and out.dims == ("sample",)
    np.testing.assert_array_equal(
        out.values, daskdepth.AIIRW(n_directions=30, random_state=0).fit(x).score_samples(x))


def test_score_dataset_reads_the_orientation_by_name():
    ds = _dataset()
    flipped = ds.rename(time="sample").transpose("feature", "sample")
    out = daskdepth.score_dataset(flipped, "X", random_state=0)
    base = daskdepth.score_dataset(ds, "X", random_state=0)
    assert out["depth"].dims == ("sample",)
    np.testing.assert_array_equal(out["depth"].values, base["depth"].values)
