"""Pure NumPy/Numba kernels of the robust (MCD) and shrinkage covariance estimators.

Nothing in this module knows about Dask.  :mod:`daskdepth._robust` wires the
chunk functions below into passes over the rows.

Conventions
-----------
* Moments are ``(count, mean, scatter)`` triples as in
  :func:`daskdepth._kernels.chunk_moments`; the count may be fractional (a
  weighted share of tied rows, see :func:`support_moments`).
* Distances are squared Mahalanobis distances ``||(x - loc) W||^2`` where
  ``W W^T`` is the pseudo-inverse of the covariance (:func:`whiten`), as
  scikit-learn's ``pinvh``.  :func:`mahalanobis_sq` computes them row by row
  in a fixed order, so a row's distance does not depend on its chunk.
* The ``h`` rows of smallest distance are selected exactly.  When the
  ``h``-th smallest distance is tied, all rows at that distance get the same
  fractional weight so that the weights sum to ``h``: identical rows (the
  usual cause of ties) then give the same moments as any choice of ``h`` rows,
  and the result depends neither on row order nor on chunking.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from scipy.stats import chi2

from ._kernels import chunk_moments, merge_moments

_jit = numba.njit(nogil=True, cache=True)

Moments = tuple[float, np.ndarray, np.ndarray]

#: Eigenvalues of a correlation matrix below ``RANK_RTOL * p`` times the largest
#: count as zero in the C-steps (an exact fit): rounding level, as ``pinvh``.
RANK_RTOL = 1e-12
#: Largest number of C-step iterations, as in scikit-learn's ``MinCovDet``.
MAX_CSTEPS = 30
#: Reweighting keeps rows whose corrected distance is below this chi-square quantile.
REWEIGHT_QUANTILE = 0.975


# --------------------------------------------------------------------------- linear algebra


def whiten(cov: np.ndarray) -> tuple[np.ndarray, float]:
    """Pseudo-inverse square root ``W`` (p x p) of ``cov`` and its log-determinant.

    Computed in correlation scale (so that features of very different scales
    are treated alike): ``cov = S C S``, ``W = S^-1 E diag(lambda)^-1/2`` over
    the eigenpairs of ``C`` above ``RANK_RTOL * p * largest`` (other columns
    of ``W`` are zero), so ``W W^T`` is the pseudo-inverse of ``cov`` on its
    principal subspace, as scikit-learn's ``pinvh``.  The log-determinant is
    ``-inf`` when any eigenvalue is dropped or a feature has zero variance
    (an exact fit).
    """
    w, logdet = whiten_batch(np.asarray(cov, dtype=np.float64)[None])
    return w[0], float(logdet[0])


def whiten_batch(covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`whiten` of a stack of covariance matrices (K, p, p)."""
    covs = (covs + np.swapaxes(covs, 1, 2)) / 2
    p = covs.shape[-1]
    var = np.diagonal(covs, axis1=1, axis2=2)
    live = (var > 0) & np.isfinite(var)
    sd = np.where(live, np.sqrt(np.where(live, var, 1.0)), 1.0)
    both = live[:, :, None] & live[:, None, :]
    corr = np.where(both, covs / (sd[:, :, None] * sd[:, None, :]), 0.0)
    fast = _whiten_cholesky(corr, live, sd)
    if fast is not None:
        return fast
    vals, vecs = np.linalg.eigh(corr)
    top = vals[:, -1:]
    keep = (vals > RANK_RTOL * p * top) & (top > 0)
    safe = np.where(keep, vals, 1.0)
    w = vecs * np.where(keep, 1.0 / np.sqrt(safe), 0.0)[:, None, :]
    w = np.where(live[:, :, None], w / sd[:, :, None], 0.0)
    logdet = np.where(keep.all(axis=1), np.log(safe).sum(axis=1) + 2 * np.log(sd).sum(axis=1),
                      -np.inf)
    return w, logdet


def _whiten_cholesky(corr: np.ndarray, live: np.ndarray, sd: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`whiten_batch` by Cholesky factors, when they show every eigenvalue is kept.

    With ``C = L L^T``, ``W = L^-T`` whitens as the eigenvectors do (distances
    are the same; only the rotation differs), and ``lambda_min(C) >=
    1 / ||L^-1||_F^2`` certifies that no eigenvalue falls below the rank
    threshold (the largest is at most ``trace(C) = p``).  Ten times cheaper
    than ``eigh``; returns None (use ``eigh``) if any matrix fails the test.
    """
    p = corr.shape[-1]
    if not live.all():
        return None
    try:
        chol = np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:
        return None
    inv = np.linalg.inv(chol)
    norm2 = np.einsum("kij,kij->k", inv, inv)
    if not np.all(np.isfinite(norm2) & (1.0 / norm2 > RANK_RTOL * p * p)):
        return None
    w = np.swapaxes(inv, 1, 2) / sd[:, :, None]
    logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1) + 2 * np.log(sd).sum(
        axis=1)
    return w, logdet


def consistency_factor(p: int, alpha: float) -> float:
    """Factor making the covariance of the ``alpha`` most central share consistent.

    ``alpha / F_{p+2}(chi2_p^{-1}(alpha))`` for Gaussian data, as scikit-learn's
    ``MinCovDet`` (Croux and Haesbroeck, 1999).
    """
    if alpha >= 1.0:
        return 1.0
    return float(alpha / chi2.cdf(chi2.ppf(alpha, df=p), p + 2))


def reweight_threshold(p: int, raw_factor: float) -> float:
    """Squared raw distance below which a row is kept by the reweighting step.

    scikit-learn keeps rows with ``raw_dist / raw_factor < chi2_p.isf(0.025)``.
    """
    return float(raw_factor * chi2(p).isf(1.0 - REWEIGHT_QUANTILE))


# --------------------------------------------------------------------------- moments


def moments_of(x: np.ndarray, mask: np.ndarray | None = None) -> Moments:
    """Count, mean and scatter of the rows of ``x`` (selected by ``mask``)."""
    x = np.asarray(x, dtype=np.float64)
    if mask is None:
        mask = np.ones(x.shape[0], dtype=bool)
    n, mean, scatter = chunk_moments(x, mask)
    return float(n), mean, scatter


def merge(a: Moments, b: Moments, weight: float = 1.0) -> Moments:
    """Moments of the union of ``a`` and ``b``, each row of ``b`` counted ``weight`` times."""
    if weight != 1.0:
        b = (b[0] * weight, b[1], b[2] * weight)
    n, mean, scatter = merge_moments(a, b)
    return float(n), mean, scatter


def empty_moments(d: int) -> Moments:
    return 0.0, np.zeros(d), np.zeros((d, d))


def support_moments(x: np.ndarray, d2: np.ndarray, h: int, base: Moments | None = None,
                    offset: int = 0) -> tuple[Moments, float]:
    """Moments of the ``h - offset`` rows of ``x`` with smallest ``d2``, added to ``base``.

    Rows tied at the threshold share the remaining weight equally.  Returns the
    moments and the threshold (the ``(h - offset)``-th smallest value).
    """
    r = h - offset
    t = float(np.partition(d2, r - 1)[r - 1])
    less = d2 < t
    eq = d2 == t
    out = base if base is not None else empty_moments(x.shape[1])
    out = merge(out, moments_of(x, less))
    n_less = int(less.sum())
    if n_less < r:
        out = merge(out, moments_of(x, eq), (r - n_less) / int(eq.sum()))
    return out, t


# --------------------------------------------------------------------------- distances


@_jit
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


@_jit
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


# --------------------------------------------------------------------------- selection pass


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
        rw = merge(out.reweight, p.reweight) if out.reweight is not None else None
        if out.below is None:
            out = SelectPart(None, None, None, None, None, None, None, rw)
            continue
        have = out.coll_d2 is not None and p.coll_d2 is not None
        out = SelectPart(
            merge(out.below, p.below), merge(out.inside, p.inside), out.counts + p.counts,
            np.minimum(out.vmin, p.vmin), np.maximum(out.vmax, p.vmax),
            np.concatenate([out.coll_d2, p.coll_d2]) if have else None,
            np.concatenate([out.coll_x, p.coll_x]) if have else None, rw,
        )
    return out


@dataclass
class Resolved:
    """Outcome of one selection pass: the support moments, or a narrower bracket."""

    support: Moments | None
    threshold: float | None
    bracket: tuple[float, float] | None
    count: int  # rows in the new bracket (when refining)


def resolve(part: SelectPart, h: int, bracket: tuple[float, float]) -> Resolved:
    """Exact moments of the ``h`` rows of smallest distance, or where to look next."""
    a, b = bracket
    n_below = int(round(part.below[0]))
    n_in = int(round(part.inside[0]))
    if n_below < h <= n_below + n_in:
        if a == b:
            sup = merge(part.below, part.inside, (h - n_below) / n_in)
            return Resolved(sup, a, None, 0)
        if part.coll_d2 is not None:
            sup, t = support_moments(part.coll_x, part.coll_d2, h, part.below, n_below)
            return Resolved(sup, t, None, 0)
    cum = np.cumsum(part.counts)
    j = int(np.searchsorted(cum, h))
    return Resolved(None, None, (float(part.vmin[j]), float(part.vmax[j])), int(part.counts[j]))


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
    outer = np.quantile(sample_d2, np.linspace(0, 1, 65)[1:-1]) if s else np.zeros(0)
    top = b if np.isfinite(b) else (float(sample_d2[-1]) if s else a)
    inner = np.linspace(a, max(top, a), 65)
    edges = np.unique(np.concatenate([outer, inner, [a]]))
    return (a, b), edges


def refine_edges(bracket: tuple[float, float], k: int = 128) -> np.ndarray:
    a, b = bracket
    return np.unique(np.linspace(a, b, k + 1))


# --------------------------------------------------------------------------- in-memory FastMCD


def thread_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``[fn(i) for i in items]`` on one thread per core (NumPy releases the GIL)."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(items), os.cpu_count() or 1))) as ex:
        return list(ex.map(fn, items))


def _cov_batch(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    loc = xs.mean(axis=1)
    xc = xs - loc[:, None, :]
    return loc, np.matmul(np.swapaxes(xc, 1, 2), xc) / xs.shape[1]


def _cstep_batch(x: np.ndarray, h: int, locs: np.ndarray, covs: np.ndarray, steps: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``steps`` C-steps for each of K candidates (locs (K, p), covs (K, p, p))."""
    m, p = x.shape
    w, logdet = whiten_batch(covs)
    per = max(1, (1 << 22) // max(1, m * p))
    for _ in range(steps):
        new_locs = np.empty_like(locs)
        new_covs = np.empty_like(covs)
        for k0 in range(0, locs.shape[0], per):
            k1 = min(locs.shape[0], k0 + per)
            z = (x[None] - locs[k0:k1, None, :]) @ w[k0:k1]
            d2 = np.einsum("kij,kij->ki", z, z)
            idx = np.argpartition(d2, h - 1, axis=1)[:, :h]
            new_locs[k0:k1], new_covs[k0:k1] = _cov_batch(x[idx])
        locs, covs = new_locs, new_covs
        w, logdet = whiten_batch(covs)
    return locs, covs, logdet


def _elemental_starts(x: np.ndarray, n_starts: int, limit: int,
                      rng: np.random.Generator | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of random (p+1)-subsets, grown while singular (up to ``limit``).

    ``rng`` may be the uniform numbers ``(n_starts, m)`` the subsets are drawn from.
    """
    m, p = x.shape
    u = rng if isinstance(rng, np.ndarray) else rng.random((n_starts, m))
    order = np.argsort(u, axis=1)
    locs, covs = _cov_batch(x[order[:, :p + 1]])
    _, logdet = whiten_batch(covs)
    for k in np.flatnonzero(~np.isfinite(logdet)):
        size = p + 1
        while size < limit:
            size = min(limit, size + max(1, size // 8))
            loc, cov = _cov_batch(x[order[k, :size]][None])
            if np.isfinite(whiten(cov[0])[1]):
                break
        locs[k], covs[k] = loc[0], cov[0]
    return locs, covs


@dataclass
class Candidate:
    loc: np.ndarray
    cov: np.ndarray
    logdet: float


#: Size of the subsets of the first FastMCD stage and the most of them.
SUBSET_SIZE = 300
MAX_SUBSETS = 5
#: Random starts of the first stage, and how many candidates each stage keeps.
N_STARTS = 500
N_BEST = 10
#: Rough budget (floating point operations) of the first stage; wide data get
#: fewer random starts.
START_FLOPS = 4e9


def fast_mcd_candidates(x: np.ndarray, h: int, rng: np.random.Generator,
                        n_best: int = N_BEST) -> list[Candidate]:
    """Starts for the C-steps on rows ``x`` (in memory): FastMCD's and a few more.

    FastMCD (Rousseeuw and Van Driessen, 1999): random (p+1)-subsets, each
    followed by two C-steps, on up to five disjoint subsets of about 300 rows;
    the best ``n_best`` per subset get two more C-steps on the merged subsets,
    and the best ``n_best`` of those are kept.  Small subsets favour near exact
    fits on data with many repeated values, which can lead the C-steps on all
    of ``x`` to a poor local optimum, so :func:`extra_candidates` adds starts
    that see all of ``x``.  None is iterated to convergence yet; ``h`` is the
    support size on ``x``.
    """
    m, p = x.shape
    if p == 1:
        return [_univariate(x[:, 0], h)]
    return _fast_mcd_starts(x, h, rng, n_best) + extra_candidates(x, h, rng)


#: Random h-subsets of all rows added to the FastMCD starts (as scikit-learn's starts).
N_RANDOM_SUBSETS = 5


def extra_candidates(x: np.ndarray, h: int, rng: np.random.Generator) -> list[Candidate]:
    """Starts from all of ``x``: the classical estimate, the ``h`` rows nearest the
    coordinatewise median (scaled by the MAD, as DetMCD's spatial start), and
    ``N_RANDOM_SUBSETS`` random ``h``-subsets."""
    m, p = x.shape
    out = [Candidate(x.mean(axis=0), np.cov(x.T, bias=True).reshape(p, p), np.inf)]
    med = np.median(x, axis=0)
    mad = np.median(np.abs(x - med), axis=0)
    scale = np.where(mad > 0, mad, np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0))
    r2 = (((x - med) / scale) ** 2).sum(axis=1)
    near = np.argpartition(r2, h - 1)[:h]
    loc, cov = _cov_batch(x[near][None])
    out.append(Candidate(loc[0], cov[0], np.inf))
    idx = np.argsort(rng.random((N_RANDOM_SUBSETS, m)), axis=1)[:, :h]
    locs, covs = _cov_batch(x[idx])
    out += [Candidate(locs[k], covs[k], np.inf) for k in range(N_RANDOM_SUBSETS)]
    return out


def _fast_mcd_starts(x: np.ndarray, h: int, rng: np.random.Generator,
                     n_best: int) -> list[Candidate]:
    m, p = x.shape
    frac = h / m
    sub = max(SUBSET_SIZE, int(np.ceil(2 * (p + 1) / frac)))
    per_start = 3 * (min(m, sub) * p * p + p ** 3) + 1
    n_starts = int(np.clip(START_FLOPS / per_start, 30, N_STARTS))
    if m <= 2 * sub:
        locs, covs = _elemental_starts(x, n_starts, h, rng)
        locs, covs, logdet = _cstep_batch(x, h, locs, covs, 3)
        best = np.argsort(logdet, kind="stable")[:n_best]
        return [Candidate(locs[i], covs[i], float(logdet[i])) for i in best]
    k = min(MAX_SUBSETS, m // sub)
    perm = rng.permutation(m)
    h_sub = int(np.ceil(sub * frac))
    # The subsets' random numbers are drawn in order, then the subsets run on
    # as many threads as cores (NumPy releases the GIL): the same results.
    per = max(1, n_starts // k)
    draws = [rng.random((per, sub)) for _ in range(k)]

    def subset_best(i: int) -> tuple[np.ndarray, np.ndarray]:
        xs = x[perm[i * sub:(i + 1) * sub]]
        locs, covs = _elemental_starts(xs, per, h_sub, draws[i])
        locs, covs, logdet = _cstep_batch(xs, h_sub, locs, covs, 3)
        best = np.argsort(logdet, kind="stable")[:n_best]
        return locs[best], covs[best]

    pooled = thread_map(subset_best, range(k))
    pooled_l = [b[0] for b in pooled]
    pooled_c = [b[1] for b in pooled]
    merged = x[perm[:k * sub]]
    h_merged = int(np.ceil(merged.shape[0] * frac))
    locs, covs, logdet = _cstep_batch(merged, h_merged, np.concatenate(pooled_l),
                                      np.concatenate(pooled_c), 2)
    best = np.argsort(logdet, kind="stable")[:n_best]
    return [Candidate(locs[i], covs[i], float(logdet[i])) for i in best]


def _univariate(v: np.ndarray, h: int) -> Candidate:
    """Exact univariate MCD: the shortest window holding ``h`` sorted values."""
    s = np.sort(v)
    width = s[h - 1:] - s[:s.size - h + 1]
    j = int(np.argmin(width))
    win = s[j:j + h]
    var = float(win.var())
    return Candidate(np.array([win.mean()]), np.array([[var]]),
                     float(np.log(var)) if var > 0 else -np.inf)


# --------------------------------------------------------------------------- shrinkage


def fourth_moment_chunk(x: np.ndarray, mean: np.ndarray) -> float:
    """Sum over the finite rows of ``||x_i - mean||^4``."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    xc = x[finite] - mean
    r2 = np.einsum("ij,ij->i", xc, xc)
    return float(r2 @ r2)


def ledoit_wolf(n: int, scatter: np.ndarray, fourth: float) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf shrunk covariance from the moments (scikit-learn's formula).

    ``fourth`` is ``sum_i ||x_i - mean||^4``, which is the sum of the entries
    of ``X2^T X2`` (``X2`` the squared centred rows) used by
    ``sklearn.covariance.ledoit_wolf_shrinkage``.
    """
    d = scatter.shape[0]
    emp = scatter / n
    if d == 1:
        return emp.copy(), 0.0
    trace = np.diag(scatter) / n
    mu = trace.sum() / d
    delta_ = float(np.sum(scatter ** 2)) / n ** 2
    beta = 1.0 / (d * n) * (fourth / n - delta_)
    delta = (delta_ - 2.0 * mu * trace.sum() + d * mu ** 2) / d
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 or delta == 0 else beta / delta
    cov = (1.0 - shrinkage) * emp
    cov.flat[::d + 1] += shrinkage * mu
    return cov, float(shrinkage)


def oas(n: int, scatter: np.ndarray) -> tuple[np.ndarray, float]:
    """Oracle Approximating Shrinkage covariance (scikit-learn's formula)."""
    d = scatter.shape[0]
    emp = scatter / n
    if d == 1:
        return emp.copy(), 0.0
    alpha = float(np.mean(emp ** 2))
    mu = float(np.trace(emp)) / d
    num = alpha + mu ** 2
    den = (n + 1) * (alpha - mu ** 2 / d)
    shrinkage = 1.0 if den == 0 else min(num / den, 1.0)
    cov = (1.0 - shrinkage) * emp
    cov.flat[::d + 1] += shrinkage * mu
    return cov, float(shrinkage)
