"""The rank of a covariance: affine invariant up to rounding, true deficiency detected.

A covariance is rank deficient when a direction of the data has no more variance
than rounding explains (constant features, exact linear combinations), however
ill-conditioned the rest; the whitening of a full-rank covariance whitens it.
Where the covariance cannot tell (its condition number is the square of the
data's), the rows' ``R`` factor decides: numerically full-rank data sets mapped
by ill-conditioned affine maps keep their rank.  Data that vary only within the
rounding of their values (rank 0) are refused at once.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import HAS_ODDS, chunked, mapped_data_set
from hypothesis import example, given, settings
from hypothesis import strategies as st

import daskdepth
from daskdepth.kernels.moments import chunk_factor, merge_factors
from daskdepth.kernels.whitening import (
    canonical_bits,
    factor_whitening,
    principal_subspace,
    whitening,
)


def _conditioned(d: int, cond: float, seed: int) -> np.ndarray:
    """A random covariance with eigenvalues spread log-uniformly over ``cond``."""
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    vals = np.logspace(0, -np.log10(cond), d)
    cov = (q * vals) @ q.T
    return (cov + cov.T) / 2


def _map(d: int, cond: float, seed: int) -> np.ndarray:
    """A random linear map with singular values from 1 to ``cond``."""
    rng = np.random.default_rng(seed)
    u, _, vt = np.linalg.svd(rng.normal(size=(d, d)))
    return u @ np.diag(np.linspace(1.0, cond, d)) @ vt


def _residual(w: np.ndarray, cov: np.ndarray) -> float:
    return float(np.abs(w.T @ cov @ w - np.eye(w.shape[1])).max())


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 30), log_cond=st.floats(0, 12), seed=st.integers(0, 2**31))
def test_full_rank_keeps_its_rank_however_ill_conditioned(d, log_cond, seed):
    # Up to condition 1e12 the matrix is far from singular in float64: full rank,
    # and W whitens it to within the canonical rounding (whitening rounds the
    # correlation matrix to steps of at most 2**-36, which moves W^T C W by up to
    # about d steps over the smallest eigenvalue) plus eps times the condition.
    cov = _conditioned(d, 10.0 ** log_cond, seed) * np.random.default_rng(seed).uniform(
        1e-3, 1e3)
    w, rank = whitening(cov)
    assert rank == d
    assert _residual(w, cov) <= (d * 2.0 ** -36 + 1e-12) * 10.0 ** log_cond + 1e-9
    assert principal_subspace(cov) is not None
    np.testing.assert_array_equal(principal_subspace(cov)[0], np.eye(d))


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 8), extra=st.integers(1, 4), seed=st.integers(0, 2**31),
       offset=st.sampled_from([0.0, 1.0, 1e3, 1e6, 1e9]),
       spread=st.sampled_from([1e-3, 1.0, 1e3]), cond=st.sampled_from([1.0, 7.0, 1e3]))
# np.cov's mean of these 400 rows is off by 5.5 eps |mean|: it kept rank 2
@example(k=1, extra=1, seed=0, offset=1e6, spread=1e-3, cond=7.0)
def test_exact_linear_combinations_are_found_whatever_the_affine_map(k, extra, seed, offset,
                                                                     spread, cond):
    # k independent features, then `extra` features computed (in floating point)
    # as combinations of them, all mapped by a random affine map: rank k, and the
    # null directions are the relations.
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(400, k)) * spread
    x = np.hstack([base, base @ rng.normal(size=(k, extra))])
    d = k + extra
    y = x @ _map(d, cond, seed) + offset
    cov, loc = np.cov(y.T), y.mean(axis=0)
    w, rank = whitening(cov, loc)
    assert rank == k
    assert _residual(w, cov) <= 1e-6
    basis, back = principal_subspace(cov, loc)
    assert basis.shape == (d, k)
    np.testing.assert_allclose(loc + (y - loc) @ basis @ back.T, y, rtol=0,
                               atol=1e-9 * (offset + spread * cond * d))


def test_constant_features_and_combinations_together():
    rng = np.random.default_rng(0)
    b = rng.normal(size=(500, 3)) * [1.0, 3.0, 0.01]
    x = np.column_stack([b, b[:, 0] + b[:, 1], np.full(500, 2.0)])
    w, rank = whitening(np.cov(x.T), x.mean(axis=0))
    assert rank == 3
    assert np.abs(w[4]).max() == 0  # the constant feature gets no weight
    # Orthogonal to the relation up to the 36-bit canonical rounding (a 2^-37
    # change of a correlation tilts the null direction by about that over the gap).
    null = np.array([1.0, 1.0, 0.0, -1.0, 0.0])
    assert np.abs(null @ w).max() <= 1e-8 * np.abs(w).max()


def test_large_offset_combination_is_rank_deficient():
    # Timestamps-like data: x3 = x1 + x2 holds only up to the rounding of values
    # near 1e9 (about 1e-7), far above eps relative to the spread (1e-3); the
    # location tells the rank test the scale of that rounding.
    rng = np.random.default_rng(1)
    b = rng.normal(size=(2000, 2)) * 1e-3 + 1e9
    x = np.column_stack([b, b[:, 0] + b[:, 1]])
    assert whitening(np.cov(x.T), x.mean(axis=0))[1] == 2
    with pytest.warns(daskdepth.CovarianceRankWarning, match="rank 2"):
        model = daskdepth.AIIRW(n_directions=30, random_state=0).fit(x)
    assert model.covariance_rank_ == 2
    # Full-rank data at the same offset keep rank 3.
    y = rng.normal(size=(2000, 3)) * 1e-3 + 1e9
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        assert daskdepth.AIIRW(n_directions=30, random_state=0).fit(y).covariance_rank_ == 3


@pytest.mark.parametrize("seed", range(3))
def test_rank_is_invariant_under_affine_maps_of_ill_conditioned_data(seed):
    # The covariance of breast-cancer-like data (condition 1e11) and of its
    # images under random maps of condition 7: full rank each time, no warning.
    cov = _conditioned(30, 1e11, seed)
    for k in range(3):
        a = _map(30, 7.0, 100 * seed + k)
        c = a.T @ cov @ a
        w, rank = whitening((c + c.T) / 2, np.full(30, 100.0))
        assert rank == 30
        assert _residual(w, c) <= 1e-3


def test_canonical_bits_follow_the_smallest_eigenvalue():
    # Well-conditioned: 36 bits (chunking-proof); ill-conditioned: finer, so that
    # the rounding moves the smallest eigenvalue by at most 2^-20 of itself.
    assert canonical_bits(1.0, 5) == 36
    assert canonical_bits(5 * 2.0 ** -17, 5) == 36
    assert canonical_bits(5 * 2.0 ** -30, 5) == 49
    assert canonical_bits(0.0, 5) == 36
    lam, d = 1e-11, 30
    step = 2.0 ** -canonical_bits(lam, d)
    assert d * step / 2 <= 2.0 ** -20 * lam


# --------------------------------------------------------------------------- rank 0


def _rounding_only(kind: str) -> np.ndarray:
    """Data whose spread is within the float64 rounding of their values (rank 0)."""
    rng = np.random.default_rng(0)
    if kind == "offset":
        return 1e12 + 3e-4 * rng.normal(size=(1000, 2))
    if kind == "ulp":  # half the rows one ulp above the others
        return np.where(np.arange(1000)[:, None] % 2 == 0, 1e6, np.nextafter(1e6, 2e6)) \
            * np.ones((1000, 2))
    return 2**62 + rng.integers(0, 20_000, size=(1000, 3))  # int64 IDs


ROUNDING = "vary only within the float64 rounding of their values .* subtract a common offset"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["offset", "ulp", "ids"])
@pytest.mark.parametrize("estimator", [
    lambda: daskdepth.AIIRW(random_state=0),
    lambda: daskdepth.AIIRW(frame="invariant", random_state=0),
    lambda: daskdepth.AIIRW(covariance="mcd", random_state=0),
    lambda: daskdepth.Halfspace(affine_invariant=True, random_state=0),
])
def test_rank_zero_is_refused_at_once(kind, estimator):
    # The rank test finds no direction above rounding: a clear error, not a redraw of
    # directions on the sphere of R^0 for ever.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # int64 beyond 2**53
        with pytest.raises(ValueError, match=ROUNDING):
            estimator().fit(_rounding_only(kind))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["fit", "score"])
def test_rank_zero_is_refused_by_the_cli(tmp_path, capsys, command):
    import re

    import zarr

    from daskdepth.cli import main

    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=_rounding_only("offset"), chunks=(250, 2))
    out = ["--model", str(tmp_path / "m.zarr")] if command == "fit" else \
        ["--out", str(tmp_path / "o.zarr")]
    assert main([command, str(src), *out, "-q", "--scheduler", "synchronous"]) != 0
    assert re.search(ROUNDING, capsys.readouterr().err)


def test_no_directions_on_the_sphere_of_r0():
    from daskdepth.kernels.directions import uniform_sphere

    with pytest.raises(ValueError, match="R\\^0"):
        uniform_sphere(np.random.RandomState(0), 5, 0)


# --------------------------------------------------------------------------- the R factor


def _mean(x: np.ndarray) -> np.ndarray:
    """The correctly rounded column means, as the fit's compensated sums give them (a
    mean off by a few ulps of a large offset would add a constant to every row)."""
    return np.array([math.fsum(col) for col in x.T]) / x.shape[0]


def _factor(x: np.ndarray) -> np.ndarray:
    return np.linalg.qr(x - _mean(x), mode="r")


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 8), extra=st.integers(1, 4), seed=st.integers(0, 2**31),
       offset=st.sampled_from([0.0, 1.0, 1e3, 1e6, 1e9]),
       spread=st.sampled_from([1e-3, 1.0, 1e3]), cond=st.sampled_from([1.0, 7.0]))
def test_factor_finds_exact_linear_combinations(k, extra, seed, offset, spread, cond):
    # As the covariance's test, on R: k independent features and `extra` combinations
    # computed in floating point, under a well-conditioned map; the relations are null.
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(400, k)) * spread
    x = np.hstack([base, base @ rng.normal(size=(k, extra))])
    d = k + extra
    y = x @ _map(d, cond, seed) + offset
    r = _factor(y)
    w, rank = factor_whitening(r, 1 / 399, _mean(y))
    assert rank == k
    # against the covariance of the same centred rows (np.cov centres on its own mean,
    # a few ulps of the offset away: 1e-6 of the spread at offset 1e9)
    assert _residual(w, r.T @ r / 399) <= 1e-6


@settings(max_examples=30, deadline=None)
@given(d=st.integers(2, 30), log_cond=st.floats(0, 12), seed=st.integers(0, 2**31))
def test_factor_keeps_the_rank_of_numerically_full_rank_data(d, log_cond, seed):
    # Rows whose singular values span up to 1e12 (a covariance of condition 1e24, far
    # beyond what the covariance itself resolves): full rank, and W whitens the rows.
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    x = rng.normal(size=(1000, d)) @ np.diag(np.logspace(0, -log_cond, d)) @ q + 5.0
    w, rank = factor_whitening(_factor(x), 1 / 999, _mean(x))
    assert rank == d
    z = (x - x.mean(axis=0)) @ w
    # to the canonical rounding (2**-20 of the smallest singular value) and the rounding
    # of the projections (eps times the condition number)
    assert np.abs(np.cov(z.T) - np.eye(d)).max() <= 1e-5 + 1e-15 * 10.0 ** log_cond


def test_factor_of_chunks_merges_to_the_factor_of_all_rows():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1000, 4)) + 1e6
    x[17] = np.nan
    loc = np.nanmean(x, axis=0)
    parts = [chunk_factor(x[i:i + 150], loc) for i in range(0, 1000, 150)]
    parts.append(chunk_factor(x[:2], loc))  # fewer rows than features
    n, r = merge_factors(*parts)
    rows = np.vstack([x, x[:2]])
    rows = rows[np.isfinite(rows).all(axis=1)] - loc
    assert n == rows.shape[0] == 1001
    np.testing.assert_allclose(r.T @ r, rows.T @ rows, rtol=1e-12)
    assert (np.diag(r) >= 0).all() and np.array_equal(np.triu(r), r)


@pytest.mark.parametrize("name,cond", [
    ("breast_cancer", 1e2), ("breast_cancer", 1e4), ("breast_cancer", 1e8),
    pytest.param("satimage-2", 1e8,
                 marks=pytest.mark.skipif(not HAS_ODDS, reason="shared ODDS data not available")),
    pytest.param("musk", 1e6,
                 marks=pytest.mark.skipif(not HAS_ODDS, reason="shared ODDS data not available")),
    pytest.param("musk", 1e8,
                 marks=pytest.mark.skipif(not HAS_ODDS, reason="shared ODDS data not available")),
])
def test_mapped_data_sets_keep_their_rank(name, cond):
    # Before the factor pass: ranks 29, 23, 14-15 of 30; 28-29 of 36; 147-149, 116-118 of 166.
    y = mapped_data_set(name, cond)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        model = daskdepth.AIIRW(n_directions=20, random_state=0).fit(y)
    assert model.covariance_rank_ == y.shape[1]
    # The directions whiten the rows: unit variance (to the canonical rounding, 2**-20
    # of the smallest singular value, and the projections' rounding, eps times the
    # condition number; v^T cov v in floating point would square it).
    proj = (y - y.mean(axis=0)) @ model.directions_.T
    np.testing.assert_allclose(proj.var(axis=0, ddof=1), 1.0, rtol=1e-3)


@pytest.mark.parametrize("estimator", [
    lambda: daskdepth.AIIRW(covariance="mcd", n_directions=20, random_state=0),
    lambda: daskdepth.Halfspace(affine_invariant=True, n_directions=20, random_state=0),
])
def test_mapped_data_keep_their_rank_under_the_mcd_and_halfspace(estimator):
    y = mapped_data_set("breast_cancer", 1e8)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        model = estimator().fit(y)
    assert model.covariance_rank_ == 30


@pytest.mark.parametrize("frame", ["correlation", "invariant"])
def test_factor_path_is_chunking_invariant(frame):
    # x3 = x1 + x2: the covariance's test drops the relation, the factor pass decides
    # (rank 2); its R is rounded in correlation scale, so every chunking gives the same bits.
    rng = np.random.default_rng(4)
    b = rng.standard_exponential(size=(3000, 2)) * [1.0, 3.0] + 100.0
    x = np.column_stack([b, b[:, 0] + b[:, 1]])
    fits = []
    for rows in (3000, 1000, 377, (1, 2998, 1)):
        with pytest.warns(daskdepth.CovarianceRankWarning, match="rank 2"):
            fits.append(daskdepth.AIIRW(n_directions=30, random_state=0, frame=frame)
                        .fit(chunked(x, rows)))
    for model in fits[1:]:
        np.testing.assert_array_equal(model.directions_, fits[0].directions_)
        np.testing.assert_array_equal(model.basis_, fits[0].basis_)
