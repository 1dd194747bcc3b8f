"""The in-memory FastMCD: starts, C-steps and the consistency and reweighting constants (NumPy).

Distances are squared Mahalanobis distances ``||(x - loc) W||^2`` where
``W W^T`` is the pseudo-inverse of the covariance
(:func:`daskdepth.kernels.whitening.whiten`), as scikit-learn's ``pinvh``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from scipy.stats import chi2

from .frame import Support
from .moments import Moments, add_dd, column_sums_dd, merge_weighted, moments_of
from .selection import chunk_distances
from .whitening import whiten, whiten_batch

#: Largest number of C-step iterations, as in scikit-learn's ``MinCovDet``.
MAX_CSTEPS = 30


#: Reweighting keeps rows whose corrected distance is below this chi-square quantile.
REWEIGHT_QUANTILE = 0.975


#: Values (candidates x rows x features) whose distances the batched C-steps
#: compute at once: bounds their temporary arrays (32 MiB of float64 each)
#: while keeping each batch's matrix products large.
CSTEP_BATCH_VALUES = 1 << 22


#: A singular elemental start grows by ``1 / ELEMENTAL_GROWTH`` of its rows (at
#: least one) at a time until its covariance is regular: few steps, ending near
#: the smallest regular subset.
ELEMENTAL_GROWTH = 8


#: C-steps of every random start (on its subset, or on the sample when that is
#: one subset) before the best are kept, and of those best on the merged
#: subsets: the determinant falls most in the first steps, so a few rank the
#: starts, and the kept ones are concentrated to convergence afterwards.
START_CSTEPS = 3


MERGED_CSTEPS = 2


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


class ReweightPart(NamedTuple):
    """The rows of a support: count, compensated column sums ``(2, d)`` in input
    coordinates, and moments in the MCD's coordinates (mergeable, :func:`reweight_merge`)."""

    count: float
    sums: np.ndarray
    moments: Moments


def reweight_chunk(x: np.ndarray, support: Support, mean: np.ndarray,
                   basis: np.ndarray) -> ReweightPart:
    """:class:`ReweightPart` of the finite rows of ``x`` in ``support``.

    The support is the rows with ``||(x - location) whitening||^2 < threshold``
    (the distances of :func:`daskdepth.kernels.selection.chunk_distances`, row by
    row, so the same for any chunking).  The sums are double-doubles
    (:func:`daskdepth.kernels.moments.column_sums_dd`), so that their rounded
    quotient by the count, the support's mean, has the same bits however the
    rows are chunked; the moments are those of ``(x - mean) @ basis``.

    Examples
    --------
    >>> x = np.array([[0.0, 1.0], [2.0, 3.0], [50.0, 0.0], [np.nan, 0.0]])
    >>> part = reweight_chunk(x, Support(np.zeros(2), np.eye(2), 20.0), np.zeros(2), np.eye(2))
    >>> part.count, (part.sums[0] + part.sums[1]).tolist(), part.moments.mean.tolist()
    (2.0, [2.0, 4.0], [1.0, 2.0])
    """
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    keep = np.zeros(x.shape[0], dtype=bool)
    keep[finite] = chunk_distances(x[finite], support.location, support.whitening) \
        < support.threshold
    z = (x[keep] - mean) @ basis
    return ReweightPart(float(keep.sum()), column_sums_dd(x, keep), moments_of(z))


def support_copies(x: np.ndarray, support: Support, row: np.ndarray) -> float:
    """Rows of ``x`` in ``support`` (as :func:`reweight_chunk`) equal to ``row``.

    Examples
    --------
    >>> x = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 3.0], [1.0, 2.0]])
    >>> support_copies(x, Support(np.zeros(2), np.eye(2), 7.0), np.array([1.0, 2.0]))
    3.0
    """
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    xf = x[finite]
    keep = chunk_distances(xf, support.location, support.whitening) < support.threshold
    return float((keep & (xf == row).all(axis=1)).sum())


def reweight_merge(*parts: ReweightPart) -> ReweightPart:
    """Merge :class:`ReweightPart` records."""
    out = parts[0]
    for p in parts[1:]:
        out = ReweightPart(out.count + p.count, add_dd(out.sums, p.sums),
                           merge_weighted(out.moments, p.moments))
    return out


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
    per = max(1, CSTEP_BATCH_VALUES // max(1, m * p))
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
            size = min(limit, size + max(1, size // ELEMENTAL_GROWTH))
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
    followed by :data:`START_CSTEPS` C-steps, on up to :data:`MAX_SUBSETS`
    disjoint subsets of about :data:`SUBSET_SIZE` rows; the best ``n_best`` per
    subset get :data:`MERGED_CSTEPS` more C-steps on the merged subsets, and the
    best ``n_best`` of those are kept.  Small subsets favour near exact
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
        locs, covs, logdet = _cstep_batch(x, h, locs, covs, START_CSTEPS)
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
        locs, covs, logdet = _cstep_batch(xs, h_sub, locs, covs, START_CSTEPS)
        best = np.argsort(logdet, kind="stable")[:n_best]
        return locs[best], covs[best]

    pooled = thread_map(subset_best, range(k))
    pooled_l = [b[0] for b in pooled]
    pooled_c = [b[1] for b in pooled]
    merged = x[perm[:k * sub]]
    h_merged = int(np.ceil(merged.shape[0] * frac))
    locs, covs, logdet = _cstep_batch(merged, h_merged, np.concatenate(pooled_l),
                                      np.concatenate(pooled_c), MERGED_CSTEPS)
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
