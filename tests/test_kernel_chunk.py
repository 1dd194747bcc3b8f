"""How the block kernels read a row chunk, against an independent NumPy route, bit for bit.

With several direction groups the kernels copy the chunk's columns once per
call and every group reads its tiles from that copy; with one group they copy
each tile as they go (:func:`daskdepth.kernels.tiles.whole_chunk`).  Either
way invalid rows must project to exactly 0 and count nowhere, overflows must be
clamped before any use, and the extremes (a SIMD sweep over the valid rows of
each tile) must be the same values as the rows' own.  Here: chunks shorter than
a tile or one row past it, invalid rows (holding NaN and 1e300) at tile and
lane boundaries, C and Fortran order, one group and several, and every value
of the route checked against ``np.searchsorted(keys, p, 'right')`` on
projections summed in NumPy in the kernels' fixed order.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import kernel_projections

from daskdepth.kernels.blocks import collect_block, count_block, score_block, score_block_squares
from daskdepth.kernels.tiles import MAXF, ROW_TILE, Projection
from daskdepth.summary.leaves import BlockLeaves

#: A SIMD sweep's lanes (the extremes' sweep runs over blocks of 64 rows): rows at its edges.
LANES = 64



def chunk_case(n: int, d: int, positive: bool, seed: int) -> tuple:
    """Rows, directions, validity and a block whose keys are some of the valid projections.

    Invalid rows sit at tile and lane boundaries and hold NaN or 1e300 (a leak
    would show in the leaves, scores or extremes).  With ``positive`` every
    valid projection is positive, so an invalid row's 0.0 would be the minimum.
    """
    rng = np.random.default_rng(seed)
    mb = 12
    x = rng.normal(size=(n, d))
    v = rng.normal(size=(mb, d))
    if positive:
        x += 100.0
        v = np.abs(v) + 0.1
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    x[n // 3] = 1e308  # overflowing projections, clamped to MAXF
    x[n - 1] = 50.0 if positive else -30.0  # an extreme in the last lanes
    valid = np.ones(n, dtype=bool)
    edges = [0, LANES - 1, LANES, ROW_TILE - 1, ROW_TILE, 2 * ROW_TILE - 1, n - 2]
    bad = np.array([i for i in edges if 0 <= i < n and i != n // 3 and i != n - 1], dtype=int)
    valid[bad] = False
    x[bad[::2]] = np.nan
    x[bad[1::2]] = -1e300 if positive else 1e300
    p = kernel_projections(x, v, valid)
    keys = []
    for j in range(mb):
        good = p[j, valid]
        pick = np.unique(np.concatenate([good[rng.random(good.size) < 0.4], good[:1]]))
        keys.append(pick[np.abs(pick) < MAXF])
    cptr = np.concatenate([[0], np.cumsum([k.size for k in keys])])
    return x, v, valid, p, BlockLeaves.build(0, mb, cptr, np.concatenate(keys))


def leaves_of(block: BlockLeaves, p: np.ndarray) -> np.ndarray:
    """Global leaf of every projection: the direction's first leaf plus its keys ``<= p``."""
    cuts = block.cuts
    local = np.stack([np.searchsorted(cuts[block.cptr[j]:block.cptr[j + 1]], p[j], "right")
                      for j in range(block.mb)])
    return local + block.lptr[:-1, None]


def routers(block: BlockLeaves):
    """One group of the whole block (tiles copied as they go), then groups of 4, 4, 3 and 1."""
    r = block.router
    for bounds in ([0, 12], [0, 4, 8, 11, 12], [0, 1, 2, 3, 4, 8, 12]):
        yield r._replace(groups=np.array(bounds, dtype=np.int64))


SIZES = [1, 5, LANES + 3, ROW_TILE - 1, ROW_TILE + 1, 3 * ROW_TILE + 70]


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_counts_extremes_and_scores_of_any_chunk_equal_numpy(n, positive):
    d = 10 if n % 2 else 3
    x, v, valid, p, block = chunk_case(n, d, positive, seed=n)
    leaves = leaves_of(block, p)
    weight = np.random.default_rng(n).integers(1, 5, size=n).astype(np.float64)
    want = np.zeros(block.n_leaves)
    for j in range(block.mb):
        np.add.at(want, leaves[j, valid], weight[valid])
    lut = np.random.default_rng(n + 1).integers(0, 40, size=block.n_leaves) / 2.0
    total, squares = np.zeros(n), np.zeros(n)
    for j in range(block.mb):  # the kernels' order of additions, invalid rows' leaf of 0.0 too
        total += lut[leaves[j]]
        squares += lut[leaves[j]] ** 2
    for layout in (np.ascontiguousarray, np.asfortranarray):
        proj = Projection(layout(x), v, np.empty((0, 0)), False)
        for router in routers(block):
            counts = np.zeros(block.n_leaves)
            ext = np.tile([np.inf, -np.inf], (block.mb, 1))
            count_block(proj, valid, weight, router, counts, ext)
            np.testing.assert_array_equal(counts, want)
            if valid.any():
                np.testing.assert_array_equal(ext[:, 0], p[:, valid].min(axis=1))
                np.testing.assert_array_equal(ext[:, 1], p[:, valid].max(axis=1))
            out, out_sq = np.zeros(n), np.zeros(n)
            score_block(proj, valid, router, lut, out)
            np.testing.assert_array_equal(out, total)
            out[:] = 0.0
            score_block_squares(proj, valid, router, lut, out, out_sq)
            np.testing.assert_array_equal(out, total)
            np.testing.assert_array_equal(out_sq, squares)


def test_extremes_start_from_the_given_ones():
    """The kernel lowers and raises ``ext``; it never forgets what it held."""
    x, v, valid, p, block = chunk_case(ROW_TILE + 1, 10, True, seed=3)
    for router in routers(block):
        ext = np.tile([-5.0, np.inf], (block.mb, 1))  # beyond every row (one is MAXF)
        count_block(Projection(x, v, np.empty((0, 0)), False), valid, np.ones(x.shape[0]),
                    router, np.zeros(block.n_leaves), ext)
        np.testing.assert_array_equal(ext, np.tile([-5.0, np.inf], (block.mb, 1)))
        ext = np.tile([np.inf, -np.inf], (block.mb, 1))
        ext[3] = [90.0, 110.0]  # inside the rows' range on direction 3: widened
        count_block(Projection(x, v, np.empty((0, 0)), False), valid, np.ones(x.shape[0]),
                    router, np.zeros(block.n_leaves), ext)
        np.testing.assert_array_equal(ext[3], [min(90.0, p[3, valid].min()),
                                               max(110.0, p[3, valid].max())])


@pytest.mark.parametrize("n", [ROW_TILE - 1, 3 * ROW_TILE + 70])
def test_collected_values_of_any_chunk_equal_numpy(n):
    x, v, valid, p, block = chunk_case(n, 10, False, seed=7)
    leaves = leaves_of(block, p)
    rng = np.random.default_rng(n)
    wanted = rng.random(block.n_leaves) < 0.3
    dirs = np.ones(block.mb, dtype=bool)
    dirs[[1, 6]] = False
    weight = rng.integers(1, 4, size=n).astype(np.float64)
    keep = wanted[leaves] & valid & dirs[:, None]
    rows = np.broadcast_to(np.arange(n), leaves.shape)
    for layout in (np.ascontiguousarray, np.asfortranarray):
        for router in routers(block):
            nodes, values, weights = collect_block(
                Projection(layout(x), v, np.empty((0, 0)), False), valid, weight, router,
                wanted, dirs, 4)
            np.testing.assert_array_equal(nodes, leaves[keep])
            np.testing.assert_array_equal(values.view(np.uint64), p[keep].view(np.uint64))
            np.testing.assert_array_equal(weights, weight[rows[keep]])


def test_the_chunk_copy_is_made_only_where_the_task_budget_keeps_room_for_it():
    """Several groups, computed projections, ``8 d <= 16 B`` bytes per row (runtime.memory)."""
    from daskdepth.kernels.tiles import whole_chunk

    v = np.zeros((8, 1))
    two = np.array([0, 4, 8], dtype=np.int64)
    for d, want in ((3, True), (16, True), (17, False)):
        assert whole_chunk(Projection(np.zeros((5, d)), v, np.empty((0, 0)), False), two) is want
    one = np.array([0, 8], dtype=np.int64)
    assert whole_chunk(Projection(np.zeros((5, 3)), v, np.empty((0, 0)), False), one) is False
    given = Projection(np.zeros((5, 3)), v, np.zeros((8, 5)), True)
    assert whole_chunk(given, two) is False
