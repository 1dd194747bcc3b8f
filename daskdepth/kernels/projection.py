"""Projection depth kernels: exact order statistics of projections, and the score of rows.

The projection depth (Zuo & Serfling, 2000) of ``x`` over directions ``v_j``
is ``1 / (1 + max_j |<x - mu, v_j> - med_j| / mad_j)`` with ``med_j`` the
median of the reference rows' projections on ``v_j`` and ``mad_j`` the median
of their absolute deviations from it.  Fitting finds ``med_j`` and ``mad_j``
exactly by selection: each pass counts, per direction and wanted rank, the
values below, above and in equal-width bins of a bracket (with each bin's
smallest and largest value), or collects the values of a bracket that holds
few; the client then narrows each bracket to the bin that holds the rank.
Every projection is :func:`~daskdepth.kernels.mass.centred_dot` of the centred
row (features summed in order), at fit and at scoring alike, so the counts,
and the order statistics, do not depend on the chunking.

NumPy/Numba only, no Dask.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .mass import centred_dot
from .top import push_top


@kernel
def _value(p, centre):
    """The value a selection ranks: the projection, or its distance to ``centre`` (not NaN)."""
    if centre != centre:
        return p
    return abs(p - centre)


@kernel
def _bin(v, lo, hi, nbins):
    """Bin of ``v``: 0 below ``lo``, ``nbins + 1`` above ``hi``, else ``1 .. nbins``.

    Halves first, so that ``hi - lo`` cannot overflow; a monotone function of
    ``v``, so each bin holds an interval of values.
    """
    if v < lo:
        return 0
    if v > hi:
        return nbins + 1
    width = hi / 2 - lo / 2
    if not width > 0:
        return 1
    b = int((v / 2 - lo / 2) / width * nbins)
    if b >= nbins:
        b = nbins - 1
    return b + 1


@kernel
def rank_counts(xc, valid, v, dirs, qptr, centre, lo, hi, collect, nbins, counts, vmin, vmax,
                filled, values, offsets):
    """Count (and with ``values``, collect) the ranked values of every selection problem.

    Problem ``q`` (``qptr[k] <= q < qptr[k + 1]``) ranks the values of direction
    ``dirs[k]``: the projection ``p`` of each valid centred row, or ``|p -
    centre[q]|`` where ``centre[q]`` is not NaN.  ``counts[q, b]`` counts them
    per :func:`_bin` of ``[lo[q], hi[q]]`` and ``vmin``/``vmax`` keep each bin's
    extremes.  For problems with ``collect[q]``, the values within the bracket
    are also written to ``values[offsets[q] + ...]`` when ``values`` is not
    empty (``filled[q]`` counts them): call once to count, then once to fill.
    Direction by direction, so that a problem's counts stay in cache.
    """
    fill = values.size > 0
    for k in range(dirs.size):
        j = dirs[k]
        for r in range(xc.shape[0]):
            if not valid[r]:
                continue
            p = centred_dot(xc[r], v, j)
            for q in range(qptr[k], qptr[k + 1]):
                val = _value(p, centre[q])
                b = _bin(val, lo[q], hi[q], nbins)
                if not fill:
                    counts[q, b] += 1
                    if val < vmin[q, b]:
                        vmin[q, b] = val
                    if val > vmax[q, b]:
                        vmax[q, b] = val
                elif collect[q] and 0 < b <= nbins:
                    values[offsets[q] + filled[q]] = val
                    filled[q] += 1


@kernel
def _outlyingness(dev, mad):
    """``dev / mad``, with the zero-MAD convention: 0 at the median, infinite elsewhere."""
    if mad > 0:
        return dev / mad
    if dev > 0:
        return np.inf
    return 0.0


@kernel
def projection_depth(xc, v, med, mad, valid, out):
    """``1 / (1 + max_j |<xc[r], v[j]> - med[j]| / mad[j])`` per row; NaN where not ``valid``.

    A direction with ``mad[j] == 0`` (more than half the reference projections
    tie at the median) gives outlyingness 0 to a row at the median and
    infinity (depth 0) to any other: the limit of the ratio as the spread
    vanishes, computed without dividing by zero.
    """
    for r in range(xc.shape[0]):
        if not valid[r]:
            out[r] = np.nan
            continue
        row = xc[r]
        worst = 0.0
        for j in range(v.shape[0]):
            o = _outlyingness(abs(centred_dot(row, v, j) - med[j]), mad[j])
            if o > worst:
                worst = o
        out[r] = 1.0 / (1.0 + worst)


@kernel
def projection_top(xc, v, med, mad, inv_scale, valid, tv, tt, td, ts):
    """Push every valid row's outlyingness ``|p_j - med[j]| / mad[j]`` per direction, negated.

    ``p_j = <xc[r], v[j]>`` and the ratio as :func:`projection_depth` computes
    them (the same zero-MAD convention), so the slots (of
    :func:`~daskdepth.kernels.top.empty_top`, empty) keep each row's ``k``
    largest outlyingnesses, the largest first, and the first is the one the
    row's depth is made of.  Ordered by ``-o`` they are ordered by depth
    ``1 / (1 + o)`` too, which is monotone in ``o``.  The side is the sign of
    ``p_j - med[j]`` and the distance ``|p_j| * inv_scale[j]``.

    A row's values are computed once, its ``k`` smallest kept (values and
    directions) as they come; only when a value equal to the ``k``-th was
    left out (ties, as where MADs are 0) are all directions at or below it
    pushed, so that ties are broken as the slots order them.
    """
    m = v.shape[0]
    k = tv.shape[1]
    value = np.empty(m)
    kth = np.empty(k)
    kj = np.empty(k, dtype=np.int64)
    for r in range(xc.shape[0]):
        if not valid[r]:
            continue
        row = xc[r]
        kth[:] = np.inf
        kj[:] = -1
        limit = np.inf
        tie = False  # a value equal to the k-th may have been left out
        for j in range(m):
            c = -_outlyingness(abs(centred_dot(row, v, j) - med[j]), mad[j])
            value[j] = c
            if c < limit:
                evicted = kth[k - 1]
                q = k - 1
                while q > 0 and c < kth[q - 1]:
                    kth[q] = kth[q - 1]
                    kj[q] = kj[q - 1]
                    q -= 1
                kth[q] = c
                kj[q] = j
                limit = kth[k - 1]
                if evicted == limit and evicted < np.inf:  # inf: an empty slot
                    tie = True
            elif c == limit:
                tie = True
        for q in range(k):
            j = kj[q] if not tie else -1
            if j < 0:
                continue
            p = centred_dot(row, v, j)
            side = -1 if p < med[j] else (1 if p > med[j] else 0)
            push_top(tv, tt, td, ts, r, kth[q], abs(p) * inv_scale[j], j, side)
        if not tie:
            continue
        for j in range(m):
            c = value[j]
            if not c <= limit:  # NaN too: as in projection_depth, never the least deep
                continue
            p = centred_dot(row, v, j)
            side = -1 if p < med[j] else (1 if p > med[j] else 0)
            push_top(tv, tt, td, ts, r, c, abs(p) * inv_scale[j], j, side)


@kernel
def project_rows(xc, v, out):
    """``out[j, r] = <xc[r], v[j]>``: every row projected on every direction, as scoring does."""
    for r in range(xc.shape[0]):
        row = xc[r]
        for j in range(v.shape[0]):
            out[j, r] = centred_dot(row, v, j)
