"""The whole fit: moments, covariance, directions, summaries and the offset sample."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..covariance.estimate import resolve_covariance
from ..errors import CovarianceRankWarning, SummaryMemoryWarning, nan_rows_message
from ..kernels.directions import draw_directions
from ..kernels.whitening import canonical_covariance, whitening
from ..passes.moments import ChunkMoments, moments_pass
from ..passes.scoring import score_array
from ..runtime.client import keep_placement, phase
from ..runtime.keys import key_name
from ..runtime.memory import (
    MAX_DIRECTIONS_PER_BLOCK,
    directions_per_block,
    directions_per_wave,
    free_worker_memory,
    row_chunk,
    summary_memory_message,
)
from ..summary.depth import DepthSummary
from .summaries import FitInfo, build_summary, pilot_bytes_per_direction

#: Rows drawn (Bernoulli, keyed on the global row index) for the pilot leaves and
#: for ``offset_``: the contamination quantile of 65,536 depths is within about
#: 1e-3 in rank of the quantile over all training rows.  Small ``tol`` asks for
#: more (``SAMPLE_PER_LEAF / tol``, at most ``SAMPLE_MAX``) so that the pilot
#: leaves hold enough sampled rows to be sized reliably.
SAMPLE_SIZE = 1 << 16
SAMPLE_PER_LEAF = 16
SAMPLE_MAX = 1 << 20


#: Upper bound on the bytes of that sample (matters only for very wide data).
SAMPLE_BYTES = 256 * 2**20


def pilot_sample_size(d: int, tol: float) -> int:
    """Expected size of the row sample for ``d`` features and tolerance ``tol``."""
    want = SAMPLE_SIZE if tol <= 0 else max(SAMPLE_SIZE, int(np.ceil(SAMPLE_PER_LEAF / tol)))
    return int(max(1024, min(want, SAMPLE_MAX, SAMPLE_BYTES // (8 * d))))


#: ``stacklevel`` of the fit's warnings: they point at the user's call of ``fit``.
WARN_LEVEL = 6


@dataclass
class FittedDepth:
    """Everything a fit computes, for the estimator's fitted attributes."""

    location: np.ndarray
    covariance: np.ndarray
    rank: int
    directions: np.ndarray
    summary: DepthSummary
    n: int
    sample_depth: np.ndarray
    info: FitInfo
    token: str


def fit_depth(x: da.Array, *, depth: str, n_directions: int | None, covariance: object,
              tol: float, rng: np.random.RandomState, nan_policy: str) -> FittedDepth:
    """Fit location, covariance, directions and summaries on the rows of ``x``.

    The phases: one moments pass (:func:`daskdepth.passes.moments.moments_pass`),
    the covariance (more passes for robust ones), the whitening and directions
    (on the client), the leaf summaries
    (:func:`daskdepth.fitting.summaries.build_summary`) and the depths of a row
    sample that set ``offset_``.
    """
    n_total, d = x.shape
    seed = int(rng.randint(0, 2**63 - 1, dtype=np.int64))
    token = tokenize(x.name, depth, n_directions, covariance, tol, seed, nan_policy)
    mom = moments_pass(x, seed=seed, sample_size=pilot_sample_size(d, tol), token=token)
    _check_rows(mom, n_total, nan_policy)
    location, cov = resolve_covariance(covariance, mom.n, mom.exact_mean, mom.scatter, d, x=x,
                                       seed=seed, token=token)
    w, rank = _whitening(cov, mom) if depth == "ai-irw" else (None, d)
    m = n_directions if n_directions is not None else 100 * d
    directions = draw_directions(rng, m, d, w)
    # Tasks hold a row chunk, or (pilot) the row sample, with one block's projections.
    block = directions_per_block(d, max(max(x.chunks[0], default=1), 2 * mom.sample.shape[0]))
    too_big = summary_memory_message(m, mom.n, tol)
    if too_big:
        warnings.warn(too_big, SummaryMemoryWarning, stacklevel=WARN_LEVEL - 1)
    pilot_bytes = pilot_bytes_per_direction(mom.n, tol, mom.sample.shape[0])
    summary, info = build_summary(
        x, location, directions, mom.sample, mom.n, tol, token,
        block_size=min(block, MAX_DIRECTIONS_PER_BLOCK),
        wave_directions=lambda: directions_per_wave(pilot_bytes, free=free_worker_memory()))
    sample_depth = _offset_depths(summary, mom.sample, token)
    return FittedDepth(location, cov, rank, directions, summary, mom.n, sample_depth, info,
                       token)


def _check_rows(mom: ChunkMoments, n_total: int, nan_policy: str) -> None:
    """Refuse non-finite rows under ``nan_policy='raise'``, and fewer than 2 finite rows."""
    if mom.n_bad and nan_policy == "raise":
        raise ValueError(nan_rows_message(mom.n_bad, mom.bad_rows))
    if mom.n < 2:
        raise ValueError(
            f"only {mom.n} finite rows remain out of {n_total}; a depth reference needs at "
            "least 2"
        )


def _whitening(cov: np.ndarray, mom: ChunkMoments) -> tuple[np.ndarray, int]:
    """AI-IRW's whitening map of ``cov`` and its rank (warning when singular)."""
    d = cov.shape[0]
    if not cov.any() and np.ptp(mom.sample, axis=0).any():
        raise ValueError(
            "the covariance of the reference data underflows to zero although the rows "
            f"differ: the values are too small in scale (largest |x| about "
            f"{np.abs(mom.sample).max():.1e}) for float64 squares; rescale the features, "
            "e.g. multiply them by a common factor"
        )
    w, rank = whitening(canonical_covariance(cov))
    if rank < d:
        warnings.warn(
            f"the covariance has rank {rank} < {d} features (some features are linear "
            f"combinations of others or constant); AI-IRW depth is computed in the "
            f"{rank}-dimensional principal subspace",
            CovarianceRankWarning, stacklevel=WARN_LEVEL,
        )
    return w, rank


def _offset_depths(summary: DepthSummary, sample: np.ndarray, token: str) -> np.ndarray:
    """Depths of at most :data:`SAMPLE_SIZE` sampled rows, for ``offset_``.

    The contamination quantile of 65,536 depths is within about 1e-3 in rank of
    the quantile over all rows.  The sample is in global row order, so evenly
    spaced picks are as random and do not depend on the chunking.
    """
    if sample.shape[0] > SAMPLE_SIZE:
        sample = sample[np.linspace(0, sample.shape[0] - 1, SAMPLE_SIZE).astype(np.int64)]
    rows = da.from_array(sample, chunks=(row_chunk(*sample.shape), sample.shape[1]),
                         name=key_name("offset", token))
    with phase("offset"), keep_placement():
        return score_array(rows, summary, raise_nan=False, token=token).compute()
