"""Projection and routing kernels: which leaf each projection falls in (NumPy/Numba, no Dask).

The per-direction summary of the reference projections is a sorted list of
leaf keys: leaf ``k`` holds the projections ``p`` with ``key[k-1] <= p <
key[k]``.  Routing a value is counting the keys ``<= p``, which is monotone in
``p``, so every row in a leaf to the left of the leaf of ``q`` is strictly
smaller than ``q`` and every row to the right is strictly larger.  Each leaf
keeps the exact count of its rows, which makes atoms (leaves
``[a, nextafter(a))``) and empty leaves exact and bounds the error of any
other leaf by ``count / 2`` rows.

Routing, counting and scoring are fused per direction block: projections are
computed, routed and used in one loop, never stored.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ._jit import kernel

#: Dimension up to which the routing kernels project each row inline; above it
#: a sum of ``d`` dependent products per value is slower than projecting the
#: chunk beforehand with :func:`project` (SIMD over rows, same bits).
PROJECT_MAX_D = 32


class Projection(NamedTuple):
    """What the block kernels project: rows ``X`` on directions ``V``.

    With ``direct`` the projections were computed beforehand into ``P``
    (``(n_dir, n_rows)``, by :func:`project`); otherwise each kernel projects
    inline and ``P`` is empty.
    """

    X: np.ndarray
    V: np.ndarray
    P: np.ndarray
    direct: bool


class Router(NamedTuple):
    """A block's routing structure: guide grid per direction, padded keys, leaf offsets.

    Direction ``jj``'s guide grid has ``g`` cells: linear from ``g_lo[jj]`` with
    scale ``g_scale[jj]``, or, where ``g_log[jj, 0] > 0``, logarithmic around
    ``g_lo[jj]`` (see :func:`log_cell`); its keys start at ``keys[kptr[jj]]`` and
    its leaves at ``lptr[jj]``; ``table[jj, c]`` counts its keys in the cells
    before ``c``.
    """

    g_lo: np.ndarray
    g_scale: np.ndarray
    g: int
    kptr: np.ndarray
    keys: np.ndarray
    table: np.ndarray
    lptr: np.ndarray
    g_log: np.ndarray


#: ``+inf`` sentinels after each direction's keys: the window search below reads
#: up to eight keys past the first candidate without a bounds test.
PAD = 8


@kernel
def cell(p, lo, sc, gm):
    """Guide cell in ``[0, g + 1]`` of ``p`` (``gm = g + 0.5``); monotone in ``p``.

    Always in range, whatever ``lo`` and ``sc`` hold: NaN (from a degenerate or
    crafted grid) gives cell 0, from which the search still counts correctly.
    """
    x = (p - lo) * sc
    if not x > -1.0:
        x = -1.0
    elif x > gm:
        x = gm
    return np.uint64(np.int64(x + 1.0))


@kernel
def log_cell(p, c, inv_s, k, gm):
    """Guide cell in ``[0, g + 1]`` of ``p`` on a logarithmic scale around ``c``; monotone.

    ``g / 2 + sign(t) k L(|t| / s)`` with ``t = p - c`` and ``L(u) = e - 2 + 2 m``
    for ``1 + u = m 2^e`` (``frexp``), the piecewise-linear ``log2(1 + u)``: exact
    and continuous at powers of 2, and every step is monotone (rounding is), so
    keys in earlier cells are never above ``p``.  Cells grow geometrically away
    from ``c``, which spreads the keys of heavy-tailed projections (most within
    +-1, a few at 1e20) evenly enough for the eight-key search.
    """
    t = p - c
    m, e = math.frexp(abs(t) * inv_s + 1.0)
    x = k * ((e - 2) + 2.0 * m)
    pos = 0.5 * (gm - 0.5) + x if t >= 0.0 else 0.5 * (gm - 0.5) - x
    return np.uint64(np.int64(min(max(pos, -1.0), gm) + 1.0))


#: Rows routed together: a tile's projections and leaves stay in L1 while each
#: phase (project, search, use) runs over it.  Short dependency chains per
#: phase let the CPU overlap many rows' memory loads (faster than routing and
#: using one row at a time).
TILE = 256


#: Largest finite float64: overflowing projections are clamped to it (NaN, from
#: inf - inf, to the top), i.e. ranked beyond every reference value.
MAXF = 1.7976931348623157e308


class Grid(NamedTuple):
    """One direction's guide grid, read once per direction by the block kernels.

    ``lo``, ``sc``: a linear grid's origin and scale; ``ls``, ``lk``: a
    logarithmic grid's inverse scale and cells per octave (``ls > 0``: the
    grid is logarithmic, :func:`log_cell`); ``gm = g + 0.5``; ``k0``: where
    the direction's keys start.
    """

    lo: float
    sc: float
    ls: float
    lk: float
    gm: float
    k0: np.uint64


@kernel
def direction_grid(router, jj):
    """The :class:`Grid` of direction ``jj`` of a block's :class:`Router`."""
    return Grid(router.g_lo[jj], router.g_scale[jj], router.g_log[jj, 0], router.g_log[jj, 1],
                router.g + 0.5, np.uint64(router.kptr[jj]))


@kernel
def route_tile(proj, valid, grid, keys, tab, jj, t0, t1, pbuf, lbuf):
    """Projections and leaves of rows ``t0 .. t1 - 1`` on direction ``jj`` of a block.

    ``proj`` is a :class:`Projection`, ``grid`` the direction's :class:`Grid`
    (:func:`direction_grid`), ``keys`` the block's padded keys and ``tab`` the
    direction's row of the guide table; ``pbuf[i - t0]`` receives row ``i``'s
    projection ``p`` and ``lbuf[i - t0]`` its leaf (the number of the
    direction's keys ``<= p``).  Projections are summed feature by feature in a
    fixed order, so a row's value does not depend on its chunk and equals
    :func:`project`'s (BLAS may reorder sums by shape); with ``direct`` they
    are read from ``P``.  The search starts at the first key of the row's
    guide cell (:func:`cell`, or :func:`log_cell` where the direction's grid is
    logarithmic) and counts the keys ``<= p`` among the next eight without
    branches; a cell with more than seven keys ``<= p`` (rare with four cells
    per key and a guide fitted to the keys) continues linearly until a ``+inf``
    sentinel.  Invalid rows get projection 0 and are skipped by callers.

    The grid's scalars come as one record made once per direction, and the
    arrays as arguments: unpacking the block's :class:`Router` here, once per
    tile, keeps more values live in the callers' loops.
    """
    X, V, P, direct = proj
    d = X.shape[1]
    lo, sc, ls, lk, gm, k0 = grid
    for i in range(t0, t1):
        if not valid[i]:
            p = 0.0
        elif direct:
            p = P[jj, i]
        else:
            p = 0.0
            for k in range(d):
                p += X[i, k] * V[jj, k]
        if not p >= -MAXF:
            p = -MAXF if p < 0.0 else MAXF
        elif p > MAXF:
            p = MAXF
        pbuf[i - t0] = p
    # The grid is the direction's: tested once per tile, not in the row loop.
    if ls > 0.0:
        for s in range(t1 - t0):
            lbuf[s] = k0 + np.uint64(tab[log_cell(pbuf[s], lo, ls, lk, gm)])
    else:
        for s in range(t1 - t0):
            lbuf[s] = k0 + np.uint64(tab[cell(pbuf[s], lo, sc, gm)])
    for s in range(t1 - t0):
        p = pbuf[s]
        q = lbuf[s]
        q += np.uint64(4) * np.uint64(keys[q + np.uint64(3)] <= p)
        q += np.uint64(2) * np.uint64(keys[q + np.uint64(1)] <= p)
        q += np.uint64(keys[q] <= p)
        while keys[q] <= p:
            q += np.uint64(1)
        lbuf[s] = q - k0


#: Rows projected together by :func:`project_columns`: the tile's columns (``d``
#: rows of 4 KiB) stay in L2 while every group of four directions reads them.
PROJECT_TILE = 512


@kernel
def _madd4x4(r0, r1, r2, r3, c0, c1, c2, c3, V, j, k):
    """Add features ``k .. k + 3`` (columns ``c0 .. c3``) of directions ``j .. j + 3``, in order."""
    a0 = V[j, k]
    a1 = V[j, k + 1]
    a2 = V[j, k + 2]
    a3 = V[j, k + 3]
    b0 = V[j + 1, k]
    b1 = V[j + 1, k + 1]
    b2 = V[j + 1, k + 2]
    b3 = V[j + 1, k + 3]
    e0 = V[j + 2, k]
    e1 = V[j + 2, k + 1]
    e2 = V[j + 2, k + 2]
    e3 = V[j + 2, k + 3]
    f0 = V[j + 3, k]
    f1 = V[j + 3, k + 1]
    f2 = V[j + 3, k + 2]
    f3 = V[j + 3, k + 3]
    for i in range(r0.size):
        x0 = c0[i]
        x1 = c1[i]
        x2 = c2[i]
        x3 = c3[i]
        r0[i] = (((r0[i] + x0 * a0) + x1 * a1) + x2 * a2) + x3 * a3
        r1[i] = (((r1[i] + x0 * b0) + x1 * b1) + x2 * b2) + x3 * b3
        r2[i] = (((r2[i] + x0 * e0) + x1 * e1) + x2 * e2) + x3 * e3
        r3[i] = (((r3[i] + x0 * f0) + x1 * f1) + x2 * f2) + x3 * f3


@kernel
def _madd4x1(r0, c0, c1, c2, c3, V, j, k):
    """:func:`_madd4x4` for the one direction ``j``."""
    a0 = V[j, k]
    a1 = V[j, k + 1]
    a2 = V[j, k + 2]
    a3 = V[j, k + 3]
    for i in range(r0.size):
        r0[i] = (((r0[i] + c0[i] * a0) + c1[i] * a1) + c2[i] * a2) + c3[i] * a3


@kernel
def _madd1(r, c, v):
    """Add one feature (column ``c``, coefficient ``v``) to the projections ``r``."""
    for i in range(r.size):
        r[i] = r[i] + c[i] * v


@kernel
def project_columns(xt, V, P):
    """``P[j] = `` projections of the rows whose columns are ``xt`` (d, n) on ``V[j]``.

    Every value is summed feature by feature from 0.0, as :func:`route_tile`
    does (a product, then a sum, never fused), so the values are the same bits
    however rows are tiled or chunked.  Tiled for speed: tiles of
    :data:`PROJECT_TILE` rows, four directions and four features per sweep
    (one load and store of a projection per four products), rows innermost in
    SIMD lanes: faster than one direction and one feature per sweep for wide
    rows, and as fast for narrow ones.
    """
    d, nr = xt.shape
    mb = V.shape[0]
    for i0 in range(0, nr, PROJECT_TILE):
        i1 = min(nr, i0 + PROJECT_TILE)
        j = 0
        while j < mb:
            g = 4 if j + 4 <= mb else 1
            for q in range(g):
                P[j + q, i0:i1] = 0.0
            k = 0
            while k + 4 <= d:
                if g == 4:
                    _madd4x4(P[j, i0:i1], P[j + 1, i0:i1], P[j + 2, i0:i1], P[j + 3, i0:i1],
                             xt[k, i0:i1], xt[k + 1, i0:i1], xt[k + 2, i0:i1], xt[k + 3, i0:i1],
                             V, j, k)
                else:
                    _madd4x1(P[j, i0:i1], xt[k, i0:i1], xt[k + 1, i0:i1], xt[k + 2, i0:i1],
                             xt[k + 3, i0:i1], V, j, k)
                k += 4
            while k < d:
                for q in range(g):
                    _madd1(P[j + q, i0:i1], xt[k, i0:i1], V[j + q, k])
                k += 1
            j += g


def project(X: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Projections (n_dir, n_rows) of the rows of ``X`` on the rows of ``V``.

    The same bits as the routing kernels' (see :func:`project_columns`).
    """
    P = np.empty((V.shape[0], X.shape[0]))
    project_columns(np.ascontiguousarray(X.T), np.ascontiguousarray(V), P)
    return P


@kernel
def pad_keys(cptr, cuts):
    """Each direction's keys followed by ``PAD`` copies of ``+inf`` (see :func:`route_tile`)."""
    mb = cptr.size - 1
    keys = np.empty(cuts.size + PAD * mb)
    q = 0
    for jj in range(mb):
        for b in range(cptr[jj], cptr[jj + 1]):
            keys[q] = cuts[b]
            q += 1
        for _ in range(PAD):
            keys[q] = np.inf
            q += 1
    return keys


@kernel
def unpad_keys(cptr, keys):
    """The keys of :func:`pad_keys` without the padding."""
    mb = cptr.size - 1
    out = np.empty(cptr[-1])
    for jj in range(mb):
        k0 = cptr[jj] + PAD * jj
        for b in range(cptr[jj], cptr[jj + 1]):
            out[b] = keys[k0 + b - cptr[jj]]
    return out


@kernel
def guide_table(g_lo, g_scale, g_log, g, kptr, keys, table, only, crowded=0, scan_max=0.0):
    """Fill ``table[jj, c]``: keys of direction ``jj`` whose guide cell is before ``c``.

    Only the directions with ``only[jj]`` are filled.  Returns each direction's
    expected scan, ``sum over cells of keys ** 2 / keys``: the keys a lookup
    starts before or scans, for a point distributed like the keys.

    With ``crowded > 0``, stops at the first direction that has a cell of more
    than ``crowded`` keys and an expected scan of at most ``scan_max`` (so no
    other grid would replace its own), and returns an empty array: a grid
    tried for its smaller table that cannot be kept is given up at once.
    """
    gm = g + 0.5
    cost = np.zeros(g_lo.size)
    for jj in range(g_lo.size):
        if not only[jj]:
            continue
        row = table[jj]
        row[:] = 0
        for k in range(kptr[jj], kptr[jj + 1] - PAD):
            if g_log[jj, 0] > 0.0:
                c = log_cell(keys[k], g_lo[jj], g_log[jj, 0], g_log[jj, 1], gm)
            else:
                c = cell(keys[k], g_lo[jj], g_scale[jj], gm)
            if c + 1 < g + 2:
                row[c + 1] += 1
        sq = 0.0
        most = 0
        for c in range(1, g + 2):
            most = max(most, np.int64(row[c]))
            sq += float(row[c]) * float(row[c])
            row[c] += row[c - 1]
        cost[jj] = sq / max(1, kptr[jj + 1] - PAD - kptr[jj])
        if crowded > 0 and most > crowded and cost[jj] <= scan_max:
            return np.zeros(0)
    return cost


@kernel
def leaf_atoms(cptr, cuts):
    """Which leaves are atoms: those between two keys with no float between them."""
    mb = cptr.size - 1
    out = np.zeros(cuts.size + mb, dtype=np.bool_)
    for jj in range(mb):
        for b in range(cptr[jj] + 1, cptr[jj + 1]):
            if np.nextafter(cuts[b - 1], np.inf) == cuts[b]:
                out[b + jj] = True  # leaf b - cptr[jj] of direction jj
    return out


@kernel
def count_block(proj, valid, weight, router, counts, ext):
    """Add every projection to its leaf's count and to its direction's extremes.

    ``proj`` is a :class:`Projection`, ``router`` a :class:`Router`.  Row ``i``
    counts ``weight[i]`` times (its multiplicity); ``ext[jj]`` holds the
    ``(min, max)`` of direction ``jj``'s projections, kept in registers.
    """
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(router.g_lo.size):
        l0 = lptr[jj]
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        lo = ext[jj, 0]
        hi = ext[jj, 1]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                if not valid[t0 + s]:
                    continue
                p = pbuf[s]
                counts[l0 + np.int64(lbuf[s])] += weight[t0 + s]
                lo = min(lo, p)
                hi = max(hi, p)
        ext[jj, 0] = lo
        ext[jj, 1] = hi


@kernel
def collect_block(proj, valid, weight, router, wanted, dirs, expected):
    """Leaf, projection and row weight of every value that lands in a ``wanted`` leaf.

    Only the directions with ``dirs[jj]`` set are routed.  ``expected`` sizes
    the output buffer, which grows if it is exceeded.
    """
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    cap = max(16, expected)
    nodes = np.empty(cap, dtype=np.int64)
    values = np.empty(cap, dtype=np.float64)
    weights = np.empty(cap, dtype=np.float64)
    h = 0
    for jj in range(router.g_lo.size):
        if not dirs[jj]:
            continue
        l0 = lptr[jj]
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                node = l0 + np.int64(lbuf[s])
                if not (valid[t0 + s] and wanted[node]):
                    continue
                if h == cap:
                    cap *= 2
                    n2 = np.empty(cap, dtype=np.int64)
                    v2 = np.empty(cap, dtype=np.float64)
                    w2 = np.empty(cap, dtype=np.float64)
                    n2[:h] = nodes[:h]
                    v2[:h] = values[:h]
                    w2[:h] = weights[:h]
                    nodes = n2
                    values = v2
                    weights = w2
                nodes[h] = node
                values[h] = pbuf[s]
                weights[h] = weight[t0 + s]
                h += 1
    return nodes[:h].copy(), values[:h].copy(), weights[:h].copy()


@kernel
def score_block(proj, valid, router, lut, out):
    """Add the tabulated ``min(L, G)`` of every projection's leaf to ``out`` (per row)."""
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(router.g_lo.size):
        l0 = lptr[jj]
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                out[t0 + s] += lut[l0 + np.int64(lbuf[s])]


@kernel
def score_block_squares(proj, valid, router, lut, out, out_sq):
    """:func:`score_block`, also adding the square of every tabulated value to ``out_sq``.

    The sums of squares give each point's spread over directions (its Monte
    Carlo standard error).
    """
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(router.g_lo.size):
        l0 = lptr[jj]
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                v = np.float64(lut[l0 + np.int64(lbuf[s])])
                out[t0 + s] += v
                out_sq[t0 + s] += v * v


@kernel
def score_block_min(proj, valid, router, lut, out):
    """Lower ``out`` (per row) to the smallest tabulated ``min(L, G)`` over the block's directions.

    The halfspace (Tukey) depth takes the minimum over directions where IRW
    depths take the mean.
    """
    lptr = router.lptr
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(router.g_lo.size):
        l0 = lptr[jj]
        grid = direction_grid(router, jj)
        tab = router.table[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(proj, valid, grid, router.keys, tab, jj, t0, t1, pbuf, lbuf)
            for s in range(t1 - t0):
                v = np.float64(lut[l0 + np.int64(lbuf[s])])
                if v < out[t0 + s]:
                    out[t0 + s] = v

