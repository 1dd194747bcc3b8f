"""Pure NumPy/Numba kernels. Nothing in this module knows about Dask.

The per-direction summary of the reference projections is a sorted list of
leaf bounds: leaf ``k`` holds the projections ``p`` with ``bounds[k-1] <= p <
bounds[k]``.  Routing a value is counting the bounds ``<= p``, which is monotone
in ``p`` by construction, so every row in a leaf to the left of the leaf of
``q`` is strictly smaller than ``q`` and every row to the right is strictly
larger.  Each leaf keeps the exact count, minimum and maximum of its rows,
which makes atoms (leaves with ``min == max``) exact and bounds the error of
any other leaf by ``(count - 1) / n``.
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


# --------------------------------------------------------------------------- routing


@_jit
def project(X, V):
    """Projections (n_dir, n_rows) of the rows of ``X`` on the rows of ``V``.

    Accumulated feature by feature in a fixed order, so a row's projection does
    not depend on the chunk it sits in (BLAS kernels may reorder sums by shape).
    """
    mb = V.shape[0]
    nr, d = X.shape
    P = np.empty((mb, nr), dtype=np.float64)
    for jj in range(mb):
        for i in range(nr):
            p = 0.0
            for k in range(d):
                p += X[i, k] * V[jj, k]
            P[jj, i] = p
    return P


@_jit
def route_block(P, valid, g_lo, g_scale, g, bptr, bounds, table, lptr):
    """Leaf of every projection ``P[j, i]`` (``-1`` for invalid rows).

    Direction ``j`` has sorted interior leaf bounds ``bounds[bptr[j]:bptr[j+1]]``
    (``bounds`` ends with one extra ``+inf`` sentinel);
    leaf ``k`` holds ``bounds[k-1] <= p < bounds[k]``, i.e. ``k`` is the number of
    bounds ``<= p``.  A uniform guide grid of ``g`` cells narrows the search:
    ``table[j, c]`` is the number of bounds in cells before ``c``, computed with
    the same arithmetic, so the answer lies in ``[table[j, c], table[j, c + 1]]``
    whatever the rounding.  The remaining search halves without data-dependent
    branches, which mispredict on every step otherwise.
    """
    mb = g_lo.size
    nr = valid.size
    out = np.empty((mb, nr), dtype=np.int64)
    for jj in range(mb):
        lo_j = g_lo[jj]
        sc_j = g_scale[jj]
        b0 = bptr[jj]
        l0 = lptr[jj]
        for i in range(nr):
            if not valid[i]:
                out[jj, i] = -1
                continue
            p = P[jj, i]
            c = 1 + int(np.floor(min(max((p - lo_j) * sc_j, -1.0), g + 0.5)))
            base = table[jj, c]
            n = table[jj, c + 1] - base
            while n > 1:  # rare with four cells per bound
                half = n >> 1
                base += half * (bounds[b0 + base + half - 1] <= p)
                n -= half
            # The trailing sentinel makes this read safe when the cell is empty.
            base += (n > 0) & (bounds[b0 + base] <= p)
            out[jj, i] = l0 + base
    return out


@_jit
def guide_table(g_lo, g_scale, g, bptr, bounds):
    """``table[j, c]``: number of bounds of direction ``j`` in guide cells before ``c``."""
    mb = g_lo.size
    table = np.zeros((mb, g + 3), dtype=np.int64)
    for jj in range(mb):
        for k in range(bptr[jj], bptr[jj + 1]):
            c = 1 + int(np.floor(min(max((bounds[k] - g_lo[jj]) * g_scale[jj], -1.0), g + 0.5)))
            table[jj, c + 1] += 1
        for c in range(1, g + 3):
            table[jj, c] += table[jj, c - 1]
    return table


@_jit
def count_leaves(P, leaves, counts, vmin, vmax):
    """Add count, minimum and maximum of the routed projections to the leaf statistics."""
    mb, nr = leaves.shape
    for jj in range(mb):
        for i in range(nr):
            node = leaves[jj, i]
            if node < 0:
                continue
            p = P[jj, i]
            counts[node] += 1
            if p < vmin[node]:
                vmin[node] = p
            if p > vmax[node]:
                vmax[node] = p


@_jit
def collect_leaves(P, leaves, wanted):
    """Leaf index and projection of every routed value that lands in a wanted leaf."""
    mb, nr = leaves.shape
    hits = 0
    for jj in range(mb):
        for i in range(nr):
            node = leaves[jj, i]
            if node >= 0 and wanted[node]:
                hits += 1
    nodes = np.empty(hits, dtype=np.int64)
    values = np.empty(hits, dtype=np.float64)
    h = 0
    for jj in range(mb):
        for i in range(nr):
            node = leaves[jj, i]
            if node >= 0 and wanted[node]:
                nodes[h] = node
                values[h] = P[jj, i]
                h += 1
    return nodes, values


@_jit
def pack_leaves(cum, counts, vmin, vmax):
    """One 32-byte record ``(cum, count, min, max)`` per node: one cache line per lookup."""
    out = np.empty((cum.size, 4), dtype=np.float64)
    for node in range(cum.size):
        out[node, 0] = cum[node]
        out[node, 1] = counts[node]
        out[node, 2] = vmin[node]
        out[node, 3] = vmax[node]
    return out


@_jit
def score_leaves(P, leaves, packed, n, out):
    """Add ``min(L, G)`` of every routed projection to ``out`` (per row).

    ``L`` and ``G`` estimate the number of reference projections ``<= p`` and
    ``>= p``.  They are exact unless ``p`` falls inside ``[min, max]`` of a
    leaf that is not an atom; then ``L`` lies in ``[cum + 1, cum + c]`` and the
    interpolated estimate is off by at most ``c - 1``.
    """
    mb, nr = leaves.shape
    for jj in range(mb):
        for i in range(nr):
            node = leaves[jj, i]
            if node < 0:
                continue
            p = P[jj, i]
            cb = packed[node, 0]
            c = packed[node, 1]
            a = packed[node, 2]
            b = packed[node, 3]
            if c == 0.0 or p < a:
                lo_cnt = cb
                hi_cnt = n - cb
            elif p > b:
                lo_cnt = cb + c
                hi_cnt = n - cb - c
            elif a == b:
                lo_cnt = cb + c
                hi_cnt = n - cb
            else:
                f = (p - a) / (b - a)
                lo_cnt = cb + 1.0 + (c - 1.0) * f
                hi_cnt = n - cb - (c - 1.0) * f
            out[i] += lo_cnt if lo_cnt < hi_cnt else hi_cnt


# --------------------------------------------------------------------------- tree edits


@_jit
def plan_edges(nodes, values, weight, cap):
    """Split points for leaves from their sorted values (greedy, tie-aware).

    ``nodes`` and ``values`` are sorted by (node, value).  Distinct values are
    packed left to right into children whose weighted mass stays <= ``cap``; a
    value heavier than ``cap`` gets a child of its own (an atom).  Returns, for
    each leaf with more than one child: the leaf, its child count, the edges
    (child ``k`` holds ``edges[k-1] <= p < edges[k]``) and the count, minimum
    and maximum of the values in each child.
    """
    n = values.size
    split_node = np.empty(n, dtype=np.int64)
    split_nch = np.empty(n, dtype=np.int64)
    out_edges = np.empty(n, dtype=np.float64)
    ch_count = np.empty(n, dtype=np.int64)
    ch_min = np.empty(n, dtype=np.float64)
    ch_max = np.empty(n, dtype=np.float64)
    ns = 0
    ne = 0
    nc = 0
    i = 0
    while i < n:
        j = i
        while j < n and nodes[j] == nodes[i]:
            j += 1
        e0 = ne
        c0 = nc
        cur = 0.0
        force = False
        cnt = 0
        cmin = values[i]
        k = i
        while k < j:
            a = values[k]
            r = k
            while r < j and values[r] == a:
                r += 1
            mass = (r - k) * weight
            if cur > 0.0 and (force or cur + mass > cap or mass > cap):
                out_edges[ne] = a
                ne += 1
                ch_count[nc] = cnt
                ch_min[nc] = cmin
                ch_max[nc] = values[k - 1]
                nc += 1
                cur = 0.0
                cnt = 0
                cmin = a
                force = False
            cur += mass
            cnt += r - k
            if mass > cap:
                force = True
            k = r
        ch_count[nc] = cnt
        ch_min[nc] = cmin
        ch_max[nc] = values[j - 1]
        nc += 1
        if nc - c0 > 1:
            split_node[ns] = nodes[i]
            split_nch[ns] = nc - c0
            ns += 1
        else:
            ne = e0
            nc = c0
        i = j
    return (split_node[:ns], split_nch[:ns], out_edges[:ne], ch_count[:nc], ch_min[:nc],
            ch_max[:nc])


@_jit
def coalesce_leaves(lptr, bptr, bounds, counts, vmin, vmax, cap):
    """Merge runs of adjacent leaves whose rows add up to at most ``cap``.

    A merged leaf keeps the first leaf's lower bound, the summed count and the
    outer minimum and maximum, so its error bound stays within the limit; a leaf
    heavier than ``cap`` (an atom) is left alone.  Returns the new leaf
    pointers, bound pointers, bounds, counts, minima and maxima.
    """
    mb = lptr.size - 1
    n_leaves = counts.size
    keep_bound = np.zeros(bounds.size, dtype=np.bool_)
    group = np.empty(n_leaves, dtype=np.int64)
    new_lptr = np.zeros(mb + 1, dtype=np.int64)
    g = -1
    for jj in range(mb):
        cur = 0
        first = True
        for k in range(lptr[jj], lptr[jj + 1]):
            c = counts[k]
            if first or cur + c > cap or c > cap or cur > cap:
                g += 1
                cur = 0
                if not first:
                    keep_bound[bptr[jj] + (k - lptr[jj]) - 1] = True
                first = False
            cur += c
            group[k] = g
        new_lptr[jj + 1] = g + 1
    n_new = g + 1
    out_counts = np.zeros(n_new, dtype=np.int64)
    out_min = np.full(n_new, np.inf)
    out_max = np.full(n_new, -np.inf)
    for k in range(n_leaves):
        gi = group[k]
        out_counts[gi] += counts[k]
        if vmin[k] < out_min[gi]:
            out_min[gi] = vmin[k]
        if vmax[k] > out_max[gi]:
            out_max[gi] = vmax[k]
    new_bptr = np.zeros(mb + 1, dtype=np.int64)
    for jj in range(mb):
        kept = 0
        for b in range(bptr[jj], bptr[jj + 1]):
            if keep_bound[b]:
                kept += 1
        new_bptr[jj + 1] = new_bptr[jj] + kept
    return new_lptr, new_bptr, bounds[keep_bound], out_counts, out_min, out_max


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
