"""The tiled block kernels against an independent NumPy route, bit for bit.

The block kernels (:mod:`daskdepth.kernels.routing`) project a row tile once on
a group of directions and route it on each; here every projection is computed
column by column in NumPy in the same fixed order (``((0.0 + x0 v0) + x1 v1)
+ ...``, a product then a sum), clamped as the kernels clamp, and routed by
``np.searchsorted(keys, p, 'right')``: counts, extremes, collected values and
scores must be the same bits.  Data: ties, duplicated rows, values exactly on
keys and one float32 ulp from them, +-inf and NaN projections, heavy tails
(logarithmic guide grids), tiles and direction groups that end mid-way, and
invalid rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import kernel_projections

from daskdepth.kernels.blocks import (
    collect_block,
    count_block,
    score_block,
    score_block_min,
    score_block_squares,
)
from daskdepth.kernels.routing import ROUTE_KEY_BYTES, route_groups
from daskdepth.kernels.tiles import MAXF, ROW_TILE, Projection, project
from daskdepth.summary.leaves import BlockLeaves


def numpy_leaves(block: BlockLeaves, p: np.ndarray) -> np.ndarray:
    """Local leaf of every projection: the number of the direction's keys ``<= p``."""
    cuts = block.cuts
    return np.stack([np.searchsorted(cuts[block.cptr[j]:block.cptr[j + 1]], p[j], "right")
                     for j in range(block.mb)])


def tiled(x: np.ndarray, v: np.ndarray) -> Projection:
    return Projection(x, v, np.empty((0, 0)), False)


def make_case(d: int, n: int, seed: int, heavy: bool) -> tuple:
    """Rows, directions, validity and a block whose keys are some of the rows' projections."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[:, 0] = np.round(x[:, 0], 1)  # ties
    x[n // 2:n // 2 + n // 10] = x[:n // 10]  # duplicated rows
    if heavy:
        c = rng.standard_cauchy(size=(n, d))
        x = np.sign(c) * np.abs(c) ** 4
    mb = 11
    v = rng.normal(size=(mb, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    valid = rng.random(n) > 0.05
    x[~valid & (rng.random(n) < 0.5)] = np.nan  # some invalid rows hold NaN
    x[7] = 1e308  # overflowing projections: +-inf, clamped
    x[8] = -1e308
    p = kernel_projections(x, v, valid)
    keys = []
    for j in range(mb):
        pick = np.unique(p[j, valid][rng.random(int(valid.sum())) < 0.3])
        pick = pick[np.abs(pick) < MAXF]
        # Keys one float32 ulp from projections, and projections exactly on keys.
        near = pick[::7][np.abs(pick[::7]) < 3e38].astype(np.float32)
        ulp = np.concatenate([np.nextafter(near, np.float32(np.inf)),
                              np.nextafter(near, np.float32(-np.inf))]).astype(np.float64)
        keys.append(np.unique(np.concatenate([pick, ulp[np.isfinite(ulp)]])))
    cptr = np.concatenate([[0], np.cumsum([k.size for k in keys])])
    block = BlockLeaves.build(0, mb, cptr, np.concatenate(keys))
    return x, v, valid, block


CASES = [(1, 700, 0, False), (3, 2 * ROW_TILE + 37, 1, False), (10, 1537, 2, False),
         (10, 1200, 3, True), (40, 901, 4, False), (33, 640, 5, True)]


def routers(block: BlockLeaves):
    """The block's router, and the same with direction groups of 1, 3 and 5 directions."""
    r = block.router
    yield r
    for bounds in ([0, 1, 4, 9, 11], list(range(12)), [0, 5, 10, 11]):
        yield r._replace(groups=np.array(bounds, dtype=np.int64))


@pytest.mark.parametrize(("d", "n", "seed", "heavy"), CASES)
def test_counts_and_extremes_equal_numpy_route(d, n, seed, heavy):
    x, v, valid, block = make_case(d, n, seed, heavy)
    if heavy:
        assert (block.g_log[:, 0] > 0).any()  # logarithmic guide grids are routed
    p = kernel_projections(x, v, valid)
    leaves = numpy_leaves(block, p)
    weight = np.random.default_rng(seed).integers(1, 4, size=n).astype(np.float64)
    want = np.zeros(block.n_leaves)
    lptr = block.lptr
    for j in range(block.mb):
        want[lptr[j]:lptr[j + 1]] = np.bincount(leaves[j, valid], weight[valid],
                                                minlength=lptr[j + 1] - lptr[j])
    for layout in (np.ascontiguousarray, np.asfortranarray):
        for router in routers(block):
            counts = np.zeros(block.n_leaves)
            ext = np.tile([np.inf, -np.inf], (block.mb, 1))
            count_block(tiled(layout(x), v), valid, weight, router, counts, ext)
            np.testing.assert_array_equal(counts, want)
            np.testing.assert_array_equal(ext[:, 0], p[:, valid].min(axis=1))
            np.testing.assert_array_equal(ext[:, 1], p[:, valid].max(axis=1))


@pytest.mark.parametrize(("d", "n", "seed", "heavy"), CASES)
def test_scores_equal_numpy_route(d, n, seed, heavy):
    x, v, valid, block = make_case(d, n, seed, heavy)
    p = kernel_projections(x, v, valid)
    leaves = numpy_leaves(block, p) + block.lptr[:-1, None]
    for dtype in (np.float32, np.float64):
        lut = np.random.default_rng(seed).integers(0, 50, size=block.n_leaves).astype(dtype) / 2
        total, squares = np.zeros(n), np.zeros(n)
        for j in range(block.mb):  # the kernels' order of additions
            t = lut[leaves[j]].astype(np.float64)
            total += t
            squares += t * t
        least = lut[leaves].astype(np.float64).min(axis=0)
        for router in routers(block):
            out, out_sq, low = np.zeros(n), np.zeros(n), np.full(n, np.inf)
            score_block(tiled(x, v), valid, router, lut, out)
            np.testing.assert_array_equal(out, total)
            out[:] = 0.0
            score_block_squares(tiled(x, v), valid, router, lut, out, out_sq)
            np.testing.assert_array_equal(out, total)
            np.testing.assert_array_equal(out_sq, squares)
            score_block_min(tiled(x, v), valid, router, lut, low)
            np.testing.assert_array_equal(low, least)


@pytest.mark.parametrize(("d", "n", "seed", "heavy"), CASES[1:4])
def test_collected_values_equal_numpy_route_in_direction_then_row_order(d, n, seed, heavy):
    x, v, valid, block = make_case(d, n, seed, heavy)
    p = kernel_projections(x, v, valid)
    leaves = numpy_leaves(block, p) + block.lptr[:-1, None]
    rng = np.random.default_rng(seed)
    wanted = rng.random(block.n_leaves) < 0.2
    dirs = np.ones(block.mb, dtype=bool)
    dirs[[2, 5, 6]] = False
    weight = rng.integers(1, 4, size=n).astype(np.float64)
    keep = wanted[leaves] & valid & dirs[:, None]
    rows = np.broadcast_to(np.arange(n), leaves.shape)
    for router in routers(block):
        nodes, values, weights = collect_block(tiled(x, v), valid, weight, router, wanted, dirs, 3)
        np.testing.assert_array_equal(nodes, leaves[keep])
        np.testing.assert_array_equal(values.view(np.uint64), p[keep].view(np.uint64))
        np.testing.assert_array_equal(weights, weight[rows[keep]])


def test_given_projections_route_as_tiled_ones():
    """``direct`` (projections made beforehand by ``project``) gives the same bits."""
    x, v, valid, block = make_case(10, 1537, 6, False)
    xs = x.copy()
    xs[~valid] = 0.0
    given = Projection(x, v, project(xs, v), True)
    for proj in (given, tiled(x, v)):
        counts = np.zeros(block.n_leaves)
        ext = np.tile([np.inf, -np.inf], (block.mb, 1))
        count_block(proj, valid, np.ones(x.shape[0]), block.router, counts, ext)
        out = np.zeros(x.shape[0])
        score_block(proj, valid, block.router, counts, out)
        if proj is given:
            first = counts, ext, out
    for a, b in zip(first, (counts, ext, out), strict=True):
        np.testing.assert_array_equal(a, b)


def test_direction_groups_fit_the_budget_and_cover_the_block():
    kptr = np.array([0, 100, 150, 1000, 1010, 1020])
    table = np.zeros((5, 30), dtype=np.uint16)
    bounds = route_groups(kptr, table, 2800)
    assert bounds.tolist() == [0, 2, 3, 5]  # the third direction alone exceeds the budget
    per = np.diff(kptr) * ROUTE_KEY_BYTES + 60
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        assert b - a == 1 or per[a:b].sum() <= 2800
    assert route_groups(kptr[:1], table[:0]).tolist() == [0]
