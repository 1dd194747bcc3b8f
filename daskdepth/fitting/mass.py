"""Fitting the half-space mass (Algorithm 1 of Chen, Ting, Washio & Haffari, 2015).

One pass over the row chunks draws a keyed row sample (the pool, with the
rows' global indices; :func:`daskdepth.passes.sampling.row_sample_pass`);
everything else happens on the client: each half-space's subsample is a
uniform draw without replacement from the pool, its direction is uniform on
the sphere, and its split point is uniform within ``scope`` times the
subsample's projected range around the range's middle.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..errors import FitTooLargeError
from ..kernels.directions import uniform_sphere
from ..kernels.mass import subsample_projections
from ..passes.sampling import RowSample, row_sample_pass
from ..runtime.keys import fresh_token
from ..runtime.refusals import mass_plan_message
from ..summary.mass import MassSummary
from ..summary.statistics import WHOLE
from .fit import SAMPLE_BYTES, SAMPLE_MAX, check_finite_rows, draw_seed
from .offset import SAMPLE_SIZE, offset_depths

#: Rows of the pool per subsampled row (``t * psi`` of them): with a pool this
#: much larger than the subsamples, subsamples drawn from it overlap about as
#: rarely as subsamples drawn from all rows would.
POOL_PER_SUBSAMPLED_ROW = 4


def pool_size(d: int, n_halfspaces: int, psi: int) -> int:
    """Expected size of the keyed row sample the subsamples are drawn from."""
    want = max(SAMPLE_SIZE, POOL_PER_SUBSAMPLED_ROW * n_halfspaces * psi)
    return int(max(1024, min(want, SAMPLE_MAX, SAMPLE_BYTES // (8 * d))))


@dataclass
class FittedMass:
    """Everything a half-space mass fit computes, for the estimator's fitted attributes."""

    summary: MassSummary
    subsamples: np.ndarray  # (t, psi) global row indices of each half-space's subsample
    n: int
    sample_depth: np.ndarray
    token: str


def fit_mass(x: da.Array, *, n_halfspaces: int, psi: int, scope: float,
             rng: np.random.RandomState, nan_policy: str) -> FittedMass:
    """Draw ``n_halfspaces`` half-spaces from the rows of ``x`` (Algorithm 1 of Chen et al.).

    Half-space ``j``: a subsample of ``min(psi, pool)`` distinct finite rows
    drawn uniformly (without replacement) from a keyed Bernoulli sample of
    the rows (all finite rows when there are at most :func:`pool_size`); a
    direction ``v_j`` uniform on the sphere; the subsample's projections
    ``p = <row - mu, v_j>`` (``mu`` the pool's mean, for precision only: the
    half-spaces do not depend on it); a split point ``s_j = mid + scope * range
    * (u - 1/2)`` with ``mid`` and ``range`` the middle and width of the
    projections' range and ``u`` uniform in [0, 1); and the mass
    ``left_j = #{p < s_j} / psi`` (the rest, ``1 - left_j``, is the mass of
    the other side).  Random numbers come from ``rng`` on the client and the
    row sample is keyed on global row indices: the result does not depend on
    the chunking.
    """
    n_total, d = x.shape
    too_large = mass_plan_message(d, n_halfspaces, min(psi, n_total))
    if too_large:
        raise FitTooLargeError(too_large)
    seed = draw_seed(rng)
    # every fit's keys are its own, as a depth fit's (daskdepth.fitting.fit)
    token = tokenize(x.name, "halfspace-mass", n_halfspaces, psi, scope, seed, nan_policy,
                     fresh_token())
    pool = row_sample_pass(x, seed=seed, sample_size=pool_size(d, n_halfspaces, psi),
                           token=token)
    _check_pool(pool, n_total, nan_policy)
    rows = pool.rows
    s = rows.shape[0]
    psi = min(psi, s)
    location = rows.mean(axis=0)
    directions = uniform_sphere(rng, n_halfspaces, d)
    gen = np.random.default_rng(draw_seed(rng))
    picks = np.empty((n_halfspaces, psi), dtype=np.int64)
    for j in range(n_halfspaces):
        picks[j] = gen.choice(s, size=psi, replace=False)
    u = gen.random(n_halfspaces)
    proj = subsample_projections(rows, location, directions, picks)
    lo, hi = proj.min(axis=1), proj.max(axis=1)
    splits = (lo + hi) / 2 + scope * (hi - lo) * (u - 0.5)
    left = np.count_nonzero(proj < splits[:, None], axis=1) / psi
    summary = MassSummary(location, directions, splits, left, pool.n)
    sample_depth = offset_depths(summary, rows, token, WHOLE)
    return FittedMass(summary, pool.index[picks], pool.n, sample_depth, token)


def _check_pool(pool: RowSample, n_total: int, nan_policy: str) -> None:
    """:func:`~daskdepth.fitting.fit.check_finite_rows` for the pool's counts, and a pool
    of at least 2 rows."""
    check_finite_rows(pool.n, pool.n_bad, pool.bad_rows, n_total, nan_policy)
    if pool.rows.shape[0] < 2:  # pragma: no cover - a Bernoulli sample of >= 65,536 rows
        raise RuntimeError("the row sample of the half-space mass holds fewer than 2 rows; "
                           "please report this with the input's shape and chunks")
