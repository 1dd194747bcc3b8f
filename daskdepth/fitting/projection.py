"""Fitting the projection depth: each direction's median and MAD, exact, in passes over the rows."""

from __future__ import annotations

from dataclasses import dataclass

import dask.array as da
import numpy as np

from ..passes.ranks import median_and_mad, middle, order_statistics
from ..summary.projection import ProjectionSummary
from ..summary.statistics import WHOLE
from .fit import FitFrame, every_row, fit_frame
from .offset import SAMPLE_SIZE, offset_depths


@dataclass
class FittedProjection:
    """Everything a projection depth fit computes, for the estimator's fitted attributes."""

    frame: FitFrame
    summary: ProjectionSummary
    n: int
    passes: int
    sample_depth: np.ndarray
    train_depth: np.ndarray | None


def fit_projection(x: da.Array, *, n_directions: int | None, covariance: object,
                   rng: np.random.RandomState, nan_policy: str,
                   whiten: bool) -> FittedProjection:
    """Fit the projection depth of the rows of ``x`` over random directions.

    The moments pass, covariance, whitening (with ``whiten``) and directions
    of :func:`daskdepth.fitting.fit.fit_frame`; then the median of every
    direction's projections and the median of their absolute deviations from
    it (:func:`daskdepth.passes.ranks.order_statistics`: from the row sample
    when it holds every finite row, else a few passes each), both exact; and
    the depths of a row sample that set ``offset_``.
    """
    n_total = x.shape[0]
    fr = fit_frame(x, depth="projection", n_directions=n_directions, covariance=covariance,
                   tol=0.0, rng=rng, nan_policy=nan_policy, whiten=whiten,
                   statistic="projection", plan=False)
    mom, location = fr.mom, fr.cfit.location
    n = mom.n
    if mom.sample.shape[0] == n:  # every finite row is in the sample: no pass
        medians, mads = median_and_mad(mom.sample, location, fr.directions)
        passes = 0
    else:
        ranks = tuple(sorted({(n - 1) // 2, n // 2}))  # NumPy's middle order statistics
        med, first = order_statistics(x, location, fr.directions, mom.sample, n, ranks, None,
                                      fr.token, "median")
        medians = middle(med)
        mad, second = order_statistics(x, location, fr.directions, mom.sample, n, ranks,
                                       medians, fr.token, "mad")
        mads, passes = middle(mad), first + second
    summary = ProjectionSummary(location, fr.directions, medians, mads, n)
    sample_depth = offset_depths(summary, mom.sample, fr.token, WHOLE)
    # In memory with a small sample, the offset rows are every finite row.
    in_sample = sample_depth if mom.sample.shape[0] == n <= SAMPLE_SIZE else None
    return FittedProjection(fr, summary, n, passes, sample_depth,
                            every_row(in_sample, mom, n_total))
