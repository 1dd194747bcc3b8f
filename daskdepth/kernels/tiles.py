"""Row tiles projected on directions in a fixed order (NumPy/Numba, no Dask).

Every projection of the package's rank depths is summed feature by feature
from 0.0, a product then a sum, never fused, in the same order whatever the
chunk, tile or group of the row (a BLAS product may reorder the sums by
shape): rows in SIMD lanes, four directions and four features per sweep
(:func:`project_columns`, :func:`project_tile`).  The leaf keys of a summary
are such projections of reference rows, so a row routed later lands in its
atom exactly.  The block kernels (:mod:`daskdepth.kernels.blocks`) load a row
tile's columns (:func:`load_tile`, or the chunk's once, :func:`load_columns`)
and project it on four directions at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import types
from numba.extending import intrinsic

from ._jit import kernel


@intrinsic
def wide_vectors(typingctx):
    """Ask LLVM for 512-bit vectors in the calling kernel, where the CPU has them.

    LLVM vectorises loops 256 bits wide on Intel CPUs with AVX-512 unless a
    function asks for more (its ``prefer-vector-width`` attribute, as
    clang's ``-mprefer-vector-width=512``); Numba sets no such attribute.
    Every kernel of the block kernels' modules (:mod:`~daskdepth.kernels.tiles`,
    :mod:`~daskdepth.kernels.routing`, :mod:`~daskdepth.kernels.blocks`) calls
    this first, since LLVM vectorises a loop with the attributes of the
    function it ends up in after inlining.  Their loops are elementwise (no
    reordered sums), so the values are the same bits at any vector width; on
    CPUs without 512-bit vectors the attribute changes nothing.  Measured
    against the same kernels without it in one process (alternated chunk by
    chunk): 1.03-1.14x faster counting and scoring at ``d = 3, 10, 40``,
    the same speed at ``d = 40``, ``tol = 1e-4`` (docs/performance.md).
    """

    def codegen(context, builder, signature, args):
        # llvmlite's attribute set accepts only LLVM's keyword attributes: this
        # string attribute is added as the set's plain element, as it prints.
        attributes = builder.function.attributes
        if isinstance(attributes, set):  # every llvmlite so far; else 256 bits, same values
            set.add(attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.void(), codegen


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


#: Largest finite float64: overflowing projections are clamped to it (NaN, from
#: inf - inf, to the top), i.e. ranked beyond every reference value.
MAXF = 1.7976931348623157e308


#: Rows projected together by :func:`project_columns`: the tile's columns (``d``
#: rows of 4 KiB) stay in L2 while every group of four directions reads them.
PROJECT_TILE = 512


@kernel
def _madd4x4(r0, r1, r2, r3, c0, c1, c2, c3, V, j, k):
    """Add features ``k .. k + 3`` (columns ``c0 .. c3``) of directions ``j .. j + 3``, in order."""
    wide_vectors()
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
    wide_vectors()
    a0 = V[j, k]
    a1 = V[j, k + 1]
    a2 = V[j, k + 2]
    a3 = V[j, k + 3]
    for i in range(r0.size):
        r0[i] = (((r0[i] + c0[i] * a0) + c1[i] * a1) + c2[i] * a2) + c3[i] * a3


@kernel
def _madd2x4(r0, r1, r2, r3, c0, c1, V, j, k):
    """Add features ``k, k + 1`` (columns ``c0, c1``) of directions ``j .. j + 3``, in order."""
    wide_vectors()
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
    wide_vectors()
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
    wide_vectors()
    for i in range(r.size):
        r[i] = r[i] + c[i] * v


@kernel
def project_columns(xt, V, P):
    """``P[j] = `` projections of the rows whose columns are ``xt`` (d, n) on ``V[j]``.

    Every value is summed feature by feature from 0.0, as
    :func:`~daskdepth.kernels.routing.route_tile` does (a product, then a sum, never fused), so the
    values are the same bits however rows are tiled or chunked.  Tiled for speed: tiles of
    :data:`PROJECT_TILE` rows, four directions and four features per sweep (one load and store of a
    projection per four products), rows innermost in SIMD lanes: faster than one direction and one
    feature per sweep for wide rows, and as fast for narrow ones.  The last ``d % 4`` features are
    added to four directions per sweep too (:func:`_madd2x4`, :func:`_madd1x4`).
    """
    wide_vectors()
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


#: Most rows projected and routed together by the block kernels: the tile's
#: columns (``d`` x 8 x ``ROW_TILE`` bytes, 40 KiB at d = 10), four
#: directions' projections (16 KiB) and leaves stay in L1 or L2 while every
#: direction of a group reads them.
ROW_TILE = 512


#: Bytes of a tile's columns: wide rows get shorter tiles (at least
#: :data:`ROW_TILE_MIN` rows), so that the columns stay in L2.
TILE_COLUMN_BYTES = 128 << 10


ROW_TILE_MIN = 64


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
    wide_vectors()
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
    wide_vectors()
    return not proj.direct and groups.size > 2 and proj.X.shape[1] <= 2 * groups[-1]


@kernel
def load_tile(X, valid, t0, m, xt):
    """Columns of rows ``t0 .. t0 + m - 1`` of ``X`` into ``xt[:, :m]`` (a transpose).

    Invalid rows get zeros, as in :func:`load_columns`.
    """
    wide_vectors()
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
    wide_vectors()
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
    wide_vectors()
    return (n + ROW_TILE - 1) // ROW_TILE * ROW_TILE + TILE_PAD


@kernel
def project_tile(proj, valid, xt, x0, j, g, t0, m, pb):
    """Projections of a tile's rows on directions ``j .. j + g - 1`` (``g`` 1 or 4) into ``pb``.

    ``xt[:, x0:x0 + m]`` holds the columns of rows ``t0 .. t0 + m - 1`` (the
    chunk's columns with ``x0 = t0``, :func:`load_columns`, or the tile's with
    ``x0 = 0``, :func:`load_tile`); ``pb[q, s]`` receives row ``t0 + s``'s
    projection on direction ``j + q``, summed feature by feature from 0.0 in a
    fixed order (:func:`_madd4x4`, rows in SIMD lanes, a product then a sum,
    never fused), so the same bits as :func:`~daskdepth.kernels.routing.route_tile`'s inline sum and
    :func:`project`; with ``proj.direct`` they are copied from ``P``.
    Overflows are clamped (:data:`MAXF`) and invalid rows get 0 (zero
    columns, or zeroed here when the projections are given).
    """
    wide_vectors()
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
