"""Projection and routing kernels: which leaf each projection falls in (NumPy/Numba, no Dask).

The per-direction summary of the reference projections is a sorted list of
leaf keys: leaf ``k`` holds the projections ``p`` with ``key[k-1] <= p <
key[k]``.  Routing a value is counting the keys ``<= p``, which is monotone in
``p``, so every row in a leaf to the left of the leaf of ``q`` is strictly
smaller than ``q`` and every row to the right is strictly larger.  Each leaf
keeps the exact count of its rows, which makes atoms (leaves
``[a, nextafter(a))``) and empty leaves exact and bounds the error of any
other leaf by ``count / 2`` rows.

Routing, counting and scoring are fused per direction block and tiled: for
each group of directions whose tables fit half of L2 (:func:`route_groups`),
each tile of rows is projected on four directions at a time with a
fixed-order product (rows in SIMD lanes, :func:`project_tile`), and routed
and used on each direction while its projections are in L1.  The tiles'
columns come from a copy of the chunk's columns made once per kernel call
when several groups read them (:func:`load_columns`), else from a copy of
each tile (:func:`load_tile`).  Projections are never stored beyond a tile,
for any number of features.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._jit import kernel

#: Dimension up to which :func:`route_tile` (used per row by
#: :func:`daskdepth.kernels.top.top_block`) projects each row inline; above it
#: a sum of ``d`` dependent products per value is slower than projecting the
#: chunk beforehand with :func:`project` (SIMD over rows, same bits).  The
#: block kernels project tiles themselves (:func:`project_tile`) at every ``d``.
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
    before ``c``.  ``groups`` bounds the consecutive direction groups whose
    keys and guide rows fit :data:`ROUTE_GROUP_BYTES` (:func:`route_groups`):
    the block kernels route a row tile on every direction of a group before
    the next tile.
    """

    g_lo: np.ndarray
    g_scale: np.ndarray
    g: int
    kptr: np.ndarray
    keys: np.ndarray
    table: np.ndarray
    lptr: np.ndarray
    g_log: np.ndarray
    groups: np.ndarray


#: ``+inf`` sentinels after each direction's keys: the routing search reads up
#: to :data:`CELL_WINDOW` keys past the first candidate without a bounds test,
#: and its rare linear continuation stops at the first sentinel.
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
    +-1, a few at 1e20) evenly enough for the search's window of four keys.
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
    logarithmic) and counts the keys ``<= p`` among the next four with
    independent compares (:func:`route_values`); a cell with four keys or more
    ``<= p`` (rare with a guide fitted to the keys) continues linearly until a
    key ``> p``.  Invalid rows get projection 0 and are skipped by callers.

    The grid's scalars come as one record made once per direction, and the
    arrays as arguments: unpacking the block's :class:`Router` here, once per
    tile, keeps more values live in the callers' loops.
    """
    X, V, P, direct = proj
    d = X.shape[1]
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
    route_values(pbuf, t1 - t0, grid, keys, tab, lbuf)


@kernel
def route_values(pv, m, grid, keys, tab, lbuf):
    """Leaves ``lbuf[:m]`` of the (clamped) projections ``pv[:m]`` on one direction.

    ``grid`` is the direction's :class:`Grid`, ``keys`` the block's padded keys
    and ``tab`` the direction's row of the guide table; a leaf is the number of
    the direction's keys ``<= p`` (see :func:`route_tile`).

    The guide cell ``c`` is monotone in ``p``, so every key of a later cell is
    ``> p``: the leaf is ``tab[c]`` (the keys of earlier cells) plus the keys
    ``<= p`` among the next :data:`CELL_WINDOW`, counted with one vector load
    and compare (:func:`keys_at_most`), where the last of them is ``> p``.
    That holds unless cell ``c`` has more keys than the window and ``p`` is
    past them (rare: guide grids keep at most
    :data:`~daskdepth.summary.guide.GUIDE_CELL_KEYS` keys in a cell, mostly one
    to three); then the count continues linearly up to the first key ``> p``
    (every direction's keys end with ``+inf`` padding).  Before, each value
    went through three dependent steps over eight keys: about five dependent
    loads, where this has two (the guide table, then the keys).
    """
    lo, sc, ls, lk, gm, k0 = grid
    # The grid is the direction's: tested once per tile, not in the row loop.
    if ls > 0.0:
        for s in range(m):
            lbuf[s] = log_cell(pv[s], lo, ls, lk, gm)
    else:
        for s in range(m):
            lbuf[s] = cell(pv[s], lo, sc, gm)
    kd = keys[k0:]  # the direction's keys: leaves are indices into them
    for s in range(m):
        p = pv[s]
        q = np.uint64(tab[lbuf[s]])
        c = keys_at_most(kd, q, p)  # keys are sorted: those <= p come first
        leaf = q + c
        if c == np.uint64(CELL_WINDOW):  # the window's keys are all <= p: the cell may hold more
            while kd[leaf] <= p:
                leaf += np.uint64(1)
        lbuf[s] = leaf


#: Keys compared at once, independently, from the first candidate of a guide
#: cell (:func:`route_values`, :func:`keys_at_most`); :data:`PAD` ``+inf``
#: sentinels follow each direction's keys, so the window never reads past them.
CELL_WINDOW = 4


@intrinsic
def keys_at_most(typingctx, keys, start, p):
    """How many of ``keys[start:start + 4]`` are ``<= p`` (a uint64 in ``0 .. 4``).

    One unaligned load of the four keys as a vector, one compare with ``p``
    (ordered ``<=``, so false for NaN, as ``keys[i] <= p``), a popcount of
    the four bits: fewer instructions than four scalar loads, compares and
    adds, which made the block kernels 1.10x faster (counting and scoring
    at ``10^6 x 10``, ``tol = 1e-4``).  No bounds
    test: callers keep ``start + 4 <= keys.size`` (:data:`PAD`).  Numba
    compiles it inline (LLVM IR), on any target.
    """
    sig = types.uint64(keys, start, p)

    def codegen(context, builder, signature, args):
        arr, at, value = args
        data = context.make_array(signature.args[0])(context, builder, arr).data
        vec4 = ir.VectorType(ir.DoubleType(), CELL_WINDOW)
        ptr = builder.bitcast(builder.gep(data, [at]), vec4.as_pointer())
        window = builder.load(ptr, align=8)
        lane0 = builder.insert_element(ir.Constant(vec4, ir.Undefined), value,
                                       ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(
            lane0, ir.Constant(vec4, ir.Undefined),
            ir.Constant(ir.VectorType(ir.IntType(32), CELL_WINDOW), [0] * CELL_WINDOW))
        bits = builder.bitcast(builder.fcmp_ordered("<=", window, splat),
                               ir.IntType(CELL_WINDOW))
        return builder.zext(builder.ctpop(bits), ir.IntType(64))

    return sig, codegen


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
def _madd2x4(r0, r1, r2, r3, c0, c1, V, j, k):
    """Add features ``k, k + 1`` (columns ``c0, c1``) of directions ``j .. j + 3``, in order."""
    a0 = V[j, k]
    a1 = V[j, k + 1]
    b0 = V[j + 1, k]
    b1 = V[j + 1, k + 1]
    e0 = V[j + 2, k]
    e1 = V[j + 2, k + 1]
    f0 = V[j + 3, k]
    f1 = V[j + 3, k + 1]
    for i in range(r0.size):
        x0 = c0[i]
        x1 = c1[i]
        r0[i] = (r0[i] + x0 * a0) + x1 * a1
        r1[i] = (r1[i] + x0 * b0) + x1 * b1
        r2[i] = (r2[i] + x0 * e0) + x1 * e1
        r3[i] = (r3[i] + x0 * f0) + x1 * f1


@kernel
def _madd1x4(r0, r1, r2, r3, c0, V, j, k):
    """Add feature ``k`` (column ``c0``) of directions ``j .. j + 3``."""
    a0 = V[j, k]
    b0 = V[j + 1, k]
    e0 = V[j + 2, k]
    f0 = V[j + 3, k]
    for i in range(r0.size):
        x0 = c0[i]
        r0[i] = r0[i] + x0 * a0
        r1[i] = r1[i] + x0 * b0
        r2[i] = r2[i] + x0 * e0
        r3[i] = r3[i] + x0 * f0


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
    rows, and as fast for narrow ones.  The last ``d % 4`` features are added
    to four directions per sweep too (:func:`_madd2x4`, :func:`_madd1x4`).
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
            if g == 4:  # the last d % 4 features, four directions per sweep
                if k + 2 <= d:
                    _madd2x4(P[j, i0:i1], P[j + 1, i0:i1], P[j + 2, i0:i1], P[j + 3, i0:i1],
                             xt[k, i0:i1], xt[k + 1, i0:i1], V, j, k)
                    k += 2
                if k < d:
                    _madd1x4(P[j, i0:i1], P[j + 1, i0:i1], P[j + 2, i0:i1], P[j + 3, i0:i1],
                             xt[k, i0:i1], V, j, k)
                    k += 1
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


#: Bytes of routing tables one tile loop reads (per key: the key and the
#: pass's per-leaf value, a count or a tabulated score, 16 B; per direction its
#: guide table row): half of a 2 MiB per-core L2 cache, so that a direction
#: group's tables stay in L2 while its row tiles are routed (the other half
#: holds the streamed tile columns, projections, leaves and what the pass
#: writes).  Measured: groups of all 32 directions of a block at tol = 1e-4
#: (3 MiB) were slower than the old kernels; a half or a quarter of L2, faster.
ROUTE_GROUP_BYTES = 1 << 20
#: Bytes a tile loop reads per key (see :data:`ROUTE_GROUP_BYTES`).
ROUTE_KEY_BYTES = 16


#: Most rows projected and routed together by the block kernels: the tile's
#: columns (``d`` x 8 x ``ROW_TILE`` bytes, 40 KiB at d = 10), four
#: directions' projections (16 KiB) and leaves stay in L1 or L2 while every
#: direction of a group reads them.
ROW_TILE = 512
#: Bytes of a tile's columns: wide rows get shorter tiles (at least
#: :data:`ROW_TILE_MIN` rows), so that the columns stay in L2.
TILE_COLUMN_BYTES = 128 << 10
ROW_TILE_MIN = 64


def route_groups(kptr: np.ndarray, table: np.ndarray,
                 budget: int = ROUTE_GROUP_BYTES) -> np.ndarray:
    """Boundaries of consecutive direction groups whose routing tables fit ``budget`` bytes.

    A direction reads :data:`ROUTE_KEY_BYTES` per key and its guide table row.
    A group holds at least one direction, and a multiple of four (the
    directions :func:`project_tile` projects together) when it holds four or
    more, the block's last group apart; ``[0]`` for a block without directions.

    Examples
    --------
    >>> route_groups(np.array([0, 100, 200, 300]), np.zeros((3, 10), np.uint16), 4000).tolist()
    [0, 2, 3]
    >>> route_groups(np.arange(0, 1001, 100), np.zeros((10, 10), np.uint16), 9000).tolist()
    [0, 4, 8, 10]
    """
    per = np.diff(kptr) * ROUTE_KEY_BYTES + table.shape[1] * table.itemsize
    bounds = [0]
    used = 0
    jj = 0
    while jj < per.size:
        if used and used + per[jj] > budget:
            # A multiple of four directions where it can: the tile is projected on
            # four at a time, and one left over costs nearly as much as four.
            size = jj - bounds[-1]
            bounds.append(bounds[-1] + (size - size % 4 if size >= 4 else size))
            jj = bounds[-1]
            used = 0
        used += int(per[jj])
        jj += 1
    if per.size:
        bounds.append(per.size)
    return np.array(bounds, dtype=np.int64)


#: Doubles of padding after each row of a tile buffer: rows 4 KiB apart would
#: share L1 sets and alias in the store buffer (4K aliasing), which made the
#: projection of a tile more than twice as slow.
TILE_PAD = 8


@kernel
def tile_buffers(proj, valid, whole):
    """The rows' columns, four directions' projections, leaves, and ``rows`` (the tile).

    ``rows``: :data:`ROW_TILE`, fewer for wide rows (:data:`TILE_COLUMN_BYTES`).
    The columns: with ``whole``, the chunk's ``(d, n)``, loaded here
    (:func:`load_columns`); else a tile's ``(d, rows)``, which the caller fills
    per tile (:func:`load_tile`); none when the projections are given
    (``proj.direct``).  The tile buffers' rows are :data:`TILE_PAD` doubles
    longer than ``rows``.
    """
    d = proj.X.shape[1]
    rows = min(ROW_TILE, max(ROW_TILE_MIN, TILE_COLUMN_BYTES // (8 * max(d, 1)) // 64 * 64))
    if proj.direct:
        xt = np.empty((0, 0))
    elif whole:
        xt = load_columns(proj.X, valid, rows)
    else:
        xt = np.empty((d, rows + TILE_PAD))
    return xt, np.empty((4, rows + TILE_PAD)), np.empty(rows, dtype=np.uint64), rows


@kernel
def whole_chunk(proj, groups):
    """Whether the block kernels copy the chunk's columns at once: several groups read them.

    With one direction group each tile's columns are read once anyway, and
    copying them per tile (:func:`load_tile`, into L1) was faster than
    copying the chunk first (0.87x at ``d = 10``, ``tol = 1e-3``, one group
    of 32 directions: median of 7 interleaved runs, process CPU time).  The
    copy (``8 d`` bytes per row) is made only where it fits in the ``16``
    bytes per row and direction that a task's memory budget keeps for the
    block (:mod:`daskdepth.runtime.memory`), which the tiles do not use:
    ``d <= 2 B`` for a block of ``B`` directions.
    """
    return not proj.direct and groups.size > 2 and proj.X.shape[1] <= 2 * groups[-1]


@kernel
def load_tile(X, valid, t0, m, xt):
    """Columns of rows ``t0 .. t0 + m - 1`` of ``X`` into ``xt[:, :m]`` (a transpose).

    Invalid rows get zeros, as in :func:`load_columns`.
    """
    d = X.shape[1]
    for k in range(d):
        for i in range(m):
            xt[k, i] = X[t0 + i, k]
    for i in range(m):
        if not valid[t0 + i]:
            for k in range(d):
                xt[k, i] = 0.0


@kernel
def load_columns(X, valid, rows):
    """The chunk's columns ``(d, n)``, invalid rows zeroed: a transpose, once per kernel call.

    Invalid rows get zeros, so that their projections are exactly 0 (the sum
    of :func:`project_tile` starts at 0.0, and ``0.0 + -0.0`` is 0.0) without
    a test per projection.  The copy costs about the chunk's size in memory
    (``8 d n`` bytes, as many as ``X``) for the kernel call; every direction
    group then reads its tiles' columns from it (:func:`project_tile`) instead
    of transposing each tile again per group.  Rows of the buffer are
    :func:`column_stride` doubles apart, never a multiple of 4 KiB (see
    :data:`TILE_PAD`).
    """
    n, d = X.shape
    xt = np.empty((d, column_stride(n)))
    # Tile by tile and column by column for both layouts: contiguous (SIMD)
    # stores, and reads that stay in L1 / L2 (the tile's rows); faster than row
    # by row for C-ordered rows too (measured 1.3 -> 0.96 ns per row-direction
    # at d = 10, groups of 8, when each group transposed its tiles).
    for t0 in range(0, n, rows):
        m = min(rows, n - t0)
        for k in range(d):
            for i in range(m):
                xt[k, t0 + i] = X[t0 + i, k]
    for i in range(n):
        if not valid[i]:
            for k in range(d):
                xt[k, i] = 0.0
    return xt


@kernel
def column_stride(n):
    """Doubles between the rows of :func:`load_columns`' buffer: ``n`` rounded up, plus a pad.

    A multiple of :data:`ROW_TILE` plus :data:`TILE_PAD`, so that the rows
    are never a multiple of 4 KiB apart (4K aliasing, see :data:`TILE_PAD`).
    """
    return (n + ROW_TILE - 1) // ROW_TILE * ROW_TILE + TILE_PAD


@kernel
def project_tile(proj, valid, xt, x0, j, g, t0, m, pb):
    """Projections of a tile's rows on directions ``j .. j + g - 1`` (``g`` 1 or 4) into ``pb``.

    ``xt[:, x0:x0 + m]`` holds the columns of rows ``t0 .. t0 + m - 1`` (the
    chunk's columns with ``x0 = t0``, :func:`load_columns`, or the tile's with
    ``x0 = 0``, :func:`load_tile`); ``pb[q, s]`` receives row ``t0 + s``'s
    projection on direction ``j + q``, summed feature by feature from 0.0 in a
    fixed order (:func:`_madd4x4`, rows in SIMD lanes, a product then a sum,
    never fused), so the same bits as :func:`route_tile`'s inline sum and
    :func:`project`; with ``proj.direct`` they are copied from ``P``.
    Overflows are clamped (:data:`MAXF`) and invalid rows get 0 (zero
    columns, or zeroed here when the projections are given).
    """
    V = proj.V
    if proj.direct:
        for q in range(g):
            pb[q, :m] = proj.P[j + q, t0:t0 + m]
    else:
        d = xt.shape[0]
        x1 = x0 + m
        for q in range(g):
            pb[q, :m] = 0.0
        k = 0
        while k + 4 <= d:
            if g == 4:
                _madd4x4(pb[0, :m], pb[1, :m], pb[2, :m], pb[3, :m], xt[k, x0:x1],
                         xt[k + 1, x0:x1], xt[k + 2, x0:x1], xt[k + 3, x0:x1], V, j, k)
            else:
                for q in range(g):
                    _madd4x1(pb[q, :m], xt[k, x0:x1], xt[k + 1, x0:x1], xt[k + 2, x0:x1],
                             xt[k + 3, x0:x1], V, j + q, k)
            k += 4
        if g == 4:  # the last d % 4 features, four directions per sweep
            if k + 2 <= d:
                _madd2x4(pb[0, :m], pb[1, :m], pb[2, :m], pb[3, :m], xt[k, x0:x1],
                         xt[k + 1, x0:x1], V, j, k)
                k += 2
            if k < d:
                _madd1x4(pb[0, :m], pb[1, :m], pb[2, :m], pb[3, :m], xt[k, x0:x1], V, j, k)
                k += 1
        while k < d:
            for q in range(g):
                _madd1(pb[q, :m], xt[k, x0:x1], V[j + q, k])
            k += 1
    for q in range(g):
        r = pb[q]
        # Branch-free (SIMD): -inf and +inf to -MAXF and MAXF, NaN to MAXF.
        for s in range(m):
            p = r[s]
            c = min(max(p, -MAXF), MAXF)
            r[s] = MAXF if p != p else c
    if proj.direct:  # computed rows have zero columns where invalid (load_columns)
        for s in range(m):
            if not valid[t0 + s]:
                for q in range(g):
                    pb[q, s] = 0.0


@kernel
def tile_step(groups, gi, j):
    """Directions projected together from direction ``j`` of group ``gi``: 4, or 1 at its end."""
    return 4 if j + 4 <= groups[gi + 1] else 1


@kernel
def count_block(proj, valid, weight, router, counts, ext):
    """Add every projection to its leaf's count and to its direction's extremes.

    ``proj`` is a :class:`Projection`, ``router`` a :class:`Router`.  Row ``i``
    counts ``weight[i]`` times (its multiplicity); ``ext[jj]`` holds the
    ``(min, max)`` of direction ``jj``'s projections.  The chunk's columns are
    copied once (:func:`load_columns`, about the chunk's size in memory) when
    the block has several direction groups (``router.groups``), each tile's
    columns in turn otherwise (:func:`load_tile`, :func:`whole_chunk`).  Per
    group and tile of :data:`ROW_TILE` rows, the tile is projected on four
    directions at a time (:func:`project_tile`) and routed on each
    (:func:`route_values`), then the four directions' counts and extremes are
    updated in one sweep over the rows (:func:`count4`); every leaf still
    receives its rows in row order.
    """
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
    score_tiles(proj, valid, router, lut, out, out, ADD)


@kernel
def score_block_squares(proj, valid, router, lut, out, out_sq):
    """:func:`score_block`, also adding the square of every tabulated value to ``out_sq``.

    The sums of squares give each point's spread over directions (its Monte
    Carlo standard error).
    """
    score_tiles(proj, valid, router, lut, out, out_sq, ADD_SQUARES)


@kernel
def score_block_min(proj, valid, router, lut, out):
    """Lower ``out`` (per row) to the smallest tabulated ``min(L, G)`` over the block's directions.

    The halfspace (Tukey) depth takes the minimum over directions where IRW
    depths take the mean.
    """
    score_tiles(proj, valid, router, lut, out, out, LOWER)
