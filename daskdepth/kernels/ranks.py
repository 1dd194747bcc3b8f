"""Exact tie-aware counts against sorted projections (NumPy/Numba, no Dask).

A direction's reference projections, sorted, answer ``L = #{p_i <= q}`` and
``G = #{p_i >= q}`` for any ``q`` by binary search, exactly: ties are equal
floats, and projections are computed with the same bits everywhere
(:func:`daskdepth.kernels.routing.project_columns`).  The searches are
branch-free and run a tile of rows level by level, so that the memory loads of
many rows overlap.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .routing import MAXF

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


@kernel
def _count_le(s, q, t0, m, out):
    """``out[i] = #{s <= q[t0 + i]}`` for ``i < m`` (``s`` sorted, not empty)."""
    for i in range(m):
        out[i] = 0
    length = s.size
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
def _count_lt(s, q, t0, m, out):
    """``out[i] = #{s < q[t0 + i]}`` for ``i < m`` (``s`` sorted, not empty)."""
    for i in range(m):
        out[i] = 0
    length = s.size
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
def in_sample_counts(P, S, out):
    """Add, for every reference row ``i``, ``min(L, G)`` over the directions to ``out[i]``.

    ``P[jj]`` holds direction ``jj``'s projections of the reference rows in row
    order and ``S[jj]`` the same values sorted.  A row's own value is among
    them, so one search gives ``L`` (the end of its run of equal values) and
    the run's start gives ``G``.
    """
    mb, n = P.shape
    start = np.empty(n, dtype=np.int64)
    le = np.empty(TILE, dtype=np.int64)
    for jj in range(mb):
        s = S[jj]
        p = P[jj]
        start[0] = 0
        for k in range(1, n):
            start[k] = start[k - 1] if s[k] == s[k - 1] else k
        for t0 in range(0, n, TILE):
            m = min(TILE, n - t0)
            _count_le(s, p, t0, m, le)
            for i in range(m):
                out[t0 + i] += min(le[i], n - start[le[i] - 1])


@kernel
def score_sorted(P, valid, S, mode, out, out_sq):
    """Exact ``c = min(L, G)`` (in rows) of every valid row and direction, accumulated.

    ``P[jj]`` holds the rows' projections on direction ``jj`` and ``S[jj]`` the
    sorted reference projections.  ``mode`` 0 adds ``c`` to ``out``; 1 also
    adds ``c * c`` to ``out_sq``; 2 lowers ``out`` to ``c``.  ``G`` needs a
    second search only in tiles where a row ties with a reference value.
    """
    mb, nr = P.shape
    n = S.shape[1]
    le = np.empty(TILE, dtype=np.int64)
    lt = np.empty(TILE, dtype=np.int64)
    for jj in range(mb):
        s = S[jj]
        p = P[jj]
        for t0 in range(0, nr, TILE):
            m = min(TILE, nr - t0)
            _count_le(s, p, t0, m, le)
            tie = False
            for i in range(m):
                b = le[i]
                lt[i] = b
                tie |= b > 0 and s[b - 1] == p[t0 + i]
            if tie:
                _count_lt(s, p, t0, m, lt)
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
