"""Unit tests of the summary layer: routing, leaf planning, error bound, refinement choice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import tie_data
from hypothesis import given
from hypothesis import strategies as st
from oracle import exact_depth_of_model

import daskdepth
from daskdepth.fitting.summaries import leaf_cap, refine_plan, wanted_leaves
from daskdepth.kernels.blocks import count_block
from daskdepth.kernels.leaves import plan_cuts
from daskdepth.kernels.routing import log_cell
from daskdepth.kernels.tiles import Projection, project
from daskdepth.summary.leaves import BlockLeaves, LeafCounts


def _block(keys_per_dir: list[np.ndarray]) -> BlockLeaves:
    cptr = np.concatenate([[0], np.cumsum([k.size for k in keys_per_dir])])
    cuts = np.concatenate(keys_per_dir) if keys_per_dir else np.zeros(0)
    return BlockLeaves.build(0, len(keys_per_dir), cptr, cuts)


def _leaves(block: BlockLeaves, values: np.ndarray) -> np.ndarray:
    """Leaf (local index) of each value on direction 0, via the counting kernel."""
    out = np.empty(values.size, dtype=np.int64)
    v = np.ones((block.mb, 1))
    for i, p in enumerate(values):
        stats = LeafCounts.empty(block.n_leaves, block.mb)
        count_block(Projection(np.array([[p]]), v, np.empty((0, 0)), False), np.ones(1, bool),
                    np.ones(1), block.router, stats.counts, stats.ext)
        out[i] = int(np.flatnonzero(stats.counts[: block.lptr[1]])[0])
        assert stats.ext[0, 0] == stats.ext[0, 1] == min(max(p, -1.7976931348623157e308),
                                                         1.7976931348623157e308)
    return out


@given(
    keys=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=60),
    values=st.lists(st.floats(-2e6, 2e6, allow_nan=False), min_size=1, max_size=30),
)
def test_routing_counts_keys_at_or_below(keys, values):
    # Whatever the keys (crowded cells, duplicates removed), the leaf is #keys <= p.
    k = np.unique(np.asarray(keys, dtype=np.float64))
    block = _block([k])
    p = np.asarray(values + keys[:5], dtype=np.float64)
    np.testing.assert_array_equal(_leaves(block, p), np.searchsorted(k, p, side="right"))


def test_routing_with_crowded_cells_and_out_of_grid_values():
    # 200 keys packed into a sliver of the guide grid force the linear continuation.
    rng = np.random.default_rng(0)
    k = np.unique(np.concatenate([rng.normal(size=50), 1.0 + 1e-12 * np.arange(200)]))
    block = _block([k])
    p = np.concatenate([k, np.nextafter(k, np.inf), np.nextafter(k, -np.inf),
                        [-1e300, 1e300, 1.0 + 5e-11]])
    np.testing.assert_array_equal(_leaves(block, p), np.searchsorted(k, p, side="right"))


def _scan(block: BlockLeaves) -> np.ndarray:
    """Expected keys scanned per lookup of each direction: sum(keys per cell ** 2) / keys."""
    occ = np.diff(block.table.astype(np.int64), axis=1)
    return (occ * occ).sum(axis=1) / np.maximum(np.diff(block.cptr), 1)


def _heavy_keys(n: int, seed: int, power: float = 4.0) -> np.ndarray:
    c = np.random.default_rng(seed).standard_cauchy(size=n)
    return np.unique(np.sign(c) * np.abs(c) ** power)


def test_guide_adapts_to_heavy_tailed_keys():
    # sign(c)|c|^4, c Cauchy: a linear grid over the key range put nearly all keys in
    # a few cells (42,000 keys scanned per lookup at n = 30,000); the logarithmic
    # grid spreads them.  Gaussian keys keep the linear grid (no extra work per lookup).
    rng = np.random.default_rng(0)
    gauss = np.unique(rng.normal(size=5000))
    heavy = _heavy_keys(5000, 1)
    far = np.unique(np.concatenate([rng.normal(size=4950), 1e6 + rng.normal(size=50)]))
    block = _block([gauss, heavy, far, _heavy_keys(5000, 2, 1.0)])
    assert block.g_log[0, 0] == 0 and (block.g_log[1:, 0] > 0).all()
    scan = _scan(block)
    assert scan.max() <= 8, scan
    p = np.concatenate([heavy[::50], np.nextafter(heavy[::97], np.inf), [-1e300, 1e300, 0.0]])
    big = _block([heavy])
    np.testing.assert_array_equal(_leaves(big, p), np.searchsorted(heavy, p, side="right"))


@given(
    seed=st.integers(0, 2**31),
    power=st.sampled_from([1.0, 2.0, 4.0, 8.0]),
    n=st.integers(50, 400),
    shift=st.sampled_from([0.0, 1e6, -1e12]),
    values=st.lists(st.floats(allow_nan=False), min_size=1, max_size=20),
)
def test_routing_with_logarithmic_guide_counts_keys_at_or_below(seed, power, n, shift, values):
    # Whichever grid the guide chose, a value's leaf is the number of keys <= it:
    # keys, their neighbours, arbitrary floats (infinities and extremes included).
    k = np.unique(_heavy_keys(n, seed, power) + shift)
    block = _block([k])
    p = np.concatenate([np.asarray(values, dtype=np.float64), k[::7],
                        np.nextafter(k[::11], np.inf), np.nextafter(k[::13], -np.inf)])
    np.testing.assert_array_equal(_leaves(block, p), np.searchsorted(k, p, side="right"))


@given(values=st.lists(st.floats(allow_nan=False), min_size=2, max_size=200),
       centre=st.floats(-1e12, 1e12), inv_s=st.floats(1e-300, 1e300),
       k=st.floats(1e-3, 1e6))
def test_log_cell_is_monotone(values, centre, inv_s, k):
    # Monotone cells are what makes the guide's start a lower bound of the search.
    p = np.sort(np.clip(np.asarray(values), -1.7976931348623157e308, 1.7976931348623157e308))
    gm = 1000.5
    cells = np.array([log_cell(v, centre, inv_s, k, gm) for v in p], dtype=np.int64)
    assert (np.diff(cells) >= 0).all()
    assert cells.min() >= 0 and cells.max() <= 1001


def test_plan_cuts_gives_heavy_atoms_a_leaf_of_their_own():
    # Sampled values: an atom at 0.5 (10 copies) between distinct values.
    values = np.sort(np.concatenate([np.linspace(0, 1, 21), np.full(10, 0.5)]))
    nodes = np.zeros(values.size, dtype=np.int64)
    sl, nch, keys, cnt = plan_cuts(nodes, values, np.zeros(0), 1.0, 4.0,
                                     np.array([-np.inf]), np.array([np.inf]))
    assert sl.tolist() == [0]
    assert 0.5 in keys and np.nextafter(0.5, np.inf) in keys
    block = _block([keys])
    atom = np.flatnonzero(block.atoms)
    leaf_of_atom = _leaves(block, np.array([0.5]))[0]
    assert atom.tolist() == [leaf_of_atom] and cnt[atom[0]] == 11  # 10 copies + 0.5
    # A value missing from the sample, just above the atom, does not join its leaf.
    assert _leaves(block, np.array([np.nextafter(0.5, np.inf)]))[0] == leaf_of_atom + 1
    assert np.all(np.delete(cnt, atom) <= 4)
    # The same plan from the distinct values weighted by their multiplicities.
    distinct, mult = np.unique(values, return_counts=True)
    again = plan_cuts(np.zeros(distinct.size, dtype=np.int64), distinct,
                        mult.astype(np.float64), 1.0, 4.0, np.array([-np.inf]),
                        np.array([np.inf]))
    np.testing.assert_array_equal(again[2], keys)
    np.testing.assert_array_equal(again[3], cnt)


def test_error_bound_is_mean_of_each_directions_worst_leaf():
    x = tie_data(80_000, 3, seed=2)
    model = daskdepth.IRW(n_directions=40, tol=1e-3, random_state=0).fit(x)
    assert model.n_passes_ >= 1
    n = model.n_samples_fit_
    per_dir = []
    for b in model.summary_.blocks:
        # The rows of every leaf, counted here from the data and the fitted keys
        # (the fitted blocks keep no counts): a leaf holds the values p with
        # key[k-1] <= p < key[k], projected as the kernels project.
        proj = project(np.ascontiguousarray(x - model.location_),
                       np.ascontiguousarray(model.directions_[b.j0:b.j1]))
        cuts, atoms = b.cuts, b.atoms
        worst = []
        for j in range(b.mb):
            keys = cuts[b.cptr[j]:b.cptr[j + 1]]
            counts = np.bincount(np.searchsorted(keys, proj[j], side="right"),
                                 minlength=keys.size + 1)
            light = np.where(atoms[b.lptr[j]:b.lptr[j + 1]], 0, counts)
            worst.append(light.max())
        np.testing.assert_array_equal(b.direction_errors(n), np.array(worst) / (2.0 * n))
        per_dir += [w / (2 * n) for w in worst]
    assert model.error_bound_ == pytest.approx(np.mean(per_dir), rel=1e-12)
    assert model.error_bound_ <= 1e-3
    q = x[:3000]
    err = np.abs(model.score_samples(q) - exact_depth_of_model(model, x, q))
    assert err.max() <= model.error_bound_ + 1e-12


def _finished(errs: list[float], n: int, cap: int) -> BlockLeaves:
    """A finished block whose direction j has a worst leaf of error ``errs[j]``."""
    block = _block([np.array([0.5])] * len(errs))
    counts = np.zeros(block.n_leaves)
    for j, e in enumerate(errs):
        counts[2 * j] = round(e * 2 * n)  # the direction's worst leaf
        counts[2 * j + 1] = cap // 2      # a light one
    # Infinite extremes: no keys are added, the leaves stay as given.
    ext = np.tile([-np.inf, np.inf], (len(errs), 1))
    return block.finished(LeafCounts(counts, ext))


def test_refine_plan_splits_only_the_directions_needed():
    n, tol = 100_000, 1e-3
    cap = leaf_cap(n, tol)
    ok = cap / (2 * n)
    # Four directions at the limit, one at 3x: the mean is over tol, and
    # splitting the worst direction alone brings it back.
    trees = [_finished([ok, ok, 3 * ok], n, cap), _finished([ok, ok], n, cap)]
    picks = refine_plan(trees, n, tol)
    assert picks[0].tolist() == [False, False, True]
    assert not picks[1].any()
    # The leaves collected: the heavy one of the picked direction only.
    wanted = wanted_leaves(trees[0], picks[0], n, tol)
    assert wanted.mask.tolist() == [False, False, False, False, True, False]
    assert wanted.rows == round(3 * ok * 2 * n) and wanted.n == n
    # Nothing to do when the mean already meets tol.
    trees = [_finished([ok / 2, ok / 2, 1.4 * ok], n, cap)]
    assert not refine_plan(trees, n, tol)[0].any()


def test_points_with_overflowing_projections_score_zero():
    x = np.random.default_rng(0).normal(size=(3000, 3))
    model = daskdepth.IRW(n_directions=30, random_state=0).fit(x)
    q = np.array([[1e308, 1e308, 1e308], [-1e308, 1e308, -1e308], [0.0, 0.0, 0.0]])
    d = model.score_samples(q)
    assert d[0] == 0 and d[1] == 0 and d[2] > 0.3


def _finish_reference(keys, counts, lo, hi, cap):
    """Merge, add extremes and tabulate one direction, written plainly."""
    keys, counts = list(keys), list(counts)
    if cap is not None:
        groups, cur, start = [], None, []
        for k, c in enumerate(counts):
            if cur is None or cur + c > cap or c > cap or cur > cap:
                groups.append(c)
                start.append(k)
                cur = c
            else:
                groups[-1] += c
                cur += c
        keys = [keys[k - 1] for k in start[1:]]
        counts = groups
    if counts[0] > 0 and np.isfinite(lo):
        keys, counts = [lo, *keys], [0.0, *counts]
    top = np.nextafter(hi, np.inf)
    if counts[-1] > 0 and np.isfinite(top):
        keys, counts = [*keys, top], [*counts, 0.0]
    n = sum(counts)
    lut, before, worst = [], 0.0, 0.0
    for k, c in enumerate(counts):
        atom = 0 < k < len(counts) - 1 and np.nextafter(keys[k - 1], np.inf) == keys[k]
        own = c if atom else c / 2
        lut.append(min(before + own, n - before - c + own))
        before += c
        if not atom:
            worst = max(worst, c)
    return keys, counts, lut, worst


@given(
    data=st.lists(st.tuples(st.lists(st.integers(-6, 6), max_size=12, unique=True),
                            st.lists(st.integers(0, 9), min_size=20, max_size=20)),
                  min_size=1, max_size=3),
    cap=st.one_of(st.none(), st.integers(0, 12)),
)
def test_finish_leaves_matches_a_plain_implementation(data, cap):
    # Keys on a grid with tight pairs (atoms), counts with empty leaves.
    per_dir, counts, ext = [], [], []
    for raw_keys, raw_counts in data:
        grid = np.unique(np.asarray(raw_keys, dtype=np.float64))
        keys = np.unique(np.concatenate([grid, np.nextafter(grid[::2], np.inf)]))
        c = np.asarray(raw_counts[:keys.size + 1], dtype=np.float64)
        c[-1] += 1  # a direction holds rows
        per_dir.append(keys)
        counts.append(c)
        ext.append((keys[0] - 1.5 if keys.size else -1.0, keys[-1] + 0.5 if keys.size else 1.0))
    block = _block(per_dir)
    stats = LeafCounts(np.concatenate(counts), np.asarray(ext))
    out = block.finished(stats, cap)
    for jj, (keys, c) in enumerate(zip(per_dir, counts, strict=True)):
        rk, rc, rl, rw = _finish_reference(keys, c, *ext[jj], cap)
        leaves = slice(out.lptr[jj], out.lptr[jj + 1])
        np.testing.assert_array_equal(out.cuts[out.cptr[jj]:out.cptr[jj + 1]], rk)
        np.testing.assert_array_equal(out.counts[leaves], rc)
        np.testing.assert_array_equal(out.lut[leaves], rl)
        assert out.worst[jj] == rw


# --------------------------------------------------------------------------- validation


def _finished_block(cuts_per_direction, rows_per_direction):
    """A finished block from each direction's cut points and projected rows (exact counts)."""
    cptr = np.concatenate([[0], np.cumsum([c.size for c in cuts_per_direction])])
    block = BlockLeaves.build(0, len(cuts_per_direction), cptr,
                              np.concatenate(cuts_per_direction))
    counts = LeafCounts.empty(block.n_leaves, block.mb)
    for jj, rows in enumerate(rows_per_direction):
        leaves = block.lptr[jj] + np.searchsorted(cuts_per_direction[jj], rows, side="right")
        np.add.at(counts.counts, leaves, 1.0)
        counts.ext[jj] = rows.min(), rows.max()
    return block.finished(counts)


def test_validate_accepts_built_blocks_and_checks_the_row_count():
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=50), rng.normal(size=50), rng.normal(size=50)]
    block = _finished_block([np.sort(rng.normal(size=5)), np.zeros(0), np.array([0.0])], rows)
    block.validate(50)
    with pytest.raises(ValueError, match="add up to 50 rows, not the 51"):
        block.validate(51)


def test_routing_survives_a_nan_guide_grid():
    """A guide cell is always in range: a NaN grid routes from the first key, still exactly."""
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(200, 1))
    block = _finished_block([np.sort(rng.normal(size=20))], [rows[:, 0]])
    v = np.ones((1, 1))
    points = np.vstack([rows[:50], [[1e300], [-1e300]]])
    expected = np.zeros(points.shape[0])
    block.score_into(points, v, np.ones(points.shape[0], dtype=bool), expected)
    broken = dataclasses.replace(block, g_lo=np.full(1, np.nan), g_scale=np.full(1, np.nan))
    got = np.zeros(points.shape[0])
    broken.score_into(points, v, np.ones(points.shape[0], dtype=bool), got)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="guide grid"):
        broken.validate(200)


def test_blocks_with_a_guide_of_another_rule_validate_and_score_the_same():
    """A block whose guide grid an earlier rule chose (a saved model) loads and scores alike.

    The rule picking a grid changes between versions (one cell per key here,
    where the current one takes two); any grid whose table follows from its
    parameters routes every value to the same leaf, so validation accepts it,
    and refuses a table that does not follow or parameters that are not finite.
    """
    from daskdepth.summary import guide as guide_module

    rng = np.random.default_rng(3)
    rows = rng.normal(size=(4000, 1))
    cuts = [np.concatenate([[-6.0], np.sort(rng.normal(size=600)), [6.0]])]
    block = _finished_block(cuts, [rows[:, 0]])
    v = np.ones((1, 1))
    points = np.vstack([rows[:500], [[1e300], [-1e300], [6.0], [-6.0]]])
    valid = np.ones(points.shape[0], dtype=bool)
    expected = np.zeros(points.shape[0])
    block.score_into(points, v, valid, expected)
    tried = 0
    for per_key, logarithmic in ((1, False), (2, False), (4, False), (1, True)):
        other = guide_module.guide_grid(block.cptr, block.kptr, block.keys, per_key)
        if other.g == block.g and not logarithmic:
            continue  # the rule's own grid
        if logarithmic:  # a logarithmic grid where the rule keeps a linear one
            other.log[:] = [[1.0, other.g / 8]]
            from daskdepth.kernels.routing import guide_table
            guide_table(other.lo, other.scale, other.log, other.g, block.kptr, block.keys,
                        other.table, np.ones(1, dtype=bool))
        old = dataclasses.replace(block, g=other.g, g_lo=other.lo, g_scale=other.scale,
                                  g_log=other.log, table=other.table)
        old.validate(4000)
        got = np.zeros(points.shape[0])
        old.score_into(points, v, valid, got)
        np.testing.assert_array_equal(got, expected)
        tried += 1
    assert tried >= 3
    one = guide_module.guide_grid(block.cptr, block.kptr, block.keys, 1)
    base = dataclasses.replace(block, g=one.g, g_lo=one.lo, g_scale=one.scale,
                               g_log=one.log, table=one.table)
    shifted = one.table.copy()
    shifted[0, 5:] += 1  # a search that would start past a key <= the point
    for edit, message in (
            (dict(table=shifted), "does not count the keys"),
            (dict(g=one.g + 1), "table is not a uint16 array"),
            (dict(g=guide_module.GUIDE_MAX + 1), "outside 1"),
            (dict(g_lo=np.full(1, np.inf)), "g_lo holds a value that is not finite"),
            (dict(g_log=np.array([[1.0, 0.0]])), "no positive cells per octave"),
            (dict(table=one.table.astype(np.int32)), "table is not a uint16 array")):
        with pytest.raises(ValueError, match=f"guide grid .*does not match the keys: .*{message}"):
            dataclasses.replace(base, **edit).validate(4000)


def test_tried_guides_are_given_up_early_with_the_same_result():
    """A smaller guide that cannot be kept is given up at its first crowded direction.

    The routing structure is the one of trying each smaller grid in full and
    keeping the first whose cells hold at most GUIDE_CELL_KEYS keys and few
    lookups that scan (guide.light): evenly
    spread keys (a small grid kept), clustered keys like Http's (given up, the
    full grid), heavy tails (logarithmic grids).
    """
    from daskdepth.kernels.routing import PAD, pad_keys
    from daskdepth.summary import guide as guide_module

    rng = np.random.default_rng(3)
    even = np.linspace(-1.0, 1.0, 3000)
    clustered = np.unique(np.round(rng.exponential(size=6000) ** 3, 3))
    cases = [[even, even + 0.5], [clustered, even], [even, clustered],
             [_heavy_keys(3000, 4), even], [rng.normal(size=4000), _heavy_keys(3000, 5, 1.0)]]
    kept, gave_up = set(), 0
    for dirs in cases:
        cuts = [np.sort(d) for d in dirs]
        cptr = np.concatenate([[0], np.cumsum([c.size for c in cuts])]).astype(np.int64)
        keys = pad_keys(cptr, np.concatenate(cuts))
        kptr = cptr + PAD * np.arange(len(cuts) + 1)
        for per_key in (*guide_module.GUIDE_TRY_PER_KEY, guide_module.GUIDE_PER_KEY):
            full = guide_module.guide_grid(cptr, kptr, keys, per_key)
            if per_key == guide_module.GUIDE_PER_KEY or guide_module.light(full.table):
                break
            early = guide_module.guide_grid(cptr, kptr, keys, per_key, tried=True)
            gave_up += early is None
            assert early is None or not guide_module.light(early.table)
        block = BlockLeaves.from_keys(0, len(cuts), cptr, keys)
        kept.add(per_key)
        assert block.g == full.g
        np.testing.assert_array_equal(block.table, full.table)
        np.testing.assert_array_equal(block.g_log, full.log)
        np.testing.assert_array_equal(block.g_lo, full.lo)
    assert len(kept) >= 2 and gave_up  # grids kept and given up early


def test_clustered_keys_get_eight_cells_per_key():
    """Keys with a dense cluster: four cells per key still send many lookups scanning.

    A fifth of the keys within 2 % of the span: at four cells per key about
    5 % of the key intervals lie past the vector compare's keys, at eight about
    1 %, so a fitted block (``scored``) keeps the grid of eight cells per key, and
    a pilot's keys the four that its memory plan assumes; routing stays exact.  Keys
    spread evenly keep the smaller grid, and a finer grid that does not halve
    the scans is not kept.
    """
    from daskdepth.kernels.routing import PAD, pad_keys
    from daskdepth.summary import guide as guide_module

    rng = np.random.default_rng(0)
    even = rng.uniform(0, 1, 4000)
    clustered = np.unique(np.concatenate([even, 0.5 + 0.02 * rng.uniform(0, 1, 1000)]))
    for cut, per_key in ((clustered, guide_module.GUIDE_CLUSTERED_PER_KEY), (np.sort(even), 2)):
        cptr = np.array([0, cut.size], dtype=np.int64)
        keys = pad_keys(cptr, cut)
        kptr = cptr + PAD * np.arange(2)
        four = guide_module.guide_grid(cptr, kptr, keys, guide_module.GUIDE_PER_KEY)
        block = BlockLeaves.from_keys(0, 1, cptr, keys, scored=True)
        assert block.g == per_key * cut.size
        if per_key == guide_module.GUIDE_CLUSTERED_PER_KEY:
            assert guide_module.scan_share(four.table) > guide_module.GUIDE_SCAN_SHARE
            assert guide_module.scan_share(block.table) < guide_module.scan_share(four.table)
            # keys counted once (a pilot's, a refinement's) keep four cells per key
            assert BlockLeaves.from_keys(0, 1, cptr, keys).g == four.g
        p = np.concatenate([cut, np.nextafter(cut, np.inf), np.nextafter(cut, -np.inf),
                            rng.uniform(-0.1, 1.1, 2000)])
        np.testing.assert_array_equal(_leaves(block, p), np.searchsorted(cut, p, side="right"))
    # A finer grid that scans not even half as much is not kept: a cluster of keys a few
    # ulps apart stays in one cell at any grid size (too few for a logarithmic grid).
    tight = np.concatenate([np.sort(even), 2.0 + 1e-15 * np.arange(1, 150)])
    cptr = np.array([0, tight.size], dtype=np.int64)
    keys = pad_keys(cptr, tight)
    kptr = cptr + PAD * np.arange(2)
    four = guide_module.guide_grid(cptr, kptr, keys, guide_module.GUIDE_PER_KEY)
    eight = guide_module.guide_grid(cptr, kptr, keys, guide_module.GUIDE_CLUSTERED_PER_KEY)
    assert guide_module.scan_share(eight.table) > guide_module.scan_share(four.table) / 2
    assert guide_module.scan_share(four.table) > guide_module.GUIDE_SCAN_SHARE
    assert BlockLeaves.from_keys(0, 1, cptr, keys, scored=True).g == four.g


def test_guide_with_crowded_cells_gets_more_cells():
    """A grid whose cells hold few enough keys but send many lookups past the vector compare.

    Keys at the normal quantiles plus one far key on each side: one cell per
    key leaves at most six keys in a cell (under GUIDE_CELL_KEYS) but about a
    fifth of the lookups past the four keys the search compares at once, which
    then scan key by key; two cells per key leave none.
    """
    from scipy.stats import norm

    from daskdepth.kernels.routing import CELL_WINDOW, PAD, pad_keys
    from daskdepth.summary import guide as guide_module

    body = norm.ppf((np.arange(628) + 0.5) / 628)
    cuts = [np.concatenate([[-6.0], body, [6.0]]) * s for s in (1.0, 2.0, 0.5)]
    cptr = np.concatenate([[0], np.cumsum([c.size for c in cuts])]).astype(np.int64)
    keys = pad_keys(cptr, np.concatenate(cuts))
    kptr = cptr + PAD * np.arange(len(cuts) + 1)
    one = guide_module.guide_grid(cptr, kptr, keys, 1)
    assert int(np.diff(one.table, axis=1).max()) <= guide_module.GUIDE_CELL_KEYS
    assert guide_module.scan_share(one.table) > guide_module.GUIDE_SCAN_SHARE
    block = BlockLeaves.from_keys(0, len(cuts), cptr, keys)
    assert block.g == 2 * cuts[0].size
    assert int(np.diff(block.table, axis=1).max()) < CELL_WINDOW
