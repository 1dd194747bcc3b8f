"""Routing kernels: which leaf each projection falls in (NumPy/Numba, no Dask).

The per-direction summary of the reference projections is a sorted list of
leaf keys: leaf ``k`` holds the projections ``p`` with ``key[k-1] <= p <
key[k]``.  Routing a value is counting the keys ``<= p``, which is monotone in
``p``, so every row in a leaf to the left of the leaf of ``q`` is strictly
smaller than ``q`` and every row to the right is strictly larger.  Each leaf
keeps the exact count of its rows, which makes atoms (leaves
``[a, nextafter(a))``) and empty leaves exact and bounds the error of any
other leaf by ``count / 2`` rows.

This module holds the routing structure (:class:`Router`: guide grids, padded
keys, direction groups) and the search (:func:`route_values`); the fixed-order
projection of row tiles is in :mod:`daskdepth.kernels.tiles`, and the block
kernels that project, route and count or score a row chunk on a block of
directions are in :mod:`daskdepth.kernels.blocks`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._jit import kernel
from .tiles import MAXF, wide_vectors

#: Dimension up to which :func:`route_tile` (used per row by
#: :func:`daskdepth.kernels.top.top_block`) projects each row inline; above it a sum of ``d``
#: dependent products per value is slower than projecting the chunk beforehand with
#: :func:`~daskdepth.kernels.tiles.project` (SIMD over rows, same bits).  The block kernels project
#: tiles themselves (:func:`~daskdepth.kernels.tiles.project_tile`) at every ``d``.
PROJECT_MAX_D = 32


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
    wide_vectors()
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
    wide_vectors()
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
    wide_vectors()
    return Grid(router.g_lo[jj], router.g_scale[jj], router.g_log[jj, 0], router.g_log[jj, 1],
                router.g + 0.5, np.uint64(router.kptr[jj]))


@kernel
def route_tile(proj, valid, grid, keys, tab, jj, t0, t1, pbuf, lbuf):
    """Projections and leaves of rows ``t0 .. t1 - 1`` on direction ``jj`` of a block.

    ``proj`` is a :class:`~daskdepth.kernels.tiles.Projection`, ``grid`` the direction's
    :class:`Grid` (:func:`direction_grid`), ``keys`` the block's padded keys and ``tab`` the
    direction's row of the guide table; ``pbuf[i - t0]`` receives row ``i``'s projection ``p`` and
    ``lbuf[i - t0]`` its leaf (the number of the direction's keys ``<= p``).  Projections are
    summed feature by feature in a fixed order, so a row's value does not depend on its chunk and
    equals :func:`~daskdepth.kernels.tiles.project`'s (BLAS may reorder sums by shape); with
    ``direct`` they are read from ``P``.  The search starts at the first key of the row's guide
    cell (:func:`cell`, or :func:`log_cell` where the direction's grid is logarithmic) and counts
    the keys ``<= p`` among the next four with independent compares (:func:`route_values`); a cell
    with four keys or more ``<= p`` (rare with a guide fitted to the keys) continues linearly until
    a key ``> p``.  Invalid rows get projection 0 and are skipped by callers.

    The grid's scalars come as one record made once per direction, and the
    arrays as arguments: unpacking the block's :class:`Router` here, once per
    tile, keeps more values live in the callers' loops.
    """
    wide_vectors()
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
    wide_vectors()
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


@kernel
def pad_keys(cptr, cuts):
    """Each direction's keys followed by ``PAD`` copies of ``+inf`` (see :func:`route_tile`)."""
    wide_vectors()
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
    wide_vectors()
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
    wide_vectors()
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
def cell_stats(table):
    """The most keys in one cell of a guide table, the keys past a cell's first three, and all keys.

    ``table[jj, c]`` counts direction ``jj``'s keys in the cells before ``c``
    (:func:`guide_table`).  A lookup between two keys of a cell scans past the
    vector compare when the cell holds more than ``CELL_WINDOW - 1`` keys before
    it; one pass over the table, without the int64 copy a NumPy ``diff`` makes.
    """
    wide_vectors()
    most = 0
    over = 0
    total = 0
    for jj in range(table.shape[0]):
        row = table[jj]
        for c in range(1, row.size):
            k = np.int64(row[c]) - np.int64(row[c - 1])
            most = max(most, k)
            over += max(k - (CELL_WINDOW - 1), 0)
        total += np.int64(row[row.size - 1]) - np.int64(row[0])
    return most, over, total


@kernel
def leaf_atoms(cptr, cuts):
    """Which leaves are atoms: those between two keys with no float between them."""
    wide_vectors()
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


def route_groups(kptr: np.ndarray, table: np.ndarray,
                 budget: int = ROUTE_GROUP_BYTES) -> np.ndarray:
    """Boundaries of consecutive direction groups whose routing tables fit ``budget`` bytes.

    A direction reads :data:`ROUTE_KEY_BYTES` per key and its guide table row. A group holds at
    least one direction, and a multiple of four (the directions
    :func:`~daskdepth.kernels.tiles.project_tile` projects together) when it holds four or more,
    the block's last group apart; ``[0]`` for a block without directions.

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
