"""Wide data (40 to 166 features) and the exact in-memory summary of sorted projections.

Checked against the independent oracle on both fitting paths: in memory
(:class:`BlockSorted`, exact) and distributed (leaf summaries, > 65,536 rows);
bit-identical across chunkings, schedulers and thread counts; the in-sample
depths counted while fitting equal scoring the rows afresh; saved and loaded.
"""

from __future__ import annotations

import os
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import DISTRIBUTED_ROWS, IN_MEMORY_ROWS, ODDS, chunked, gaussian_data, tie_data
from distributed import Client, LocalCluster
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracle import direction_depths, exact_depth_of_model
from oracle import project as oracle_project

import daskdepth
import daskdepth.runtime.memory
import daskdepth.runtime.refusals
from daskdepth.errors import SummaryMemoryWarning
from daskdepth.kernels.ranks import clamp_projections, in_sample_counts, score_sorted
from daskdepth.kernels.tiles import MAXF, PROJECT_TILE, project
from daskdepth.runtime.memory import WorkerMemory, prefer_sorted
from daskdepth.runtime.refusals import summary_memory_message
from daskdepth.summary.blocks import is_handle
from daskdepth.summary.leaves import BlockLeaves
from daskdepth.summary.sorted import BlockSorted

MODELS = {"ai-irw": daskdepth.AIIRW, "irw": daskdepth.IRW}
MUSK = f"{ODDS}/musk.npz"


def _fit(depth: str, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.CovarianceRankWarning)
        return MODELS[depth](random_state=kw.pop("random_state", 0), **kw).fit(x)


def _queries(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Reference rows (ties with themselves), jittered rows, far points and exact copies."""
    rng = np.random.default_rng(seed)
    rows = x[rng.choice(x.shape[0], size=min(400, x.shape[0]), replace=False)]
    scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    jitter = rows[:200] + 0.05 * scale * rng.normal(size=rows[:200].shape)
    far = x.mean(axis=0) + 1e3 * scale * rng.normal(size=(10, x.shape[1]))
    return np.vstack([rows, jitter, far, np.round(rows[:50])])


def _rank_deficient(n: int, d: int, seed: int) -> np.ndarray:
    """Rows of rank d - 3: a constant feature and two linear combinations of others."""
    x = gaussian_data(n, d, seed=seed)
    x[:, 1] = 7.0
    x[:, 2] = x[:, 3] - 2.0 * x[:, 4]
    x[:, -1] = 0.5 * x[:, 0]
    return x


WIDE = {
    "gaussian-40": lambda: gaussian_data(3000, 40, seed=1),
    "ties-40": lambda: tie_data(3000, 40, seed=2, levels=3),
    "rank-deficient-40": lambda: _rank_deficient(2500, 40, seed=3),
    "ties-166": lambda: tie_data(1200, 166, seed=4, levels=2),
    "gaussian-166": lambda: gaussian_data(1200, 166, seed=5),
}


# --------------------------------------------------------------------------- in memory, exact


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
@pytest.mark.parametrize("kind", list(WIDE))
def test_in_memory_wide_is_exact(kind, depth):
    x = WIDE[kind]()
    model = _fit(depth, x, n_directions=96)
    assert all(isinstance(b, BlockSorted) for b in model.summary_.blocks)
    assert model.n_passes_ == 0 and model.error_bound_ == 0.0
    if kind.startswith("rank"):
        assert depth == "irw" or model.covariance_rank_ == x.shape[1] - 3
    q = _queries(x)
    exact = exact_depth_of_model(model, x, q)
    np.testing.assert_allclose(model.score_samples(q), exact, rtol=0, atol=1e-12)
    # In sample: counted while fitting, the same as the oracle.
    np.testing.assert_allclose(model.score_samples(x), exact_depth_of_model(model, x, x),
                               rtol=0, atol=1e-12)


def test_exact_summary_stores_every_sorted_projection():
    x = tie_data(2000, 40, seed=6, levels=3)
    model = _fit("irw", x, n_directions=70)
    proj = oracle_project(x, model.location_, model.directions_)  # (n, m), same bits
    blocks = model.summary_.blocks
    assert [(b.j0, b.j1) for b in blocks] == [(j, min(70, j + 32)) for j in range(0, 70, 32)]
    values = np.concatenate([b.values for b in blocks])
    np.testing.assert_array_equal(values, np.sort(proj.T, axis=1))
    assert model.summary_.nbytes == values.nbytes + model.directions_.nbytes


def test_standard_error_and_minimum_on_the_exact_summary():
    x = tie_data(1500, 40, seed=7, levels=3)
    model = _fit("ai-irw", x, n_directions=50)
    assert isinstance(model.summary_.blocks[0], BlockSorted)
    points = np.vstack([x[:30], x[:30] + 0.3, [[np.nan] * 40]])
    c = direction_depths(x, points[:-1], model.location_, model.directions_)
    depth, std = model.summary_.depth_and_std(points)
    np.testing.assert_allclose(depth[:-1], c.mean(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(std[:-1], c.std(axis=1, ddof=1) / np.sqrt(c.shape[1]),
                               rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(model.summary_.min_depth(points)[:-1], c.min(axis=1))
    assert np.isnan(depth[-1]) and np.isnan(model.summary_.min_depth(points)[-1])


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
def test_in_memory_leaves_on_wide_data_respect_the_bound(depth):
    # More rows than 3 / tol: leaves are smaller than sorted projections and are kept.
    x = gaussian_data(5000, 40, seed=8)
    model = _fit(depth, x, n_directions=40, tol=1e-3)
    assert all(isinstance(b, BlockLeaves) for b in model.summary_.blocks)
    assert model.n_passes_ == 0 and 0 < model.error_bound_ <= 1e-3
    q = _queries(x)
    err = np.abs(model.score_samples(q) - exact_depth_of_model(model, x, q))
    assert err.max() <= model.error_bound_ + 1e-12
    # The offset rows were every row: scoring them again is a cache hit, same bits.
    np.testing.assert_array_equal(model.score_samples(x), model.summary_.depth(x))


# --------------------------------------------------------------------------- distributed


@pytest.fixture(scope="module")
def wide_big():
    return tie_data(DISTRIBUTED_ROWS, 166, seed=9, levels=2)


@pytest.mark.parametrize("depth", ["ai-irw", "irw"])
def test_distributed_wide_166_matches_oracle(wide_big, depth):
    x = wide_big
    model = _fit(depth, chunked(x, 20_000), n_directions=12, tol=1e-3)
    assert model.n_passes_ >= 1 and all(isinstance(b, BlockLeaves) for b in model.summary_.blocks)
    q = _queries(x)
    err = np.abs(model.score_samples(q) - exact_depth_of_model(model, x, q))
    assert model.error_bound_ <= 1e-3 and err.max() <= model.error_bound_ + 1e-12


def test_distributed_wide_40_tol_zero_is_exact():
    x = _rank_deficient(DISTRIBUTED_ROWS, 40, seed=10)
    model = _fit("ai-irw", chunked(x, 17_500), n_directions=8, tol=0)
    assert model.n_passes_ >= 1 and model.error_bound_ == 0
    q = _queries(x)
    np.testing.assert_allclose(model.score_samples(q), exact_depth_of_model(model, x, q),
                               rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- invariance


def test_exact_fit_does_not_depend_on_chunking_scheduler_or_threads():
    x = tie_data(3000, 40, seed=11, levels=3)
    q = _queries(x, seed=1)
    runs = []
    for rows, scheduler, workers in [(3000, "threads", 2), (250, "threads", 1),
                                     ((1000, 7, 1993), "sync", 1), (900, "threads", 3)]:
        with dask.config.set(scheduler=scheduler, num_workers=workers):
            model = _fit("ai-irw", chunked(x, rows), n_directions=80)
            depth = model.score_samples(chunked(q, 333)).compute()
        runs.append((model, depth))
    base, d0 = runs[0]
    for model, depth in runs[1:]:
        np.testing.assert_array_equal(depth, d0)
        np.testing.assert_array_equal(model.directions_, base.directions_)
        for a, b in zip(model.summary_.blocks, base.summary_.blocks, strict=True):
            np.testing.assert_array_equal(a.values, b.values)
        assert model.offset_ == base.offset_


def test_exact_fit_on_the_distributed_scheduler_matches_threads():
    x = gaussian_data(2000, 40, seed=12)
    local = _fit("irw", x, n_directions=64)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster):
        remote = _fit("irw", chunked(x, 600), n_directions=64)
        fresh = remote.score_samples(chunked(x[::-1].copy(), 500)).compute()[::-1]
        # The fitted blocks stay on the workers (the model keeps handles of them).
        in_sample = remote.score_samples(x)
    np.testing.assert_array_equal(in_sample, local.score_samples(x))
    np.testing.assert_array_equal(fresh, local.summary_.depth(x))


# --------------------------------------------------------------------------- in-sample depths


def test_in_sample_depths_equal_fresh_scoring_bit_for_bit():
    x = tie_data(2500, 40, seed=13, levels=3)
    model = _fit("ai-irw", x, n_directions=100, contamination=0.05)
    cached = model.score_samples(x)
    assert model._train_depth is not None
    fresh = model.summary_.depth(x)  # scored afresh, through the kernels
    np.testing.assert_array_equal(cached, fresh)
    # A copy, a dask array of other chunks and reversed rows: the same depths.
    np.testing.assert_array_equal(model.score_samples(x.copy()), fresh)
    np.testing.assert_array_equal(model.score_samples(chunked(x, 700)).compute(), fresh)
    np.testing.assert_array_equal(model.score_samples(x[::-1])[::-1], fresh)
    # fit_predict labels with the exact quantile of the same depths.
    labels = _fit("ai-irw", x, n_directions=100, contamination=0.05).fit_predict(x)
    np.testing.assert_array_equal(labels, np.where(fresh >= np.percentile(fresh, 5), 1, -1))
    # The returned array is the caller's: changing it does not change the next answer.
    cached[:] = -1.0
    np.testing.assert_array_equal(model.score_samples(x), fresh)


def test_changed_rows_are_scored_afresh():
    x = gaussian_data(2000, 40, seed=14)
    model = _fit("irw", x, n_directions=64)
    changed = x.copy()
    changed[17, 3] += 1.0  # same shape, other content
    got = model.score_samples(changed)
    np.testing.assert_array_equal(got, model.summary_.depth(changed))
    assert got[17] != model.score_samples(x)[17]


def test_in_sample_depths_with_non_finite_rows():
    x = gaussian_data(2000, 40, seed=15)
    x[[5, 900]] = np.nan
    x[1200, 7] = np.inf
    model = _fit("ai-irw", x, n_directions=64, nan_policy="omit")
    got = model.score_samples(x)
    assert np.isnan(got[[5, 900, 1200]]).all()
    np.testing.assert_array_equal(got, model.summary_.depth(x))
    model.set_params(nan_policy="raise")  # the cached NaN rows must not slip through
    with pytest.raises(ValueError, match="NaN or inf"):
        model.score_samples(x)


def test_dask_input_reuses_the_fit_for_the_same_array():
    x = chunked(gaussian_data(3000, 36, seed=16), 800)
    model = _fit("irw", x, n_directions=64)
    got = model.score_samples(x)
    assert got.chunks == ((800, 800, 800, 600),)
    assert all("known" in k[0] for k in dict(got.__dask_graph__()))  # nothing to compute
    np.testing.assert_array_equal(got.compute(), model.summary_.depth(x.compute()))


# --------------------------------------------------------------------------- save / load


def test_exact_model_round_trips(tmp_path):
    x = tie_data(1500, 40, seed=17, levels=3)
    model = _fit("ai-irw", x, n_directions=70, contamination=0.1)
    path = model.save(tmp_path / "model.zarr")
    loaded = daskdepth.load(path)
    # The loaded blocks are rebuilt from the stored rows (d < m; else read when needed).
    blocks = [b.load() if is_handle(b) else b for b in loaded.summary_.blocks]
    assert [type(b) for b in blocks] == [BlockSorted] * 3
    for a, b in zip(blocks, model.summary_.blocks, strict=True):
        assert (a.j0, a.j1) == (b.j0, b.j1)
        np.testing.assert_array_equal(a.values, b.values)
    assert loaded.error_bound_ == 0 and loaded.offset_ == model.offset_
    q = _queries(x)
    np.testing.assert_array_equal(loaded.score_samples(q), model.score_samples(q))
    np.testing.assert_array_equal(loaded.score_samples(x), model.summary_.depth(x))


# --------------------------------------------------------------------------- kernels


@pytest.mark.parametrize(("n", "d", "mb"), [(1, 1, 1), (5, 3, 6), (PROJECT_TILE + 3, 7, 5),
                                            (2 * PROJECT_TILE, 41, 9), (700, 166, 4)])
def test_projection_kernel_has_the_oracles_bits_however_rows_are_split(n, d, mb):
    rng = np.random.default_rng(n + d)
    x = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 4, size=d)
    v = rng.normal(size=(mb, d))
    whole = project(x, v)
    np.testing.assert_array_equal(whole, oracle_project(x, np.zeros(d), v).T)
    cut = max(1, n // 3)
    np.testing.assert_array_equal(np.hstack([project(x[:cut], v), project(x[cut:], v)]), whole)
    np.testing.assert_array_equal(project(x[::-1], v)[:, ::-1], whole)


def _counts(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(s, q, "right"), s.size - np.searchsorted(s, q, "left"))


values = st.sampled_from([-np.inf, -3.0, -1.0, -0.0, 0.0, 0.5, 0.5, 2.0, np.inf, np.nan])


@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 300)),
                  elements=values),
       hnp.arrays(np.float64, st.integers(1, 300), elements=values))
def test_count_kernels_match_searchsorted(p, q):
    clamp_projections(p)
    q2 = np.broadcast_to(q, (p.shape[0], q.size)).copy()
    clamp_projections(q2)
    assert np.isfinite(p).all() and np.isfinite(q2).all()
    s = np.sort(p, axis=1)
    ins = np.zeros(p.shape[1])
    in_sample_counts(p, s, ins)
    want = sum(_counts(s[j], p[j]) for j in range(p.shape[0]))
    np.testing.assert_array_equal(ins, want)
    valid = np.ones(q.size, dtype=bool)
    valid[::7] = False
    c = np.stack([_counts(s[j], q2[j]) for j in range(p.shape[0])], axis=1).astype(float)
    out, sq = np.zeros(q.size), np.zeros(q.size)
    score_sorted(q2, valid, s, 1, out, sq)
    np.testing.assert_array_equal(out[valid], c.sum(axis=1)[valid])
    np.testing.assert_array_equal(sq[valid], (c ** 2).sum(axis=1)[valid])
    assert (out[~valid] == 0).all()
    low = np.full(q.size, np.inf)
    score_sorted(q2, valid, s, 2, low, low)
    np.testing.assert_array_equal(low[valid], c.min(axis=1)[valid])


def test_clamping_orders_overflows_like_the_routing_kernels():
    p = np.array([[np.nan, -np.inf, np.inf, 1.0, -0.0]])
    clamp_projections(p)
    assert p.tolist() == [[MAXF, -MAXF, MAXF, 1.0, -0.0]]


# --------------------------------------------------------------------------- choice and memory


def test_representation_follows_the_smaller_summary():
    assert prefer_sorted(3_600, 5_803, 1e-4) and prefer_sorted(16_600, 3_062, 1e-4)
    assert prefer_sorted(10, 10**6, 0.0)  # at tol = 0 leaves hold one value each
    assert not prefer_sorted(100, 40_000, 1e-4)
    # The fit follows the rule: in memory and sorted below 3 / tol rows, leaves above.
    x = gaussian_data(IN_MEMORY_ROWS, 2, seed=18)
    assert isinstance(_fit("irw", x[:3000], n_directions=4, tol=1e-3).summary_.blocks[0],
                      BlockSorted)
    assert isinstance(_fit("irw", x[:3100], n_directions=4, tol=1e-3).summary_.blocks[0],
                      BlockLeaves)


def test_exact_summary_warns_only_when_it_is_large(monkeypatch):
    small = WorkerMemory(32 * 2**20, 1)  # a quarter: 8 MiB
    for module in (daskdepth.runtime.memory, daskdepth.runtime.refusals):
        monkeypatch.setattr(module, "worker_memory", lambda: small)
    x = gaussian_data(2000, 40, seed=19)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SummaryMemoryWarning)
        _fit("irw", x, n_directions=400)  # 6.4 MB of sorted projections
    with pytest.warns(SummaryMemoryWarning, match="sorted projections of 2,000 rows"):
        _fit("irw", x, n_directions=600)  # 9.6 MB
    assert summary_memory_message(16_600, 3_062, 1e-4, WorkerMemory(2**31, 2),
                                  exact=True) is None


@pytest.mark.skipif(not os.path.exists(MUSK), reason="shared ODDS data not available")
def test_musk_defaults_are_exact_and_compact():
    x = np.load(MUSK)["X"].astype(np.float64)
    model = daskdepth.IRW(random_state=0, n_directions=1660).fit(da.from_array(x, 1000))
    assert model.error_bound_ == 0 and model.n_passes_ == 0
    # 8 bytes per row and direction, plus the directions.
    assert model.summary_.nbytes == 8 * x.shape[0] * 1660 + model.directions_.nbytes
    q = x[::7]
    np.testing.assert_allclose(model.score_samples(q), exact_depth_of_model(model, x, q),
                               rtol=0, atol=1e-12)
