"""Block kernels: count, collect and score a row chunk on a block of directions (no Dask).

Routing, counting and scoring are fused per direction block and tiled: for
each group of directions whose tables fit half of L2
(:func:`~daskdepth.kernels.routing.route_groups`), each tile of rows is
projected on four directions at a time with a fixed-order product (rows in
SIMD lanes, :func:`~daskdepth.kernels.tiles.project_tile`), and routed
(:func:`~daskdepth.kernels.routing.route_values`) and used on each direction
while its projections are in L1.  The tiles' columns come from a copy of the
chunk's columns made once per kernel call when several groups read them
(:func:`~daskdepth.kernels.tiles.load_columns`), else from a copy of each
tile (:func:`~daskdepth.kernels.tiles.load_tile`).  Projections are never
stored beyond a tile, for any number of features.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .routing import direction_grid, route_values
from .tiles import load_tile, project_tile, tile_buffers, whole_chunk, wide_vectors


@kernel
def tile_step(groups, gi, j):
    """Directions projected together from direction ``j`` of group ``gi``: 4, or 1 at its end."""
    wide_vectors()
    return 4 if j + 4 <= groups[gi + 1] else 1


@kernel
def count_block(proj, valid, weight, router, counts, ext):
    """Add every projection to its leaf's count and to its direction's extremes.

    ``proj`` is a :class:`~daskdepth.kernels.tiles.Projection`, ``router`` a
    :class:`~daskdepth.kernels.routing.Router`.  Row ``i`` counts ``weight[i]`` times (its
    multiplicity); ``ext[jj]`` holds the ``(min, max)`` of direction ``jj``'s projections.  The
    chunk's columns are copied once (:func:`~daskdepth.kernels.tiles.load_columns`, about the
    chunk's size in memory) when the block has several direction groups (``router.groups``), each
    tile's columns in turn otherwise (:func:`~daskdepth.kernels.tiles.load_tile`,
    :func:`~daskdepth.kernels.tiles.whole_chunk`).  Per group and tile of
    :data:`~daskdepth.kernels.tiles.ROW_TILE` rows, the tile is projected on four directions at a
    time (:func:`~daskdepth.kernels.tiles.project_tile`) and routed on each
    (:func:`~daskdepth.kernels.routing.route_values`), then the four directions' counts and
    extremes are updated in one sweep over the rows (:func:`count4`); every leaf still receives its
    rows in row order.
    """
    wide_vectors()
    lptr = router.lptr
    groups = router.groups
    nr = valid.size
    whole = whole_chunk(proj, groups)
    xt, pb, lbuf, rows = tile_buffers(proj, valid, whole)
    lb = np.empty((4, rows), dtype=np.uint64)
    for gi in range(groups.size - 1):
        for t0 in range(0, nr, rows):
            m = min(rows, nr - t0)
            if not (proj.direct or whole):
                load_tile(proj.X, valid, t0, m, xt)
            x0 = t0 if whole else 0
            j = groups[gi]
            while j < groups[gi + 1]:
                g = tile_step(groups, gi, j)
                project_tile(proj, valid, xt, x0, j, g, t0, m, pb)
                for q in range(g):
                    jj = j + q
                    route_values(pb[q], m, direction_grid(router, jj), router.keys,
                                 router.table[jj], lb[q])
                if g == 4:
                    count4(counts, ext, lptr, j, lb, pb, m, valid[t0:t0 + m], weight[t0:t0 + m])
                else:
                    count1(counts, ext, lptr, j, lb[0], pb[0], m, valid[t0:t0 + m],
                           weight[t0:t0 + m])
                j += g


@kernel
def count1(counts, ext, lptr, jj, leaves, pv, m, valid, weight):
    """Add the valid rows' weights to their leaves on direction ``jj``, ``pv`` to its extremes."""
    wide_vectors()
    l0 = lptr[jj]
    lo = ext[jj, 0]
    hi = ext[jj, 1]
    for s in range(m):
        if not valid[s]:
            continue
        p = pv[s]
        counts[l0 + np.int64(leaves[s])] += weight[s]
        lo = min(lo, p)
        hi = max(hi, p)
    ext[jj, 0] = lo
    ext[jj, 1] = hi


@kernel
def count4(counts, ext, lptr, j, lb, pb, m, valid, weight):
    """:func:`count1` of directions ``j .. j + 3`` (leaves ``lb[q]``, projections ``pb[q]``).

    One sweep over the rows; each leaf still receives its rows in row order.
    """
    wide_vectors()
    l0 = lptr[j]
    l1 = lptr[j + 1]
    l2 = lptr[j + 2]
    l3 = lptr[j + 3]
    b0 = lb[0]
    b1 = lb[1]
    b2 = lb[2]
    b3 = lb[3]
    p0 = pb[0]
    p1 = pb[1]
    p2 = pb[2]
    p3 = pb[3]
    lo0, hi0 = ext[j, 0], ext[j, 1]
    lo1, hi1 = ext[j + 1, 0], ext[j + 1, 1]
    lo2, hi2 = ext[j + 2, 0], ext[j + 2, 1]
    lo3, hi3 = ext[j + 3, 0], ext[j + 3, 1]
    for s in range(m):
        if not valid[s]:
            continue
        w = weight[s]
        counts[l0 + np.int64(b0[s])] += w
        counts[l1 + np.int64(b1[s])] += w
        counts[l2 + np.int64(b2[s])] += w
        counts[l3 + np.int64(b3[s])] += w
        lo0 = min(lo0, p0[s])
        hi0 = max(hi0, p0[s])
        lo1 = min(lo1, p1[s])
        hi1 = max(hi1, p1[s])
        lo2 = min(lo2, p2[s])
        hi2 = max(hi2, p2[s])
        lo3 = min(lo3, p3[s])
        hi3 = max(hi3, p3[s])
    ext[j, 0], ext[j, 1] = lo0, hi0
    ext[j + 1, 0], ext[j + 1, 1] = lo1, hi1
    ext[j + 2, 0], ext[j + 2, 1] = lo2, hi2
    ext[j + 3, 0], ext[j + 3, 1] = lo3, hi3


@kernel
def collect_block(proj, valid, weight, router, wanted, dirs, expected):
    """Leaf, projection and row weight of every value that lands in a ``wanted`` leaf.

    Only the directions with ``dirs[jj]`` set are routed.  ``expected`` sizes
    the output buffer, which grows if it is exceeded.  The values come ordered
    by direction, then row (the tiles' values are put in that order at the end).
    """
    wide_vectors()
    lptr = router.lptr
    groups = router.groups
    mb = router.g_lo.size
    nr = valid.size
    whole = whole_chunk(proj, groups)
    xt, pb, lbuf, rows = tile_buffers(proj, valid, whole)
    cap = max(16, expected)
    nodes = np.empty(cap, dtype=np.int64)
    values = np.empty(cap, dtype=np.float64)
    weights = np.empty(cap, dtype=np.float64)
    of_dir = np.empty(cap, dtype=np.int64)
    per_dir = np.zeros(mb + 1, dtype=np.int64)
    h = 0
    for gi in range(groups.size - 1):
        if not dirs[groups[gi]:groups[gi + 1]].any():
            continue
        for t0 in range(0, nr, rows):
            m = min(rows, nr - t0)
            if not (proj.direct or whole):
                load_tile(proj.X, valid, t0, m, xt)
            x0 = t0 if whole else 0
            j = groups[gi]
            while j < groups[gi + 1]:
                g = tile_step(groups, gi, j)
                if not dirs[j:j + g].any():
                    j += g
                    continue
                project_tile(proj, valid, xt, x0, j, g, t0, m, pb)
                for q in range(g):
                    jj = j + q
                    if not dirs[jj]:
                        continue
                    pv = pb[q]
                    route_values(pv, m, direction_grid(router, jj), router.keys,
                                 router.table[jj], lbuf)
                    l0 = lptr[jj]
                    for s in range(m):
                        node = l0 + np.int64(lbuf[s])
                        if not (valid[t0 + s] and wanted[node]):
                            continue
                        if h == cap:
                            cap *= 2
                            n2 = np.empty(cap, dtype=np.int64)
                            v2 = np.empty(cap, dtype=np.float64)
                            w2 = np.empty(cap, dtype=np.float64)
                            d2 = np.empty(cap, dtype=np.int64)
                            n2[:h] = nodes[:h]
                            v2[:h] = values[:h]
                            w2[:h] = weights[:h]
                            d2[:h] = of_dir[:h]
                            nodes = n2
                            values = v2
                            weights = w2
                            of_dir = d2
                        nodes[h] = node
                        values[h] = pv[s]
                        weights[h] = weight[t0 + s]
                        of_dir[h] = jj
                        per_dir[jj + 1] += 1
                        h += 1
                j += g
    # Stable counting sort by direction: within a direction, tiles and rows came in order.
    for jj in range(mb):
        per_dir[jj + 1] += per_dir[jj]
    on, ov, ow = np.empty(h, dtype=np.int64), np.empty(h), np.empty(h)
    for e in range(h):
        at = per_dir[of_dir[e]]
        per_dir[of_dir[e]] += 1
        on[at] = nodes[e]
        ov[at] = values[e]
        ow[at] = weights[e]
    return on, ov, ow


#: What :func:`score_tiles` does with each tabulated value ``v`` of a row: add it
#: (IRW depths: the mean over directions), add it and its square (the spread over
#: directions), or keep the smallest (the halfspace depth: the minimum).
ADD, ADD_SQUARES, LOWER = 0, 1, 2


@kernel
def score_tiles(proj, valid, router, lut, out, out_sq, mode):
    """Route every row on the block's directions and fold the tabulated values into ``out``.

    Tiled as :func:`count_block`; each row's values are folded in direction
    order.  ``mode`` (:data:`ADD`, :data:`ADD_SQUARES`, :data:`LOWER`) is tested
    once per group of directions, outside the row loop.  The four directions
    projected together are routed first, then folded in one sweep over the
    rows (:func:`fold4`): ``(((out + v0) + v1) + v2) + v3``, the sums of four
    sweeps, so the same bits, with one load and store of ``out`` per four values.
    """
    wide_vectors()
    lptr = router.lptr
    groups = router.groups
    nr = valid.size
    whole = whole_chunk(proj, groups)
    xt, pb, lbuf, rows = tile_buffers(proj, valid, whole)
    lb = np.empty((4, rows), dtype=np.uint64)
    for gi in range(groups.size - 1):
        for t0 in range(0, nr, rows):
            m = min(rows, nr - t0)
            if not (proj.direct or whole):
                load_tile(proj.X, valid, t0, m, xt)
            x0 = t0 if whole else 0
            j = groups[gi]
            while j < groups[gi + 1]:
                g = tile_step(groups, gi, j)
                project_tile(proj, valid, xt, x0, j, g, t0, m, pb)
                for q in range(g):
                    jj = j + q
                    route_values(pb[q], m, direction_grid(router, jj), router.keys,
                                 router.table[jj], lb[q])
                if g == 4:
                    fold4(lut, lptr, j, lb, m, out[t0:t0 + m], out_sq[t0:t0 + m], mode)
                else:
                    fold1(lut, lptr[j], lb[0], m, out[t0:t0 + m], out_sq[t0:t0 + m], mode)
                j += g


@kernel
def fold1(lut, l0, leaves, m, out, out_sq, mode):
    """Fold the tabulated values of one direction's leaves (from ``lut[l0]``) into ``out``."""
    wide_vectors()
    if mode == ADD:
        for s in range(m):
            out[s] += lut[l0 + np.int64(leaves[s])]
    elif mode == ADD_SQUARES:
        for s in range(m):
            v = np.float64(lut[l0 + np.int64(leaves[s])])
            out[s] += v
            out_sq[s] += v * v
    else:
        for s in range(m):
            v = np.float64(lut[l0 + np.int64(leaves[s])])
            if v < out[s]:
                out[s] = v


@kernel
def fold4(lut, lptr, j, lb, m, out, out_sq, mode):
    """:func:`fold1` of directions ``j .. j + 3`` (leaves ``lb[0 .. 3]``), in direction order."""
    wide_vectors()
    l0 = lptr[j]
    l1 = lptr[j + 1]
    l2 = lptr[j + 2]
    l3 = lptr[j + 3]
    b0 = lb[0]
    b1 = lb[1]
    b2 = lb[2]
    b3 = lb[3]
    if mode == ADD:
        for s in range(m):
            v0 = np.float64(lut[l0 + np.int64(b0[s])])
            v1 = np.float64(lut[l1 + np.int64(b1[s])])
            v2 = np.float64(lut[l2 + np.int64(b2[s])])
            v3 = np.float64(lut[l3 + np.int64(b3[s])])
            out[s] = (((out[s] + v0) + v1) + v2) + v3
    elif mode == ADD_SQUARES:
        for s in range(m):
            v0 = np.float64(lut[l0 + np.int64(b0[s])])
            v1 = np.float64(lut[l1 + np.int64(b1[s])])
            v2 = np.float64(lut[l2 + np.int64(b2[s])])
            v3 = np.float64(lut[l3 + np.int64(b3[s])])
            out[s] = (((out[s] + v0) + v1) + v2) + v3
            out_sq[s] = (((out_sq[s] + v0 * v0) + v1 * v1) + v2 * v2) + v3 * v3
    else:
        for s in range(m):
            v0 = np.float64(lut[l0 + np.int64(b0[s])])
            v1 = np.float64(lut[l1 + np.int64(b1[s])])
            v2 = np.float64(lut[l2 + np.int64(b2[s])])
            v3 = np.float64(lut[l3 + np.int64(b3[s])])
            low = out[s]
            if v0 < low:
                low = v0
            if v1 < low:
                low = v1
            if v2 < low:
                low = v2
            if v3 < low:
                low = v3
            out[s] = low


@kernel
def score_block(proj, valid, router, lut, out):
    """Add the tabulated ``min(L, G)`` of every projection's leaf to ``out`` (per row)."""
    wide_vectors()
    score_tiles(proj, valid, router, lut, out, out, ADD)


@kernel
def score_block_squares(proj, valid, router, lut, out, out_sq):
    """:func:`score_block`, also adding the square of every tabulated value to ``out_sq``.

    The sums of squares give each point's spread over directions (its Monte
    Carlo standard error).
    """
    wide_vectors()
    score_tiles(proj, valid, router, lut, out, out_sq, ADD_SQUARES)


@kernel
def score_block_min(proj, valid, router, lut, out):
    """Lower ``out`` (per row) to the smallest tabulated ``min(L, G)`` over the block's directions.

    The halfspace (Tukey) depth takes the minimum over directions where IRW
    depths take the mean.
    """
    wide_vectors()
    score_tiles(proj, valid, router, lut, out, out, LOWER)
