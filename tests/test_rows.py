"""Duplicate rows merged before routing: same results, bit for bit."""

from __future__ import annotations

import functools

import numpy as np
from conftest import DISTRIBUTED_ROWS, chunked
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import daskdepth
from daskdepth.kernels.rows import morton_codes
from daskdepth.passes import leaves as leaf_passes
from daskdepth.summary import depth as depth_summary
from daskdepth.summary.rows import MERGE_MIN_GAIN, prepare_rows


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 4)),
              elements=st.sampled_from([0.0, 1.0, -2.5, 3.0, np.nan, np.inf])))
def test_prepare_rows_maps_every_row_to_an_equal_distinct_row(x):
    loc = np.full(x.shape[1], 0.5)
    rows = prepare_rows(x, loc)
    finite = np.isfinite(x).all(axis=1)
    assert rows.weight[rows.valid].sum() == finite.sum()
    if rows.inverse is None:  # nothing worth merging: the chunk itself
        np.testing.assert_array_equal(rows.x, x - loc)
        np.testing.assert_array_equal(rows.valid, finite)
    else:
        assert np.array_equal(rows.inverse >= 0, finite)
        np.testing.assert_array_equal(rows.x[rows.inverse[finite]], x[finite] - loc)
        assert np.unique(rows.x, axis=0).shape[0] == rows.x.shape[0]
        assert rows.x.shape[0] <= (1 - MERGE_MIN_GAIN) * finite.sum()
    depth = np.arange(rows.x.shape[0], dtype=np.float64)
    out = rows.expand(depth)
    assert np.isnan(out[~finite]).all() and not np.isnan(out[finite]).any()


def _fit_and_score(x, monkeypatch, merge):
    prepare = functools.partial(prepare_rows, merge=merge, order=merge)
    monkeypatch.setattr(leaf_passes, "prepare_rows", prepare)
    monkeypatch.setattr(depth_summary, "prepare_rows", prepare)
    model = daskdepth.AIIRW(n_directions=24, random_state=3, nan_policy="omit", tol=1e-3)
    model.fit(chunked(x, 17_000))
    return model, np.asarray(model.score_samples(x))


def test_rows_in_z_order_map_back_to_their_rows():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 50, size=(20_000, 3)).astype(np.float64)
    x[::997, 2] = np.inf
    loc = np.array([3.0, -1.0, 0.5])
    finite = np.isfinite(x).all(axis=1)
    for merge in (True, False):
        rows = prepare_rows(x, loc, merge=merge)
        assert rows.valid.all() and rows.weight.sum() == finite.sum()
        np.testing.assert_array_equal(rows.x[rows.inverse[finite]], x[finite] - loc)
        assert (rows.inverse[~finite] == -1).all()
        codes = morton_codes(rows.x, rows.valid, 63 // 3)
        assert (np.diff(codes.astype(np.float64)) >= 0).all()
        # Z-order keeps neighbours close: consecutive rows are much nearer than at random.
        step = np.abs(np.diff(rows.x, axis=0)).sum(axis=1).mean()
        assert step < 0.25 * np.abs(rows.x - rows.x[rng.permutation(len(rows.x))]).sum(1).mean()


def test_merging_duplicates_changes_no_bit(monkeypatch):
    # Integer data with heavy duplication, some NaN rows, on the distributed path.
    rng = np.random.default_rng(5)
    x = rng.integers(0, 6, size=(DISTRIBUTED_ROWS, 3)).astype(np.float64)
    x[rng.choice(x.shape[0], 30, replace=False), 1] = np.nan
    x = np.vstack([x, rng.normal(size=(5000, 3))])
    with np.errstate(invalid="ignore"):
        merged, d1 = _fit_and_score(x, monkeypatch, merge=True)
        plain, d2 = _fit_and_score(x, monkeypatch, merge=False)
    assert merged.n_passes_ >= 1  # the histogram pass ran
    np.testing.assert_array_equal(d1, d2)
    assert merged.error_bound_ == plain.error_bound_
    for a, b in zip(merged.summary_.blocks, plain.summary_.blocks, strict=True):
        np.testing.assert_array_equal(a.cuts, b.cuts)


def test_records_report_their_arrays_to_dask_sizeof():
    """Workers count a prepared chunk, leaf counts and pass records as managed memory."""
    from dask.sizeof import sizeof

    from daskdepth.passes.moments import _moments_chunk
    from daskdepth.passes.sampling import _sample_chunk
    from daskdepth.summary.leaves import LeafCounts

    x = np.random.default_rng(0).normal(size=(5000, 40))
    assert sizeof(prepare_rows(x, np.zeros(40))) >= x.nbytes
    assert sizeof(LeafCounts.empty(100_000, 32)) >= 100_000 * 8
    assert sizeof(_moments_chunk(x, 0, 1, 1.0)) >= x.nbytes  # the chunk's rows as sample
    assert sizeof(_sample_chunk(x, 0, 1, 1.0)) >= x.nbytes
