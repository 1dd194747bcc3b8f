"""Kernels over the rows of a chunk: distinct rows and Z-order codes (NumPy/Numba, no Dask)."""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .hashing import splitmix64


@kernel
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
            h = splitmix64(h ^ B[i, k])
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


@kernel
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
