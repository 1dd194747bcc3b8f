"""Hypothesis properties: range, chunking and reduction invariance, affine invariance."""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
from conftest import DISTRIBUTED_ROWS, chunked, gaussian_data
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracle import exact_depth, exact_depth_of_model
from scipy.stats import kendalltau, special_ortho_group
from sklearn.datasets import load_breast_cancer

import daskdepth

MODELS = {"ai-irw": daskdepth.AIIRW, "irw": daskdepth.IRW}

depths = st.sampled_from(["ai-irw", "irw"])
tols = st.sampled_from([0.0, 1e-3, 1e-2, 0.1])
seeds = st.integers(0, 2**32 - 1)


def _fit(depth: str, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.CovarianceRankWarning)
        return MODELS[depth](**kw).fit(x)


def _split(n: int, cuts: list[int]) -> tuple[int, ...]:
    """Row chunk sizes from cut points in (0, n)."""
    edges = [0, *sorted(set(c for c in cuts if 0 < c < n)), n]
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:], strict=True))


@st.composite
def continuous_data(draw, max_rows: int = 400):
    n = draw(st.integers(2, max_rows))
    d = draw(st.integers(1, 4))
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    scales = np.array(draw(st.lists(st.floats(1e-3, 1e3), min_size=d, max_size=d)))
    return rng.standard_t(draw(st.sampled_from([1, 3, 30])), size=(n, d)) * scales


@st.composite
def tied_data(draw):
    """Small arrays from a handful of values: many ties, duplicate rows, constant columns."""
    values = st.sampled_from([-2.0, -0.5, 0.0, 0.0, 1.0, 1.0, 3.25, 1e3])
    x = draw(hnp.arrays(np.float64, st.tuples(st.integers(2, 60), st.integers(1, 3)),
                        elements=values))
    assume(np.ptp(x, axis=0).max() > 0)
    return x


# --------------------------------------------------------------------------- range


@given(x=continuous_data(), depth=depths, tol=tols, seed=seeds)
def test_depth_in_zero_half(x, depth, tol, seed):
    n = x.shape[0]
    model = _fit(depth, x, n_directions=16, tol=tol, random_state=seed)
    d = model.score_samples(x)
    assert d.shape == (n,)
    # A reference row counts itself on both sides, so without ties its depth is at
    # most (n + 1) / (2 n): 1/2 up to one row.
    assert np.all(d >= 0) and np.all(d <= 0.5 + 0.5 / n)
    # Each reference row is on its own side at least once per direction.
    assert np.all(d >= 1 / n - model.error_bound_ - 1e-12)
    # Points that are not reference rows have exact depth in [0, 1/2].
    q = x[: min(n, 50)] * (1 + 1e-6) + 1e-9
    assert not np.isin(q, x).any()
    dq = model.score_samples(q)
    exact = exact_depth_of_model(model, x, q)
    assert np.all(exact <= 0.5) and np.all(dq >= 0)
    assert np.all(dq <= 0.5 + model.error_bound_ + 1e-12)


@given(x=tied_data(), depth=depths, tol=tols, seed=seeds)
def test_tied_data_within_bound_of_oracle(x, depth, tol, seed):
    model = _fit(depth, x, n_directions=8, tol=tol, random_state=seed)
    q = np.vstack([x, x + 0.25, x.mean(axis=0, keepdims=True)])
    got = model.score_samples(q)
    exact = exact_depth_of_model(model, x, q)
    assert model.error_bound_ <= tol
    assert np.abs(got - exact).max() <= model.error_bound_ + 1e-12
    assert np.all(got >= 0) and np.all(got <= 1)


# --------------------------------------------------------------------------- invariance


@given(x=continuous_data(max_rows=600), depth=depths, tol=st.sampled_from([0.0, 1e-3, 1e-2]),
       seed=seeds, cuts_a=st.lists(st.integers(1, 599), max_size=6),
       cuts_b=st.lists(st.integers(1, 599), max_size=6))
def test_chunking_invariance(x, depth, tol, seed, cuts_a, cuts_b):
    n = x.shape[0]
    xa, xb = chunked(x, _split(n, cuts_a)), chunked(x, _split(n, cuts_b))
    ma = _fit(depth, xa, n_directions=12, tol=tol, random_state=seed)
    mb = _fit(depth, xb, n_directions=12, tol=tol, random_state=seed)
    da_ = ma.score_samples(xa).compute()
    db_ = mb.score_samples(xb).compute()
    assert np.abs(da_ - db_).max() <= 2 * tol + 1e-12
    np.testing.assert_allclose(ma.location_, mb.location_, rtol=1e-12,
                               atol=1e-12 * np.abs(x).max())


@given(x=continuous_data(max_rows=600), depth=depths, seed=seeds,
       rows=st.integers(7, 60))
def test_split_every_invariance(x, depth, seed, rows):
    tol = 1e-3
    xd = chunked(x, rows)
    m0 = _fit(depth, xd, n_directions=12, tol=tol, random_state=seed)
    with dask.config.set(split_every=2):
        m2 = _fit(depth, xd, n_directions=12, tol=tol, random_state=seed)
        d2 = m2.score_samples(xd).compute()
    d0 = m0.score_samples(xd).compute()
    assert np.abs(d0 - d2).max() <= 2 * tol + 1e-12
    assert m0.n_samples_fit_ == m2.n_samples_fit_ == x.shape[0]


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
def test_chunking_and_split_every_invariance_distributed_path(depth):
    x = gaussian_data(DISTRIBUTED_ROWS, 2, seed=3)
    tol = 1e-3
    q = x[:3000]
    ref = None
    for rows, split_every in [(35_000, None), ((1, 9_999, 20_000, 40_000), None),
                              (7_000, 2)]:
        with dask.config.set(split_every=split_every):
            model = _fit(depth, chunked(x, rows), n_directions=20, tol=tol, random_state=5)
        assert model.n_passes_ >= 1
        d = model.score_samples(q)
        if ref is None:
            ref = d
        else:
            assert np.abs(d - ref).max() <= 2 * tol + 1e-12


def _well_conditioned(seed: int, d: int) -> np.ndarray:
    q1 = special_ortho_group.rvs(d, random_state=seed)
    q2 = special_ortho_group.rvs(d, random_state=seed + 1)
    s = np.random.default_rng(seed).uniform(0.5, 2.0, size=d)
    return q1 @ np.diag(s) @ q2


# Examples are derandomised: tau is a Monte Carlo quantity (3000 directions, 300
# rows) and its spread over seeds reaches below 0.95 (0.948 at seed 756, with
# exact depths), so fixed examples keep the test about invariance, not luck.
@settings(max_examples=4, derandomize=True)
@given(seed=st.integers(0, 10_000))
def test_ai_irw_affine_invariance(seed):
    rng = np.random.default_rng(seed)
    x = gaussian_data(300, 3, seed=seed)
    a = _well_conditioned(seed, 3)
    b = rng.normal(size=3) * 100
    y = x @ a.T + b
    dx = daskdepth.score(x, n_directions=3000, random_state=seed)
    dy = daskdepth.score(y, n_directions=3000, random_state=seed + 1)
    tau = kendalltau(dx, dy)[0]
    assert tau >= 0.94  # IRW's falls to 0.3-0.5 (test_irw_is_not_affine_invariant)


def _cholesky_ai_irw(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Exact in-sample AI-IRW with Cholesky whitening: directions ``L^-T u``."""
    cov = np.cov(x.T)
    w = np.linalg.inv(np.linalg.cholesky(cov)).T
    return exact_depth(x, x, x.mean(axis=0), u @ w.T)


@pytest.mark.parametrize("seed", [0, 1])
def test_ai_irw_affine_invariance_on_full_rank_ill_conditioned_data(seed):
    # Breast cancer (569 x 30, covariance condition about 6e11) after a random,
    # well-conditioned affine map (condition 7): the covariance stays positive
    # definite (about 1e12), so the fit keeps rank 30, says nothing about linear
    # combinations, and ranks the rows as an exact AI-IRW with Cholesky whitening.
    x = load_breast_cancer().data
    rng = np.random.default_rng(seed)
    q1, _, q2 = np.linalg.svd(rng.normal(size=(30, 30)))
    a = q1 @ np.diag(np.linspace(1.0, 7.0, 30)) @ q2
    y = x @ a + rng.normal(size=30) * 100
    m = 3000
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        mx = daskdepth.AIIRW(n_directions=m, tol=0, random_state=seed).fit(x)
        my = daskdepth.AIIRW(n_directions=m, tol=0, random_state=seed).fit(y)
        mp = daskdepth.AIIRW(n_directions=m, tol=0, random_state=seed,
                             covariance=np.cov(y.T)).fit(y)
    assert mx.covariance_rank_ == my.covariance_rank_ == mp.covariance_rank_ == 30
    dx, dy = mx.score_samples(x), my.score_samples(y)
    tau = kendalltau(dx, dy)[0]
    u = np.random.default_rng(seed).normal(size=(m, 30))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    exact_tau = kendalltau(_cholesky_ai_irw(x, u), _cholesky_ai_irw(y, u))[0]
    assert tau >= 0.94 and tau >= exact_tau - 0.02, (tau, exact_tau)
    assert kendalltau(dy, mp.score_samples(y))[0] >= 0.99
    # The directions whiten the covariance of y to within its rounding (cond about 1e12).
    var = np.einsum("ij,jk,ik->i", my.directions_, my.covariance_, my.directions_)
    np.testing.assert_allclose(var, 1.0, rtol=1e-4)


def test_irw_is_not_affine_invariant():
    x = gaussian_data(300, 3, seed=8)
    a = special_ortho_group.rvs(3, random_state=8) @ np.diag([1.0, 50.0, 0.02])
    y = x @ a.T - 7.0
    taus = {}
    for depth in ("ai-irw", "irw"):
        dx = daskdepth.score(x, depth=depth, n_directions=3000, random_state=1)
        dy = daskdepth.score(y, depth=depth, n_directions=3000, random_state=2)
        taus[depth] = kendalltau(dx, dy)[0]
    assert taus["ai-irw"] >= 0.95
    assert taus["irw"] < taus["ai-irw"] - 0.1


# --------------------------------------------------------------------------- determinism


@settings(max_examples=10)
@given(x=continuous_data(), depth=depths, seed=seeds)
def test_same_random_state_is_deterministic(x, depth, seed):
    m1 = _fit(depth, x, n_directions=10, tol=1e-3, random_state=seed)
    m2 = _fit(depth, chunked(x, max(1, x.shape[0] // 3)), n_directions=10, tol=1e-3,
              random_state=seed)
    m3 = _fit(depth, x, n_directions=10, tol=1e-3, random_state=seed)
    np.testing.assert_array_equal(m1.directions_, m3.directions_)
    np.testing.assert_array_equal(m1.score_samples(x), m3.score_samples(x))
    if depth == "irw":
        # IRW directions do not depend on the data: chunked input draws the same ones.
        np.testing.assert_array_equal(m1.directions_, m2.directions_)
    else:
        # AI-IRW directions depend on the covariance, whose rounding depends on the
        # chunking (amplified by its condition number): compare loosely.
        np.testing.assert_allclose(m1.directions_, m2.directions_, rtol=1e-3,
                                   atol=1e-3 * np.abs(m1.directions_).max())
    m4 = _fit(depth, x, n_directions=10, tol=1e-3, random_state=seed ^ 1)
    assert not np.array_equal(m1.directions_, m4.directions_)


def test_random_state_instance_is_consumed():
    # A RandomState instance is advanced by a fit: two fits differ, like scikit-learn.
    x = gaussian_data(200, 2, seed=0)
    rs = np.random.RandomState(0)
    m = daskdepth.IRW(n_directions=5, random_state=rs)
    d1 = m.fit(x).directions_.copy()
    d2 = m.fit(x).directions_.copy()
    assert not np.array_equal(d1, d2)
    d3 = daskdepth.IRW(n_directions=5, random_state=np.random.RandomState(0)).fit(x).directions_
    np.testing.assert_array_equal(d1, d3)
