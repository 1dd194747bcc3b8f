"""Bad input is refused with an error that names the problem and the fix."""

from __future__ import annotations

import re
import warnings

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import chunked, gaussian_data

import daskdepth

MODELS = [daskdepth.AIIRW, daskdepth.IRW, daskdepth.Halfspace, daskdepth.HalfspaceMass]


@pytest.fixture
def x():
    return gaussian_data(300, 3, seed=0)


@pytest.fixture
def fitted(x):
    return daskdepth.AIIRW(n_directions=10, random_state=0).fit(x)


def _with_bad_rows(x):
    x = x.copy()
    x[5, 1] = np.nan
    x[17, 0] = np.inf
    x[200, 2] = np.nan
    x[250, :] = -np.inf
    return x, [5, 17, 200, 250]


# --------------------------------------------------------------------------- NaN / inf


@pytest.mark.parametrize("cls", MODELS)
def test_nan_in_numpy_fit(cls, x):
    bad_x, rows = _with_bad_rows(x)
    with pytest.raises(ValueError, match=r"4 rows with NaN or inf") as exc:
        cls(n_directions=5).fit(bad_x)
    msg = str(exc.value)
    assert "[5, 17, 200, 250]" in msg
    assert "nan_policy='omit'" in msg


def test_nan_in_numpy_score(fitted, x):
    bad_x, _ = _with_bad_rows(x)
    with pytest.raises(ValueError, match=r"4 rows with NaN or inf.*\[5, 17, 200, 250\]"):
        fitted.score_samples(bad_x)
    with pytest.raises(ValueError, match=r"nan_policy='omit'"):
        fitted.predict(bad_x)


def test_nan_message_lists_at_most_five_rows(x):
    bad_x = x.copy()
    bad_x[10:30, 0] = np.nan
    pattern = r"20 rows .*\[10, 11, 12, 13, 14, \.\.\.\]"
    with pytest.raises(ValueError, match=pattern):
        daskdepth.IRW(n_directions=5).fit(bad_x)


def test_single_nan_row_message(x):
    bad_x = x.copy()
    bad_x[42, 1] = np.nan
    with pytest.raises(ValueError, match=r"1 row with NaN or inf values \(rows \[42\]\)"):
        daskdepth.IRW(n_directions=5).fit(bad_x)


@pytest.mark.parametrize("cls", MODELS)
def test_nan_in_dask_fit(cls, x):
    bad_x, _ = _with_bad_rows(x)
    with pytest.raises(ValueError, match=r"4 rows with NaN or inf") as exc:
        cls(n_directions=5).fit(chunked(bad_x, 100))
    assert "[5, 17, 200, 250]" in str(exc.value)
    assert "nan_policy='omit'" in str(exc.value)


def test_nan_in_dask_fit_distributed_path():
    big = gaussian_data(70_000, 2, seed=1)
    big[[69_000, 3, 50_000]] = np.nan
    with pytest.raises(ValueError, match=r"3 rows with NaN.*\[3, 50000, 69000\]"):
        daskdepth.IRW(n_directions=4, tol=1e-2).fit(chunked(big, 10_000))


def test_nan_in_dask_scoring_raises_at_compute(fitted, x):
    bad_x, rows = _with_bad_rows(x)
    out = fitted.score_samples(chunked(bad_x, 100))  # lazy: no error yet
    with dask.config.set(scheduler="sync"), pytest.raises(ValueError) as exc:
        out.compute()
    msg = str(exc.value)
    assert "NaN or inf" in msg and "nan_policy='omit'" in msg
    # A failing chunk is named: its count and its rows, as global row indices.
    found = re.search(r"(\d+) rows? with NaN or inf .*\(rows \[([\d, ]+)\]\)", msg)
    assert found, msg
    listed = [int(r) for r in found.group(2).split(", ")]
    assert int(found.group(1)) == len(listed)
    assert listed in ([5, 17], [200, 250])
    # With one chunk the whole count and every row are named.
    with pytest.raises(ValueError, match=r"4 rows.*\[5, 17, 200, 250\]"):
        fitted.score_samples(chunked(bad_x, 300)).compute()


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("method", ["fit", "score_samples"])
def test_one_dimensional_input(fitted, x, method):
    target = daskdepth.AIIRW() if method == "fit" else fitted
    with pytest.raises(ValueError, match=r"1-D.*reshape\(-1, 1\).*reshape\(1, -1\)"):
        getattr(target, method)(x[:, 0])


def test_three_dimensional_input(x):
    with pytest.raises(ValueError, match=r"3 dimensions.*2-D array"):
        daskdepth.AIIRW().fit(x.reshape(100, 3, 3))


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_rows_for_fit(x, n):
    with pytest.raises(ValueError, match=rf"{n} samples? .*at least 2 rows"):
        daskdepth.AIIRW().fit(x[:n])
    with pytest.raises(ValueError, match="at least 2"):
        daskdepth.IRW().fit(chunked(x[:n], 1) if n else x[:0])


def test_only_one_finite_row_with_omit(x):
    bad = np.full_like(x[:4], np.nan)
    bad[2] = 1.0
    with pytest.raises(ValueError, match=r"only 1 finite rows remain out of 4.*at least 2"):
        daskdepth.AIIRW(nan_policy="omit").fit(bad)


def test_zero_rows_score_ok(fitted, x):
    out = fitted.score_samples(x[:0])
    assert isinstance(out, np.ndarray) and out.shape == (0,)


def test_zero_features(x):
    with pytest.raises(ValueError, match="0 features"):
        daskdepth.AIIRW().fit(x[:, :0])


def test_constant_data_for_ai_irw():
    with pytest.raises(ValueError, match="covariance .* is zero.*constant"):
        daskdepth.AIIRW(n_directions=5).fit(np.ones((20, 2)))


@pytest.mark.parametrize("scale", [1e200, 1e-300])
def test_extreme_scale_error_names_the_scale(x, scale):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError) as exc:
            daskdepth.AIIRW(n_directions=5).fit(x * scale)
    msg = str(exc.value)
    assert "constant" not in msg and re.search(r"(?i)scale", msg), msg


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [str, "U5", "S5"])
def test_string_dtypes(x, dtype):
    with pytest.raises(TypeError, match=r"dtype .*real numbers.*astype\(float\)"):
        daskdepth.AIIRW().fit(x.astype(dtype))


def test_text_in_object_arrays_refused(x):
    for text in ("1.5", b"1"):
        obj = x.astype(object)
        obj[4, 1] = text
        with pytest.raises(TypeError, match=r"holds text \(b?'1(\.5)?' at row 4, column 1\)"):
            daskdepth.AIIRW(n_directions=10).fit(obj)


def test_string_dtype_in_dask_and_score(fitted, x):
    with pytest.raises(TypeError, match="real numbers"):
        daskdepth.AIIRW().fit(chunked(x.astype(str), 100))
    with pytest.raises(TypeError, match=r"holds text \('[-0-9.]+' at row 0, column 0\).*"
                                        r"real numbers.*astype\(float\)"):
        fitted.score_samples(x.astype(str).astype(object))


# Object arrays and pandas' nullable columns holding numbers are converted as
# scikit-learn's check_array converts them (issue 25, B3); text is still refused.


def _reference_depths(x, **params):
    model = daskdepth.AIIRW(n_directions=10, random_state=0, **params).fit(x)
    return model, np.asarray(model.score_samples(x), dtype=np.float64)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_object_array_of_numbers_is_converted(x, kind):
    ref = x.copy()
    ref[:, 2] = np.round(10 * x[:, 2])
    obj = ref.astype(object)
    obj[1::2, 2] = [int(v) for v in ref[1::2, 2]]  # Python ints among the floats
    _, want = _reference_depths(ref)
    data = obj if kind == "numpy" else chunked(obj, 100)
    model = daskdepth.AIIRW(n_directions=10, random_state=0).fit(data)
    got = model.score_samples(data)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_object_array_missing_values_are_nan(x):
    obj = x.astype(object)
    obj[3, 0], obj[7, 1], obj[9, 2] = None, pd.NA, np.nan
    with pytest.raises(ValueError, match=r"3 rows with NaN or inf values \(rows \[3, 7, 9\]\)"):
        daskdepth.AIIRW(n_directions=10).fit(obj)
    model = daskdepth.AIIRW(n_directions=10, random_state=0, nan_policy="omit").fit(obj)
    assert model.n_samples_fit_ == 297
    depth = model.score_samples(obj)
    assert np.isnan(depth[[3, 7, 9]]).all() and np.isfinite(np.delete(depth, [3, 7, 9])).all()


@pytest.mark.parametrize("value, shown", [({"foo": "bar"}, "dict"), ([1.0], "list"),
                                          (1 + 2j, "complex")])
def test_object_array_other_objects_refused(x, value, shown):
    obj = x.astype(object)
    obj[4, 1] = value
    with pytest.raises(TypeError, match=rf"{shown} .*row 4, column 1.*real number"):
        daskdepth.AIIRW(n_directions=10).fit(obj)


def test_sklearn_object_check_message(x):
    # scikit-learn's check_dtype_object expects this wording for a dict in an object array
    obj = x.astype(object)
    obj[0, 0] = {"foo": "bar"}
    with pytest.raises(TypeError, match="argument must be .* string.* number"):
        daskdepth.IRW(n_directions=5).fit(obj)


def _nullable_frame(x, dtype, with_na):
    frame = pd.DataFrame(x * 10 if dtype == "Int64" else x, columns=["a", "b", "c"],
                         index=np.arange(x.shape[0]) + 100)
    frame = frame.round().astype(dtype) if dtype == "Int64" else frame.astype(dtype)
    if with_na:
        frame.iloc[[5, 40], 1] = pd.NA
    return frame


@pytest.mark.parametrize("dtype", ["Float64", "Int64", "float64[pyarrow]"])
@pytest.mark.parametrize("with_na", [False, True])
@pytest.mark.parametrize("container", ["pandas", "dask"])
def test_pandas_nullable_columns(x, dtype, with_na, container):
    if dtype.endswith("[pyarrow]"):
        pytest.importorskip("pyarrow")
    frame = _nullable_frame(x, dtype, with_na)
    plain = frame.astype("float64")  # pd.NA -> NaN
    data = frame if container == "pandas" else dd.from_pandas(frame, npartitions=3)
    if with_na:  # pd.NA counts as NaN: refused, naming the rows, unless omitted
        with pytest.raises(ValueError, match=r"2 rows with NaN or inf values \(rows \[5, 40\]\)"):
            daskdepth.AIIRW(n_directions=10).fit(frame)
    params = {"nan_policy": "omit"} if with_na else {}
    ref, want = _reference_depths(plain, **params)
    model = daskdepth.AIIRW(n_directions=10, random_state=0, **params).fit(data)
    assert model.n_samples_fit_ == x.shape[0] - 2 * with_na
    np.testing.assert_array_equal(model.location_, ref.location_)
    got = model.score_samples(data)
    got = got.compute() if container == "dask" else got
    assert list(got.index) == list(frame.index)
    np.testing.assert_array_equal(got.to_numpy(), want)
    assert list(model.feature_names_in_) == ["a", "b", "c"]


def test_pandas_object_columns_of_numbers(x):
    frame = pd.DataFrame(x, columns=["a", "b", "c"])
    mixed = frame.astype({"b": object})
    mixed.loc[3, "b"] = None
    _, want = _reference_depths(frame.astype({"b": float}).assign(
        b=lambda f: f.b.where(f.index != 3)), nan_policy="omit")
    model = daskdepth.AIIRW(n_directions=10, random_state=0, nan_policy="omit").fit(mixed)
    np.testing.assert_array_equal(model.score_samples(mixed).to_numpy(), want)
    with dask.config.set({"dataframe.convert-string": False}):
        lazy = dd.from_pandas(mixed, npartitions=2)
        assert lazy.dtypes["b"].kind == "O"
        got = daskdepth.AIIRW(n_directions=10, random_state=0, nan_policy="omit").fit(lazy)
        np.testing.assert_array_equal(got.score_samples(lazy).compute().to_numpy(), want)


def test_pandas_text_columns_refused(x):
    frame = pd.DataFrame(x, columns=["a", "b", "c"], index=np.arange(300) + 1000)
    frame = frame.astype({"c": object})
    frame.loc[1207, "c"] = "n/a"
    with pytest.raises(TypeError, match=r"columns that are not real numbers: 'c' \(object, "
                                        r"holds str 'n/a' at index 1207\).*encode them as "
                                        r"numbers"):
        daskdepth.AIIRW().fit(frame)
    strings = pd.DataFrame(x, columns=["a", "b", "c"]).astype({"c": str})
    with pytest.raises(TypeError, match=r"not real numbers: 'c' \(str"):
        daskdepth.AIIRW().fit(strings)
    # dask turns object columns into text by default: the message says so
    with pytest.raises(TypeError, match=r"'b' \(string\).*convert-string"):
        daskdepth.AIIRW().fit(dd.from_pandas(
            pd.DataFrame(x, columns=["a", "b", "c"]).astype({"b": object}), npartitions=2))
    with dask.config.set({"dataframe.convert-string": False}):
        lazy = dd.from_pandas(frame, npartitions=2)
        with pytest.raises(TypeError, match=r"'c' \(object, holds str 'n/a' at index 1207\)"):
            daskdepth.AIIRW(n_directions=10).fit(lazy)


def test_numeric_categorical_columns_are_their_values(x):
    # scikit-learn accepts them (their categories' values); they were refused as "category"
    frame = pd.DataFrame({"a": x[:, 0], "level": np.round(x[:, 1] * 2), "n": x[:, 2]},
                         index=np.arange(300) + 7)
    frame.loc[[9, 40], "level"] = np.nan
    plain = frame.copy()
    frame["level"] = pd.Categorical(frame["level"])
    frame["n"] = pd.Categorical(np.arange(300) % 4)
    plain["n"] = (np.arange(300) % 4).astype(float)
    _, want = _reference_depths(plain, nan_policy="omit")
    for data in (frame, dd.from_pandas(frame, npartitions=2)):
        model = daskdepth.AIIRW(n_directions=10, random_state=0, nan_policy="omit").fit(data)
        got = model.score_samples(data)
        got = got.compute() if hasattr(got, "compute") else got
        np.testing.assert_array_equal(got.to_numpy(), want)
        assert list(got.index) == list(frame.index)
    assert list(model.feature_names_in_) == ["a", "level", "n"]
    with pytest.raises(ValueError, match=r"2 rows with NaN or inf values \(rows \[2, 33\]\)"):
        daskdepth.AIIRW(n_directions=10).fit(frame)
    text = frame.assign(n=pd.Categorical(np.where(np.arange(300) % 2, "x", "y")))
    with pytest.raises(TypeError, match=r"not real numbers: 'n' \(category of \w+, whose codes "
                                        r"\.cat\.codes are numbers\)"):
        daskdepth.AIIRW().fit(text)


@pytest.mark.parametrize("row", [False, True])
def test_pandas_series_message_suggests_to_frame(x, fitted, row):
    frame = pd.DataFrame(x, columns=["a", "b", "c"])
    series = frame.iloc[0] if row else frame["b"]
    for call in (daskdepth.AIIRW().fit, fitted.score_samples):
        with pytest.raises(ValueError, match=r"X is a pandas Series \(1-D, \d+ values\); .* "
                                             r"X\.to_frame\(\) .* X\.to_frame\(\)\.T") as exc:
            call(series)
        assert ".reshape(1, -1)" not in str(exc.value)  # a Series has no reshape


def test_pandas_boolean_and_number_columns(x):
    # NumPy dtypes that to_numpy() would mix into object (bool with float): column by column
    frame = pd.DataFrame({"a": x[:, 0], "flag": x[:, 1] > 0, "n": np.arange(300)})
    plain = frame.astype(float)
    _, want = _reference_depths(plain)
    for data in (frame, frame.astype({"flag": "boolean"}), dd.from_pandas(frame, npartitions=2)):
        model = daskdepth.AIIRW(n_directions=10, random_state=0).fit(data)
        got = model.score_samples(data)
        got = got.compute() if hasattr(got, "compute") else got
        np.testing.assert_array_equal(got.to_numpy(), want)


def test_wide_integers_beside_floats_warn(x):
    # to_numpy() of int64 with float64 columns rounds the integers: checked before
    ids = pd.DataFrame({"id": np.arange(2**62, 2**62 + 300, dtype=np.int64), "v": x[:, 0]})
    with pytest.warns(UserWarning, match=r"beyond 2\*\*53"):
        daskdepth.IRW(n_directions=5, random_state=0).fit(ids)


def test_nullable_wide_integers_warn(x):
    ids = pd.DataFrame({"id": pd.array([2**62 + i for i in range(300)], dtype="Int64"),
                        "v": x[:, 0]})
    with pytest.warns(UserWarning, match=r"beyond 2\*\*53"):
        daskdepth.IRW(n_directions=5, random_state=0).fit(ids)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_complex_dtype(x, kind):
    z = x.astype(complex)
    with pytest.raises(ValueError, match=r"Complex data not supported.*real part or its modulus"):
        daskdepth.AIIRW().fit(z if kind == "numpy" else chunked(z, 100))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, bool])
def test_real_dtypes_accepted(x, dtype):
    data = (x * 10).astype(dtype)
    model = daskdepth.IRW(n_directions=5, random_state=0).fit(data)
    ref = daskdepth.IRW(n_directions=5, random_state=0).fit(data.astype(np.float64))
    np.testing.assert_array_equal(model.score_samples(data), ref.score_samples(data))


def test_lists_accepted(x):
    model = daskdepth.IRW(n_directions=5, random_state=0).fit(x.tolist())
    ref = daskdepth.IRW(n_directions=5, random_state=0).fit(x)
    np.testing.assert_array_equal(model.score_samples(x[:7].tolist()), ref.score_samples(x[:7]))


# --------------------------------------------------------------------------- dask chunks


def test_unknown_chunk_sizes(fitted, x):
    dx = chunked(x, 100)
    filtered = dx[dx[:, 0] > 0]
    for call in (daskdepth.AIIRW().fit, fitted.score_samples):
        with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes\(\)"):
            call(filtered)
    # The suggested fix works.
    filtered.compute_chunk_sizes()
    assert fitted.score_samples(filtered).compute().shape == (int((x[:, 0] > 0).sum()),)


def test_feature_axis_split_into_chunks(x):
    one = chunked(x, 100)
    split = one.rechunk({1: 1})
    assert split.numblocks[1] == 3
    m1 = daskdepth.AIIRW(n_directions=10, random_state=0).fit(one)
    m2 = daskdepth.AIIRW(n_directions=10, random_state=0).fit(split)
    np.testing.assert_array_equal(m1.directions_, m2.directions_)
    out = m2.score_samples(split)
    assert out.chunks[0] == split.chunks[0] and out.ndim == 1
    np.testing.assert_array_equal(out.compute(), m1.score_samples(one).compute())


def test_feature_count_mismatch(fitted, x):
    with pytest.raises(ValueError, match=r"X has 2 features, but AIIRW is expecting 3"):
        fitted.score_samples(x[:, :2])
    with pytest.raises(ValueError, match="expecting 3 features"):
        fitted.predict(chunked(np.hstack([x, x]), 100))


def test_score_before_fit(x):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        daskdepth.AIIRW().score_samples(x)


# --------------------------------------------------------------------------- parameters


# The depths averaging over directions also take 'auto'; the half-space mass does not.
ND = (r"'n_directions' parameter of \w+ must be an int in the range \[1, inf\)"
      r"(, a str among \{'auto'\})? or None")
ND_BOOL = r"'n_directions' parameter of \w+ must be a number, not a bool"
TOL = r"'tol' parameter of \w+ must be a float in the range \[0\.0, 0\.5\)"
NAN = r"'nan_policy' parameter of \w+ must be a str among \{'(raise|omit)', '(raise|omit)'\}"
CONT = (r"^contamination must be a float in \(0, 0\.5\], the expected share of outliers "
        r"\(e\.g\. 0\.01 for 1%\); got ")


INVALID = [
    ({"n_directions": 0}, ND + r"\. Got 0 instead; (None means|pass an int, or None for) "
                              r"(100 x n_features|1000 half-spaces)"),
    ({"n_directions": -3}, ND + r"\. Got -3 instead"),
    ({"n_directions": 2.5}, ND + r"\. Got 2\.5 instead"),
    ({"n_directions": "many"}, ND + r"\. Got 'many' instead; .*'auto' (picks m|\(m picked)"),
    ({"n_directions": True}, ND_BOOL + r"\. Got True instead"),
    ({"tol": -1}, TOL + r"\. Got -1 instead; tol=0 gives the exact depth"),
    ({"tol": 0.7}, TOL + r"\. Got 0\.7 instead"),
    ({"tol": "small"}, TOL + r"\. Got 'small' instead"),
    ({"tol": False}, r"'tol' parameter of \w+ must be a number, not a bool"),
    ({"nan_policy": "bad"}, NAN + r"\. Got 'bad' instead; 'raise' rejects rows"),
    ({"contamination": 0.7}, CONT + r"0\.7$"),
    ({"contamination": 0}, CONT + r"0$"),
    ({"contamination": True}, CONT + r"True$"),
    ({"contamination": "auto"}, CONT + r"'auto'; 'auto' .* has no meaning for a depth"),
    ({"random_state": "seed"}, r"'random_state' parameter .* Got 'seed' instead; pass an int"),
    ({"affine_invariant": "yes"}, r"'affine_invariant' parameter .* Got 'yes' instead; pass True"),
    ({"subsample_size": 1}, r"'subsample_size' parameter .* Got 1 instead; .* at least 2"),
    ({"subsample_size": 8.0}, r"'subsample_size' parameter .* Got 8\.0 instead"),
    ({"scope": 0}, r"'scope' parameter .* Got 0 instead; split points"),
    ({"scope": True}, r"'scope' parameter of \w+ must be a number, not a bool"),
    # beyond 100 almost no split point falls within the data: every score tends to 1 (1e308
    # overflowed to all scores exactly 1.0; issue 25, B6)
    ({"scope": 1e308}, r"'scope' parameter .* range \(0\.0, 100\.0\]\. Got 1e\+308 instead;.*"
                       r"every score near 1: use the default 0\.5"),
    ({"scope": float("inf")}, r"'scope' parameter .* Got inf instead"),
    ({"scope": 101}, r"'scope' parameter .* Got 101 instead"),
]


@pytest.mark.parametrize("cls, params, pattern", [
    (cls, params, pattern) for params, pattern in INVALID for cls in MODELS
    if set(params) <= set(cls._get_param_names())])
def test_invalid_parameters(x, cls, params, pattern):
    with pytest.raises(ValueError, match=pattern):
        cls(**params).fit(x)
    with pytest.raises(ValueError, match=pattern):
        cls(**params).fit_predict(x)


@pytest.mark.parametrize("params,pattern", [
    ({"depth": "foo"}, r"'depth' parameter .* Got 'foo' instead; depth must be one of "
                       r"'ai-irw', 'irw', 'halfspace', 'halfspace-mass'"),
    ({"n_directions": 0}, ND),
    ({"tol": 0.7}, TOL),
    ({"nan_policy": "bad"}, NAN),
    ({"depth": "irw", "covariance": "mcd"},
     r"covariance='mcd' does not apply to depth='irw' .* use depth='ai-irw'"),
    ({"depth": "irw", "support_fraction": 0.8},
     r"support_fraction=0\.8 does not apply to depth='irw'"),
])
def test_invalid_score_parameters(x, params, pattern):
    with pytest.raises(ValueError, match=pattern):
        daskdepth.score(x, **params)


@pytest.mark.parametrize("cls, default", [
    (daskdepth.Halfspace, "100 x n_features"), (daskdepth.Projection, "100 x n_features"),
    (daskdepth.HalfspaceMass, "1000 half-spaces")])
def test_auto_refusal_says_who_takes_auto_and_the_depths_own_default(x, cls, default):
    # It described 'auto' as if it had been taken, and gave the half-space mass the default
    # of the other depths (100 x n_features; its None means 1000 half-spaces).
    with pytest.raises(ValueError) as exc:
        cls(n_directions="auto").fit(x)
    message = str(exc.value)
    assert "Got 'auto' instead" in message
    assert f"None for {default}" in message and "is taken only by IRW and AIIRW" in message
    assert "'auto' picks" not in message
    assert ("100 x n_features" in message) == (cls is not daskdepth.HalfspaceMass)


@pytest.mark.parametrize("cls, name, value, takers", [
    (daskdepth.Projection, "tol", 1e-3, "AIIRW, IRW and Halfspace"),
    (daskdepth.IRW, "covariance", "mcd", "AIIRW, Halfspace and Projection"),
    (daskdepth.HalfspaceMass, "frame", "invariant", "AIIRW"),
    (daskdepth.AIIRW, "scope", 2.0, "HalfspaceMass"),
])
def test_a_parameter_the_class_does_not_take_is_a_parameter_error(cls, name, value, takers):
    # docs/depths.md promises a ParameterError naming the depths that take it; the classes
    # raised Python's bare "unexpected keyword argument" TypeError.
    with pytest.raises(daskdepth.ParameterError,
                       match=rf"^{cls.__name__} takes no parameter '{name}'.*{name} is a "
                             rf"parameter of {takers}") as exc:
        cls(**{name: value})
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, ValueError)
    assert exc.value.name == name and exc.value.value == value and exc.value.takers


def test_a_parameter_no_depth_takes_names_the_closest(x):
    with pytest.raises(daskdepth.ParameterError,
                       match=r"IRW takes no parameter 'n_direction'; did you mean "
                             r"'n_directions'\? IRW's parameters: contamination, n_directions"):
        daskdepth.IRW(n_direction=10)
    # the estimators' own paths are unchanged: clone, set_params, pickling
    import pickle

    from sklearn.base import clone

    model = daskdepth.IRW(tol=1e-3, random_state=0)
    assert clone(model).get_params() == model.get_params()
    assert pickle.loads(pickle.dumps(model.fit(x))).score_samples(x[:3]).shape == (3,)
    with pytest.raises(ValueError, match="Invalid parameter 'covariance' for estimator IRW"):
        model.set_params(covariance="mcd")


def test_irw_takes_the_one_call_defaults(x):
    # The defaults of score() apply to AI-IRW only and are not an error for IRW.
    np.testing.assert_array_equal(
        daskdepth.score(x, depth="irw", covariance="sample", support_fraction=None,
                        n_directions=20, random_state=0),
        daskdepth.IRW(n_directions=20, random_state=0).fit(x).score_samples(x))


@pytest.mark.parametrize("cov,pattern", [
    ("foo", r"covariance must be .*'sample'.* or a \(d, d\) array"),
    (np.eye(2), r"shape \(3, 3\) to match the 3 features, got \(2, 2\)"),
    (np.array([[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]), r"finite and symmetric"),
    (np.diag([1.0, np.nan, 1.0]), r"finite and symmetric"),
])
def test_invalid_covariance(x, cov, pattern):
    with pytest.raises(ValueError, match=pattern):
        daskdepth.AIIRW(covariance=cov, n_directions=5).fit(x)


def test_valid_edge_parameters(x):
    daskdepth.AIIRW(n_directions=1, tol=0, contamination=0.5).fit(x)
    daskdepth.IRW(n_directions=np.int64(3), tol=np.float32(0.01)).fit(x)


# --------------------------------------------------------------------------- containers


def test_xarray_dataset_is_refused(x, fitted):
    ds = xr.Dataset({"a": (("sample", "feature"), x)})
    for call in (daskdepth.AIIRW().fit, fitted.score_samples, daskdepth.score):
        with pytest.raises(TypeError, match=r"xarray\.Dataset.*ds\['name'\]"):
            call(ds)


def test_dataset_message_names_an_existing_fix(x):
    ds = xr.Dataset({"a": (("sample", "feature"), x)})
    with pytest.raises(TypeError) as exc:
        daskdepth.AIIRW().fit(ds)
    for name in re.findall(r"daskdepth\.(\w+)\(", str(exc.value)):
        assert hasattr(daskdepth, name), name


def test_sparse_input_message():
    sparse = pytest.importorskip("scipy.sparse")
    xs = sparse.random(30, 3, density=0.5, format="csr", random_state=0)
    with pytest.raises((TypeError, ValueError), match="(?i)sparse"):
        daskdepth.AIIRW(n_directions=5).fit(xs)


# --------------------------------------------------------------------------- plans that cannot fit


@pytest.fixture
def no_pass(monkeypatch):
    """Fail the test if a fit reaches its first pass over the data."""
    import daskdepth.fitting.fit as fit_module

    def forbidden(*args, **kwargs):
        raise AssertionError("the fit started a pass before refusing")

    monkeypatch.setattr(fit_module, "moments_pass", forbidden)


@pytest.mark.parametrize("make, params, hint", [
    # 10 million directions: terabytes of summary
    (lambda: gaussian_data(1000, 5, seed=1), dict(n_directions=10_000_000), "n_directions <="),
    # exact on 2e7 rows (lazy: nothing is computed)
    (lambda: dask.array.zeros((2 * 10**7, 5), chunks=(10**6, 5)), dict(tol=0),
     "tol=0: exact"),
    # tol so small that every row gets a leaf
    (lambda: dask.array.zeros((2 * 10**7, 5), chunks=(10**6, 5)), dict(tol=1e-12),
     "at tol=1e-12"),
    # 2,000 x 5,000: the default m = 500,000 directions
    (lambda: dask.array.zeros((2000, 5000), chunks=(500, 5000)), {}, "500,000 directions"),
])
@pytest.mark.parametrize("model", [m for m in MODELS if m is not daskdepth.HalfspaceMass])
def test_plan_too_large_is_refused_before_any_pass(no_pass, make, params, hint, model):
    with pytest.raises(daskdepth.FitTooLargeError, match="the fit needs about") as exc:
        model(random_state=0, **params).fit(make())
    text = str(exc.value)
    assert hint in text and "more than half of" in text
    assert re.search(r"use n_directions <= [\d,]+", text)


def test_mass_plan_too_large_is_refused_before_any_pass(monkeypatch):
    """Half-space mass has no tol; its fitted state grows with n_directions (t)."""
    import daskdepth.fitting.mass as mass_module

    def forbidden(*args, **kwargs):
        raise AssertionError("the fit started a pass before refusing")

    monkeypatch.setattr(mass_module, "row_sample_pass", forbidden)
    with pytest.raises(daskdepth.FitTooLargeError, match="the fit needs about") as exc:
        daskdepth.HalfspaceMass(n_directions=10**9, random_state=0).fit(gaussian_data(1000, 5))
    text = str(exc.value)
    assert "1,000,000,000 half-spaces" in text and "more than half of" in text
    assert re.search(r"use n_directions <= [\d,]+", text)


def test_tiny_tol_is_exact_not_an_overflow(x):
    """tol=1e-320 (1 / tol overflows) means every leaf is exact: the tol=0 result."""
    exact = daskdepth.AIIRW(n_directions=20, tol=0, random_state=0).fit(x)
    tiny = daskdepth.AIIRW(n_directions=20, tol=1e-320, random_state=0).fit(x)
    np.testing.assert_array_equal(tiny.score_samples(x), exact.score_samples(x))
    assert tiny.error_bound_ == 0


# --------------------------------------------------------------------------- misleading messages


@pytest.mark.parametrize("dtype, base", [(np.uint64, 2**63), (np.int64, 2**62)])
@pytest.mark.parametrize("lazy", [False, True])
def test_wide_integers_are_not_called_constant(dtype, base, lazy):
    """64-bit ids or timestamps that float64 rounds together: the message says why."""
    rng = np.random.default_rng(0)
    x = (dtype(base) + rng.integers(0, 400, size=(500, 3)).astype(dtype)).astype(dtype)
    data = dask.array.from_array(x, chunks=(100, 3)) if lazy else x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the in-memory warning, checked below
        with pytest.raises(ValueError, match=r"holds (u)?int64 integers.*rounds beyond 2\*\*53.*"
                                             r"X - X.min\(axis=0\)"):
            daskdepth.AIIRW(random_state=0).fit(data)
    if not lazy:
        with pytest.warns(UserWarning, match="beyond 2\\*\\*53 \\(largest"):
            with pytest.raises(ValueError):
                daskdepth.AIIRW(random_state=0).fit(data)
    # the fix the message suggests works, and gives a depth
    shifted = x - x.min(axis=0)
    assert daskdepth.AIIRW(random_state=0).fit(shifted).score_samples(shifted).shape == (500,)


@pytest.mark.parametrize("cov", [-np.eye(3), np.array([[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1]])])
def test_precomputed_covariance_must_be_positive_semidefinite(x, cov):
    with pytest.raises(ValueError, match="must be positive semi-definite, but its smallest "
                                         "eigenvalue is -1"):
        daskdepth.AIIRW(covariance=cov).fit(x)


def test_singular_precomputed_covariance_is_accepted(x):
    cov = np.diag([1.0, 1.0, 0.0])
    with pytest.warns(daskdepth.CovarianceRankWarning):
        daskdepth.AIIRW(covariance=cov, n_directions=10, random_state=0).fit(x)


# --------------------------------------------------------------------------- masked arrays


def _masked(x):
    """``x`` with rows 3 and 7 hiding sentinels (-999) behind the mask."""
    data = x.copy()
    data[[3, 7], 0] = -999.0
    mask = np.zeros(x.shape, dtype=bool)
    mask[[3, 7], 0] = True
    return np.ma.masked_array(data, mask=mask)


@pytest.mark.parametrize("cls", MODELS)
def test_masked_entries_count_as_nan(cls, x):
    xm = _masked(x)
    with pytest.raises(ValueError, match=r"masked entries count as NaN\) has 2 rows .*\[3, 7\]"):
        cls(n_directions=20, random_state=0).fit(xm)
    model = cls(n_directions=20, random_state=0, nan_policy="omit").fit(xm)
    clean = np.delete(x, [3, 7], axis=0)
    reference = cls(n_directions=20, random_state=0).fit(clean)
    assert model.n_samples_fit_ == 298  # the sentinels were not fitted
    np.testing.assert_allclose(model.location_, reference.location_, rtol=0, atol=1e-12)
    depth = model.score_samples(xm)
    assert np.isnan(depth[[3, 7]]).all()
    np.testing.assert_allclose(np.delete(depth, [3, 7]), reference.score_samples(clean),
                               rtol=0, atol=1e-9)


def test_masked_dask_chunks_count_as_nan(x):
    import dask.array as da  # only these masked-array tests use dask's masked chunks

    xm = _masked(x)
    lazy = da.ma.masked_array(da.from_array(xm.data, chunks=100), mask=xm.mask)
    model = daskdepth.IRW(n_directions=20, random_state=0, nan_policy="omit").fit(xm)
    depth = model.score_samples(lazy).compute()
    assert np.isnan(depth[[3, 7]]).all()
    np.testing.assert_array_equal(depth, model.score_samples(xm))
    fitted = daskdepth.IRW(n_directions=20, random_state=0, nan_policy="omit").fit(lazy)
    assert fitted.n_samples_fit_ == 298
    with pytest.raises(ValueError, match="NaN"):
        daskdepth.IRW(n_directions=20, random_state=0).fit(lazy)


def test_masked_integer_arrays(x):
    xi = np.ma.masked_array(np.round(x * 10).astype(np.int64),
                            mask=np.zeros(x.shape, dtype=bool))
    xi.mask[0, 0] = True
    model = daskdepth.IRW(n_directions=20, random_state=0, nan_policy="omit").fit(xi)
    assert model.n_samples_fit_ == 299


def test_largest_scope_still_splits_the_data(x):
    model = daskdepth.HalfspaceMass(scope=100, random_state=0).fit(x)
    assert np.ptp(model.score_samples(x)) > 0


@pytest.mark.parametrize("columns", [["a", 1, "c"], [0, "b", 2.5]])
def test_mixed_type_column_names_are_refused_as_scikit_learn(x, columns):
    """As scikit-learn: names of mixed types raise (issue 25, B6)."""
    frame = pd.DataFrame(x, columns=columns)
    for cls in MODELS:
        with pytest.raises(TypeError, match=r"Feature names are only supported if all input "
                                            r"features have string names.*astype\(str\)"):
            cls(n_directions=5).fit(frame)
    fitted = daskdepth.IRW(n_directions=5, random_state=0).fit(x)
    with pytest.raises(TypeError, match="string names"):
        fitted.score_samples(frame)
    with pytest.raises(TypeError, match="string names"):
        daskdepth.IRW(n_directions=5).fit(dd.from_pandas(frame, npartitions=2))
    with pytest.raises(TypeError, match="string names"):
        daskdepth.IRW(n_directions=5).fit(xr.DataArray(
            x, dims=("sample", "feature"), coords={"feature": np.array(columns, dtype=object)}))
    # all strings, or none: kept as names, or no names (as before)
    assert daskdepth.IRW(n_directions=5).fit(pd.DataFrame(x, columns=[0, 1, 2])).__dict__.get(
        "feature_names_in_") is None


def test_reference_near_the_top_of_float64_keeps_a_finite_location():
    """Column sums above 1.8e308 overflow: the location is the merged mean, not NaN.

    Before, the compensated sums overflowed to inf - inf, ``location_`` was NaN and
    every row scored 1.0, outside the depth's range [0, 1/2].
    """
    rng = np.random.default_rng(0)
    x = 1e307 + rng.normal(size=(500, 3)) * 1e305
    exact = np.mean(x / 1024, axis=0) * 1024
    for data in (x, chunked(x, 100)):
        with warnings.catch_warnings():  # the overflow is handled: no NumPy warning from inside
            warnings.simplefilter("error", RuntimeWarning)
            model = daskdepth.IRW(random_state=0, n_directions=50).fit(data)
        np.testing.assert_allclose(model.location_, exact, rtol=1e-14)
        depth = np.asarray(model.score_samples(x[:50]))
        assert np.all((depth >= 0) & (depth <= 0.5))


def test_reference_whose_mean_overflows_is_refused():
    """Rows spread over +-1.7e308 have no float64 mean: refused, naming the fix."""
    rng = np.random.default_rng(0)
    x = 1e308 * np.sign(rng.normal(size=(500, 3))) * rng.uniform(0.5, 1.7, size=(500, 3))
    with pytest.raises(ValueError, match="mean of the reference data overflows.*rescale"), \
            warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        daskdepth.IRW(random_state=0, n_directions=50).fit(x)
