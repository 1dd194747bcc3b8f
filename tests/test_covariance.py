"""Robust (MCD) and shrinkage covariance estimates: agreement with scikit-learn,
robustness, exact distributed selection, determinism and errors."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback
from dask.utils import key_split
from sklearn.covariance import OAS, LedoitWolf, MinCovDet
from sklearn.metrics import roc_auc_score

import daskdepth
from daskdepth.covariance import mcd as mcd_module
from daskdepth.covariance.estimate import resolve_covariance
from daskdepth.covariance.mcd import DaskEvaluator, MCDResult, MemoryEvaluator, mcd
from daskdepth.covariance.shrinkage import ledoit_wolf
from daskdepth.kernels import whitening as whitening_module
from daskdepth.kernels.moments import support_moments
from daskdepth.kernels.shrinkage import ledoit_wolf_shrunk, oas_shrunk
from daskdepth.kernels.whitening import _whiten_cholesky, whiten, whiten_batch
from daskdepth.runtime.keys import task_prefix

# --------------------------------------------------------------------------- helpers

TOKEN = "0123456789abcdef0123456789abcdef"


def planted(n: int, d: int, frac: float, seed: int = 0, far: float = 12.0) -> np.ndarray:
    """Correlated Gaussian rows; the first ``frac * n`` rows are a tight far cluster."""
    rng = np.random.default_rng(seed)
    rot = np.linalg.qr(rng.normal(size=(d, d)))[0]
    mix = rot * np.linspace(0.5, 2.0, d)
    x = rng.normal(size=(n, d)) @ mix.T + rng.normal(size=d)
    k = int(frac * n)
    x[:k] = 0.3 * rng.normal(size=(k, d)) + far * np.ones(d) / np.sqrt(d) + x.mean(axis=0)
    return x


def moments(x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    x = x[np.isfinite(x).all(axis=1)]
    mean = x.mean(axis=0)
    xc = x - mean
    return x.shape[0], mean, xc.T @ xc


def run_mcd(x: np.ndarray, chunks: int | tuple = 500, seed: int = 0,
            **kw) -> MCDResult:
    n, mean, scatter = moments(x)
    arr = da.from_array(x, chunks=(chunks, x.shape[1]))
    return mcd(arr, n, mean, scatter, seed=seed, token=TOKEN, **kw)


def mahalanobis(x: np.ndarray, loc: np.ndarray, cov: np.ndarray) -> np.ndarray:
    xc = x - loc
    return np.einsum("ij,jk,ik->i", xc, np.linalg.pinv(cov), xc)


def raw_support(x: np.ndarray, res: MCDResult) -> np.ndarray:
    d2 = mahalanobis(x, res.raw_location, res.raw_covariance)
    out = np.zeros(x.shape[0], dtype=bool)
    out[np.argsort(d2, kind="stable")[:res.n_support]] = True
    return out


def reweighted_support(x: np.ndarray, res: MCDResult) -> np.ndarray:
    return mahalanobis(x, res.raw_location, res.raw_covariance) < res.raw_threshold


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# --------------------------------------------------------------------------- MCD vs sklearn


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("sample_size", [None, 600], ids=["in-memory", "distributed"])
def test_mcd_agrees_with_mincovdet(d, sample_size):
    n = 3000
    x = planted(n, d, 0.15, seed=d)
    res = run_mcd(x, chunks=700, sample_size=sample_size)
    assert res.in_memory == (sample_size is None)
    sk = MinCovDet(random_state=0).fit(x)
    assert res.n_support == sk.raw_support_.sum()
    # Same supports up to points near the boundary.  The raw support's boundary
    # runs through the bulk of the data, where local optima of equal quality
    # differ by 1% of the rows (as much as MinCovDet's own supports for other
    # random states); the reweighted support's boundary is in the tails.
    assert (raw_support(x, res) != sk.raw_support_).sum() <= 0.015 * n
    assert (reweighted_support(x, res) != sk.support_).sum() <= 0.003 * n
    # No planted outlier is kept.
    assert not reweighted_support(x, res)[:int(0.15 * n)].any()
    assert rel(res.covariance, sk.covariance_) < 0.02
    assert rel(res.raw_covariance, sk.raw_covariance_) < 0.05
    scale = np.sqrt(np.diag(sk.covariance_))
    assert np.all(np.abs(res.location - sk.location_) < 0.02 * scale)
    # The raw determinant is as low as scikit-learn's, up to local optima.
    assert res.logdet <= np.linalg.slogdet(sk.raw_covariance_)[1] + 2e-3


def test_mcd_matches_mincovdet_on_clean_gaussian_small_n():
    x = planted(300, 4, 0.0, seed=5)
    res = run_mcd(x, chunks=64)
    sk = MinCovDet(random_state=0).fit(x)
    assert (reweighted_support(x, res) != sk.support_).sum() <= 3
    assert rel(res.covariance, sk.covariance_) < 0.05


@pytest.mark.parametrize("sample_size", [None, 300], ids=["in-memory", "distributed"])
def test_exact_fit_matches_mincovdet(sample_size):
    # 70% of the rows share one value of a feature: the raw support lies in a
    # hyperplane (zero determinant); that feature keeps exactly zero raw variance
    # and the reweighting follows scikit-learn (pseudo-inverse distances).
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 3))
    x[:700, 2] = 1.0
    x[700:, 2] = rng.integers(2, 10, size=300)
    res = run_mcd(x, sample_size=sample_size)
    sk = MinCovDet(random_state=0).fit(x)
    assert res.logdet == -np.inf
    assert np.all(res.raw_covariance[2] == 0) and np.all(sk.raw_covariance_[2] == 0)
    np.testing.assert_allclose(res.covariance, sk.covariance_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(res.location, sk.location_, rtol=1e-6, atol=1e-9)


def test_mcd_univariate():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 1))
    x[:150] += 25.0
    res = run_mcd(x)
    sk = MinCovDet(random_state=0).fit(x)
    assert abs(res.location[0] - sk.location_[0]) < 0.05
    assert abs(res.covariance[0, 0] / sk.covariance_[0, 0] - 1) < 0.05


# --------------------------------------------------------------------------- breakdown


@pytest.mark.parametrize("sample_size", [None, 500], ids=["in-memory", "distributed"])
def test_breakdown_20_percent_gross_outliers(sample_size):
    rng = np.random.default_rng(1)
    n, d = 4000, 3
    cov = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, 0.3], [0.0, 0.3, 0.5]])
    chol = np.linalg.cholesky(cov)
    clean = rng.normal(size=(n, d)) @ chol.T
    x = clean.copy()
    k = int(0.2 * n)
    x[:k] = rng.normal(size=(k, d)) * 5.0 + np.array([1000.0, -500.0, 800.0])
    res = run_mcd(x, chunks=900, sample_size=sample_size)
    inv = np.linalg.inv(chol)
    ratio = np.linalg.eigvalsh(inv @ res.covariance @ inv.T)
    assert 0.75 < ratio.min() and ratio.max() < 1.3
    assert np.linalg.norm(res.location) < 0.15
    # The sample covariance breaks down.
    n_, mean, scatter = moments(x)
    sample_ratio = np.linalg.eigvalsh(inv @ (scatter / (n_ - 1)) @ inv.T)
    assert sample_ratio.max() > 1e4
    assert np.linalg.norm(mean) > 100


def test_robust_aiirw_finds_local_outliers_despite_gross_ones():
    # A thin elongated cloud with a few rows just off its thin axis (the
    # anomalies to find) and 16% gross outliers far away, which break the
    # sample covariance and so the whitening.
    rng = np.random.default_rng(2)
    th = 0.6
    rot = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    inliers = rng.normal(size=(2000, 2)) * [3.0, 0.1] @ rot.T
    local = (rng.normal(size=(100, 2)) * [1.0, 0.05] + [0, 0.6]) @ rot.T
    gross = rng.normal(size=(400, 2)) * 20 + [300, -200]
    x = np.vstack([gross, inliers, local])
    y = np.r_[np.zeros(2000), np.ones(100)]
    auc = {}
    for cov in ("sample", "mcd"):
        depth = daskdepth.AIIRW(covariance=cov, random_state=0).fit(x).score_samples(x)
        auc[cov] = roc_auc_score(y, -depth[400:])
    assert auc["mcd"] > 0.99
    assert auc["sample"] < 0.6


# --------------------------------------------------------------------------- exact selection


def _params(x: np.ndarray, shift: float = 0.0):
    n, mean, scatter = moments(x)
    vals, vecs = np.linalg.eigh(scatter / n)
    basis = vecs[:, ::-1]
    z = (x - mean) @ basis
    loc = np.median(z, axis=0) + shift
    w, _ = whiten(np.cov(z.T) * 0.8)
    return n, mean, basis, z, loc, w


def _tied(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, size=(n, d)).astype(np.float64)
    x[:, 0] *= 3.0
    dup = rng.choice(n, n // 3, replace=False)
    x[dup] = x[rng.integers(0, 50, size=dup.size)]
    return x


@pytest.mark.parametrize("data", ["gaussian", "ties"])
@pytest.mark.parametrize("mode", ["hit", "overflow", "miss"])
def test_distributed_selection_is_exact(data, mode, monkeypatch):
    x = planted(2500, 3, 0.1, seed=7) if data == "gaussian" else _tied(2500, 3, seed=7)
    n, mean, basis, z, loc, w = _params(x)
    h = 1400
    if mode == "overflow":
        monkeypatch.setattr(mcd_module, "COLLECT_MIN_ROWS", 4)
        monkeypatch.setattr(mcd_module, "COLLECT_BYTES", 4 * 8 * 4)
    sample = z[::25]
    if mode == "miss":
        sample = 0.1 * sample  # distances far too small: the bracket misses
    ev = DaskEvaluator(da.from_array(x, chunks=(333, 3)), mean, basis, basis, sample,
                               n, "t")
    sup, rw = ev(loc, w, h, 7.5)
    ref_sup, ref_rw = MemoryEvaluator(z)(loc, w, h, 7.5)
    assert sup[0] == pytest.approx(h)
    np.testing.assert_allclose(sup[1], ref_sup[1], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sup[2], ref_sup[2], rtol=1e-9, atol=1e-8)
    assert rw[0] == ref_rw[0]
    np.testing.assert_allclose(rw[2], ref_rw[2], rtol=1e-9, atol=1e-8)
    if mode == "hit" and data == "gaussian":
        assert ev.passes == 1
    if mode != "hit":
        assert ev.refines >= 1


def test_tied_threshold_shares_weight():
    x = np.repeat(np.arange(10.0), 10)[:, None] * np.ones((1, 2))
    x[:, 1] = np.tile(np.arange(10.0), 10)
    d2 = np.repeat(np.arange(10.0), 10)
    m, t = support_moments(x, d2, 35)
    assert t == 3.0 and m[0] == pytest.approx(35.0)
    # Rows 30..39 share the last 5 units of weight: same mean as any 5 of them
    # when they are identical in the first coordinate.
    assert m[1][0] == pytest.approx((10 * (0 + 1 + 2) + 5 * 3) / 35)


# --------------------------------------------------------------------------- determinism


def test_mcd_is_independent_of_chunking_and_deterministic():
    x = planted(5000, 4, 0.1, seed=3)
    runs = [run_mcd(x, chunks=c, seed=11, sample_size=800)
            for c in (5000, 1000, (7, 1993, 2000, 1000), 611)]
    for r in runs[1:]:
        np.testing.assert_allclose(r.location, runs[0].location, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(r.covariance, runs[0].covariance, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(r.raw_covariance, runs[0].raw_covariance, rtol=1e-9)
    again = run_mcd(x, chunks=611, seed=11, sample_size=800)
    assert np.array_equal(again.covariance, runs[-1].covariance)
    assert np.array_equal(again.location, runs[-1].location)


def test_public_api_chunking_invariance(monkeypatch):
    monkeypatch.setattr(mcd_module, "MCD_SAMPLE_ROWS", 700)
    monkeypatch.setattr(mcd_module, "MCD_SAMPLE_MIN", 100)
    x = planted(4000, 3, 0.1, seed=4)
    fits = [daskdepth.AIIRW(covariance="mcd", random_state=5).fit(
        da.from_array(x, chunks=(c, 3))) for c in (4000, 512, 999)]
    for f in fits[1:]:
        np.testing.assert_allclose(f.covariance_, fits[0].covariance_, rtol=1e-9)
        np.testing.assert_allclose(f.location_, fits[0].location_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fits[0].location_, x[400:].mean(axis=0), atol=0.1)


def test_nan_rows_are_skipped():
    x = planted(1200, 3, 0.1, seed=6)
    xn = x.copy()
    xn[[5, 500, 1100]] = np.nan
    xn[7, 1] = np.inf
    finite = np.isfinite(xn).all(axis=1)
    a = daskdepth.AIIRW(covariance="mcd", random_state=0, nan_policy="omit").fit(xn)
    b = daskdepth.AIIRW(covariance="mcd", random_state=0).fit(xn[finite])
    np.testing.assert_allclose(a.covariance_, b.covariance_, rtol=1e-10)
    np.testing.assert_allclose(a.location_, b.location_, rtol=1e-10)


def test_graph_keys_are_named(monkeypatch):
    names: set[str] = set()

    class Keys(Callback):
        def _start_state(self, dsk, state):
            names.update(key_split(k) for k in dsk)

    x = planted(3000, 3, 0.1, seed=8)
    with Keys():
        run_mcd(x, chunks=500, sample_size=500)
        n, mean, scatter = moments(x)
        ledoit_wolf(da.from_array(x, chunks=(500, 3)), n, mean, scatter, token=TOKEN)
    assert {task_prefix(v) for v in ("draw", "cstep", "gauge")} <= names


def test_distributed_client_matches_threads():
    distributed = pytest.importorskip("distributed")
    x = planted(3000, 3, 0.1, seed=9)
    local = run_mcd(x, chunks=500, sample_size=600)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=":0"):
        remote = run_mcd(x, chunks=500, sample_size=600)
    np.testing.assert_allclose(remote.covariance, local.covariance, rtol=1e-10)
    with dask.config.set(scheduler="sync"):
        sync = run_mcd(x, chunks=500, sample_size=600)
    np.testing.assert_allclose(sync.covariance, local.covariance, rtol=1e-10)


# --------------------------------------------------------------------------- shrinkage


@pytest.mark.parametrize("d,n", [(1, 40), (2, 500), (5, 60), (30, 45)])
@pytest.mark.parametrize("method,ref", [("ledoit-wolf", LedoitWolf), ("oas", OAS)])
def test_shrinkage_matches_sklearn(d, n, method, ref):
    rng = np.random.default_rng(d)
    x = rng.normal(size=(n, d)) @ (np.eye(d) + 0.3 * rng.normal(size=(d, d))) + 5.0
    sk = ref().fit(x)
    model = daskdepth.AIIRW(covariance=method, random_state=0).fit(
        da.from_array(x, chunks=(max(7, n // 4), d)))
    np.testing.assert_allclose(model.covariance_, sk.covariance_, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(model.location_, sk.location_, rtol=1e-10)


@pytest.mark.parametrize("method,ref", [("ledoit-wolf", LedoitWolf), ("oas", OAS)])
def test_shrinkage_skips_nan_rows(method, ref):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4)) * [1.0, 2.0, 0.5, 3.0]
    xn = np.insert(x, [10, 200], np.nan, axis=0)
    sk = ref().fit(x)
    model = daskdepth.AIIRW(covariance=method, nan_policy="omit", random_state=0).fit(
        da.from_array(xn, chunks=(64, 4)))
    np.testing.assert_allclose(model.covariance_, sk.covariance_, rtol=1e-8, atol=1e-12)


def test_shrinkage_coefficients_match_sklearn():
    from sklearn.covariance import ledoit_wolf_shrinkage
    from sklearn.covariance import oas as sk_oas

    rng = np.random.default_rng(3)
    x = rng.normal(size=(80, 12))
    n, mean, scatter = moments(x)
    xc = x - mean
    fourth = float(np.sum(np.einsum("ij,ij->i", xc, xc) ** 2))
    assert ledoit_wolf_shrunk(n, scatter, fourth)[1] == pytest.approx(
        ledoit_wolf_shrinkage(xc, assume_centered=True), rel=1e-10)
    assert oas_shrunk(n, scatter)[1] == pytest.approx(sk_oas(x)[1], rel=1e-10)


# --------------------------------------------------------------------------- errors


def test_unknown_covariance_lists_accepted_values():
    x = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match="'sample', 'mcd', 'ledoit-wolf', 'oas'"):
        daskdepth.AIIRW(covariance="robust").fit(x)
    with pytest.raises(ValueError, match="'sample', 'mcd', 'ledoit-wolf', 'oas'"):
        daskdepth.score(x, covariance="MCD")


def test_precomputed_covariance_still_validated():
    x = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        daskdepth.AIIRW(covariance=np.eye(3)).fit(x)
    model = daskdepth.AIIRW(covariance=np.eye(2), random_state=0).fit(x)
    np.testing.assert_array_equal(model.covariance_, np.eye(2))


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, True, "half", np.nan])
def test_support_fraction_validated(bad):
    x = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match="support_fraction must be a number in"):
        daskdepth.AIIRW(covariance="mcd", support_fraction=bad).fit(x)


def test_support_fraction_too_small_and_used():
    x = planted(400, 3, 0.1, seed=2)
    with pytest.raises(ValueError, match="fewer than n_features"):
        daskdepth.AIIRW(covariance="mcd", support_fraction=0.005).fit(x)
    a = daskdepth.AIIRW(covariance="mcd", support_fraction=0.75, random_state=0).fit(x)
    sk = MinCovDet(support_fraction=0.75, random_state=0).fit(x)
    assert rel(a.covariance_, sk.covariance_) < 0.05
    d = daskdepth.score(x, covariance="mcd", support_fraction=0.75, random_state=0)
    assert d.shape == (400,)


def test_all_central_rows_identical_raises():
    rng = np.random.default_rng(0)
    x = np.vstack([np.zeros((700, 2)), rng.normal(size=(300, 2))])
    with pytest.raises(ValueError, match="all identical"):
        daskdepth.AIIRW(covariance="mcd", random_state=0).fit(x)


@pytest.mark.timeout(60)
def test_rows_within_rounding_are_not_called_identical():
    # 1e12 + 1e-3 N: 250 distinct rows, whose spread (8 ulps of 1e12) is within what
    # rounding of values of that magnitude explains.  The error says so and how to fix
    # it, instead of "the 126 most central of the 250 rows are all identical".
    x = 1e12 + 1e-3 * np.random.default_rng(0).normal(size=(250, 5))
    assert np.unique(x, axis=0).shape[0] > 200
    with pytest.raises(ValueError, match="within the float64 rounding of their values") as err:
        daskdepth.AIIRW(covariance="mcd", random_state=0).fit(x)
    assert "identical" not in str(err.value) and "subtract a common offset" in str(err.value)
    # The same rows without the offset are fitted.
    model = daskdepth.AIIRW(covariance="mcd", n_directions=20, random_state=0).fit(x - 1e12)
    assert model.covariance_rank_ == 5


def test_rank_deficient_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 3))
    x = np.column_stack([x, x[:, 0] + x[:, 1], np.full(500, 2.0)])
    with pytest.warns(daskdepth.CovarianceRankWarning):
        model = daskdepth.AIIRW(covariance="mcd", random_state=0).fit(x)
    assert model.covariance_rank_ == 3
    assert np.allclose(model.covariance_[4], 0) and model.location_[4] == pytest.approx(2.0)


def test_resolve_covariance_dispatch():
    x = np.random.default_rng(0).normal(size=(100, 2))
    n, mean, scatter = moments(x)
    loc, cov = resolve_covariance("oas", n, mean, scatter, 2)
    np.testing.assert_allclose(cov, OAS().fit(x).covariance_, rtol=1e-10)
    with pytest.raises(ValueError, match="covariance must be one of"):
        resolve_covariance("nope", n, mean, scatter, 2)


def test_cholesky_whitening_matches_eigh_and_falls_back_when_singular(monkeypatch):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(6, 5, 5))
    covs = a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(5)
    covs *= rng.uniform(0.01, 100, size=(6, 1, 1))
    w_fast, logdet_fast = whiten_batch(covs)
    monkeypatch.setattr(whitening_module, "_whiten_cholesky", lambda *args: None)
    w_eig, logdet_eig = whiten_batch(covs)
    x = rng.normal(size=(50, 5))
    # Same Mahalanobis distances and log-determinants; only the rotation differs.
    for k in range(covs.shape[0]):
        d_fast = ((x @ w_fast[k]) ** 2).sum(axis=1)
        d_eig = ((x @ w_eig[k]) ** 2).sum(axis=1)
        np.testing.assert_allclose(d_fast, d_eig, rtol=1e-9)
        np.testing.assert_allclose(d_fast, np.einsum("ij,jk,ik->i", x, np.linalg.inv(covs[k]), x),
                                   rtol=1e-8)
    np.testing.assert_allclose(logdet_fast, logdet_eig, rtol=1e-10)
    monkeypatch.undo()
    # A singular matrix in the stack: Cholesky declines, eigh drops its null space.
    sing = covs.copy()
    sing[3] = np.outer(np.arange(1.0, 6.0), np.arange(1.0, 6.0))  # rank one
    assert _whiten_cholesky(sing, np.ones((6, 5), bool), np.ones((6, 5))) is None
    _, logdet = whiten_batch(sing)
    assert logdet[3] == -np.inf and np.isfinite(logdet[0])
