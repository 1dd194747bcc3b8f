"""Per-row least-deep directions: a bounded top-k over direction blocks (NumPy/Numba, no Dask).

Explaining a row's depth needs the directions along which it is least deep:
the ``k`` smallest per-direction values ``c_j = min(L_j, G_j)`` (in rows) of
each row, with the direction's index and the side of its median the row lies
on.  Every row keeps ``k`` slots ordered by ``(c, -t, j)``, lexicographically,
with ``t = |p_j| / sigma_j`` the row's distance from the centre along the
direction in standard deviations (``p_j`` its centred projection): directions
of equal depth (a row beyond the data along many directions has depth 0 on
all of them) go to the one along which it lies farthest out, then to the
smaller index.  Partial results of any direction blocks merge
(:func:`merge_top`) into the same slots in any order.
Nothing of size rows x directions is ever stored: each block's values are
routed or searched a tile at a time, as the scoring kernels do, and pushed
into the slots.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .ranks import GUIDE_MIN_ROWS_PER_VALUE, _guide_or_whole, _guide_table, _tile_counts
from .ranks import TILE as SORTED_TILE
from .routing import TILE, direction_grid, route_tile

#: Direction index of an empty slot: any real direction sorts before it.
NO_DIRECTION = np.iinfo(np.int64).max


def empty_top(rows: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``k`` empty slots per row: values ``+inf``, distances 0, directions
    :data:`NO_DIRECTION`, sides 0.

    Examples
    --------
    >>> value, distance, direction, side = empty_top(2, 3)
    >>> value.shape, int(direction[0, 0]) == NO_DIRECTION, side.dtype.name
    ((2, 3), True, 'int8')
    """
    return (np.full((rows, k), np.inf), np.zeros((rows, k)),
            np.full((rows, k), NO_DIRECTION, dtype=np.int64), np.zeros((rows, k), dtype=np.int8))


@kernel
def _before(c, t, j, tv, tt, td, i, q):
    """Whether ``(c, -t, j)`` sorts before row ``i``'s slot ``q``."""
    if c != tv[i, q]:
        return c < tv[i, q]
    if t != tt[i, q]:
        return t > tt[i, q]
    return j < td[i, q]


@kernel
def push_top(tv, tt, td, ts, i, c, t, j, s):
    """Insert ``(c, t, j, s)`` into row ``i``'s slots if it is among its ``k`` first.

    Returns the row's new ``k``-th value (its threshold).
    """
    last = tv.shape[1] - 1
    if not _before(c, t, j, tv, tt, td, i, last):
        return tv[i, last]
    pos = last
    while pos > 0 and _before(c, t, j, tv, tt, td, i, pos - 1):
        tv[i, pos] = tv[i, pos - 1]
        tt[i, pos] = tt[i, pos - 1]
        td[i, pos] = td[i, pos - 1]
        ts[i, pos] = ts[i, pos - 1]
        pos -= 1
    tv[i, pos] = c
    tt[i, pos] = t
    td[i, pos] = j
    ts[i, pos] = s
    return tv[i, last]


@kernel
def merge_top(tv, tt, td, ts, ov, ot, od, os):
    """Push every filled slot of ``(ov, ot, od, os)`` into ``(tv, tt, td, ts)`` (same rows).

    The ``k`` first of a union are the ``k`` first of the parts' ``k`` first:
    merging is exact and its result does not depend on the order of the parts.
    """
    for i in range(tv.shape[0]):
        for q in range(ov.shape[1]):
            if od[i, q] == NO_DIRECTION:
                break
            push_top(tv, tt, td, ts, i, ov[i, q], ot[i, q], od[i, q], os[i, q])


@kernel
def _deepest_leaf(lut, l0, l1):
    """Local index of the first leaf of ``l0 .. l1 - 1`` with the largest tabulated value."""
    best = 0
    top = lut[l0]
    for q in range(1, l1 - l0):
        if lut[l0 + q] > top:
            top = lut[l0 + q]
            best = q
    return best


@kernel
def top_block(proj, valid, router, lut, j0, inv_scale, tv, tt, td, ts):
    """Push every valid row's tabulated ``min(L, G)`` on each direction of a leaf block.

    ``proj`` is a :class:`~daskdepth.kernels.tiles.Projection`, ``router`` a
    :class:`~daskdepth.kernels.routing.Router`; local direction ``jj`` is
    direction ``j0 + jj``, whose projections' spread is ``1 / inv_scale[jj]``.  The
    values are those :func:`score_block
    <daskdepth.kernels.blocks.score_block>` adds up (the same routing).  The
    side is -1 for a leaf before the direction's deepest leaf (the first with
    the largest tabulated value, which holds or borders the median), +1 after
    it, 0 in it.
    """
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    # Each row's k-th value, contiguous: most values are above it and rejected at once.
    thr = tv[:, tv.shape[1] - 1].copy()
    for jj in range(router.g_lo.size):
        l0 = lptr[jj]
        peak = _deepest_leaf(lut, l0, lptr[jj + 1])
        j = j0 + jj
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                if not valid[t0 + s]:
                    continue
                q = np.int64(lbuf[s])
                c = np.float64(lut[l0 + q])
                if c > thr[t0 + s]:
                    continue
                side = -1 if q < peak else (1 if q > peak else 0)
                t = abs(pbuf[s]) * inv_scale[jj]
                thr[t0 + s] = push_top(tv, tt, td, ts, t0 + s, c, t, j, side)


@kernel
def top_sorted(P, valid, S, j0, inv_scale, tv, tt, td, ts):
    """Push every valid row's exact ``min(L, G)`` on each direction of a sorted block.

    ``P[jj]`` holds the rows' projections on direction ``j0 + jj`` and ``S[jj]``
    the sorted reference projections; the counts are those of
    :func:`~daskdepth.kernels.ranks.score_sorted`.  The side is -1 where
    ``L < G`` (below the median), +1 where ``L > G``, 0 where they are equal.
    """
    mb, nr = P.shape
    n = S.shape[1]
    tab = _guide_table(n, nr >= GUIDE_MIN_ROWS_PER_VALUE * n)
    le = np.empty(SORTED_TILE, dtype=np.int64)
    lt = np.empty(SORTED_TILE, dtype=np.int64)
    thr = tv[:, tv.shape[1] - 1].copy()
    for jj in range(mb):
        s = S[jj]
        p = P[jj]
        lo, sc, gm, span = _guide_or_whole(s, tab)
        for t0 in range(0, nr, SORTED_TILE):
            m = min(SORTED_TILE, nr - t0)
            _tile_counts(s, p, t0, m, tab, lo, sc, gm, span, le, lt)
            for i in range(m):
                if not valid[t0 + i]:
                    continue
                below = le[i]
                above = n - lt[i]
                c = np.float64(min(below, above))
                if c > thr[t0 + i]:
                    continue
                side = -1 if below < above else (1 if below > above else 0)
                t = abs(p[t0 + i]) * inv_scale[jj]
                thr[t0 + i] = push_top(tv, tt, td, ts, t0 + i, c, t, j0 + jj, side)
