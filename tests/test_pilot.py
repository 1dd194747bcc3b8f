"""The fit's pilot and what follows it: leaves planned from a row sample, finished blocks."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from conftest import tie_data
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import exact_depth

from daskdepth.fitting.summaries import build_summary, finish_block, leaf_cap
from daskdepth.kernels.directions import draw_directions
from daskdepth.summary.statistics import MEAN, MIN


def _noisy_fit(statistic=MEAN, seed=0):
    """A fit whose pilot leaves come from a thin sample (7.5 % of 200,000 rows, about 12
    sampled rows per leaf, as the defaults plan at 10^6 rows): sampling noise leaves a few
    leaves above the limit, which the old finish sent to a refinement pass."""
    rng = np.random.default_rng(seed)
    n, tol = 200_000, 1e-3
    x = rng.normal(size=(n, 3))
    sample = x[rng.random(n) < 0.075]
    v = draw_directions(np.random.RandomState(seed), 64, 3, None)
    summary, info = build_summary(da.from_array(x, chunks=(50_000, 3)), np.zeros(3), v,
                                  sample, n, tol, f"pilot-test-{statistic.name}-{seed}",
                                  statistic=statistic)
    return x, v, n, tol, summary, info


def test_noisy_pilot_leaves_make_room_instead_of_a_refinement_pass():
    x, v, n, tol, summary, info = _noisy_fit()
    cap = leaf_cap(n, tol)
    errs = summary.direction_errors()
    # the noise case happened: some directions keep a leaf above the limit ...
    assert (errs > cap / (2.0 * n)).any()
    # ... the other directions of their blocks merged less, so the mean still meets tol
    assert summary.error_bound() <= tol
    assert info.passes == 1  # the histogram pass only: no refinement
    points = np.concatenate([x[:500], np.random.default_rng(1).normal(size=(500, 3)) * 1.5])
    exact = exact_depth(x, points, np.zeros(3), v)
    assert np.abs(summary.depth(points) - exact).max() <= summary.error_bound() + 1e-12


def test_the_halfspace_bound_still_refines_every_heavy_direction():
    # the minimum over directions has no room to share: every direction meets tol alone
    _, _, n, tol, summary, info = _noisy_fit(MIN)
    assert info.passes == 2
    assert summary.direction_errors().max() <= tol
    assert summary.error_bound(MIN) <= tol


def test_finish_block_with_room_keeps_the_sum_of_worst_leaves_within_the_limit():
    from daskdepth.fitting.summaries import pilot_leaves
    from daskdepth.summary.leaves import LeafCounts
    from daskdepth.summary.rows import prepare_rows

    rng = np.random.default_rng(0)
    n, tol = 200_000, 1e-3
    x = rng.normal(size=(n, 3))
    v = draw_directions(np.random.RandomState(0), 32, 3, None)
    cap = leaf_cap(n, tol)
    block = pilot_leaves(x[rng.random(n) < 0.075], v, 0, 32, n, tol)
    counts = block.accumulate(prepare_rows(x, np.zeros(3)), v,
                              LeafCounts.empty(block.n_leaves, block.mb))
    plain = finish_block(block, counts, cap, n)
    spared = finish_block(block, counts, cap, n, spare=True)
    assert plain.worst.max() > cap  # noise left a heavy leaf ...
    assert plain.worst.sum() > cap * 32  # ... that the merged leaves at the limit leave no room for
    assert spared.worst.sum() <= cap * 32
    # the heavy leaves are kept (with their counts, for a refinement the plan may still pick)
    assert spared.worst.max() == plain.worst.max() and spared.counts is not None
    assert spared.n_leaves >= plain.n_leaves
    for b in (plain, spared):  # every row counted once per direction
        np.testing.assert_array_equal(np.add.reduceat(b.counts, b.lptr[:-1]), n)


# ----------------------------------------------------------------- the pilot's cuts


def _reference_cuts(values: np.ndarray, scale: float, target: float):
    """plan_cuts (the refinement's planner) on one node spanning every float."""
    from daskdepth.kernels.leaves import plan_cuts

    _, _, keys, rows = plan_cuts(np.zeros(values.size, dtype=np.int64), values, np.zeros(0),
                                 scale, target, np.array([-np.inf]), np.array([np.inf]))
    return keys, (rows if rows.size else np.array([float(values.size)]))


@given(st.lists(st.sampled_from([-np.inf, -1.5, -0.0, 0.0, 5e-324, 1.0, 1.0 + 2**-52, 3.0,
                                 np.inf]), min_size=1, max_size=200),
       st.floats(0.5, 4.0), st.floats(0.0, 40.0))
@settings(max_examples=200, deadline=None)
def test_cut_sorted_is_plan_cuts_of_one_node(values, scale, target):
    """Ties, atoms, -0.0 beside 0.0, subnormals and infinities: the same keys and rows."""
    from daskdepth.kernels.leaves import cut_sorted

    v = np.sort(np.array(values))
    keys_buf, rows_buf = np.full(2 * v.size, np.nan), np.full(3 * v.size + 1, np.nan)
    ne, nc = cut_sorted(v, scale, target, keys_buf, rows_buf)
    keys, rows = _reference_cuts(v, scale, target)
    np.testing.assert_array_equal(keys_buf[:ne].view(np.uint64), keys.view(np.uint64))
    np.testing.assert_array_equal(rows_buf[:nc], rows)
    assert rows_buf[:nc].sum() == v.size and nc == ne + 1


@given(st.lists(st.tuples(st.sampled_from([-2.0, -0.0, 0.0, 1e-300, 1.0, 7.5, np.inf]),
                          st.integers(1, 700)), min_size=1, max_size=12),
       st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), st.floats(0.0, 60.0))
@settings(max_examples=150, deadline=None)
def test_cut_sorted_skips_long_runs_as_the_value_by_value_cut_does(runs, scale, target):
    """Runs of up to 700 tied values (found by galloping): the keys and rows of the greedy
    cut that visits every value (plan_cuts' weighted path, each value weighing one row;
    scales that are powers of two keep both paths' arithmetic exact)."""
    from daskdepth.kernels.leaves import cut_sorted, plan_cuts

    v = np.sort(np.concatenate([np.full(k, a) for a, k in runs]))
    keys_buf, rows_buf = np.empty(2 * v.size), np.empty(3 * v.size + 1)
    ne, nc = cut_sorted(v, scale, target, keys_buf, rows_buf)
    _, _, keys, rows = plan_cuts(np.zeros(v.size, dtype=np.int64), v, np.ones(v.size), scale,
                                 target, np.array([-np.inf]), np.array([np.inf]))
    rows = rows if rows.size else np.array([float(v.size)])
    np.testing.assert_array_equal(keys_buf[:ne].view(np.uint64), keys.view(np.uint64))
    np.testing.assert_array_equal(rows_buf[:nc], rows)


def test_cut_sorted_of_no_values_is_one_empty_child():
    from daskdepth.kernels.leaves import cut_sorted

    rows = np.full(1, np.nan)
    assert cut_sorted(np.zeros(0), 1.0, 4.0, np.zeros(0), rows) == (0, 1) and rows[0] == 0.0


@pytest.mark.parametrize("d", [3, 6, 9])
def test_pilot_keys_are_the_sorted_sample_cut_one_direction_at_a_time(d):
    """Projected in groups of directions (wide rows) or singly: each direction's keys are
    its own sorted projections (the routing kernels' bits) cut greedily, atoms exact."""
    from daskdepth.fitting.summaries import PILOT_GUARD, pilot_leaves
    from daskdepth.kernels.routing import unpad_keys
    from daskdepth.kernels.tiles import project

    rng = np.random.default_rng(d)
    sample = tie_data(6_000, d, seed=d)
    sample[: 2_000] += rng.normal(size=(2_000, d)) * 1e-3  # some continuous values too
    n, tol = 40_000, 1e-3
    v = draw_directions(np.random.RandomState(d), 11, d, None)  # groups of 4 and a rest
    block = pilot_leaves(sample, v, 0, 11, n, tol)
    got = unpad_keys(block.cptr, block.keys)
    p = project(sample, v)
    want = [_reference_cuts(np.sort(p[j]), n / sample.shape[0],
                            PILOT_GUARD * leaf_cap(n, tol))[0] for j in range(11)]
    np.testing.assert_array_equal(np.diff(block.cptr), [w.size for w in want])
    np.testing.assert_array_equal(got.view(np.uint64), np.concatenate(want).view(np.uint64))
    atoms = block.atoms  # the heavy ties got leaves of their own
    assert atoms.any()


def test_pilot_of_every_row_is_exact():
    """The sample is the data: leaves finished from the sample's own counts (ties heavy)."""
    from daskdepth.fitting.summaries import pilot_leaves

    x = tie_data(3_000, 5, seed=4)
    v = draw_directions(np.random.RandomState(4), 9, 5, None)
    block = pilot_leaves(x, v, 0, 9, x.shape[0], 1e-2)
    assert block.lut is not None
    np.testing.assert_array_equal(np.add.reduceat(block.counts, block.lptr[:-1]), x.shape[0])
    assert block.worst.max() <= leaf_cap(x.shape[0], 1e-2)
    points = np.concatenate([x[:300], np.random.default_rng(5).normal(size=(300, 5))])
    from daskdepth.summary.depth import DepthSummary

    summary = DepthSummary(np.zeros(5), v, [block.without_counts()], x.shape[0])
    exact = exact_depth(x, points, np.zeros(5), v)
    assert np.abs(summary.depth(points) - exact).max() <= summary.error_bound() + 1e-12
