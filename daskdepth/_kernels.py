"""Pure NumPy/Numba kernels. Nothing in this module knows about Dask.

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

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True)

#: Dimension up to which projections are computed by :func:`project`; above it
#: a BLAS matrix product is faster.
PROJECT_MAX_D = 32


# --------------------------------------------------------------------------- hashing


@_jit
def _splitmix64(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(
        0xFFFFFFFFFFFFFFFF
    )
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(
        0xFFFFFFFFFFFFFFFF
    )
    return z ^ (z >> np.uint64(31))


@_jit
def row_uniforms(row_start, nrows, seed):
    """Uniform numbers in [0, 1) keyed on (seed, global row index).

    Keyed on the global index, not on the chunk, so a Bernoulli sample drawn
    with them is the same however the rows are chunked.
    """
    out = np.empty(nrows, dtype=np.float64)
    s = _splitmix64(np.uint64(seed))
    for i in range(nrows):
        h = _splitmix64(s ^ np.uint64(row_start + i))
        out[i] = (h >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return out


# --------------------------------------------------------------------------- duplicates


@_jit
def distinct_rows(B, valid):
    """Distinct valid rows of ``B`` (rows of float64 bits as ``uint64``).

    Returns the index of each distinct row's first occurrence (in row order),
    the distinct row of every row (``-1`` where not ``valid``) and each
    distinct row's multiplicity.  Rows are compared bit for bit, so equal rows
    have equal projections whatever the directions (``-0.0`` and ``0.0`` stay
    apart, which only costs a missed merge).  Open addressing on a table of
    at least twice the rows.
    """
    nr, d = B.shape
    size = 16
    while size < 2 * nr:
        size *= 2
    mask = np.uint64(size - 1)
    slots = np.full(size, -1, dtype=np.int64)
    first = np.empty(nr, dtype=np.int64)
    inverse = np.empty(nr, dtype=np.int64)
    counts = np.zeros(nr, dtype=np.float64)
    nu = 0
    for i in range(nr):
        if not valid[i]:
            inverse[i] = -1
            continue
        h = np.uint64(d)
        for k in range(d):
            h = _splitmix64(h ^ B[i, k])
        s = h & mask
        while True:
            u = slots[s]
            if u < 0:
                slots[s] = nu
                first[nu] = i
                inverse[i] = nu
                counts[nu] = 1.0
                nu += 1
                break
            r = first[u]
            same = True
            for k in range(d):
                if B[r, k] != B[i, k]:
                    same = False
                    break
            if same:
                inverse[i] = u
                counts[u] += 1.0
                break
            s = (s + np.uint64(1)) & mask
    return first[:nu].copy(), inverse, counts[:nu].copy()


# --------------------------------------------------------------------------- routing
#
# Direction ``jj`` of a block has ``nk`` sorted interior keys stored at
# ``keys[kptr[jj]:kptr[jj] + nk]`` and followed by ``PAD`` copies of ``+inf``;
# ``kptr[jj + 1] = kptr[jj] + nk + PAD``.  Leaf ``k`` holds the values ``p`` with
# ``key[k-1] <= p < key[k]``, so the leaf of ``p`` is the number of keys ``<= p``.
# A uniform guide grid of ``g`` cells narrows the search: ``cell`` is monotone
# non-decreasing in ``p`` (every floating-point step is), so every key in an
# earlier cell is ``< p`` and every key in a later cell is ``> p``;
# ``table[jj, c]`` counts the keys in cells before ``c``.  Indices are unsigned:
# Numba then skips its negative-index wraparound, which measured 2x faster.

#: ``+inf`` sentinels after each direction's keys: the window search below reads
#: up to eight keys past the first candidate without a bounds test.
PAD = 8


@_jit
def cell(p, lo, sc, gm):
    """Guide cell in ``[0, g + 1]`` of ``p`` (``gm = g + 0.5``); monotone in ``p``."""
    return np.uint64(np.int64(min(max((p - lo) * sc, -1.0), gm) + 1.0))


#: Rows routed together: a tile's projections and leaves stay in L1 while each
#: phase (project, search, use) runs over it.  Short dependency chains per
#: phase let the CPU overlap many rows' memory loads (measured 1.5x faster than
#: routing and using one row at a time).
TILE = 256
#: Largest finite float64: overflowing projections are clamped to it (NaN, from
#: inf - inf, to the top), i.e. ranked beyond every reference value.
_MAXF = 1.7976931348623157e308


@_jit
def route_tile(X, V, P, direct, valid, jj, t0, t1, lo, sc, gm, keys, k0, tab, pbuf, lbuf):
    """Projections and leaves (number of keys ``<= p``) of rows ``t0 .. t1 - 1``.

    Projections are summed feature by feature in a fixed order, so a row's
    value does not depend on its chunk and equals :func:`project`'s (BLAS may
    reorder sums by shape); with ``direct`` they are read from ``P``.  The
    search starts at the first key of the row's guide cell and counts the keys
    ``<= p`` among the next eight without branches; a cell with more than seven
    keys ``<= p`` (rare with four cells per key) continues linearly until a
    ``+inf`` sentinel.  Invalid rows get projection 0 and are skipped by callers.
    """
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
        if not p >= -_MAXF:
            p = -_MAXF if p < 0.0 else _MAXF
        elif p > _MAXF:
            p = _MAXF
        pbuf[i - t0] = p
        lbuf[i - t0] = k0 + np.uint64(tab[cell(p, lo, sc, gm)])
    for s in range(t1 - t0):
        p = pbuf[s]
        q = lbuf[s]
        q += np.uint64(4) * np.uint64(keys[q + np.uint64(3)] <= p)
        q += np.uint64(2) * np.uint64(keys[q + np.uint64(1)] <= p)
        q += np.uint64(keys[q] <= p)
        while keys[q] <= p:
            q += np.uint64(1)
        lbuf[s] = q - k0


@_jit
def project_columns(xt, V, P):
    """``P[j] = `` projections of the rows whose columns are ``xt`` (d, n) on ``V[j]``.

    Summed feature by feature from 0.0, as :func:`route_tile` does, so the values
    are the same bits; the loop runs over rows innermost, in SIMD lanes.
    """
    d, nr = xt.shape
    for jj in range(V.shape[0]):
        row = P[jj]
        row[:] = 0.0
        for k in range(d):
            vk = V[jj, k]
            col = xt[k]
            for i in range(nr):
                row[i] += col[i] * vk


def project(X: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Projections (n_dir, n_rows) of the rows of ``X`` on the rows of ``V``.

    The same bits as the routing kernels' (see :func:`project_columns`).
    """
    P = np.empty((V.shape[0], X.shape[0]))
    project_columns(np.ascontiguousarray(X.T), np.ascontiguousarray(V), P)
    return P


@_jit
def guide_table(g_lo, g_scale, g, kptr, keys):
    """``table[jj, c]``: keys of direction ``jj`` whose guide cell is before ``c``."""
    mb = g_lo.size
    gm = g + 0.5
    table = np.zeros((mb, g + 2), dtype=np.int32)
    for jj in range(mb):
        row = table[jj]
        for k in range(kptr[jj], kptr[jj + 1] - PAD):
            c = cell(keys[k], g_lo[jj], g_scale[jj], gm)
            if c + 1 < g + 2:
                row[c + 1] += 1
        for c in range(1, g + 2):
            row[c] += row[c - 1]
    return table


@_jit
def count_block(X, V, P, direct, valid, weight, g_lo, g_scale, g, kptr, keys, table, lptr,
                counts, ext):
    """Add every projection to its leaf's count and to its direction's extremes.

    Row ``i`` counts ``weight[i]`` times (its multiplicity); ``ext[jj]`` holds
    the ``(min, max)`` of direction ``jj``'s projections, kept in registers.
    """
    gm = g + 0.5
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(g_lo.size):
        k0 = np.uint64(kptr[jj])
        l0 = lptr[jj]
        lo = ext[jj, 0]
        hi = ext[jj, 1]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(X, V, P, direct, valid, jj, t0, t1, g_lo[jj], g_scale[jj], gm, keys, k0,
                       table[jj], pbuf, lbuf)
            for s in range(t1 - t0):
                if not valid[t0 + s]:
                    continue
                p = pbuf[s]
                counts[l0 + np.int64(lbuf[s])] += weight[t0 + s]
                lo = min(lo, p)
                hi = max(hi, p)
        ext[jj, 0] = lo
        ext[jj, 1] = hi


@_jit
def collect_block(X, V, P, direct, valid, weight, g_lo, g_scale, g, kptr, keys, table, lptr,
                  wanted, dirs, expected):
    """Leaf, projection and row weight of every value that lands in a ``wanted`` leaf.

    Only the directions with ``dirs[jj]`` set are routed.  ``expected`` sizes
    the output buffer, which grows if it is exceeded.
    """
    gm = g + 0.5
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    cap = max(16, expected)
    nodes = np.empty(cap, dtype=np.int64)
    values = np.empty(cap, dtype=np.float64)
    weights = np.empty(cap, dtype=np.float64)
    h = 0
    for jj in range(g_lo.size):
        if not dirs[jj]:
            continue
        k0 = np.uint64(kptr[jj])
        l0 = lptr[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(X, V, P, direct, valid, jj, t0, t1, g_lo[jj], g_scale[jj], gm, keys, k0,
                       table[jj], pbuf, lbuf)
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


@_jit
def score_block(X, V, P, direct, valid, g_lo, g_scale, g, kptr, keys, table, lptr, lut, out):
    """Add the tabulated ``min(L, G)`` of every projection's leaf to ``out`` (per row)."""
    gm = g + 0.5
    nr = valid.size
    pbuf = np.empty(TILE)
    lbuf = np.empty(TILE, dtype=np.uint64)
    for jj in range(g_lo.size):
        k0 = np.uint64(kptr[jj])
        l0 = lptr[jj]
        for t0 in range(0, nr, TILE):
            t1 = min(nr, t0 + TILE)
            route_tile(X, V, P, direct, valid, jj, t0, t1, g_lo[jj], g_scale[jj], gm, keys, k0,
                       table[jj], pbuf, lbuf)
            for s in range(t1 - t0):
                out[t0 + s] += lut[l0 + np.int64(lbuf[s])]


# --------------------------------------------------------------------------- leaf planning


@_jit
def _cut_weighted(values, weights, i, j, scale, target, last, hi, out_keys, ch_count, ne, nc):
    """Greedy cut of the sorted values ``i .. j - 1`` of one node; see :func:`plan_cuts`."""
    cur = 0.0
    cnt = 0.0
    k = i
    while k < j:
        a = values[k]
        r = k + 1
        while r < j and values[r] == a:
            r += 1
        rows = 0.0
        for q in range(k, r):
            rows += weights[q]
        mass = rows * scale
        heavy = mass > target
        if (heavy or (cur > 0.0 and cur + mass > target)) and a > last and a < hi:
            out_keys[ne] = a  # close the open child below a
            ne += 1
            ch_count[nc] = cnt
            nc += 1
            last = a
            cur = 0.0
            cnt = 0.0
        cur += mass
        cnt += rows
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                out_keys[ne] = nxt
                ne += 1
                ch_count[nc] = cnt
                nc += 1
                last = nxt
                cur = 0.0
                cnt = 0.0
        k = r
    ch_count[nc] = cnt
    return ne, nc + 1


@_jit
def _cut_unit(values, i, j, scale, target, last, hi, out_keys, ch_count, ne, nc):
    """:func:`_cut_weighted` for values of one row each, skipping runs that surely fit.

    In rows, a child takes at most ``lim`` (the most rows of weight ``scale``
    within ``target``).  From a child holding ``cur`` rows, every run that ends
    before position ``k + lim - cur`` fits, so the scan jumps there and only
    examines the run straddling it: about two steps per child, not one per value.
    """
    lim = int(min(target / scale, 4e18)) if target >= 0.0 else 0
    while (lim + 1) * scale <= target:
        lim += 1
    while lim > 0 and lim * scale > target:
        lim -= 1
    cur = 0
    k = i
    while k < j:
        e = k + (lim - cur)
        if e >= j:
            cur += j - k
            break
        if e > k:
            a = values[e]
            r0 = e
            while r0 > k and values[r0 - 1] == a:
                r0 -= 1
            cur += r0 - k
            k = r0
        a = values[k]
        r = k + 1
        while r < j and values[r] == a:
            r += 1
        ln = r - k
        heavy = ln > lim
        if (heavy or (cur > 0 and cur + ln > lim)) and a > last and a < hi:
            out_keys[ne] = a  # close the open child below a
            ne += 1
            ch_count[nc] = cur
            nc += 1
            last = a
            cur = 0
        cur += ln
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                out_keys[ne] = nxt
                ne += 1
                ch_count[nc] = cur
                nc += 1
                last = nxt
                cur = 0
        k = r
    ch_count[nc] = cur
    return ne, nc + 1


@_jit
def plan_cuts(nodes, values, weights, scale, target, lower, upper):
    """Cut leaves into children from their sorted values (greedy, tie-aware).

    ``nodes`` and ``values`` are sorted by (node, value); node ``k`` spans
    ``[lower[k], upper[k])``.  Value ``i`` stands for ``weights[i]`` rows (one
    each when ``weights`` is empty), and a row weighs ``scale`` (rows of the
    data per sampled row).  Distinct values are packed left to right into
    children whose weighted mass stays <= ``target``; a value heavier than
    ``target`` (an atom) gets the child ``[a, nextafter(a))`` of its own, so that
    values missing from a sample cannot land in it.  Returns, for each node with
    more than one child: the node, its child count, the new interior keys (child
    ``k`` holds ``key[k-1] <= p < key[k]``) and the rows of the given values in
    each child (children without values get 0).
    """
    n = values.size
    split_node = np.empty(n, dtype=np.int64)
    split_nch = np.empty(n, dtype=np.int64)
    out_keys = np.empty(2 * n, dtype=np.float64)
    ch_count = np.empty(3 * n, dtype=np.float64)
    unit = weights.size == 0
    ns = 0
    ne = 0
    nc = 0
    i = 0
    while i < n:
        node = nodes[i]
        j = i
        while j < n and nodes[j] == node:
            j += 1
        e0 = ne
        c0 = nc
        if unit:
            ne, nc = _cut_unit(values, i, j, scale, target, lower[node], upper[node], out_keys,
                               ch_count, ne, nc)
        else:
            ne, nc = _cut_weighted(values, weights, i, j, scale, target, lower[node],
                                   upper[node], out_keys, ch_count, ne, nc)
        if nc - c0 > 1:
            split_node[ns] = node
            split_nch[ns] = nc - c0
            ns += 1
        else:
            ne = e0
            nc = c0
        i = j
    return split_node[:ns], split_nch[:ns], out_keys[:ne], ch_count[:nc]


@_jit
def coalesce_leaves(lptr, bptr, bounds, counts, cap):
    """Merge runs of adjacent leaves whose rows add up to at most ``cap``.

    A merged leaf keeps the first leaf's lower bound and the summed count, so
    its error bound stays within the limit; a leaf heavier than ``cap`` (an
    atom) is left alone.  Returns the new leaf pointers, bound pointers, bounds
    and counts.
    """
    mb = lptr.size - 1
    n_leaves = counts.size
    keep_bound = np.zeros(bounds.size, dtype=np.bool_)
    group = np.empty(n_leaves, dtype=np.int64)
    new_lptr = np.zeros(mb + 1, dtype=np.int64)
    g = -1
    for jj in range(mb):
        cur = 0.0
        first = True
        for k in range(lptr[jj], lptr[jj + 1]):
            c = counts[k]
            if first or cur + c > cap or c > cap or cur > cap:
                g += 1
                cur = 0.0
                if not first:
                    keep_bound[bptr[jj] + (k - lptr[jj]) - 1] = True
                first = False
            cur += c
            group[k] = g
        new_lptr[jj + 1] = g + 1
    out_counts = np.zeros(g + 1)
    for k in range(n_leaves):
        out_counts[group[k]] += counts[k]
    new_bptr = np.zeros(mb + 1, dtype=np.int64)
    for jj in range(mb):
        kept = 0
        for b in range(bptr[jj], bptr[jj + 1]):
            if keep_bound[b]:
                kept += 1
        new_bptr[jj + 1] = new_bptr[jj] + kept
    return new_lptr, new_bptr, bounds[keep_bound], out_counts


# --------------------------------------------------------------------------- exact helpers


def chunk_moments(x: np.ndarray, finite: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and centred scatter matrix of the finite rows of a chunk.

    Rows are shifted by the first finite row before summing so that a large
    common offset does not cost precision (two passes within the chunk).
    """
    d = x.shape[1]
    xv = x if finite.all() else x[finite]
    n = xv.shape[0]
    if n == 0:
        return 0, np.zeros(d), np.zeros((d, d))
    y = xv - xv[0]
    mu = y.mean(axis=0)
    z = y - mu
    return n, xv[0] + mu, z.T @ z


@_jit
def column_sums_dd(x, finite):
    """Column sums of the finite rows as double-double ``(2, d)``: ``hi`` and ``lo``.

    Compensated (Neumaier) summation: the pair carries about 106 bits, so the
    rounded sum ``hi + lo`` does not depend on how rows were chunked.
    """
    d = x.shape[1]
    hi = np.zeros(d)
    lo = np.zeros(d)
    for i in range(x.shape[0]):
        if not finite[i]:
            continue
        for k in range(d):
            a = hi[k]
            b = x[i, k]
            t = a + b
            if abs(a) >= abs(b):
                lo[k] += (a - t) + b
            else:
                lo[k] += (b - t) + a
            hi[k] = t
    out = np.empty((2, d))
    for k in range(d):
        t = hi[k] + lo[k]
        out[1, k] = lo[k] - (t - hi[k])
        out[0, k] = t
    return out


def add_dd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of two double-double arrays ``(2, d)`` (TwoSum of the high parts)."""
    t = a[0] + b[0]
    bv = t - a[0]
    err = (a[0] - (t - bv)) + (b[0] - bv) + a[1] + b[1]
    hi = t + err
    return np.stack([hi, err - (hi - t)])


def merge_moments(a, b):
    """Chan et al. pairwise merge of (count, mean, scatter) triples."""
    na, ma, sa = a
    nb, mb, sb = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    mean = ma + delta * (nb / n)
    scatter = sa + sb + np.outer(delta, delta) * (na * nb / n)
    return n, mean, scatter


# --------------------------------------------------------------------------- row order


@_jit
def morton_codes(X, valid, bits):
    """Z-order code of each row, ``bits`` bits per feature over the rows' bounding box.

    Rows close in space get close codes, so sorting by them makes consecutive
    rows' projections close on every direction: the routing tables' cache
    lines are then reused from row to row.  Invalid rows get code 0.
    """
    nr, d = X.shape
    lo = np.full(d, np.inf)
    hi = np.full(d, -np.inf)
    for i in range(nr):
        if valid[i]:
            for k in range(d):
                lo[k] = min(lo[k], X[i, k])
                hi[k] = max(hi[k], X[i, k])
    top = float((1 << bits) - 1)
    sc = np.zeros(d)
    for k in range(d):
        if hi[k] > lo[k]:
            sc[k] = top / (hi[k] - lo[k])
    out = np.zeros(nr, dtype=np.uint64)
    for i in range(nr):
        if not valid[i]:
            continue
        code = np.uint64(0)
        for k in range(d):
            q = np.uint64(min(max((X[i, k] - lo[k]) * sc[k], 0.0), top))
            for b in range(bits):
                code |= ((q >> np.uint64(b)) & np.uint64(1)) << np.uint64(b * d + k)
        out[i] = code
    return out
