"""Computed depth against the independent exact oracle, on both fitting paths."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    DISTRIBUTED_ROWS,
    IN_MEMORY_ROWS,
    ODDS,
    cauchy_data,
    chunked,
    gaussian_data,
    tie_data,
)
from oracle import exact_depth, exact_depth_of_model

import daskdepth

SMTP = Path(ODDS) / "smtp.npz"
MAKERS = {"gaussian": gaussian_data, "cauchy": cauchy_data, "ties": tie_data}
MODELS = {"ai-irw": daskdepth.AIIRW, "irw": daskdepth.IRW}
#: Slack for floating-point rounding of the depth sums.
EPS = 1e-12


def _model(depth: str, **kw):
    return MODELS[depth](random_state=kw.pop("random_state", 0), **kw)


def _queries(x: np.ndarray, seed: int = 0, k: int = 1500) -> np.ndarray:
    """Reference rows, jittered rows and far points: every branch of the scorer."""
    rng = np.random.default_rng(seed)
    rows = x[rng.choice(x.shape[0], size=k, replace=False)]
    scale = np.nanstd(x, axis=0)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    jitter = rows[: k // 2] + 0.05 * scale * rng.normal(size=rows[: k // 2].shape)
    far = np.median(x, axis=0) + 1e3 * scale * rng.normal(size=(20, x.shape[1]))
    return np.vstack([rows, jitter, far])


def _check_against_oracle(model, reference: np.ndarray, points: np.ndarray, tol: float):
    got = np.asarray(model.score_samples(points))
    exact = exact_depth_of_model(model, reference, points)
    err = np.abs(got - exact)
    assert np.isfinite(got).all()
    assert model.error_bound_ <= tol
    assert err.max() <= model.error_bound_ + EPS, (err.max(), model.error_bound_)
    return got, exact


# --------------------------------------------------------------------------- in memory


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
@pytest.mark.parametrize("kind", ["gaussian", "cauchy", "ties"])
def test_in_memory_path_matches_oracle(kind, depth):
    x = MAKERS[kind](3000, 3, seed=11)
    tol = 1e-3
    model = _model(depth, n_directions=40, tol=tol).fit(x)
    assert model.n_passes_ == 0
    assert model.n_samples_fit_ == 3000
    _check_against_oracle(model, x, _queries(x), tol)


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
def test_in_memory_path_bound_is_used_but_respected(depth):
    # With tol large enough for leaves of several rows the estimate is approximate:
    # the certified bound must be positive and still cover the true error.
    x = gaussian_data(5000, 2, seed=4)
    tol = 1e-2
    model = _model(depth, n_directions=40, tol=tol).fit(x)
    assert 0 < model.error_bound_ <= tol
    got, exact = _check_against_oracle(model, x, _queries(x, k=2000), tol)
    assert np.abs(got - exact).max() > 0


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
@pytest.mark.parametrize("kind", ["gaussian", "ties"])
def test_in_memory_tol_zero_is_exact(kind, depth):
    x = MAKERS[kind](4000, 3, seed=5)
    model = _model(depth, n_directions=30, tol=0).fit(x)
    assert model.error_bound_ == 0
    q = _queries(x)
    np.testing.assert_allclose(model.score_samples(q), exact_depth_of_model(model, x, q),
                               rtol=0, atol=1e-12)


def test_in_memory_limit_is_inclusive():
    # Exactly 65,536 finite rows still take the in-memory path; one more does not.
    x = gaussian_data(IN_MEMORY_ROWS + 1, 2, seed=6)
    m0 = _model("irw", n_directions=4, tol=1e-2).fit(x[:IN_MEMORY_ROWS])
    m1 = _model("irw", n_directions=4, tol=1e-2).fit(x)
    assert m0.n_passes_ == 0
    assert m1.n_passes_ >= 1


def test_in_memory_limit_counts_all_rows():
    # Documented: the sample is drawn before non-finite rows are known, so the
    # in-memory limit applies to all rows; the distributed path is just as exact.
    x = gaussian_data(IN_MEMORY_ROWS + 1, 2, seed=6)
    x[0] = np.nan
    model = _model("irw", n_directions=4, tol=1e-2, nan_policy="omit").fit(x)
    assert model.n_samples_fit_ == IN_MEMORY_ROWS
    assert model.n_passes_ == 1
    got = model.score_samples(x[1:2000])
    exact = exact_depth_of_model(model, x, x[1:2000])
    assert np.abs(got - exact).max() <= model.error_bound_ + 1e-12


def test_out_of_sample_in_memory():
    a = gaussian_data(3000, 3, seed=7)
    b = gaussian_data(1000, 3, seed=8) * 2.0
    model = _model("ai-irw", n_directions=50, tol=1e-3).fit(a)
    got, exact = _check_against_oracle(model, a, b, 1e-3)
    # Scoring B against A is not scoring B against itself.
    self_depth = exact_depth_of_model(model, b, b)
    assert np.abs(self_depth - exact).max() > 0.05


# --------------------------------------------------------------------------- distributed


@pytest.fixture(scope="module")
def big():
    return {kind: make(DISTRIBUTED_ROWS, 2, seed=21) for kind, make in MAKERS.items()}


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
@pytest.mark.parametrize("kind", ["gaussian", "cauchy", "ties"])
def test_distributed_path_matches_oracle(big, kind, depth):
    x = big[kind]
    tol = 1e-3
    # 40 directions span two direction blocks of the histogram passes.
    model = _model(depth, n_directions=40, tol=tol).fit(chunked(x, 17_000))
    assert model.n_passes_ >= 1
    assert model.n_samples_fit_ == x.shape[0]
    _check_against_oracle(model, x, _queries(x, k=2000), tol)


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
def test_distributed_tol_zero_is_exact(big, depth):
    x = big["gaussian"]
    model = _model(depth, n_directions=12, tol=0).fit(chunked(x, 20_000))
    assert model.n_passes_ >= 1
    assert model.error_bound_ == 0
    q = _queries(x, k=3000)
    np.testing.assert_allclose(model.score_samples(q), exact_depth_of_model(model, x, q),
                               rtol=0, atol=1e-12)


def test_distributed_tol_zero_with_ties_is_exact(big):
    x = big["ties"]
    model = _model("ai-irw", n_directions=12, tol=0).fit(chunked(x, 20_000))
    assert model.n_passes_ >= 1 and model.error_bound_ == 0
    q = _queries(x, k=2000)
    np.testing.assert_allclose(model.score_samples(q), exact_depth_of_model(model, x, q),
                               rtol=0, atol=1e-12)


def test_distributed_duplicated_rows():
    # Every row appears five times: a large dataset with few distinct rows.
    base = gaussian_data(15_000, 2, seed=9)
    x = np.repeat(base, 5, axis=0)
    np.random.default_rng(0).shuffle(x)
    tol = 1e-3
    model = _model("ai-irw", n_directions=24, tol=tol).fit(chunked(x, 25_000))
    assert model.n_passes_ >= 1
    _check_against_oracle(model, x, _queries(x, k=2000), tol)


def test_out_of_sample_distributed(big):
    a = big["gaussian"]
    b = np.vstack([gaussian_data(2000, 2, seed=30) * 1.5, a[:50] + 1e-9, [[1e6, -1e6]]])
    tol = 1e-3
    model = _model("ai-irw", n_directions=30, tol=tol).fit(chunked(a, 15_000))
    assert model.n_passes_ >= 1
    got = model.score_samples(chunked(b, 700)).compute()
    exact = exact_depth_of_model(model, a, b)
    assert np.abs(got - exact).max() <= model.error_bound_ + EPS
    assert got[-1] == exact[-1] == 0.0


def test_oracle_is_not_the_identity():
    # Sanity check of the oracle itself on a case computed by hand: points on a line.
    ref = np.array([[0.0], [1.0], [1.0], [2.0], [3.0]])
    pts = np.array([[1.0], [2.5], [-1.0], [3.0]])
    got = exact_depth(ref, pts, np.zeros(1), np.array([[1.0], [-1.0]]))
    # x = 1: #<= 3, #>= 4 -> 3/5;  x = 2.5: #<= 4, #>= 1 -> 1/5;  outside -> 0;  x = 3: 1/5.
    np.testing.assert_allclose(got, [0.6, 0.2, 0.0, 0.2])


# --------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("n", [3000, DISTRIBUTED_ROWS])
def test_large_offset_small_spread_whitening(n):
    rng = np.random.default_rng(12)
    z = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.6], [0.0, 0.5]]) * 1e-3
    offset = 1e9
    x_off = z + offset
    x_cen = x_off - offset  # the same rounded values, without the offset
    tol = 1e-3
    m_off = _model("ai-irw", n_directions=30, tol=tol).fit(chunked(x_off, n // 4))
    m_cen = _model("ai-irw", n_directions=30, tol=tol).fit(chunked(x_cen, n // 4))
    assert m_off.covariance_rank_ == 2
    np.testing.assert_allclose(m_off.covariance_, m_cen.covariance_, rtol=1e-4)
    q = slice(0, 2000)
    d_off = m_off.score_samples(x_off[q])
    d_cen = m_cen.score_samples(x_cen[q])
    assert np.abs(d_off - d_cen).max() <= 2 * tol + 1e-6
    # And the offset model is right against the oracle for its own directions.
    assert np.abs(d_off - exact_depth_of_model(m_off, x_off, x_off[q])).max() <= (
        m_off.error_bound_ + EPS)
    # A whitened depth is informative: it falls with the Mahalanobis distance.
    zc = z[q] - z.mean(axis=0)
    maha = np.einsum("ij,jk,ik->i", zc, np.linalg.inv(np.cov(z.T)), zc)
    assert np.corrcoef(d_off, maha)[0, 1] < -0.8


#: Row chunkings of the offset data: one chunk, even, uneven, many small.
OFFSET_CHUNKS = (None, 10_000, 3_333, 2_593, 1_000)


@pytest.mark.parametrize("offset", [1e6, 1e9, 1e12])
@pytest.mark.parametrize("covariance", ["sample", "ledoit-wolf"])
def test_large_offset_depths_do_not_depend_on_chunking(offset, covariance):
    # Timestamps or projected coordinates: a common offset far above the spread.
    # Chunked moments must stay accurate enough for the canonical rounding of the
    # covariance to absorb their noise, so the directions and depths are the same
    # bits for NumPy input and every chunking.
    x = gaussian_data(10_000, 3, seed=21) + offset
    queries = x[:: 7]
    for tol in (0.0, 1e-4):
        fitted = [
            _model("ai-irw", n_directions=30, tol=tol, covariance=covariance).fit(
                x if rows is None else chunked(x, rows))
            for rows in OFFSET_CHUNKS
        ]
        ref = fitted[0]
        d_ref = ref.score_samples(queries)
        for model in fitted[1:]:
            np.testing.assert_allclose(model.covariance_, ref.covariance_, rtol=1e-14,
                                       atol=0)
            np.testing.assert_array_equal(model.directions_, ref.directions_)
            np.testing.assert_array_equal(model.score_samples(queries), d_ref)
    # And the certified bound holds against the oracle for those directions.
    exact = exact_depth_of_model(ref, x, queries)
    assert np.abs(d_ref - exact).max() <= ref.error_bound_ + EPS


@pytest.mark.parametrize("offset", [1e6, 1e9, 1e12])
def test_chunked_moments_keep_the_precision_of_the_spread(offset):
    # The scatter of offset rows merged over many chunks (Chan merge) equals the
    # one-chunk scatter to rounding level, whichever row comes first in a chunk.
    from daskdepth.kernels.moments import chunk_moments, merge_moments  # test-only import

    rng = np.random.default_rng(3)
    x = rng.normal(size=(20_000, 3)) + offset
    x[0] = [0.0, 1.0, 2.0]  # an outlying first row must not round the others
    x[1] = x[1] - 0.5 * offset
    whole = chunk_moments(x, np.ones(x.shape[0], dtype=bool))
    for rows in (7, 1_000, 7_777):
        parts = [chunk_moments(x[i:i + rows], np.ones(min(rows, x.shape[0] - i), dtype=bool))
                 for i in range(0, x.shape[0], rows)]
        merged = parts[0]
        for p in parts[1:]:
            merged = merge_moments(merged, p)
        assert merged.count == whole.count
        sd = np.sqrt(np.diag(whole.scatter))
        err = np.abs(merged.scatter - whole.scatter) / np.outer(sd, sd)
        assert err.max() < 1e-13, (rows, err.max())
        exact_mean = np.array([math.fsum(col) for col in x.T]) / x.shape[0]
        np.testing.assert_allclose(merged.mean + merged.mean_lo, exact_mean, rtol=1e-15)


def test_depth_in_range_continuous_data(big):
    x = big["cauchy"]
    for model in (_model("ai-irw", n_directions=20, tol=1e-3).fit(chunked(x, 30_000)),
                  _model("irw", n_directions=20, tol=1e-3).fit(x[:5000])):
        d = model.score_samples(_queries(x))
        n = model.n_samples_fit_
        assert d.min() >= 0 and d.max() <= 0.5 + 0.5 / n
        assert d.max() > 0.45  # the deepest query rows are near the centre


def _heavy_ties() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 3, size=(2000, 2)).astype(np.float64)


def test_depth_with_ties_can_exceed_half_like_the_oracle():
    # With the tie-aware definition min(#<=, #>=) / n a point sitting on a heavy
    # atom may have depth above 1/2; the estimator follows the definition.
    x = _heavy_ties()
    model = _model("irw", n_directions=20, tol=0).fit(x)
    got = model.score_samples(x)
    exact = exact_depth_of_model(model, x, x)
    np.testing.assert_allclose(got, exact, atol=1e-12, rtol=0)
    assert exact.max() > 0.5


def test_documented_range_holds_for_reference_rows():
    # A reference row counts on both sides of itself: depth <= (n + 1) / (2 n) without ties.
    three = np.array([[0.0], [1.0], [2.0]])
    got = daskdepth.IRW(n_directions=1, tol=0).fit(three).score_samples(three)
    assert got.max() == pytest.approx(2 / 3)
    assert daskdepth.IRW(n_directions=1, tol=0).fit(three).score_samples([[0.5]]).max() <= 0.5


# --------------------------------------------------------------------------- real data


@pytest.mark.skipif(not SMTP.exists(), reason="shared ODDS data not available")
def test_smtp_real_data_against_oracle():
    x = np.load(SMTP)["X"]
    assert x.shape == (95_156, 3)
    tol = 1e-3
    model = _model("ai-irw", n_directions=30, tol=tol).fit(chunked(x, 24_000))
    assert model.n_passes_ >= 1
    got = model.score_samples(chunked(x, 24_000)).compute()
    exact = exact_depth_of_model(model, x, x)
    assert model.error_bound_ <= tol
    assert np.abs(got - exact).max() <= model.error_bound_ + EPS
    # Labelled attacks are on average much shallower than normal traffic.
    y = np.load(SMTP)["y"].astype(bool)
    assert got[y].mean() < got[~y].mean()


@pytest.mark.parametrize("rows", [3000, DISTRIBUTED_ROWS])
def test_wide_data_matches_oracle(rows):
    # Above 32 features the kernels read precomputed projections (same bits as
    # the pilot's); above 15 the rows are not reordered.  Ties in every feature.
    x = tie_data(rows, 40, seed=9, levels=3)
    tol = 1e-3
    model = _model("ai-irw", n_directions=24, tol=tol).fit(chunked(x, 20_000))
    assert (model.n_passes_ >= 1) == (rows > IN_MEMORY_ROWS)
    _check_against_oracle(model, x, np.vstack([x[:500], x[:100] + 0.5]), tol)
