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

#: Dimension up to which the routing kernels project each row inline; above it
#: a sum of ``d`` dependent products per value is slower than projecting the
#: chunk beforehand with :func:`project` (SIMD over rows, same bits).
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
def pad_keys(bptr, bounds):
    """Each direction's keys followed by ``PAD`` copies of ``+inf`` (see :func:`route_tile`)."""
    mb = bptr.size - 1
    keys = np.empty(bounds.size + PAD * mb)
    q = 0
    for jj in range(mb):
        for b in range(bptr[jj], bptr[jj + 1]):
            keys[q] = bounds[b]
            q += 1
        for _ in range(PAD):
            keys[q] = np.inf
            q += 1
    return keys


@_jit
def unpad_keys(bptr, keys):
    """The keys of :func:`pad_keys` without the padding."""
    mb = bptr.size - 1
    out = np.empty(bptr[-1])
    for jj in range(mb):
        k0 = bptr[jj] + PAD * jj
        for b in range(bptr[jj], bptr[jj + 1]):
            out[b] = keys[k0 + b - bptr[jj]]
    return out


@_jit
def guide_table(g_lo, g_scale, g, kptr, keys, table):
    """Fill ``table[jj, c]``: keys of direction ``jj`` whose guide cell is before ``c``."""
    gm = g + 0.5
    for jj in range(g_lo.size):
        row = table[jj]
        row[:] = 0
        for k in range(kptr[jj], kptr[jj + 1] - PAD):
            c = cell(keys[k], g_lo[jj], g_scale[jj], gm)
            if c + 1 < g + 2:
                row[c + 1] += 1
        for c in range(1, g + 2):
            row[c] += row[c - 1]


@_jit
def leaf_atoms(bptr, bounds):
    """Which leaves are atoms: those between two keys with no float between them."""
    mb = bptr.size - 1
    out = np.zeros(bounds.size + mb, dtype=np.bool_)
    for jj in range(mb):
        for b in range(bptr[jj] + 1, bptr[jj + 1]):
            if np.nextafter(bounds[b - 1], np.inf) == bounds[b]:
                out[b + jj] = True  # leaf b - bptr[jj] of direction jj
    return out


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
def _close_child(out_keys, ch_count, ne, nc, key, rows):
    """Record the open child's rows and the key that ends it; returns the new cursors."""
    out_keys[ne] = key
    ch_count[nc] = rows
    return ne + 1, nc + 1


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
            ne, nc = _close_child(out_keys, ch_count, ne, nc, a, cnt)  # the child below a
            last = a
            cur = 0.0
            cnt = 0.0
        cur += mass
        cnt += rows
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                ne, nc = _close_child(out_keys, ch_count, ne, nc, nxt, cnt)
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
            ne, nc = _close_child(out_keys, ch_count, ne, nc, a, cur)  # the child below a
            last = a
            cur = 0
        cur += ln
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                ne, nc = _close_child(out_keys, ch_count, ne, nc, nxt, cur)
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
def _starts_group(cur, c, cap, first):
    """Whether a leaf of ``c`` rows starts a new merged leaf after ``cur`` rows."""
    return first or cap < 0 or cur + c > cap or c > cap or cur > cap


@_jit
def finish_leaves(bptr, keys, counts, ext, cap, like):
    """Final keys, counts and tabulated scores of a block, from exact leaf counts.

    Three steps in one pass per direction, writing each output once:

    * with ``cap >= 0``, runs of adjacent leaves holding at most ``cap`` rows
      together merge (a leaf heavier than ``cap``, an atom, stays alone; the
      merged leaf keeps the first leaf's lower key and the summed count);
    * the direction's smallest value (``ext[jj, 0]``) and the float above its
      largest (``ext[jj, 1]``) become keys when the end leaves hold rows, so
      that points beyond the data get exact (zero) counts; keys stay sorted,
      as the smallest value lies below the first key when the first leaf
      holds rows, and the largest at or above the last key when the last does;
    * ``lut[k]`` receives ``min(L, G)`` estimated for any point in leaf ``k``:
      ``L`` and ``G`` count the values ``<=`` and ``>=`` it, namely the leaves
      before it, the leaves after it and, of its own leaf, all rows for an
      atom (exact) or half of them (the midpoint, off by at most half).

    ``keys`` are padded (:func:`pad_keys`); counts and ``lut`` get the dtype of
    ``like`` (float32 is exact for them up to 2**23 rows).
    Returns the new bound pointers, padded keys, counts, ``lut`` and each
    direction's largest leaf that is not an atom.
    """
    mb = bptr.size - 1
    # Pass 1: merged leaves and end flags, so that outputs are allocated once.
    n_out = np.zeros(mb, dtype=np.int64)
    head = np.zeros(mb, dtype=np.bool_)
    tail = np.zeros(mb, dtype=np.bool_)
    for jj in range(mb):
        l0 = bptr[jj] + jj
        l1 = bptr[jj + 1] + jj + 1
        cur = 0.0
        groups = 0
        for k in range(l0, l1):
            c = counts[k]
            if _starts_group(cur, c, cap, k == l0):
                if groups == 1:
                    head[jj] = cur > 0
                groups += 1
                cur = 0.0
            cur += c
        if groups == 1:
            head[jj] = cur > 0
        head[jj] = head[jj] and -np.inf < ext[jj, 0] < np.inf
        tail[jj] = cur > 0 and -np.inf < np.nextafter(ext[jj, 1], np.inf) < np.inf
        n_out[jj] = groups + head[jj] + tail[jj]
    new_bptr = np.zeros(mb + 1, dtype=np.int64)
    for jj in range(mb):
        new_bptr[jj + 1] = new_bptr[jj] + n_out[jj] - 1
    new_keys = np.empty(new_bptr[-1] + PAD * mb)
    new_counts = np.empty(new_bptr[-1] + mb, dtype=like.dtype)
    lut = np.empty(new_counts.size, dtype=like.dtype)
    worst = np.zeros(mb)
    # Pass 2: write keys and counts, then tabulate the direction.
    for jj in range(mb):
        l0 = bptr[jj] + jj
        l1 = bptr[jj + 1] + jj + 1
        k0 = bptr[jj] + PAD * jj  # first key of direction jj in ``keys``
        q0 = new_bptr[jj] + PAD * jj  # ... in ``new_keys``
        c0 = new_bptr[jj] + jj  # first leaf in ``new_counts``
        q = q0
        c = c0
        if head[jj]:
            new_keys[q] = ext[jj, 0]
            q += 1
            new_counts[c] = 0.0
            c += 1
        cur = 0.0
        for k in range(l0, l1):
            ck = counts[k]
            if _starts_group(cur, ck, cap, k == l0):
                if k > l0:
                    new_counts[c] = cur
                    c += 1
                    new_keys[q] = keys[k0 + (k - l0) - 1]  # the lower key of leaf k
                    q += 1
                cur = 0.0
            cur += ck
        new_counts[c] = cur
        c += 1
        if tail[jj]:
            new_keys[q] = np.nextafter(ext[jj, 1], np.inf)
            q += 1
            new_counts[c] = 0.0
            c += 1
        for _ in range(PAD):
            new_keys[q] = np.inf
            q += 1
        total = 0.0
        for k in range(c0, c):
            total += new_counts[k]
        before = 0.0
        for k in range(c0, c):
            ck = new_counts[k]
            i = q0 + (k - c0)  # key above leaf k
            atom = k > c0 and k < c - 1 and np.nextafter(new_keys[i - 1], np.inf) == new_keys[i]
            own = ck if atom else 0.5 * ck
            lut[k] = min(before + own, total - before - ck + own)
            before += ck
            if not atom:
                worst[jj] = max(worst[jj], ck)
    return new_bptr, new_keys, new_counts, lut, worst


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
