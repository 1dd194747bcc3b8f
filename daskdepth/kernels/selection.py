"""Exact selection of the ``h`` rows of smallest Mahalanobis distance, chunk by chunk (NumPy/Numba).

:func:`mahalanobis_sq` computes distances row by row in a fixed order, so a
row's distance does not depend on its chunk.  When the ``h``-th smallest
distance is tied, all rows at that distance get the same fractional weight so
that the weights sum to ``h``: identical rows (the usual cause of ties) then
give the same moments as any choice of ``h`` rows, and the result depends
neither on row order nor on chunking.  :mod:`daskdepth.covariance.mcd` wires
the chunk functions into passes over the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._jit import kernel
from .moments import Moments, merge_weighted, moments_of, support_moments


@kernel
def mahalanobis_sq(x, loc, w, out):
    """Squared distances ``||(x_i - loc) w||^2``, NaN for rows with NaN or inf.

    Summed in a fixed order per row: the value does not depend on the chunk.
    """
    nr, d = x.shape
    r = w.shape[1]
    z = np.empty(d)
    for i in range(nr):
        ok = True
        for k in range(d):
            v = x[i, k]
            if not np.isfinite(v):
                ok = False
                break
            z[k] = v - loc[k]
        if not ok:
            out[i] = np.nan
            continue
        s = 0.0
        for j in range(r):
            p = 0.0
            for k in range(d):
                p += z[k] * w[k, j]
            s += p * p
        out[i] = s


@kernel
def histogram_minmax(values, edges, counts, vmin, vmax):
    """Count, minimum and maximum of ``values`` per bin ``[edges[i-1], edges[i])``.

    Bin 0 holds values below ``edges[0]`` and bin ``len(edges)`` values at or
    above ``edges[-1]``; NaN values are skipped.
    """
    ne = edges.size
    for i in range(values.size):
        v = values[i]
        if np.isnan(v):
            continue
        lo = 0
        hi = ne
        while lo < hi:
            mid = (lo + hi) >> 1
            if edges[mid] <= v:
                lo = mid + 1
            else:
                hi = mid
        counts[lo] += 1
        if v < vmin[lo]:
            vmin[lo] = v
        if v > vmax[lo]:
            vmax[lo] = v


def chunk_distances(x: np.ndarray, loc: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape[0])
    mahalanobis_sq(np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(loc),
                   np.ascontiguousarray(w), out)
    return out


@dataclass
class SelectPart:
    """What one pass learns about the distances of a set of rows (mergeable).

    ``below``: moments of rows with ``d2 < a``; ``inside``: of rows with
    ``a <= d2 <= b``; ``counts/vmin/vmax``: histogram over ``edges``;
    ``coll_d2/coll_x``: the rows inside ``[a, b]`` (None when a chunk held more
    than its share); ``reweight``: moments of rows with ``d2 < reweight threshold``.
    """

    below: Moments | None
    inside: Moments | None
    counts: np.ndarray | None
    vmin: np.ndarray | None
    vmax: np.ndarray | None
    coll_d2: np.ndarray | None
    coll_x: np.ndarray | None
    reweight: Moments | None


def select_chunk(x: np.ndarray, loc: np.ndarray, w: np.ndarray, bracket: tuple | None,
                 edges: np.ndarray | None, cap: int, rw_thr: float | None) -> SelectPart:
    """One chunk of a C-step pass: distances, bracket moments, histogram, collection."""
    x = np.asarray(x, dtype=np.float64)
    d2 = chunk_distances(x, loc, w)
    valid = ~np.isnan(d2)
    rw = moments_of(x, valid & (d2 < rw_thr)) if rw_thr is not None else None
    if bracket is None:
        return SelectPart(None, None, None, None, None, None, None, rw)
    a, b = bracket
    below = valid & (d2 < a)
    inside = valid & (d2 >= a) & (d2 <= b)
    k = edges.size + 1
    counts = np.zeros(k, dtype=np.int64)
    vmin = np.full(k, np.inf)
    vmax = np.full(k, -np.inf)
    histogram_minmax(d2, edges, counts, vmin, vmax)
    n_in = int(inside.sum())
    coll_d2 = coll_x = None
    if n_in <= cap:
        coll_d2 = d2[inside]
        coll_x = x[inside]
    return SelectPart(moments_of(x, below), moments_of(x, inside), counts, vmin, vmax,
                      coll_d2, coll_x, rw)


def select_merge(*parts: SelectPart) -> SelectPart:
    """Merge chunk summaries left to right (exact; order kept for collected rows)."""
    out = parts[0]
    for p in parts[1:]:
        rw = merge_weighted(out.reweight, p.reweight) if out.reweight is not None else None
        if out.below is None:
            out = SelectPart(None, None, None, None, None, None, None, rw)
            continue
        have = out.coll_d2 is not None and p.coll_d2 is not None
        out = SelectPart(
            merge_weighted(out.below, p.below), merge_weighted(out.inside, p.inside),
            out.counts + p.counts,
            np.minimum(out.vmin, p.vmin), np.maximum(out.vmax, p.vmax),
            np.concatenate([out.coll_d2, p.coll_d2]) if have else None,
            np.concatenate([out.coll_x, p.coll_x]) if have else None, rw,
        )
    return out


@dataclass
class Resolved:
    """Outcome of one selection pass: the support moments, or a narrower bracket."""

    support: Moments | None
    bracket: tuple[float, float] | None
    count: int  # rows in the new bracket (when refining)


def resolve(part: SelectPart, h: int, bracket: tuple[float, float]) -> Resolved:
    """Exact moments of the ``h`` rows of smallest distance, or where to look next."""
    a, b = bracket
    n_below = int(round(part.below.count))
    n_in = int(round(part.inside.count))
    if n_below < h <= n_below + n_in:
        if a == b:
            sup = merge_weighted(part.below, part.inside, (h - n_below) / n_in)
            return Resolved(sup, None, 0)
        if part.coll_d2 is not None:
            sup, _ = support_moments(part.coll_x, part.coll_d2, h, part.below, n_below)
            return Resolved(sup, None, 0)
    cum = np.cumsum(part.counts)
    j = int(np.searchsorted(cum, h))
    return Resolved(None, (float(part.vmin[j]), float(part.vmax[j])), int(part.counts[j]))


#: Edges of each of the two grids of a distance histogram (the sample's
#: quantiles, and a uniform grid over the bracket): 64 bins each, so that a pass
#: missing the bracket still finds the ``h``-th distance in a bin of at most
#: about a 64th of the rows, with a small histogram per chunk.
BRACKET_EDGES = 65


def predict_bracket(sample_d2: np.ndarray, h: int, n: int,
                    z: float = 5.0) -> tuple[tuple[float, float], np.ndarray]:
    """Bracket likely to hold the ``h``-th smallest of ``n`` distances, and histogram edges.

    ``sample_d2`` are the sorted distances of a uniform row sample; the bracket
    spans ``z`` binomial standard deviations of the sample rank around ``h/n``.
    The edges (sample quantiles and a grid over the bracket) let a pass that
    misses the bracket find a bin holding the ``h``-th value exactly.
    """
    s = sample_d2.size
    q = h / n
    centre = q * s
    half = z * np.sqrt(s * q * (1 - q)) + 2
    lo = int(np.floor(centre - half)) - 1
    hi = int(np.ceil(centre + half))
    a = float(sample_d2[lo]) if lo >= 0 else 0.0
    b = float(sample_d2[hi]) if hi < s else np.inf
    outer = np.quantile(sample_d2, np.linspace(0, 1, BRACKET_EDGES)[1:-1]) if s else np.zeros(0)
    top = b if np.isfinite(b) else (float(sample_d2[-1]) if s else a)
    inner = np.linspace(a, max(top, a), BRACKET_EDGES)
    edges = np.unique(np.concatenate([outer, inner, [a]]))
    return (a, b), edges


def refine_edges(bracket: tuple[float, float], k: int = 128) -> np.ndarray:
    a, b = bracket
    return np.unique(np.linspace(a, b, k + 1))
