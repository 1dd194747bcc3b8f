"""The whole fit: moments, covariance, directions, summaries and the offset sample."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..covariance.estimate import CovarianceFit, fit_covariance
from ..errors import (
    CovarianceRankWarning,
    FitTooLargeError,
    FrameWarning,
    SummaryMemoryWarning,
    nan_rows_message,
    user_stacklevel,
)
from ..kernels.directions import direction_spread, directions_for_std, draw_directions
from ..kernels.frame import FrameReport
from ..kernels.whitening import covariance_keeps_rank, factor_whitening, whitening
from ..passes.moments import ChunkMoments, factor_pass, moments_pass
from ..runtime.client import active_client
from ..runtime.keys import fresh_token
from ..runtime.memory import (
    MAX_DIRECTIONS_PER_BLOCK,
    directions_per_block,
    directions_per_wave,
    free_worker_memory,
    largest_summary_bytes,
    prefer_sorted,
    shard_summary,
    sorted_summary_bytes,
)
from ..runtime.refusals import plan_memory_message, summary_memory_message
from ..summary.depth import DepthSummary
from ..summary.statistics import MEAN, Statistic
from .frame import frame_message, invariant_basis
from .offset import SAMPLE_SIZE, offset_depths, offset_pick
from .summaries import FitInfo, build_summary, pilot_bytes_per_direction

#: Rows drawn (Bernoulli, keyed on the global row index) for the pilot leaves and
#: for ``offset_`` (:data:`daskdepth.fitting.offset.SAMPLE_SIZE`).  Small ``tol`` asks
#: for more (``SAMPLE_PER_LEAF / tol``, at most ``SAMPLE_MAX``) so that the pilot
#: leaves hold enough sampled rows to be sized reliably.
SAMPLE_PER_LEAF = 16
SAMPLE_MAX = 1 << 20


#: Upper bound on the bytes of that sample (matters only for very wide data).
SAMPLE_BYTES = 256 * 2**20


def default_directions(d: int) -> int:
    """``m`` for ``n_directions=None``: ``100 * d``, the paper's choice.

    Examples
    --------
    >>> default_directions(3)
    300
    """
    return 100 * int(d)


def draw_seed(rng: np.random.RandomState) -> int:
    """A fit's seed (keyed row samples, robust covariances) drawn from its ``rng``.

    Examples
    --------
    >>> draw_seed(np.random.RandomState(0)) == draw_seed(np.random.RandomState(0))
    True
    """
    return int(rng.randint(0, 2**63 - 1, dtype=np.int64))


def pilot_sample_size(d: int, tol: float) -> int:
    """Expected size of the row sample for ``d`` features and tolerance ``tol``."""
    # min() before int(): SAMPLE_PER_LEAF / tol overflows to inf for tol near 1e-320
    want = SAMPLE_SIZE if tol <= 0 else max(SAMPLE_SIZE,
                                            int(min(np.ceil(SAMPLE_PER_LEAF / tol), SAMPLE_MAX)))
    return int(max(1024, min(want, SAMPLE_MAX, SAMPLE_BYTES // (8 * d))))



#: ``n_directions='auto'``: the Monte Carlo standard error of the depth (over the
#: directions) that the chosen ``m`` keeps every pilot point below.
AUTO_STD = 0.005
#: ... estimated with this many pilot directions, on at most ``AUTO_REFERENCE``
#: rows of the row sample as reference and ``AUTO_POINTS`` of them as points.
AUTO_PILOT = 100
AUTO_REFERENCE = 1 << 14
AUTO_POINTS = 2000
#: Range of the ``m`` that ``'auto'`` picks.  Per-direction depths lie in [0, 1/2],
#: so their spread is at most 1/4 and ``(1/4 / AUTO_STD)**2 = 2500`` always suffices.
AUTO_MIN = 50
AUTO_MAX = 2500
#: Mixed into the seed: the pilot's directions are not the fit's.
_AUTO_STREAM = 0xA0705


@dataclass
class FittedDepth:
    """Everything a fit computes, for the estimator's fitted attributes.

    ``train_depth`` is the depth of every input row (NaN where not finite),
    the same bits as scoring them afresh, when the fit computed it: in memory,
    where the sample is every finite row; otherwise ``None``.
    """

    location: np.ndarray
    covariance: np.ndarray
    rank: int
    basis: np.ndarray | None
    frame: FrameReport | None
    directions: np.ndarray
    summary: DepthSummary
    n: int
    sample_depth: np.ndarray
    info: FitInfo
    token: str
    train_depth: np.ndarray | None = None


@dataclass
class FitFrame:
    """What every depth on random directions fits before its summary: rows, centring, directions.

    ``mom`` is the moments pass (row counts, mean, scatter and the row sample),
    ``cfit`` the covariance, ``basis`` the whitening (None when the directions
    are not whitened), ``rank`` its rank and ``report`` the invariant frame's.
    """

    mom: ChunkMoments
    cfit: CovarianceFit
    basis: np.ndarray | None
    rank: int
    report: FrameReport | None
    directions: np.ndarray
    seed: int
    token: str
    source: Any = None


def fit_frame(x: da.Array, *, depth: str, n_directions: int | str | None, covariance: object,
              tol: float, rng: np.random.RandomState, nan_policy: str,
              frame: str = "correlation", whiten: bool = False, statistic: str = "depth",
              plan: bool = True, keep_sample: bool = False) -> FitFrame:
    """The moments pass, the covariance, the whitening and the directions of a fit.

    The phases: one moments pass (:func:`daskdepth.passes.moments.moments_pass`),
    the covariance (more passes for robust ones), the whitening (on the client,
    after one factor pass where the covariance's rank test drops a direction;
    with ``frame='invariant'`` refined and rotated into the invariant frame by
    one or two more passes, :mod:`daskdepth.fitting.frame`) when ``whiten``,
    and the directions (their number from a pilot on the row sample for
    ``n_directions='auto'``).  With ``plan``, a fit whose leaf summaries at
    ``tol`` cannot fit in memory is refused before the first pass.  With
    ``keep_sample``, on a distributed client, ``source`` is the future of the
    moments pass, whose row sample the summary's pilots read where it is
    (see :func:`daskdepth.fitting.summaries.build_summary`).
    """
    n_total, d = x.shape
    if plan and n_directions != "auto":  # refused before the first pass
        _check_plan(n_total, d, n_directions if n_directions is not None
                    else default_directions(d), tol)
    seed = draw_seed(rng)
    # Every fit's keys are its own (fresh_token): a kept model's sharded summary holds keys
    # of its fit, which an identical fit's tasks, reading other shared keys, must not reuse.
    token = tokenize(x.name, depth, n_directions, covariance, tol, seed, nan_policy, frame,
                     whiten, statistic, fresh_token())
    mom, source = moments_pass(x, seed=seed, sample_size=pilot_sample_size(d, tol),
                               token=token, keep=keep_sample)
    _check_rows(mom, n_total, nan_policy)
    cfit = fit_covariance(covariance, mom.n, mom.exact_mean, mom.scatter, d, x=x, seed=seed,
                          token=token, equivariant=frame == "invariant")
    w, rank = (_whitening(x, cfit, mom, token, "AI-IRW" if depth == "ai-irw" else "the")
               if whiten else (None, d))
    report = None
    if w is not None and frame == "invariant":
        inv = invariant_basis(x, cfit, w, token)
        w, report = inv.basis, inv.report
        if not report.unique:
            warnings.warn(frame_message(report, d), FrameWarning,
                          stacklevel=user_stacklevel())
    if n_directions == "auto":
        m = _auto_directions(mom.sample, cfit.location, w, d, seed)
        if plan:
            _check_plan(mom.n, d, m, tol)  # before the summary's passes
    else:
        m = n_directions if n_directions is not None else default_directions(d)
    return FitFrame(mom, cfit, w, rank, report, draw_directions(rng, m, d, w), seed, token,
                    source)


def fit_depth(x: da.Array, *, depth: str, n_directions: int | str | None, covariance: object,
              tol: float, rng: np.random.RandomState, nan_policy: str,
              frame: str = "correlation", whiten: bool | None = None,
              statistic: Statistic = MEAN, overfull: float = 1.0,
              fill: float = 1.0) -> FittedDepth:
    """Fit location, covariance, directions and summaries on the rows of ``x``.

    :func:`fit_frame`, then the leaf summaries
    (:func:`daskdepth.fitting.summaries.build_summary`) and the depths of a row
    sample that set ``offset_``.  Directions are whitened by the covariance
    when ``whiten`` (default: for ``depth='ai-irw'``); ``statistic`` is the
    :class:`~daskdepth.summary.statistics.Statistic` that scores (the mean over
    directions, or the minimum, the halfspace depth), whose certified bound the
    summaries bring down to ``tol``.  ``overfull`` above 1 makes the pilot
    leaves too heavy on purpose, so that the refinement runs
    (:func:`daskdepth.fitting.summaries.pilot_aim`; the warm-up's miniature fit).
    ``fill`` below 1 (the first batch of a stream) plans and merges the leaves
    to that fraction of the row limit (:func:`~daskdepth.fitting.summaries.build_summary`).
    """
    n_total, d = x.shape
    whiten = depth == "ai-irw" if whiten is None else bool(whiten)
    fr = fit_frame(x, depth=depth, n_directions=n_directions, covariance=covariance, tol=tol,
                   rng=rng, nan_policy=nan_policy, frame=frame, whiten=whiten,
                   statistic=statistic.name, keep_sample=True)
    mom, token, directions = fr.mom, fr.token, fr.directions
    location, cov, w, rank, report = (fr.cfit.location, fr.cfit.covariance, fr.basis, fr.rank,
                                      fr.report)
    m = directions.shape[0]
    exact = mom.sample.shape[0] == mom.n and prefer_sorted(m, mom.n, tol)
    # Tasks hold a row chunk with one block's projections; the exact phase holds every
    # row with its block's projections, sorted (pilot tasks project one direction at a
    # time, so the row sample does not bound the leaves' blocks).
    held = max(max(x.chunks[0], default=1), 2 * mom.sample.shape[0] if exact else 1)
    block = directions_per_block(d, held)
    too_big = summary_memory_message(m, mom.n, tol, exact=exact)
    if too_big:
        warnings.warn(too_big, SummaryMemoryWarning, stacklevel=user_stacklevel())
    pilot_bytes = pilot_bytes_per_direction(mom.n, tol, mom.sample.shape[0])
    # On a cluster, a summary that is a small part of a worker's memory at its largest
    # (while fitted) is copied to every worker; a larger one is sharded over them.
    shard = active_client() is not None and shard_summary(
        sorted_summary_bytes(m, mom.n) if exact else largest_summary_bytes(m, mom.n, tol))
    summary, info = build_summary(
        x, location, directions, mom.sample, mom.n, tol, token,
        block_size=min(block, MAX_DIRECTIONS_PER_BLOCK), exact=exact, statistic=statistic,
        wave_directions=lambda: directions_per_wave(pilot_bytes, free=free_worker_memory()),
        shard=shard, source=fr.source, overfull=overfull, fill=fill)
    # The in-sample totals the exact path counts are sums over directions (the mean).
    if info.in_sample is not None and statistic.name == MEAN.name:
        in_sample = summary.depth_of_totals(info.in_sample)
        sample_depth = offset_pick(in_sample)
    else:
        sample_depth = offset_depths(summary, mom.sample, token, statistic)
        # In memory with a small sample, the offset rows are every finite row.
        in_sample = sample_depth if mom.sample.shape[0] == mom.n <= SAMPLE_SIZE else None
    return FittedDepth(location, cov, rank, w, report, directions, summary, mom.n, sample_depth,
                       info, token, every_row(in_sample, mom, n_total))


def _auto_directions(sample: np.ndarray, location: np.ndarray, w: np.ndarray | None, d: int,
                     seed: int) -> int:
    """``m`` for ``n_directions='auto'``: standard error at most :data:`AUTO_STD`.

    A pilot of :data:`AUTO_PILOT` directions (their own random stream) measures,
    on the row sample, each point's spread of per-direction depths; ``m`` makes
    the largest spread over ``sqrt(m)`` at most :data:`AUTO_STD`.  The sample is
    in global row order, so evenly spaced picks are random and do not depend on
    the chunking.
    """
    def picks(k: int) -> np.ndarray:
        return sample[np.linspace(0, sample.shape[0] - 1, k).astype(np.int64)] \
            if sample.shape[0] > k else sample
    pilot = draw_directions(np.random.RandomState([seed & 0xFFFFFFFF, _AUTO_STREAM]),
                            AUTO_PILOT, d, w)
    spread = direction_spread(picks(AUTO_REFERENCE), picks(AUTO_POINTS), location, pilot)
    return directions_for_std(float(spread.max(initial=0.0)), AUTO_STD, AUTO_MIN, AUTO_MAX)


def _check_plan(n: int, d: int, m: int, tol: float) -> None:
    """Refuse a fit of ``m`` directions over ``n x d`` rows at ``tol`` that cannot fit in memory.

    ``n`` bounds the finite rows; with at most a row sample's worth of them the
    summary may be the sorted projections (:func:`~daskdepth.runtime.memory.prefer_sorted`).
    """
    too_large = plan_memory_message(n, d, m, tol, in_memory=n <= pilot_sample_size(d, tol))
    if too_large:
        raise FitTooLargeError(too_large)


def check_finite_rows(n: int, n_bad: int, bad_rows: Sequence[int], n_total: int,
                      nan_policy: str) -> None:
    """Refuse non-finite rows under ``nan_policy='raise'``, and fewer than 2 finite rows.

    ``n`` finite rows and ``n_bad`` others (the first of them ``bad_rows``) were
    found among the ``n_total`` rows of the input.

    Examples
    --------
    >>> check_finite_rows(1, 0, [], 3, "omit")
    Traceback (most recent call last):
    ...
    ValueError: only 1 finite rows remain out of 3; a depth reference needs at least 2
    """
    if n_bad and nan_policy == "raise":
        raise ValueError(nan_rows_message(n_bad, bad_rows))
    if n < 2:
        raise ValueError(
            f"only {n} finite rows remain out of {n_total}; a depth reference needs at "
            "least 2"
        )


def _check_rows(mom: ChunkMoments, n_total: int, nan_policy: str) -> None:
    """:func:`check_finite_rows` for the moments' counts, and a mean that does not overflow."""
    check_finite_rows(mom.n, mom.n_bad, mom.bad_rows, n_total, nan_policy)
    # Rows spread over most of float64's range (e.g. +-1e308): their differences, so the
    # mean and every centred projection, overflow; a NaN location would score every row
    # as the deepest.
    if not np.isfinite(mom.exact_mean).all():
        big = f" (|x| up to {np.abs(mom.sample).max():.1e})" if mom.sample.size else ""
        raise ValueError(
            "the mean of the reference data overflows float64: the values are too large in "
            f"scale{big}; rescale the features, e.g. divide them by a common factor")


def _whitening(x: da.Array, cfit: CovarianceFit, mom: ChunkMoments, token: str,
               name: str = "AI-IRW") -> tuple[np.ndarray, int]:
    """The whitening map of the covariance and its rank (warning, naming the ``name`` depth,
    when singular).

    The rank counts the directions whose variance is above what rounding of values
    around the location explains (:func:`daskdepth.kernels.whitening.whitening`).
    Where the covariance's own test drops a direction, a covariance made from rows
    is decided again from the rows' ``R`` factor (one more pass,
    :func:`daskdepth.passes.moments.factor_pass`), whose condition number is the
    data's, not its square: numerically full-rank data keep their rank, and are
    whitened accurately (:func:`daskdepth.kernels.whitening.factor_whitening`).
    """
    cov, location, rows = cfit.covariance, cfit.location, cfit.rows
    d = cov.shape[0]
    if not cov.any() and np.ptp(mom.sample, axis=0).any():
        raise ValueError(
            "the covariance of the reference data underflows to zero although the rows "
            f"differ: the values are too small in scale (largest |x| about "
            f"{np.abs(mom.sample).max():.1e}) for float64 squares; rescale the features, "
            "e.g. multiply them by a common factor"
        )
    if rows is not None and rows.ridge == 0 and not covariance_keeps_rank(cov, location):
        count, r = factor_pass(x, location, support=rows.support, token=token, k=1)
        w, rank = factor_whitening(r, rows.factor / max(count - rows.ddof, 1.0), location)
    else:
        w, rank = whitening(cov, location)
    if rank < d:
        warnings.warn(
            f"the covariance has rank {rank} < {d} features (some features are linear "
            f"combinations of others or constant); {name} depth is computed in the "
            f"{rank}-dimensional principal subspace",
            CovarianceRankWarning, stacklevel=user_stacklevel(),
        )
    return w, rank


def every_row(depth: np.ndarray | None, mom: ChunkMoments, n_total: int) -> np.ndarray | None:
    """The depths of the finite rows spread over all ``n_total`` input rows (NaN elsewhere).

    ``None`` when unknown, or when not every non-finite row was recorded.
    """
    if depth is None or mom.n_bad != mom.bad_rows.size or depth.shape[0] + mom.n_bad != n_total:
        return None
    if not mom.n_bad:
        return depth
    out = np.full(n_total, np.nan)
    finite = np.ones(n_total, dtype=bool)
    finite[mom.bad_rows] = False
    out[finite] = depth
    return out
