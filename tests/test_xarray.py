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
