"""The halfspace (Tukey) depth and the half-space mass: oracles, bounds, determinism, I/O.

The halfspace depth runs on the leaf-summary engine (minimum over directions
instead of the mean) and is checked against the independent oracle's
per-direction depths on both fitting paths; the half-space mass is checked
against a plain NumPy implementation of Algorithm 1 of Chen et al. (2015)
rebuilt from the fitted subsamples, directions and split points.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import DISTRIBUTED_ROWS, chunked, gaussian_data, tie_data
from hypothesis import given
from hypothesis import strategies as st
from oracle import direction_depths, exact_halfspace_depth, halfspace_mass
from scipy import stats
from test_summary import _finished

import daskdepth
from daskdepth.cli import build_parser, main
from daskdepth.estimators import DEPTHS, make_estimator
from daskdepth.fitting.summaries import leaf_cap, refine_plan, wanted_leaves
from daskdepth.summary.statistics import MEAN, MIN

SYNC = ["--scheduler", "synchronous"]
#: Slack for floating-point rounding.
EPS = 1e-12


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x).all(axis=1)]


def _queries(x: np.ndarray, seed: int = 0, k: int = 600) -> np.ndarray:
    """Reference rows, jittered rows and far points."""
    rng = np.random.default_rng(seed)
    rows = x[rng.choice(x.shape[0], size=k, replace=False)]
    jitter = rows[: k // 2] + 0.05 * x.std(axis=0) * rng.normal(size=rows[: k // 2].shape)
    far = x.mean(axis=0) + 50 * x.std(axis=0) * rng.normal(size=(10, x.shape[1]))
    return np.vstack([rows, jitter, far])


def _oracle_halfspace(model, reference: np.ndarray, points: np.ndarray) -> np.ndarray:
    return exact_halfspace_depth(_finite(reference), points, model.location_, model.directions_)


# --------------------------------------------------------------------------- halfspace depth


@pytest.mark.parametrize("make", [gaussian_data, tie_data])
@pytest.mark.parametrize("tol", [0.0, 1e-2])
def test_halfspace_in_memory_matches_the_oracle(make, tol):
    x = make(3000, 3, seed=5)
    model = daskdepth.Halfspace(n_directions=60, tol=tol, random_state=0).fit(x)
    assert model.n_passes_ == 0
    points = _queries(x)
    got = model.score_samples(points)
    exact = _oracle_halfspace(model, x, points)
    assert model.error_bound_ <= tol
    assert np.abs(got - exact).max() <= model.error_bound_ + EPS
    if tol == 0:
        np.testing.assert_array_equal(got, exact)
    assert (got[-10:] == 0).all()  # beyond the data along some direction


@pytest.mark.parametrize("make", [gaussian_data, tie_data])
def test_halfspace_histogram_path_is_exact_at_tol_zero(make):
    x = make(DISTRIBUTED_ROWS, 3, seed=6)
    model = daskdepth.Halfspace(n_directions=8, tol=0, random_state=1).fit(chunked(x, 20_000))
    assert model.n_passes_ >= 1 and model.error_bound_ == 0
    points = _queries(x, k=400)
    np.testing.assert_array_equal(model.score_samples(points),
                                  _oracle_halfspace(model, x, points))


@pytest.mark.parametrize("make", [gaussian_data, tie_data])
def test_halfspace_certified_bound_holds_on_the_histogram_path(make):
    x = make(DISTRIBUTED_ROWS, 2, seed=7)
    tol = 2e-3
    model = daskdepth.Halfspace(n_directions=40, tol=tol, random_state=2).fit(chunked(x, 17_000))
    assert model.n_passes_ >= 1
    # The minimum's bound is the worst direction's, not the mean over directions.
    errs = model.summary_.direction_errors()
    assert model.error_bound_ == errs.max() <= tol
    assert model.error_bound_ >= model.summary_.error_bound(MEAN)
    points = _queries(x, k=1000)
    err = np.abs(model.score_samples(points) - _oracle_halfspace(model, x, points))
    assert err.max() <= model.error_bound_ + EPS


def test_refine_plan_brings_the_worst_direction_under_tol_for_the_minimum():
    n, tol = 100_000, 1e-3
    cap = leaf_cap(n, tol)
    ok = cap / (2 * n)
    # The mean over directions meets tol, but one direction is above it: the
    # mean needs no split, the minimum needs that direction split.
    blocks = [_finished([ok / 4, ok / 4, ok / 4, 1.5 * ok], n, cap)]
    assert not refine_plan(blocks, n, tol)[0].any()
    picks = refine_plan(blocks, n, tol, MIN)
    assert picks[0].tolist() == [False, False, False, True]  # per direction
    wanted = wanted_leaves(blocks[0], picks[0], n, tol)  # then its heavy leaves
    assert wanted.mask.tolist() == [False, False, False, False, False, False, True, False]


def test_affine_invariant_halfspace_draws_the_ai_irw_directions():
    x = gaussian_data(2000, 3, seed=8) * np.array([1.0, 50.0, 0.01])
    ai = daskdepth.AIIRW(n_directions=30, random_state=4).fit(x)
    hs = daskdepth.Halfspace(n_directions=30, affine_invariant=True, random_state=4).fit(x)
    np.testing.assert_array_equal(hs.directions_, ai.directions_)
    plain = daskdepth.Halfspace(n_directions=30, random_state=4).fit(x)
    np.testing.assert_allclose(np.linalg.norm(plain.directions_, axis=1), 1.0)
    # Same directions, same summaries: the minimum of what AI-IRW averages.
    per = direction_depths(x, x[:200], ai.location_, ai.directions_)
    np.testing.assert_allclose(hs.score_samples(x[:200]), per.min(axis=1), rtol=0,
                               atol=hs.error_bound_ + EPS)
    mcd = daskdepth.Halfspace(n_directions=30, affine_invariant=True, covariance="mcd",
                              random_state=4).fit(x)
    np.testing.assert_array_equal(
        mcd.directions_, daskdepth.AIIRW(n_directions=30, covariance="mcd",
                                         random_state=4).fit(x).directions_)


@pytest.mark.parametrize("params, given", [({"covariance": "mcd"}, "covariance='mcd'"),
                                           ({"support_fraction": 0.8}, "support_fraction=0.8")])
def test_covariance_needs_affine_invariant(params, given):
    with pytest.raises(ValueError, match=f"{given} applies only with affine_invariant=True"):
        daskdepth.Halfspace(**params).fit(gaussian_data(100, 2))


def test_halfspace_is_deterministic_and_chunking_invariant():
    x = gaussian_data(DISTRIBUTED_ROWS, 3, seed=9)
    kw = dict(n_directions=24, tol=1e-3, random_state=5)
    a = daskdepth.Halfspace(**kw).fit(chunked(x, 20_000))
    b = daskdepth.Halfspace(**kw).fit(chunked(x, 20_000))
    c = daskdepth.Halfspace(**kw).fit(chunked(x, (30_000, 25_000, 15_000)))
    points = _queries(x, k=500)
    np.testing.assert_array_equal(a.score_samples(points), b.score_samples(points))
    assert a.offset_ == b.offset_
    np.testing.assert_allclose(a.directions_, c.directions_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.score_samples(points), c.score_samples(points), rtol=0,
                               atol=1e-9)
    np.testing.assert_array_equal(
        a.score_samples(points), np.asarray(a.score_samples(chunked(points, 77)).compute()))


# --------------------------------------------------------------------------- half-space mass


def _oracle_mass(model, reference: np.ndarray, points: np.ndarray):
    return halfspace_mass(reference, points, model.location_, model.directions_,
                          model.subsample_indices_, model.split_points_)


def test_halfspace_mass_matches_algorithm_1_rebuilt_from_its_draws():
    x = gaussian_data(3000, 3, seed=10)
    model = daskdepth.HalfspaceMass(n_directions=400, random_state=0).fit(x)
    t, psi = model.subsample_indices_.shape
    assert (t, psi) == (400, 32) and model.subsample_size_ == 32 and model.error_bound_ == 0
    points = _queries(x)
    left, mass = _oracle_mass(model, x, points)
    np.testing.assert_array_equal(model.left_mass_, left)
    np.testing.assert_allclose(model.score_samples(points), mass, rtol=0, atol=EPS)
    # Subsamples: distinct rows, without replacement, each row about equally often.
    idx = model.subsample_indices_
    assert all(np.unique(row).size == psi for row in idx)
    counts = np.bincount(idx.ravel(), minlength=x.shape[0])
    assert stats.chisquare(counts).pvalue > 1e-4
    # Split points uniform within scope * range around the middle of each subsample's range.
    sub = np.stack([(x[idx[j]] - model.location_) @ model.directions_[j] for j in range(t)])
    lo, hi = sub.min(axis=1), sub.max(axis=1)
    u = (model.split_points_ - (lo + hi) / 2) / (model.scope * (hi - lo)) + 0.5
    assert (u >= -1e-9).all() and (u <= 1 + 1e-9).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    np.testing.assert_allclose(np.linalg.norm(model.directions_, axis=1), 1.0)


def test_halfspace_mass_orders_the_centre_above_outliers():
    x = gaussian_data(2000, 2, seed=11)
    model = daskdepth.HalfspaceMass(scope=1.0, random_state=1, contamination=0.05).fit(x)
    mass = model.score_samples(np.vstack([x.mean(axis=0), x.mean(axis=0) + 20 * x.std(axis=0)]))
    assert mass[0] > 0.6 > mass[1]
    assert 0.0 <= model.score_samples(x).min() and model.score_samples(x).max() <= 1.0
    assert np.mean(model.predict(x) == -1) == pytest.approx(0.05, abs=0.01)


def test_halfspace_mass_distributed_sample_and_nan_rows():
    x = gaussian_data(DISTRIBUTED_ROWS + 80_000, 3, seed=12)
    x[[3, 70_000, 149_999], 1] = np.nan
    kw = dict(n_directions=200, subsample_size=16, random_state=6, nan_policy="omit")
    a = daskdepth.HalfspaceMass(**kw).fit(chunked(x, 25_000))
    b = daskdepth.HalfspaceMass(**kw).fit(chunked(x, (60_000, 1, 50_000, 39_999)))
    c = daskdepth.HalfspaceMass(**kw).fit(chunked(x, 25_000))
    assert a.n_samples_fit_ == x.shape[0] - 3
    for name in ("subsample_indices_", "split_points_", "left_mass_", "directions_",
                 "location_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_array_equal(getattr(a, name), getattr(c, name), err_msg=name)
    assert a.offset_ == b.offset_ == c.offset_
    idx = a.subsample_indices_
    assert np.isfinite(x[idx.ravel()]).all()
    points = x[:3000]
    got = a.score_samples(points)
    assert np.isnan(got[3]) and np.isfinite(np.delete(got, 3)).all()
    _, mass = _oracle_mass(a, x, np.delete(points, 3, axis=0))
    np.testing.assert_allclose(np.delete(got, 3), mass, rtol=0, atol=EPS)
    np.testing.assert_array_equal(got, np.asarray(b.score_samples(chunked(points, 333))))
    with pytest.raises(ValueError, match="3 rows"):
        daskdepth.HalfspaceMass(n_directions=5, random_state=0).fit(chunked(x, 25_000))


def test_halfspace_mass_with_fewer_rows_than_the_subsample_size():
    x = gaussian_data(20, 2, seed=13)
    model = daskdepth.HalfspaceMass(n_directions=50, random_state=0).fit(x)
    assert model.subsample_indices_.shape == (50, 20) and model.subsample_size_ == 20
    np.testing.assert_array_equal(np.sort(model.subsample_indices_, axis=1),
                                  np.tile(np.arange(20), (50, 1)))
    np.testing.assert_allclose(model.score_samples(x), _oracle_mass(model, x, x)[1], atol=EPS)


# --------------------------------------------------------------------------- API, CLI, storage


def test_registry_names_and_make_estimator():
    assert set(DEPTHS) >= {"halfspace", "halfspace-mass", "projection"}
    parser = build_parser()
    for name in DEPTHS:  # --depth takes exactly the registered names
        assert parser.parse_args(["score", "in", "--out", "o", "--depth", name]).depth == name
    with pytest.raises(SystemExit):
        parser.parse_args(["score", "in", "--out", "o", "--depth", "tukey"])
    # The one-call functions' defaults pass; other values of parameters the depth does
    # not take are refused, naming the depths that take them.
    assert type(make_estimator("halfspace-mass", tol=1e-4, covariance="sample",
                               n_directions=None)).__name__ == "HalfspaceMass"
    with pytest.raises(ValueError, match=r"tol=0\.001 does not apply to depth='halfspace-mass'"):
        make_estimator("halfspace-mass", tol=1e-3)
    with pytest.raises(ValueError, match="use depth='halfspace-mass'"):
        make_estimator("irw", subsample_size=8)
    with pytest.raises(ValueError, match="use depth='halfspace'"):
        make_estimator("ai-irw", affine_invariant=True)
    with pytest.raises(TypeError, match="unknown parameter 'psi'"):
        make_estimator("halfspace-mass", psi=8)


@pytest.mark.parametrize("cls", [daskdepth.Halfspace, daskdepth.HalfspaceMass])
def test_no_standard_error_targets_for_a_minimum_or_a_mass(cls):
    # n_directions='auto' and return_std concern a mean over directions.
    x = gaussian_data(300, 2, seed=20)
    with pytest.raises(ValueError, match=r"'n_directions' parameter of \w+ must be an int in "
                                         r"the range \[1, inf\) or None\. Got 'auto'"):
        cls(n_directions="auto").fit(x)
    model = cls(n_directions=10, random_state=0).fit(x)
    with pytest.raises((TypeError, ValueError)):
        model.score_samples(x, return_std=True)
    assert "'auto'" not in cls.__doc__.split("n_directions :")[1].split("\n    ")[0]


def test_score_functions_take_the_depth_options():
    x = gaussian_data(800, 2, seed=14)
    t = daskdepth.score(x, depth="halfspace", random_state=0, n_directions=30, tol=0)
    np.testing.assert_array_equal(
        t, daskdepth.Halfspace(n_directions=30, tol=0, random_state=0).fit(x).score_samples(x))
    hm = daskdepth.score(x, depth="halfspace-mass", random_state=0, subsample_size=8, scope=1.0)
    model = daskdepth.HalfspaceMass(subsample_size=8, scope=1.0, random_state=0).fit(x)
    np.testing.assert_array_equal(hm, model.score_samples(x))
    xd = da.from_array(x, chunks=(300, 2))
    lazy = daskdepth.score(xd, depth="halfspace-mass", random_state=0, subsample_size=8,
                           scope=1.0)
    assert isinstance(lazy, da.Array) and lazy.chunks == ((300, 300, 200),)
    np.testing.assert_array_equal(lazy.compute(), hm)


@pytest.mark.parametrize("model", [
    daskdepth.Halfspace(n_directions=20, tol=1e-3, random_state=0),
    daskdepth.Halfspace(n_directions=20, affine_invariant=True, covariance="mcd",
                        random_state=0),
    daskdepth.HalfspaceMass(n_directions=64, subsample_size=16, random_state=0),
])
def test_save_load_round_trip(tmp_path, model):
    x = gaussian_data(1200, 3, seed=15)
    model.fit(x)
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
    np.testing.assert_array_equal(loaded.score_samples(x), model.score_samples(x))
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    for name in ("directions_", "location_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    assert loaded.offset_ == model.offset_ and loaded.error_bound_ == model.error_bound_


@pytest.mark.parametrize("depth, cls, options", [
    ("halfspace", daskdepth.Halfspace, {"tol": 0}),
    ("halfspace-mass", daskdepth.HalfspaceMass, {}),
])
def test_cli_score_fit_and_apply(tmp_path, capsys, depth, cls, options):
    x = gaussian_data(900, 3, seed=16)
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=x, chunks=(250, 3))
    extra = ["--tol", "0"] if "tol" in options else []
    assert main(["score", str(src), "--out", str(tmp_path / "o.zarr"), "--depth", depth,
                 "--seed", "3", "--n-directions", "40", "--contamination", "0.05", *extra,
                 *SYNC]) == 0
    assert f"wrote the {depth.upper()} depth of 900 rows" in capsys.readouterr().out
    model = cls(n_directions=40, random_state=3, contamination=0.05, **options).fit(x)
    import xarray as xr

    out = xr.open_zarr(str(tmp_path / "o.zarr"))
    np.testing.assert_array_equal(out["depth"].values, model.score_samples(x))
    np.testing.assert_array_equal(out["outlier"].values, model.predict(x) == -1)
    assert out.attrs["method"] == depth and out["depth"].attrs["n_directions"] == 40
    assert ("tol" in out.attrs) == (depth == "halfspace")
    assert main(["fit", str(src), "--model", str(tmp_path / "m.zarr"), "--depth", depth,
                 "--seed", "3", "--n-directions", "40", "-q", *extra, *SYNC]) == 0
    assert main(["apply", str(tmp_path / "m.zarr"), str(src), "--out", str(tmp_path / "a.zarr"),
                 "-q", *SYNC]) == 0
    applied = xr.open_zarr(str(tmp_path / "a.zarr"))
    np.testing.assert_array_equal(applied["depth"].values, model.score_samples(x))
    assert main(["info", str(tmp_path / "m.zarr")]) == 0
    assert type(model).__name__ in capsys.readouterr().out


def test_cli_refuses_tol_for_the_mass(tmp_path, capsys):
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=gaussian_data(100, 2), chunks=(50, 2))
    assert main(["score", str(src), "--out", str(tmp_path / "o.zarr"), "--depth",
                 "halfspace-mass", "--tol", "1e-3", *SYNC]) == 2  # a usage error
    # The estimator's message, with the command line's option names.
    assert "--tol 0.001 does not apply to --depth halfspace-mass" in capsys.readouterr().err


def test_display_of_the_new_estimators():
    x = gaussian_data(500, 2, seed=17)
    html = daskdepth.HalfspaceMass(n_directions=30, random_state=0).fit(x)._repr_html_()
    assert "halfspace mass" in html and "t (half-spaces)" in html
    html = daskdepth.Halfspace(n_directions=30, affine_invariant=True, random_state=0) \
        .fit(x)._repr_html_()
    assert "affine-invariant halfspace (Tukey)" in html and "error bound" in html
    assert "affine_invariant=False" in daskdepth.Halfspace()._repr_html_()


def test_threads_and_synchronous_schedulers_agree():
    x = gaussian_data(5000, 3, seed=18)
    with dask.config.set(scheduler="synchronous"):
        a = daskdepth.HalfspaceMass(n_directions=100, random_state=2).fit(chunked(x, 700))
        sa = np.asarray(a.score_samples(chunked(x, 700)))
    with dask.config.set(scheduler="threads"):
        b = daskdepth.HalfspaceMass(n_directions=100, random_state=2).fit(chunked(x, 1300))
        sb = np.asarray(b.score_samples(chunked(x, 1300)))
    np.testing.assert_array_equal(sa, sb)


def test_cli_options_of_one_depth(tmp_path, capsys):
    import xarray as xr

    x = gaussian_data(700, 3, seed=19)
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=x, chunks=(200, 3))
    common = ["--seed", "5", "--n-directions", "30", "-q", *SYNC]
    assert main(["score", str(src), "--out", str(tmp_path / "t.zarr"), "--depth", "halfspace",
                 "--affine-invariant", "--covariance", "mcd", *common]) == 0
    model = daskdepth.Halfspace(n_directions=30, affine_invariant=True, covariance="mcd",
                                random_state=5).fit(x)
    out = xr.open_zarr(str(tmp_path / "t.zarr"))
    np.testing.assert_array_equal(out["depth"].values, model.score_samples(x))
    assert out.attrs["covariance"] == "mcd" and out.attrs["affine_invariant"] == 1
    assert main(["score", str(src), "--out", str(tmp_path / "m.zarr"), "--depth",
                 "halfspace-mass", "--subsample-size", "8", "--scope", "1.5", *common]) == 0
    model = daskdepth.HalfspaceMass(n_directions=30, subsample_size=8, scope=1.5,
                                    random_state=5).fit(x)
    out = xr.open_zarr(str(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(out["depth"].values, model.score_samples(x))
    assert out.attrs["subsample_size"] == 8 and out.attrs["scope"] == 1.5
    assert out["depth"].attrs["valid_range"] == [0.0, 1.0]
    capsys.readouterr()
    assert main(["score", str(src), "--out", str(tmp_path / "x.zarr"), "--depth", "irw",
                 "--subsample-size", "8", *common]) == 2
    assert "use --depth halfspace-mass" in capsys.readouterr().err
    assert main(["score", str(src), "--out", str(tmp_path / "y.zarr"), "--depth", "halfspace",
                 "--covariance", "mcd", *common]) == 2
    assert "pass --affine-invariant" in capsys.readouterr().err


# --------------------------------------------------------------------------- properties


@st.composite
def tied_rows(draw):
    """Small data on a coarse grid (heavy ties, duplicates) and row chunkings of it."""
    n = draw(st.integers(2, 300))
    d = draw(st.integers(1, 4))
    levels = draw(st.integers(2, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).integers(0, levels, size=(n, d)).astype(float)
    cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))
    edges = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    return x, tuple(b - a for a, b in zip(edges[:-1], edges[1:], strict=True))


@given(data=tied_rows(), seed=st.integers(0, 2**32 - 1), tol=st.sampled_from([0.0, 0.05]))
def test_property_halfspace_within_its_bound_of_the_oracle(data, seed, tol):
    x, chunks = data
    model = daskdepth.Halfspace(n_directions=7, tol=tol, random_state=seed).fit(chunked(x, chunks))
    points = np.vstack([x, x + 0.5, [[10.0] * x.shape[1]]])
    err = np.abs(model.score_samples(points) - _oracle_halfspace(model, x, points))
    assert model.error_bound_ <= tol and err.max() <= model.error_bound_ + EPS


@given(data=tied_rows(), seed=st.integers(0, 2**32 - 1))
def test_property_halfspace_mass_does_not_depend_on_the_chunking(data, seed):
    x, chunks = data
    kw = dict(n_directions=9, subsample_size=5, scope=1.2, random_state=seed)
    whole = daskdepth.HalfspaceMass(**kw).fit(x)
    parts = daskdepth.HalfspaceMass(**kw).fit(chunked(x, chunks))
    for name in ("subsample_indices_", "split_points_", "left_mass_", "directions_"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(parts, name))
    left, mass = _oracle_mass(whole, x, x)
    np.testing.assert_array_equal(whole.left_mass_, left)
    np.testing.assert_allclose(parts.score_samples(x), mass, rtol=0, atol=EPS)


def test_covariance_without_affine_invariant_is_refused_when_built():
    """make_estimator (score(), score_dataset, the CLI) refuses it before any work."""
    with pytest.raises(ValueError, match="pass affine_invariant=True"):
        make_estimator("halfspace", covariance="mcd")
    assert make_estimator("halfspace", covariance="mcd", affine_invariant=True).affine_invariant
