"""Pure NumPy/Numba kernels. Nothing in this module knows about Dask.

The per-direction summary of the reference projections is a forest of *uniform
split trees*.  For direction ``j`` the projections are first routed to one of
``k1 + 2`` root bins (an equal-width grid plus an underflow and an overflow
bin); a node that holds too many rows is split into ``nchild`` equal-width
children spanning the ``[min, max]`` of the rows it holds, and so on.  Routing
is a chain of ``floor((p - lo) * scale)`` evaluations, which is monotone in
``p`` even in floating point, so every row in a leaf to the left of the leaf
of ``q`` is strictly smaller than ``q`` and every row to the right is strictly
larger.  Each leaf keeps the exact count, minimum and maximum of its rows,
which makes atoms (leaves with ``min == max``) exact and bounds the error of
any other leaf by ``(count - 1) / n``.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True)

#: Dimension up to which projections are computed inside the fused kernels;
#: above it a BLAS matrix product is faster.
FUSED_MAX_D = 32


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
def _project(X, P, fused, V, jj, i, d):
    if fused:
        p = 0.0
        for k in range(d):
            p += X[i, k] * V[jj, k]
        return p
    return P[jj, i]


@_jit
def _route(p, jj, root_lo, root_scale, k1, dir_ptr, child, nchild, lo, scale):
    t = (p - root_lo[jj]) * root_scale[jj]
    if t < 0.0:
        b = 0
    elif t >= k1:
        b = k1 + 1
    else:
        b = 1 + int(t)
    node = dir_ptr[jj] + b
    while child[node] >= 0:
        nc = nchild[node]
        t = (p - lo[node]) * scale[node]
        if t <= 0.0:
            k = 0
        elif t >= nc - 1:
            k = nc - 1
        else:
            k = int(t)
        node = child[node] + k
    return node


@_jit
def count_block(X, P, fused, V, valid, root_lo, root_scale, k1, dir_ptr, child, nchild, lo,
                scale, counts, vmin, vmax):
    """Add the rows of one chunk to the leaf statistics of one block of directions.

    ``X`` holds centred rows (n_rows, d); with ``fused`` the projections on the
    rows of ``V`` (n_dir, d) are computed here, otherwise they are read from
    ``P`` (n_dir, n_rows).  ``counts``, ``vmin`` and ``vmax`` are updated in place.
    """
    mb = dir_ptr.size - 1
    nr = valid.size
    d = X.shape[1]
    for jj in range(mb):
        for i in range(nr):
            if not valid[i]:
                continue
            p = _project(X, P, fused, V, jj, i, d)
            node = _route(p, jj, root_lo, root_scale, k1, dir_ptr, child, nchild, lo, scale)
            counts[node] += 1
            if p < vmin[node]:
                vmin[node] = p
            if p > vmax[node]:
                vmax[node] = p


@_jit
def score_block(X, P, fused, V, valid, root_lo, root_scale, k1, dir_ptr, child, nchild, lo,
                scale, cum, counts, vmin, vmax, n, out):
    """Add ``min(L, G)`` of every row and direction of the block to ``out``.

    ``L`` and ``G`` estimate the number of reference projections ``<= p`` and
    ``>= p``.  They are exact unless ``p`` falls inside ``[min, max]`` of a
    leaf that is not an atom; then ``L`` lies in ``[cum + 1, cum + c]`` and the
    interpolated estimate is off by at most ``c - 1``.
    """
    mb = dir_ptr.size - 1
    nr = valid.size
    d = X.shape[1]
    for jj in range(mb):
        for i in range(nr):
            if not valid[i]:
                continue
            p = _project(X, P, fused, V, jj, i, d)
            node = _route(p, jj, root_lo, root_scale, k1, dir_ptr, child, nchild, lo, scale)
            c = counts[node]
            cb = cum[node]
            a = vmin[node]
            b = vmax[node]
            if c == 0 or p < a:
                lo_cnt = float(cb)
                hi_cnt = float(n - cb)
            elif p > b:
                lo_cnt = float(cb + c)
                hi_cnt = float(n - cb - c)
            elif a == b:
                lo_cnt = float(cb + c)
                hi_cnt = float(n - cb)
            else:
                f = (p - a) / (b - a)
                lo_cnt = cb + 1.0 + (c - 1.0) * f
                hi_cnt = n - cb - (c - 1.0) * f
            out[i] += lo_cnt if lo_cnt < hi_cnt else hi_cnt


# --------------------------------------------------------------------------- tree edits


@_jit
def split_nodes(dir_ptr, child, nchild, lo, scale, vmin, vmax, nsplit):
    """Turn the leaves with ``nsplit > 0`` into parents of that many children.

    Children span ``[vmin, vmax]`` of their parent and are appended after the
    nodes of their direction, so each direction keeps a contiguous node range.
    Returns the new arrays and the map from old to new node index.
    """
    m = dir_ptr.size - 1
    new_ptr = np.empty(m + 1, dtype=np.int64)
    new_ptr[0] = 0
    for j in range(m):
        add = 0
        for node in range(dir_ptr[j], dir_ptr[j + 1]):
            add += nsplit[node]
        new_ptr[j + 1] = new_ptr[j] + (dir_ptr[j + 1] - dir_ptr[j]) + add
    total = new_ptr[m]
    child2 = np.full(total, -1, dtype=np.int64)
    nchild2 = np.zeros(total, dtype=np.int64)
    lo2 = np.zeros(total, dtype=np.float64)
    scale2 = np.zeros(total, dtype=np.float64)
    old_to_new = np.empty(child.size, dtype=np.int64)
    for j in range(m):
        shift = new_ptr[j] - dir_ptr[j]
        nxt = new_ptr[j] + (dir_ptr[j + 1] - dir_ptr[j])
        for node in range(dir_ptr[j], dir_ptr[j + 1]):
            nn = node + shift
            old_to_new[node] = nn
            if child[node] >= 0:
                child2[nn] = child[node] + shift
                nchild2[nn] = nchild[node]
                lo2[nn] = lo[node]
                scale2[nn] = scale[node]
            elif nsplit[node] > 0:
                s = nsplit[node]
                child2[nn] = nxt
                nchild2[nn] = s
                lo2[nn] = vmin[node]
                sc = s / (vmax[node] - vmin[node])
                scale2[nn] = sc if sc < 1e300 else 1e300
                nxt += s
    return new_ptr, child2, nchild2, lo2, scale2, old_to_new


@_jit
def leaf_cumulative(dir_ptr, k1, child, nchild, counts):
    """Number of rows in the leaves before each leaf, in value order, per direction."""
    total = child.size
    cum = np.zeros(total, dtype=np.int64)
    stack = np.empty(total, dtype=np.int64)
    m = dir_ptr.size - 1
    for j in range(m):
        top = 0
        for b in range(k1 + 1, -1, -1):
            stack[top] = dir_ptr[j] + b
            top += 1
        running = 0
        while top > 0:
            top -= 1
            node = stack[top]
            if child[node] < 0:
                cum[node] = running
                running += counts[node]
            else:
                for k in range(nchild[node] - 1, -1, -1):
                    stack[top] = child[node] + k
                    top += 1
    return cum


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
