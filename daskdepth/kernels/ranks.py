"""Exact tie-aware counts against sorted projections (NumPy/Numba, no Dask).

A direction's reference projections, sorted, answer ``L = #{p_i <= q}`` and
``G = #{p_i >= q}`` for any ``q`` by binary search, exactly: ties are equal
floats, and projections are computed with the same bits everywhere
(:func:`daskdepth.kernels.tiles.project_columns`).  The searches are
branch-free and run a tile of rows level by level, so that the memory loads of
many rows overlap.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .routing import cell
from .tiles import MAXF

#: Rows searched together, level by level (their state stays in L1).
TILE = 128


@kernel
def clamp_projections(P):
    """Clamp overflowing projections in place as the routing kernels do.

    ``-inf`` and ``+inf`` become the largest finite floats of their sign and NaN
    (from ``inf - inf``) the largest positive one, so that every value is
    ordered; finite values are unchanged.
    """
    flat = P.reshape(-1)
    for i in range(flat.size):
        p = flat[i]
        if not p >= -MAXF:
            flat[i] = -MAXF if p < 0.0 else MAXF
        elif p > MAXF:
            flat[i] = MAXF


#: Guide cells per sorted value (see :func:`_guide`): a cell holds two values on
#: average, so most searches take one to three levels instead of ``log2(n)``.
GUIDE_CELLS_PER_VALUE = 0.5


#: Scoring builds a direction's guide (``O(n)``) only for at least this many rows per
#: reference value; fewer rows are searched over the whole sorted array.
GUIDE_MIN_ROWS_PER_VALUE = 0.125


@kernel
def _guide(s, tab):
    """Guide cells over the sorted values ``s``; returns ``(lo, sc, gm, span)``.

    ``tab[c]`` counts the values whose :func:`daskdepth.kernels.routing.cell` is
    below ``c``.  The cells span the values between ranks 0.1% and 99.9%, widened
    by 5% on each side (outliers share the end cells).  ``cell`` is monotone, so a
    value in another cell than ``q`` is on the same side of ``q`` as its cell:
    ``#{s <= q}`` and ``#{s < q}`` lie in ``[tab[c], tab[c + 1]]`` for ``q`` in
    cell ``c``: the ``span`` values (the most in one cell) from ``tab[c]`` decide.
    """
    n = s.size
    g = tab.size - 3
    a = s[int(np.floor(0.001 * (n - 1)))]
    b = s[int(np.ceil(0.999 * (n - 1)))]
    spread = b - a if b > a else s[n - 1] - s[0]
    if not spread > 0:
        spread = max(abs(a), 1.0)
    lo = a - 0.05 * spread
    width = 1.1 * spread
    sc = g / width if width > g * 1e-300 else 1e300
    if not (np.isfinite(lo) and np.isfinite(width)):
        lo, sc = 0.0, 0.0  # values near the float range's ends: one cell, a full search
    gm = g + 0.5
    tab[:] = 0
    for k in range(n):
        tab[cell(s[k], lo, sc, gm) + np.uint64(1)] += 1
    most = 0
    for c in range(1, g + 3):
        most = max(most, tab[c])
        tab[c] += tab[c - 1]
    return lo, sc, gm, min(max(most, 1), n)


@kernel
def _window_starts(s, q, t0, m, tab, lo, sc, gm, span, out):
    """``out[i]``: start of the ``span`` values holding ``q[t0 + i]``'s rank (:func:`_guide`)."""
    last = s.size - span
    for i in range(m):
        out[i] = min(tab[cell(q[t0 + i], lo, sc, gm)], last)


@kernel
def _count_le(s, q, t0, m, span, out):
    """``out[i] = #{s <= q[t0 + i]}`` for ``i < m``: ``s`` sorted, not empty.

    On entry ``out[i]`` is the start of a window of ``span`` values before which
    every value is below ``q[t0 + i]`` and after which every value is above it
    (0 and ``s.size`` for the whole array).  Branch-free, level by level.
    """
    length = span
    while length > 1:
        half = length >> 1
        for i in range(m):
            b = out[i]
            out[i] = b + half if s[b + half] <= q[t0 + i] else b
        length -= half
    for i in range(m):
        b = out[i]
        out[i] = b + (1 if s[b] <= q[t0 + i] else 0)


@kernel
def _count_lt(s, q, t0, m, span, out):
    """``out[i] = #{s < q[t0 + i]}``; windows as for :func:`_count_le`."""
    length = span
    while length > 1:
        half = length >> 1
        for i in range(m):
            b = out[i]
            out[i] = b + half if s[b + half] < q[t0 + i] else b
        length -= half
    for i in range(m):
        b = out[i]
        out[i] = b + (1 if s[b] < q[t0 + i] else 0)


@kernel
def _guide_table(n, guided):
    """An uninitialised guide table for ``n`` sorted values (:func:`_guide`), or an
    empty one (``guided`` false: searches over the whole array)."""
    return np.empty(max(16, int(GUIDE_CELLS_PER_VALUE * n)) + 3 if guided else 0,
                    dtype=np.int64)


@kernel
def _guide_or_whole(s, tab):
    """:func:`_guide`'s ``(lo, sc, gm, span)`` for ``s``, or for a window that is the
    whole array when ``tab`` is empty (:func:`_guide_table`)."""
    if tab.size == 0:
        return 0.0, 1.0, 0.5, s.size
    return _guide(s, tab)


@kernel
def _tile_counts(s, q, t0, m, tab, lo, sc, gm, span, le, lt):
    """``le[i] = #{s <= q[t0 + i]}`` and ``lt[i] = #{s < q[t0 + i]}`` for ``i < m``.

    ``tab``, ``lo``, ``sc``, ``gm``, ``span`` are :func:`_guide_or_whole`'s for
    ``s``.  ``lt`` needs a second search only in tiles where a row ties with a
    value of ``s``; elsewhere it equals ``le``.
    """
    if tab.size:
        _window_starts(s, q, t0, m, tab, lo, sc, gm, span, le)
    else:
        le[:m] = 0
    lt[:m] = le[:m]
    _count_le(s, q, t0, m, span, le)
    tie = False
    for i in range(m):
        b = le[i]
        tie |= b > 0 and s[b - 1] == q[t0 + i]
    if tie:
        _count_lt(s, q, t0, m, span, lt)
    else:
        lt[:m] = le[:m]


@kernel
def in_sample_counts(P, S, out):
    """Add, for every reference row ``i``, ``min(L, G)`` over the directions to ``out[i]``.

    ``P[jj]`` holds direction ``jj``'s projections of the reference rows in row
    order and ``S[jj]`` the same values sorted.  A row's own value is among
    them, so one (guided) search gives ``L`` (the end of its run of equal
    values) and the run's start gives ``G``.
    """
    mb, n = P.shape
    tab = _guide_table(n, True)
    start = np.empty(n, dtype=np.int64)
    le = np.empty(TILE, dtype=np.int64)
    for jj in range(mb):
        s = S[jj]
        p = P[jj]
        lo, sc, gm, span = _guide(s, tab)
        start[0] = 0
        for k in range(1, n):
            start[k] = start[k - 1] if s[k] == s[k - 1] else k
        for t0 in range(0, n, TILE):
            m = min(TILE, n - t0)
            _window_starts(s, p, t0, m, tab, lo, sc, gm, span, le)
            _count_le(s, p, t0, m, span, le)
            for i in range(m):
                out[t0 + i] += min(le[i], n - start[le[i] - 1])


@kernel
def score_sorted(P, valid, S, mode, out, out_sq):
    """Exact ``c = min(L, G)`` (in rows) of every valid row and direction, accumulated.

    ``P[jj]`` holds the rows' projections on direction ``jj`` and ``S[jj]`` the
    sorted reference projections.  ``mode`` 0 adds ``c`` to ``out``; 1 also
    adds ``c * c`` to ``out_sq``; 2 lowers ``out`` to ``c``.  ``G`` needs a
    second search only in tiles where a row ties with a reference value.
    Searches are guided (:func:`_guide`) when there are enough rows to pay for
    building the guide.
    """
    mb, nr = P.shape
    n = S.shape[1]
    tab = _guide_table(n, nr >= GUIDE_MIN_ROWS_PER_VALUE * n)
    le = np.empty(TILE, dtype=np.int64)
    lt = np.empty(TILE, dtype=np.int64)
    for jj in range(mb):
        s = S[jj]
        p = P[jj]
        lo, sc, gm, span = _guide_or_whole(s, tab)
        for t0 in range(0, nr, TILE):
            m = min(TILE, nr - t0)
            _tile_counts(s, p, t0, m, tab, lo, sc, gm, span, le, lt)
            for i in range(m):
                if not valid[t0 + i]:
                    continue
                c = np.float64(min(le[i], n - lt[i]))
                if mode == 2:
                    if c < out[t0 + i]:
                        out[t0 + i] = c
                else:
                    out[t0 + i] += c
                    if mode == 1:
                        out_sq[t0 + i] += c * c
