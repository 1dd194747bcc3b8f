"""Distributed Minimum Covariance Determinant (MCD): FastMCD on a sample, C-steps over all rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from typing import Any, NamedTuple

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed
from threadpoolctl import threadpool_limits

from ..kernels.fastmcd import (
    MAX_CSTEPS,
    REWEIGHT_QUANTILE,
    ReweightPart,
    consistency_factor,
    fast_mcd_candidates,
    reweight_chunk,
    reweight_merge,
    reweight_threshold,
    support_copies,
    thread_map,
)
from ..kernels.frame import Support, invariant_coordinates
from ..kernels.hashing import keyed_sample
from ..kernels.moments import Moments, moments_of, support_moments
from ..kernels.selection import (
    SelectPart,
    chunk_distances,
    predict_bracket,
    refine_edges,
    resolve,
    select_chunk,
    select_merge,
)
from ..kernels.whitening import (
    covariance_keeps_rank,
    factor_whitening,
    principal_subspace,
    sample_covariance,
    whiten,
)
from ..passes.moments import factor_pass
from ..runtime.client import phase
from ..runtime.graph import reduce_chunks, row_blocks, tree_reduce
from ..runtime.keys import key_name

#: Most rows of the in-memory FastMCD sample.
MCD_SAMPLE_ROWS = 1 << 16


#: Budget (rows x features^2) of the in-memory sample, so that wide data get
#: a smaller sample and the in-memory C-steps stay cheap.
MCD_SAMPLE_WORK = 1 << 26


#: Least rows of the sample (unless the data have fewer).
MCD_SAMPLE_MIN = 1500


#: Least rows of the sample per row of an elemental subset (``p + 1``), also for
#: a ``sample_size`` given: the random subsets, and the support scaled to the
#: sample, need many more rows than dimensions.
MCD_SAMPLE_PER_SUBSET_ROW = 20


#: Bytes of rows near the selection threshold that a pass may collect in all
#: (but at least ``COLLECT_MIN_ROWS`` rows).
COLLECT_BYTES = 64 * 2**20


COLLECT_MIN_ROWS = 1024


#: Histogram refinement passes after which selection gives up (never reached
#: in practice: each refinement narrows the bracket 128-fold).
MAX_REFINE = 64


#: Relative change of the log-determinant below which a C-step counts as no decrease.
DET_RTOL = 1e-12


#: Mixed into the seed so that the MCD sample differs from the depth sample.
_STREAM = 0x4D4344


@dataclass
class MCDResult:
    """Robust location and covariance, with the raw estimate they came from.

    ``location``/``covariance`` are the reweighted estimates (what AI-IRW
    whitens with), ``raw_location``/``raw_covariance`` the raw MCD of the ``h``
    most central rows (uncorrected, as scikit-learn's ``raw_covariance_``) and
    ``raw_factor`` its consistency factor.  ``raw_threshold`` is the squared
    raw distance below which rows are kept by the reweighting (a row of
    scikit-learn's ``support_`` is one with raw distance below it).
    """

    location: np.ndarray
    covariance: np.ndarray
    raw_location: np.ndarray
    raw_covariance: np.ndarray
    n_support: int
    raw_factor: float
    raw_threshold: float
    logdet: float
    n_passes: int = 0
    in_memory: bool = True
    support: Support | None = None


def support_size(n: int, p: int, support_fraction: float | None) -> int:
    """Rows ``h`` of the raw MCD support, as scikit-learn's ``fast_mcd``."""
    if support_fraction is None:
        return min(int(np.ceil(0.5 * (n + p + 1))), n)
    h = int(support_fraction * n)
    if h < min(n, p + 1):
        raise ValueError(
            f"support_fraction={support_fraction!r} keeps {h} of the {n} rows, fewer than "
            f"n_features + 1 = {p + 1}, so their covariance is singular; use a larger "
            "support_fraction, or None for (n + d + 1) / 2n"
        )
    return h


def _subsample_chunk(x: np.ndarray, row_start: int, seed: int, p: float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[np.isfinite(x).all(axis=1) & keyed_sample(row_start, x.shape[0], seed, p)]


def _concat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts)


def _add(*parts: float) -> float:
    return float(sum(parts))


def subsample(x: da.Array, *, seed: int, size: int, token: str) -> np.ndarray:
    """Finite rows drawn with probability ``size / n_rows``, keyed on the global row index."""
    p = min(1.0, size / max(1, x.shape[0]))
    blocks, starts = row_blocks(x)
    sample = reduce_chunks(blocks, _subsample_chunk, _concat,
                           key=(key_name("draw", token),),
                           merge_key=key_name("merge", token, "subsample"), args=(seed, p),
                           starts=starts)
    with phase("mcd-subsample"):
        (out,) = dask.compute(sample)
    return out


def mcd_sample_size(p: int) -> int:
    """Rows of the in-memory FastMCD sample for ``p`` features."""
    return int(min(MCD_SAMPLE_ROWS, max(MCD_SAMPLE_MIN, MCD_SAMPLE_WORK // max(1, p * p))))


#: ``evaluate(loc, w, h, rw_thr)`` -> (moments of the ``h`` rows of smallest
#: distance or None, moments of the rows with distance < rw_thr or None), in
#: the coordinates of the principal subspace.
Evaluator = Callable[[np.ndarray, np.ndarray, "int | None", "float | None"],
                     "tuple[Moments | None, Moments | None]"]


class MemoryEvaluator:
    """Distances and support moments of rows held in memory."""

    def __init__(self, z: np.ndarray) -> None:
        self.z = z
        self.passes = 0

    def __call__(self, loc: np.ndarray, w: np.ndarray, h: int | None,
                 rw_thr: float | None) -> tuple[Moments | None, Moments | None]:
        zc = (self.z - loc) @ w
        d2 = np.einsum("ij,ij->i", zc, zc)
        sup = support_moments(self.z, d2, h)[0] if h is not None else None
        rw = moments_of(self.z, d2 < rw_thr) if rw_thr is not None else None
        return sup, rw


def _select_z_chunk(x: np.ndarray, mean: np.ndarray, basis: np.ndarray, loc: np.ndarray,
                    w: np.ndarray, bracket: tuple | None, edges: np.ndarray | None, cap: int,
                    rw_thr: float | None) -> SelectPart:
    """:func:`~daskdepth.kernels.selection.select_chunk` of the rows of a chunk mapped to
    ``z = (x - mean) @ basis`` (rows with NaN or inf stay NaN, and are skipped)."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    z = np.full((x.shape[0], basis.shape[1]), np.nan)
    z[finite] = (x[finite] - mean) @ basis
    return select_chunk(z, loc, w, bracket, edges, cap, rw_thr)


class DaskEvaluator:
    """Distances and exact support moments over all rows of a dask array, pass by pass.

    Works in the coordinates ``z = (x - mean) @ basis`` of the principal
    subspace of the data: each chunk task maps its rows into them and selects
    there, so that distances and moments have the conditioning of ``z`` (well
    conditioned when ``basis`` whitens), not that of ``x``.  ``back`` maps
    ``z`` back (``x = mean + back @ z``); the passes do not need it.
    """

    def __init__(self, x: da.Array, mean: np.ndarray, basis: np.ndarray, back: np.ndarray,
                 sample_z: np.ndarray, n: int, token: str) -> None:
        self.x = x
        self.mean = mean
        self.basis = basis
        self.back = back
        self.sample_z = sample_z
        self.n = n
        self.token = token
        self.passes = 0
        self.refines = 0
        self.budget = max(COLLECT_MIN_ROWS, COLLECT_BYTES // (8 * (basis.shape[1] + 1)))
        self.blocks, _ = row_blocks(x)
        self.rows = np.asarray(x.chunks[0], dtype=np.int64)

    def _pass(self, loc: np.ndarray, w: np.ndarray, bracket: tuple | None,
              edges: np.ndarray | None, caps: np.ndarray, rw_thr: float | None,
              verb: str, phase_name: str) -> SelectPart:
        k = self.passes
        name = key_name(verb, self.token)
        parts = [
            delayed(_select_z_chunk, pure=True)(b, self.mean, self.basis, loc, w, bracket,
                                                edges, int(c), rw_thr,
                                                dask_key_name=(name, k, i))
            for i, (b, c) in enumerate(zip(self.blocks, caps, strict=True))
        ]
        out = tree_reduce(parts, select_merge, key_name("merge", self.token, verb, k))
        with phase(phase_name):
            (res,) = dask.compute(out)
        self.passes += 1
        return res

    def __call__(self, loc: np.ndarray, w: np.ndarray, h: int | None,
                 rw_thr: float | None) -> tuple[Moments | None, Moments | None]:
        if h is None:
            part = self._pass(loc, w, None, None, np.zeros(len(self.blocks)), rw_thr,
                              "weigh", "reweight")
            return None, part.reweight
        zc = (self.sample_z - loc) @ w
        sample_d2 = np.sort(np.einsum("ij,ij->i", zc, zc))
        bracket, edges = predict_bracket(sample_d2, h, self.n)
        caps = np.ceil(self.budget * self.rows / max(1, self.rows.sum())).astype(np.int64)
        rw = None
        for _ in range(MAX_REFINE):
            part = self._pass(loc, w, bracket, edges, caps, rw_thr, "cstep", "cstep")
            if rw_thr is not None:
                rw, rw_thr = part.reweight, None
            res = resolve(part, h, bracket)
            if res.support is not None:
                return res.support, rw
            self.refines += 1
            bracket = res.bracket
            edges = refine_edges(bracket)
            if res.count <= self.budget:
                caps = np.full(len(self.blocks), res.count, dtype=np.int64)
        raise RuntimeError(  # pragma: no cover - each refinement narrows 128-fold
            "daskdepth internal error: the exact selection of the MCD support did not "
            "converge; please report this with the input's shape and chunks"
        )


@dataclass
class Concentrated:
    loc: np.ndarray
    cov: np.ndarray
    logdet: float
    reweight: Moments | None
    steps: int


class Estimate(NamedTuple):
    """Location and covariance of a support, its whitening and log-determinant."""

    loc: np.ndarray
    cov: np.ndarray
    w: np.ndarray
    logdet: float


def _estimate(m: Moments) -> Estimate:
    cov = m.scatter / m.count
    w, logdet = whiten(cov)
    return Estimate(m.mean, (cov + cov.T) / 2, w, logdet)


def concentrate(evaluate: Evaluator, h: int, loc: np.ndarray, cov: np.ndarray,
                rw_thr: float | None, max_steps: int = MAX_CSTEPS) -> Concentrated:
    """C-steps from ``(loc, cov)`` until the determinant stops decreasing.

    Follows scikit-learn's ``_c_step``: the support of the start gives the
    first estimate; iterate while the log-determinant decreases; on an
    increase keep the previous estimate.  The estimate kept is the last one
    whose distances were evaluated over all rows (at a fixed point, the same
    support), so that the reweighting moments come from the same pass; an
    exact fit (singular covariance) or the iteration limit cost one more
    evaluation for them.
    """
    w0, _ = whiten(cov)
    sup, _ = evaluate(loc, w0, h, None)
    cur = _estimate(sup)
    evaluated: tuple[Estimate, Moments | None] | None = None
    prev_det = np.inf
    steps = 0
    while _decreased(cur.logdet, prev_det) and steps < max_steps and np.isfinite(cur.logdet):
        sup, rw = evaluate(cur.loc, cur.w, h, rw_thr)
        evaluated = (cur, rw)
        prev_det = cur.logdet
        cur = _estimate(sup)
        steps += 1
    if evaluated is not None and not _decreased(cur.logdet, prev_det):
        last, rw = evaluated
        return Concentrated(last.loc, last.cov, last.logdet, rw, steps)
    rw = evaluate(cur.loc, cur.w, None, rw_thr)[1] if rw_thr is not None else None
    return Concentrated(cur.loc, cur.cov, cur.logdet, rw, steps)


def _decreased(det: float, previous: float) -> bool:
    """``det < previous`` beyond rounding: the moments of one support computed in two
    different passes (other brackets, other sums) agree only to a few ulps."""
    if not np.isfinite(previous):
        return det < previous
    return det < previous - DET_RTOL * max(1.0, abs(previous))


def mcd(x: da.Array, n: int, mean: np.ndarray, scatter: np.ndarray, *, seed: int, token: str,
        support_fraction: float | None = None, sample_size: int | None = None,
        equivariant: bool = False) -> MCDResult:
    """Reweighted Minimum Covariance Determinant of the finite rows of ``x``.

    Parameters
    ----------
    x : dask array (n_rows, d) with one column chunk
        Rows with NaN or inf are skipped.
    n, mean, scatter
        Count, mean and centred scatter of the finite rows (one moments pass).
    seed : int
        Seeds the row sample and the random starts.
    token : str
        Suffix of the graph keys.
    support_fraction : float in (0, 1] or None
        Share of rows in the raw support; None means ``(n + d + 1) / 2n``.
    sample_size : int, optional
        Rows of the in-memory sample (default :func:`mcd_sample_size`); when the
        data have no more finite rows than this, everything runs in memory.
    equivariant : bool, default=False
        Work in coordinates whitened by the rows' ``R`` factor (one more pass,
        :func:`daskdepth.passes.moments.factor_pass`), rotated into the affine
        invariant coordinates of the in-memory sample
        (:func:`daskdepth.kernels.frame.invariant_coordinates`), instead of the
        input's: the deterministic median start, every exact-fit and rank
        decision and every determinant comparison of the C-steps then see the
        same well-conditioned numbers for ``x`` and ``A x + b``, however
        ill-conditioned ``A``, so the estimate is affine equivariant up to the
        rounding of the data (AI-IRW's ``frame='invariant'``).  The default
        keeps the input's coordinates where the data are well conditioned
        (:data:`MCD_WHITEN_COND`; a feature constant over the support then keeps
        exactly zero variance, as in scikit-learn's ``MinCovDet``), and whitens
        by the ``R`` factor otherwise.

    Notes
    -----
    The reweighted location is the mean of the kept rows from compensated sums
    in input coordinates: the same bits for any chunking of ``x``.

    Returns
    -------
    MCDResult
    """
    frac = check_support_fraction(support_fraction)
    d = mean.shape[0]
    cov = sample_covariance(n, scatter)
    var = np.diag(cov)
    factored = ((equivariant or not _well_conditioned(cov)) and np.isfinite(cov).all()
                and bool((var > 0).any()))
    if factored:
        # Whitened coordinates from the rows' R factor, whatever the conditioning:
        # every threshold of the MCD (exact fit, rank, determinants) then sees
        # numbers that do not depend on an affine map of the data.
        subspace = _factor_coordinates(x, mean, token)
    elif covariance_keeps_rank(cov, mean):
        subspace = principal_subspace(cov, mean)
    else:  # the covariance cannot tell tiny variance from none: the rows' R factor can
        subspace, factored = _factor_coordinates(x, mean, token), True
    if subspace is None:
        zero = np.zeros((d, d))
        return MCDResult(mean, zero, mean, zero, n, 1.0, 0.0, -np.inf)
    basis, back = subspace
    p = basis.shape[1]
    h = support_size(n, p, frac)
    raw_factor = consistency_factor(p, h / n)
    rw_thr = reweight_threshold(p, raw_factor)
    size = max(sample_size if sample_size is not None else mcd_sample_size(p),
               MCD_SAMPLE_PER_SUBSET_ROW * (p + 1))
    rows = subsample(x, seed=seed ^ _STREAM, size=size, token=token)
    z = (rows - mean) @ basis
    if back is None:
        # The map back from whitened coordinates, fitted to the sample: ``z`` is well
        # conditioned, so each feature is recovered to the rounding of its own values
        # (inverting ``basis`` would lose its condition number), from numbers that do
        # not depend on the chunking (the sample, ``basis`` and the exact mean).
        back = np.linalg.lstsq(z, rows - mean, rcond=None)[0].T
    if equivariant:
        t = invariant_coordinates(z)
        if t is not None:  # z @ t: the same coordinates for A x + b
            basis, back, z = basis @ t, back @ np.linalg.inv(t).T, z @ t
    in_memory = z.shape[0] == n
    # Small matrices, and chunk tasks that already run in parallel: BLAS threads
    # only add synchronisation (and spin badly when the cores are shared).
    with threadpool_limits(limits=1, user_api="blas"), phase("mcd-fastmcd", tasks=False):
        best = _best_on_sample(z, h, n, rw_thr, np.random.default_rng([seed, _STREAM]))
    with threadpool_limits(limits=1, user_api="blas"):
        passes = 1 + factored  # the sample's pass and the factor pass
        if not in_memory:
            ev = DaskEvaluator(x, mean, basis, back, z, n, token)
            best = concentrate(ev, h, best.loc, best.cov, rw_thr)
            passes += ev.passes
    to_x = lambda c: back @ c @ back.T  # noqa: E731
    raw_location = mean + back @ best.loc
    raw_covariance = _sym(to_x(best.cov))
    if h < n and _identical(raw_covariance, raw_location, cov):
        where = "" if p == d else f" in the {p}-dimensional subspace the data span"
        raise ValueError(
            f"covariance='mcd': the {h} most central of the {n} rows are all identical{where}, so "
            "their covariance is zero (an exact fit); pass a larger support_fraction (more "
            "than the share of repeated rows), or use covariance='sample' or 'ledoit-wolf'"
        )
    support = (Support(raw_location, np.ascontiguousarray(basis @ whiten(best.cov)[0]), rw_thr)
               if best.reweight is not None and best.reweight.count > p else None)
    if support is None:  # pragma: no cover - fewer kept rows than dimensions: the raw estimate
        location, covariance = raw_location, _sym(to_x(best.cov * raw_factor))
    else:
        # The reweighting's rows, as the fit's later passes select them (raw location
        # and whitening in input coordinates): their mean from compensated sums in
        # input coordinates (the same bits for any chunking, and no rounding of the
        # map back), their covariance from their moments in the MCD's coordinates.
        part = (reweight_chunk(rows, support, mean, basis) if in_memory
                else _reweight_pass(x, support, mean, basis, token))
        passes += not in_memory
        location = (part.sums[0] + part.sums[1]) / part.count
        cov_z = part.moments.scatter / part.count * consistency_factor(p, REWEIGHT_QUANTILE)
        covariance = _sym(to_x(cov_z))
        if not np.isfinite(whiten(cov_z)[1]):  # the kept rows are an exact fit
            _refuse_point_mass(x, rows, support, part.count, n, p, d, in_memory, token)
    return MCDResult(
        location=location, covariance=covariance,
        raw_location=raw_location, raw_covariance=raw_covariance,
        n_support=h, raw_factor=raw_factor, raw_threshold=rw_thr, logdet=best.logdet,
        n_passes=passes, in_memory=in_memory, support=support,
    )


#: Condition number of the data's correlation matrix above which the MCD works in
#: whitened coordinates in every frame: its exact-fit test (eigenvalue ratios of a
#: support's correlation matrix below ``EXACT_FIT_RTOL * p``) and its determinant
#: comparisons (``DET_RTOL``) must not see the rounding of an ill-conditioned
#: problem, and a support can be worse conditioned than all the rows.  Measured: in
#: input coordinates the kept rows of ``A x + b`` and ``x`` differed for condition
#: numbers from about 1e10 (Gaussian, t, Thyroid, Satimage-2 under random maps),
#: not below 1e9; the ODDS sets have at most 7e5 (Musk).
MCD_WHITEN_COND = 1e6


def _well_conditioned(cov: np.ndarray) -> bool:
    """Whether the correlation matrix of the varying features has a condition number
    below :data:`MCD_WHITEN_COND` (True for a non-finite ``cov``: others say what is wrong)."""
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    live = sd > 0
    if not np.isfinite(cov).all() or not live.any():
        return True
    corr = cov[np.ix_(live, live)] / np.outer(sd[live], sd[live])
    vals = np.linalg.eigvalsh((corr + corr.T) / 2)
    return bool(vals[0] > 0 and vals[-1] <= MCD_WHITEN_COND * vals[0])


def _factor_coordinates(x: da.Array, mean: np.ndarray, token: str) -> tuple[np.ndarray, None]:
    """Whitened coordinates ``(basis, None)`` of the rows' principal subspace, from their
    ``R`` factor (one pass; :func:`daskdepth.kernels.whitening.factor_whitening`): its
    canonical rounding makes ``basis`` the same for any chunking.  The map back is
    fitted to the row sample by the caller."""
    count, r = factor_pass(x, mean, token=token, k=0)
    return factor_whitening(r, 1.0 / max(count - 1.0, 1.0), mean)[0], None


#: Rows whose covariance has every variance within ``(IDENTICAL_ULPS * eps)^2`` of
#: their squared magnitude plus the data's variance count as identical: what the
#: moments of repeated values keep of rounding.
IDENTICAL_ULPS = 16


def _identical(covariance: np.ndarray, location: np.ndarray, data_cov: np.ndarray) -> bool:
    """Whether rows with this covariance and mean are all the same row (up to rounding)."""
    tol = (IDENTICAL_ULPS * np.finfo(np.float64).eps) ** 2
    scale = location * location + np.abs(np.diag(data_cov))
    return bool(np.all(np.abs(np.diag(covariance)) <= tol * scale))


def _refuse_point_mass(x: da.Array, rows: np.ndarray, support: Support, count: float,
                       n: int, p: int, d: int, in_memory: bool, token: str) -> None:
    """Raise when the kept rows are copies of one row and fewer than ``p`` others.

    Their covariance then has rank below ``p`` because one value repeats, not
    because the data lie on a hyperplane: the robust estimate saw a point mass
    as the bulk of the data (a feature constant over the kept rows, or rows on a
    hyperplane, are exact fits that the depth handles in their subspace).  The
    repeated row is the most frequent kept row of the sample; its copies are
    counted over all rows (one more pass when they are not in memory).
    """
    kept = rows[chunk_distances(rows, support.location, support.whitening) < support.threshold]
    if not kept.shape[0]:  # pragma: no cover - the sample holds kept rows
        return
    values, counts = np.unique(kept, axis=0, return_counts=True)
    row = values[int(np.argmax(counts))]
    if in_memory:
        copies = support_copies(rows, support, row)
    else:
        blocks, _ = row_blocks(x)
        total = reduce_chunks(blocks, support_copies, _add,
                              key=(key_name("weigh", token, "copies"),),
                              merge_key=key_name("merge", token, "weigh", "copies"),
                              args=(support, row))
        with phase("reweight"):
            (copies,) = dask.compute(total)
    others = int(round(count - copies))
    if others >= p:
        return
    where = "" if p == d else f" in the {p}-dimensional subspace the data span"
    what = ("are all identical, so their covariance is zero" if not others else
            f"are {copies:.0f} copies of one row and {others} other row{'s' * (others > 1)}, too "
            f"few to span the "
            f"{p} dimensions{where}, so their covariance is singular")
    raise ValueError(
        f"covariance='mcd': the {count:.0f} rows the robust estimate keeps (of {n}) {what} "
        f"(an exact fit: {copies:.0f} rows repeat one value); pass a support_fraction well "
        f"above the share of repeated rows, {copies / n:.3g} (e.g. {max(0.9, copies / n):.3g}: "
        "the reweighting keeps the other rows only when they weigh enough in the raw "
        "estimate), or use covariance='sample' or 'ledoit-wolf'"
    )


def _reweight_pass(x: da.Array, support: Support, mean: np.ndarray, basis: np.ndarray,
                   token: str) -> ReweightPart:
    """:func:`~daskdepth.kernels.fastmcd.reweight_chunk` over all rows: one pass."""
    blocks, _ = row_blocks(x)
    out = reduce_chunks(blocks, reweight_chunk, reweight_merge,
                        key=(key_name("weigh", token, "rows"),),
                        merge_key=key_name("merge", token, "weigh", "rows"),
                        args=(support, mean, basis))
    with phase("reweight"):
        (res,) = dask.compute(out)
    return res


def _best_on_sample(z: np.ndarray, h: int, n: int, rw_thr: float,
                    rng: np.random.Generator) -> Concentrated:
    """FastMCD on the in-memory sample ``z`` of the ``n`` rows: the best concentrated start.

    When the sample is all the rows, its C-steps also give the reweighting
    moments; otherwise the support size is scaled to the sample, and the
    caller concentrates the winner over all rows.
    """
    in_memory = z.shape[0] == n
    p = z.shape[1]
    h_s = h if in_memory else max(p + 1, min(z.shape[0], int(np.ceil(z.shape[0] * h / n))))
    memory = MemoryEvaluator(z)
    starts = fast_mcd_candidates(z, h_s, rng)
    # Candidates are concentrated independently, on as many threads as cores
    # (NumPy releases the GIL); the best is then picked in their order.
    done = thread_map(lambda c: concentrate(memory, h_s, c.loc, c.cov,
                                              rw_thr if in_memory else None), starts)
    best = done[0]
    for res in done[1:]:
        if res.logdet < best.logdet:
            best = res
    return best


def _sym(a: np.ndarray) -> np.ndarray:
    return (a + a.T) / 2


def check_support_fraction(value: Any) -> float | None:
    """``support_fraction`` as a float in (0, 1], or None; raise otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not (0 < value <= 1):
        raise ValueError(
            f"support_fraction must be a number in (0, 1] or None (then (n + d + 1) / 2n, "
            f"as scikit-learn's MinCovDet), got {value!r}"
        )
    return float(value)
