"""Robust (MCD) and shrinkage covariance estimates over the row chunks of a dask array.

The Minimum Covariance Determinant estimate is computed as in FastMCD
(Rousseeuw and Van Driessen, 1999), split between the client and the cluster:

1. one pass draws a bounded Bernoulli row sample keyed on the global row
   index (the same rows however the data are chunked);
2. FastMCD runs in memory on that sample (random (p+1)-subsets, C-steps on
   subsets, merged subsets, then the whole sample) and keeps the best start;
3. concentration steps (C-steps) then run over all rows, one pass each as a
   rule: every chunk computes the Mahalanobis distances of its rows, the
   moments of the rows below a bracket predicted from the sample, a histogram
   of the distances, and the rows inside the bracket.  The client finds the
   ``h``-th smallest distance exactly from these and the moments of the ``h``
   rows below it (ties share the weight, see
   :mod:`daskdepth._robust_kernels`); when the bracket misses, a refinement
   pass narrows it to the histogram bin that holds rank ``h``;
4. the raw estimate is corrected for consistency and reweighted like
   scikit-learn's ``MinCovDet``; the moments of the reweighting come from the
   pass that computed the distances of the raw estimate.

No task ever holds more than its chunk, the sample, or a bounded set of rows
near the selection threshold.  When the whole data fits the sample, every
step runs in memory on the client, with no further pass.

Ledoit-Wolf shrinkage needs one more pass (the sum of ``||x - mean||^4``);
OAS is a function of the moments alone.  Every key is named
``daskdepth-<verb>-<token>`` (``subsample``, ``cstep``, ``reweight``,
``shrinkage``, ``merge``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed
from threadpoolctl import threadpool_limits

from . import _robust_kernels as R
from ._covariance import sample_covariance
from ._graph import phase, reduce_chunks, row_blocks, tree_reduce
from ._kernels import row_uniforms

#: The accepted values of ``covariance=`` besides a precomputed matrix.
COVARIANCE_METHODS = ("sample", "mcd", "ledoit-wolf", "oas")

#: Most rows of the in-memory FastMCD sample.
MCD_SAMPLE_ROWS = 1 << 16
#: Budget (rows x features^2) of the in-memory sample, so that wide data get
#: a smaller sample and the in-memory C-steps stay cheap.
MCD_SAMPLE_WORK = 1 << 26
#: Least rows of the sample (unless the data have fewer).
MCD_SAMPLE_MIN = 1500
#: Bytes of rows near the selection threshold that a pass may collect in all
#: (but at least ``COLLECT_MIN_ROWS`` rows).
COLLECT_BYTES = 64 * 2**20
COLLECT_MIN_ROWS = 1024
#: Histogram refinement passes after which selection gives up (never reached
#: in practice: each refinement narrows the bracket 128-fold).
MAX_REFINE = 64
#: Eigenvalues of the data's correlation matrix below ``DATA_RANK_RTOL * d`` times
#: the largest mark directions without variation: the MCD then works in the
#: principal subspace.
DATA_RANK_RTOL = 1e-9
#: Relative change of the log-determinant below which a C-step counts as no decrease.
DET_RTOL = 1e-12
#: Mixed into the seed so that the MCD sample differs from the depth sample.
_STREAM = 0x4D4344


@dataclass(frozen=True)
class MCDSpec:
    """``covariance='mcd'`` with a ``support_fraction`` (None: scikit-learn's default)."""

    support_fraction: float | None = None


def covariance_spec(covariance: object, support_fraction: Any = None) -> object:
    """What an estimator passes to the fit: ``covariance`` or an :class:`MCDSpec`."""
    if support_fraction is not None and isinstance(covariance, str) and covariance == "mcd":
        return MCDSpec(support_fraction)
    return covariance


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
    info: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- dispatch


def robust_covariance(spec: object, n: int, mean: np.ndarray, scatter: np.ndarray, *,
                      x: da.Array | None, seed: int,
                      token: str) -> tuple[np.ndarray, np.ndarray]:
    """Location and covariance for ``covariance='mcd' | 'ledoit-wolf' | 'oas'``."""
    if isinstance(spec, MCDSpec) or spec == "mcd":
        frac = spec.support_fraction if isinstance(spec, MCDSpec) else None
        res = mcd(_need(x, "mcd"), n, mean, scatter, seed=seed, token=token,
                  support_fraction=frac)
        return res.location, res.covariance
    if spec == "ledoit-wolf":
        return mean, ledoit_wolf(_need(x, "ledoit-wolf"), n, mean, scatter, token=token)[0]
    if spec == "oas":
        return mean, R.oas(n, scatter)[0]
    raise ValueError(
        f"covariance must be one of {', '.join(repr(m) for m in COVARIANCE_METHODS)} or a "
        f"(d, d) array, got {spec!r}"
    )


def _need(x: da.Array | None, what: str) -> da.Array:
    if x is None:  # pragma: no cover - fit_depth always passes the data
        raise ValueError(f"covariance={what!r} needs the data rows")
    return x


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


# --------------------------------------------------------------------------- passes


def _subsample_chunk(x: np.ndarray, row_start: int, seed: int, p: float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    keep = np.isfinite(x).all(axis=1)
    if p < 1.0:
        keep &= row_uniforms(row_start, x.shape[0], seed) < p
    return x[keep]


def _concat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts)


def _add(*parts: float) -> float:
    return float(sum(parts))


def subsample(x: da.Array, *, seed: int, size: int, token: str) -> np.ndarray:
    """Finite rows drawn with probability ``size / n_rows``, keyed on the global row index."""
    p = min(1.0, size / max(1, x.shape[0]))
    blocks, starts = row_blocks(x)
    sample = reduce_chunks(blocks, _subsample_chunk, _concat,
                           key=(f"daskdepth-subsample-{token}",),
                           merge_key=f"daskdepth-merge-{token}-subsample", args=(seed, p),
                           starts=starts)
    with phase("mcd-subsample"):
        (out,) = dask.compute(sample)
    return out


def sample_rows(n_total: int, p: int) -> int:
    """Rows of the in-memory FastMCD sample for ``p`` features."""
    return int(min(MCD_SAMPLE_ROWS, max(MCD_SAMPLE_MIN, MCD_SAMPLE_WORK // max(1, p * p))))


# --------------------------------------------------------------------------- evaluators

#: ``evaluate(loc, w, h, rw_thr)`` -> (moments of the ``h`` rows of smallest
#: distance or None, moments of the rows with distance < rw_thr or None), in
#: the coordinates of the principal subspace.
Evaluator = Callable[[np.ndarray, np.ndarray, "int | None", "float | None"],
                     "tuple[R.Moments | None, R.Moments | None]"]


class MemoryEvaluator:
    """Distances and support moments of rows held in memory."""

    def __init__(self, z: np.ndarray) -> None:
        self.z = z
        self.passes = 0

    def __call__(self, loc: np.ndarray, w: np.ndarray, h: int | None,
                 rw_thr: float | None) -> tuple[R.Moments | None, R.Moments | None]:
        zc = (self.z - loc) @ w
        d2 = np.einsum("ij,ij->i", zc, zc)
        sup = R.support_moments(self.z, d2, h)[0] if h is not None else None
        rw = R.moments_of(self.z, d2 < rw_thr) if rw_thr is not None else None
        return sup, rw


class DaskEvaluator:
    """Distances and exact support moments over all rows of a dask array, pass by pass.

    Works in the coordinates ``z = (x - mean) @ basis`` of the principal
    subspace of the data (``x = mean + back @ z`` there); the passes run on
    ``x`` with the parameters mapped back, and moments are mapped into ``z``.
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
        d = x.shape[1]
        self.budget = max(COLLECT_MIN_ROWS, COLLECT_BYTES // (8 * (d + 1)))
        self.blocks, _ = row_blocks(x)
        self.rows = np.asarray(x.chunks[0], dtype=np.int64)

    def _to_z(self, m: R.Moments | None) -> R.Moments | None:
        if m is None:
            return None
        return m[0], (m[1] - self.mean) @ self.basis, self.basis.T @ m[2] @ self.basis

    def _pass(self, loc_x: np.ndarray, w_x: np.ndarray, bracket: tuple | None,
              edges: np.ndarray | None, caps: np.ndarray, rw_thr: float | None,
              verb: str) -> R.SelectPart:
        k = self.passes
        name = f"daskdepth-{verb}-{self.token}"
        parts = [
            delayed(R.select_chunk, pure=True)(b, loc_x, w_x, bracket, edges, int(c), rw_thr,
                                               dask_key_name=(name, k, i))
            for i, (b, c) in enumerate(zip(self.blocks, caps, strict=True))
        ]
        out = tree_reduce(parts, R.select_merge, f"daskdepth-merge-{self.token}-{verb}{k}")
        with phase(verb):
            (res,) = dask.compute(out)
        self.passes += 1
        return res

    def __call__(self, loc: np.ndarray, w: np.ndarray, h: int | None,
                 rw_thr: float | None) -> tuple[R.Moments | None, R.Moments | None]:
        loc_x = self.mean + self.back @ loc
        w_x = np.ascontiguousarray(self.basis @ w)
        if h is None:
            part = self._pass(loc_x, w_x, None, None, np.zeros(len(self.blocks)), rw_thr,
                              "reweight")
            return None, self._to_z(part.reweight)
        zc = (self.sample_z - loc) @ w
        sample_d2 = np.sort(np.einsum("ij,ij->i", zc, zc))
        bracket, edges = R.predict_bracket(sample_d2, h, self.n)
        caps = np.ceil(self.budget * self.rows / max(1, self.rows.sum())).astype(np.int64)
        rw = None
        for _ in range(MAX_REFINE):
            part = self._pass(loc_x, w_x, bracket, edges, caps, rw_thr, "cstep")
            if rw_thr is not None:
                rw, rw_thr = part.reweight, None
            res = R.resolve(part, h, bracket)
            if res.support is not None:
                return self._to_z(res.support), self._to_z(rw)
            self.refines += 1
            bracket = res.bracket
            edges = R.refine_edges(bracket)
            if res.count <= self.budget:
                caps = np.full(len(self.blocks), res.count, dtype=np.int64)
        raise RuntimeError(  # pragma: no cover - each refinement narrows 128-fold
            "daskdepth internal error: the exact selection of the MCD support did not "
            "converge; please report this with the input's shape and chunks"
        )


# --------------------------------------------------------------------------- C-steps


@dataclass
class Concentrated:
    loc: np.ndarray
    cov: np.ndarray
    logdet: float
    reweight: R.Moments | None
    steps: int


def _params(m: R.Moments) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    cov = m[2] / m[0]
    w, logdet = R.whiten(cov)
    return m[1], (cov + cov.T) / 2, w, logdet


def concentrate(evaluate: Evaluator, h: int, loc: np.ndarray, cov: np.ndarray,
                rw_thr: float | None, max_steps: int = R.MAX_CSTEPS) -> Concentrated:
    """C-steps from ``(loc, cov)`` until the determinant stops decreasing.

    Follows scikit-learn's ``_c_step``: the support of the start gives the
    first estimate; iterate while the log-determinant decreases; on an
    increase keep the previous estimate.  The estimate kept is the last one
    whose distances were evaluated over all rows (at a fixed point, the same
    support), so that the reweighting moments come from the same pass; an
    exact fit (singular covariance) or the iteration limit cost one more
    evaluation for them.
    """
    w0, _ = R.whiten(cov)
    sup, _ = evaluate(loc, w0, h, None)
    cur = _params(sup)
    evaluated: tuple | None = None
    prev_det = np.inf
    steps = 0
    while _decreased(cur[3], prev_det) and steps < max_steps and np.isfinite(cur[3]):
        sup, rw = evaluate(cur[0], cur[2], h, rw_thr)
        evaluated = (cur, rw)
        prev_det = cur[3]
        cur = _params(sup)
        steps += 1
    if evaluated is not None and not _decreased(cur[3], prev_det):
        (loc, cov, _, logdet), rw = evaluated
        return Concentrated(loc, cov, logdet, rw, steps)
    rw = evaluate(cur[0], cur[2], None, rw_thr)[1] if rw_thr is not None else None
    return Concentrated(cur[0], cur[1], cur[3], rw, steps)


def _decreased(det: float, previous: float) -> bool:
    """``det < previous`` beyond rounding: the moments of one support computed in two
    different passes (other brackets, other sums) agree only to a few ulps."""
    if not np.isfinite(previous):
        return det < previous
    return det < previous - DET_RTOL * max(1.0, abs(previous))


# --------------------------------------------------------------------------- MCD


def mcd(x: da.Array, n: int, mean: np.ndarray, scatter: np.ndarray, *, seed: int, token: str,
        support_fraction: float | None = None, sample_size: int | None = None) -> MCDResult:
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
        Rows of the in-memory sample (default :func:`sample_rows`); when the
        data have no more finite rows than this, everything runs in memory.

    Returns
    -------
    MCDResult
    """
    frac = check_support_fraction(support_fraction)
    d = mean.shape[0]
    subspace = principal_subspace(sample_covariance(n, scatter))
    if subspace is None:
        zero = np.zeros((d, d))
        return MCDResult(mean, zero, mean, zero, n, 1.0, 0.0, -np.inf)
    basis, back = subspace
    p = basis.shape[1]
    h = support_size(n, p, frac)
    raw_factor = R.consistency_factor(p, h / n)
    rw_thr = R.reweight_threshold(p, raw_factor)
    size = max(sample_size if sample_size is not None else sample_rows(n, p), 20 * (p + 1))
    sample = subsample(x, seed=seed ^ _STREAM, size=size, token=token)
    z = (sample - mean) @ basis
    rng = np.random.default_rng([seed, _STREAM])
    in_memory = z.shape[0] == n
    h_s = h if in_memory else max(p + 1, min(z.shape[0], int(np.ceil(z.shape[0] * h / n))))
    memory = MemoryEvaluator(z)
    best: Concentrated | None = None
    # Small matrices, and chunk tasks that already run in parallel: BLAS threads
    # only add synchronisation (and spin badly when the cores are shared).
    with threadpool_limits(limits=1, user_api="blas"):
        starts = R.fast_mcd_candidates(z, h_s, rng)
        # Candidates are concentrated independently, on as many threads as cores
        # (NumPy releases the GIL); the best is then picked in their order.
        done = R.thread_map(lambda c: concentrate(memory, h_s, c.loc, c.cov,
                                                  rw_thr if in_memory else None), starts)
        for res in done:
            if best is None or res.logdet < best.logdet:
                best = res
        assert best is not None
        passes = 1
        if not in_memory:
            ev = DaskEvaluator(x, mean, basis, back, z, n, token)
            best = concentrate(ev, h, best.loc, best.cov, rw_thr)
            passes += ev.passes
    raw_loc, raw_cov = best.loc, best.cov
    if h < n and not np.any(raw_cov):
        raise ValueError(
            f"covariance='mcd': the {h} most central of the {n} rows are all identical, so "
            "their covariance is zero; pass a larger support_fraction (more than the share "
            "of repeated rows), or use covariance='sample' or 'ledoit-wolf'"
        )
    rw = best.reweight
    if rw is not None and rw[0] > p:
        loc_z = rw[1]
        cov_z = rw[2] / rw[0] * R.consistency_factor(p, R.REWEIGHT_QUANTILE)
    else:  # pragma: no cover - fewer kept rows than dimensions: keep the raw estimate
        loc_z, cov_z = raw_loc, raw_cov * raw_factor
    to_x = lambda c: back @ c @ back.T  # noqa: E731
    return MCDResult(
        location=mean + back @ loc_z, covariance=_sym(to_x(cov_z)),
        raw_location=mean + back @ raw_loc, raw_covariance=_sym(to_x(raw_cov)),
        n_support=h, raw_factor=raw_factor, raw_threshold=rw_thr, logdet=best.logdet,
        n_passes=passes, in_memory=in_memory,
        info={"rank": p, "sample_rows": int(z.shape[0]), "steps": best.steps},
    )


def _sym(a: np.ndarray) -> np.ndarray:
    return (a + a.T) / 2


def principal_subspace(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Coordinates of the affine subspace the data span: ``(basis, back)`` or None.

    ``z = (x - mean) @ basis`` and ``x = mean + back @ z`` for rows in it.  Full
    rank data keep their own coordinates (identity maps, so that a feature
    constant over the MCD support keeps exactly zero variance); otherwise
    constant features are dropped and the rest is reduced to the leading
    eigenvectors of the correlation matrix.  None when every feature is constant.
    """
    d = cov.shape[0]
    var = np.diag(cov)
    live = (var > 0) & np.isfinite(var)
    if not live.any():
        return None
    sd = np.sqrt(var[live])
    corr = cov[np.ix_(live, live)] / np.outer(sd, sd)
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    keep = vals > DATA_RANK_RTOL * d * vals.max()
    if live.all() and keep.all():
        return np.eye(d), np.eye(d)
    e = vecs[:, keep][:, ::-1]
    basis = np.zeros((d, e.shape[1]))
    back = np.zeros((d, e.shape[1]))
    basis[live] = e / sd[:, None]
    back[live] = e * sd[:, None]
    return basis, back


# --------------------------------------------------------------------------- shrinkage


def ledoit_wolf(x: da.Array, n: int, mean: np.ndarray, scatter: np.ndarray, *,
                token: str) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf covariance and shrinkage: one pass for ``sum ||x - mean||^4``."""
    if mean.shape[0] == 1:
        return R.ledoit_wolf(n, scatter, 0.0)
    blocks, _ = row_blocks(x)
    total = reduce_chunks(blocks, R.fourth_moment_chunk, _add,
                          key=(f"daskdepth-shrinkage-{token}",),
                          merge_key=f"daskdepth-merge-{token}-shrinkage", args=(mean,))
    with phase("shrinkage"):
        (fourth,) = dask.compute(total)
    return R.ledoit_wolf(n, scatter, fourth)
