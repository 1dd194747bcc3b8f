"""Statistics over directions: how a summary's per-direction values become one score per row.

A :class:`Statistic` says how a chunk of rows is scored with a whole summary,
and, for the summaries held as direction blocks
(:class:`~daskdepth.summary.depth.DepthSummary`), how a block adds into a
running result, how partial results of direction blocks combine, how a
combined result is finished into scores, and how the per-direction error
bounds give the bound of the score.  Each estimator names its statistic
(``_statistic``); the scoring passes (:mod:`daskdepth.passes.scoring`) and the
fit's bound (:mod:`daskdepth.fitting.summaries`) ask it rather than the name.

Examples
--------
>>> import numpy as np
>>> MEAN.bound(np.array([0.0, 1e-3])), MIN.bound(np.array([0.0, 1e-3]))
(0.0005, 0.001)
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from .blocks import squares_are_exact, sums_are_exact


def mean_bound(errs: np.ndarray) -> float:
    """Mean of per-direction bounds; it never exceeds the largest, so ``min`` drops rounding."""
    return float(min(math.fsum(errs) / errs.size, errs.max())) if errs.size else 0.0


class Statistic:
    """A statistic over directions: the summary's own method that scores a chunk.

    This base serves the summaries scored whole (no direction blocks, exact
    given their fitted values): their ``depth`` method scores a chunk, and the
    bound is 0.
    """

    #: What the statistic is called in messages and keys.
    name = "depth"
    #: Whether it has a Monte Carlo standard error over directions (a mean has).
    has_std = False

    def score(self, summary: Any, x: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        """Scores of the rows of ``x`` (NaN where not ``valid``) with the whole ``summary``."""
        return summary.depth(x, valid)

    def bound(self, errs: np.ndarray) -> float:
        """Certified bound of the statistic given every direction's bound ``errs``."""
        return 0.0

    # The block protocol: only for summaries held as direction blocks.

    def start(self, size: int) -> Any:  # pragma: no cover - whole summaries have no blocks
        raise TypeError(f"the statistic {self.name!r} scores whole summaries only")

    def add_blocks(self, x: np.ndarray, directions: np.ndarray, valid: np.ndarray,
                   running: Any, blocks: Any) -> Any:  # pragma: no cover - as start
        raise TypeError(f"the statistic {self.name!r} scores whole summaries only")

    def combine(self, *parts: Any) -> Any:  # pragma: no cover - as start
        raise TypeError(f"the statistic {self.name!r} scores whole summaries only")

    def finish(self, summary: Any, part: Any, expand: Any) -> np.ndarray:  # pragma: no cover
        raise TypeError(f"the statistic {self.name!r} scores whole summaries only")

    def exact_in_any_order(self, m: int, n: int) -> bool:
        """Whether partial results combine to the same bits in any order (else: block order)."""
        return True

    def __repr__(self) -> str:
        return f"<statistic {self.name}>"


class Mean(Statistic):
    """The mean over directions of ``min(L_j, G_j) / n`` (IRW, AI-IRW): sums of rows, divided."""

    name = "depth"
    has_std = True

    def score(self, summary: Any, x: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        return summary.depth(x, valid)

    def bound(self, errs: np.ndarray) -> float:
        # The mean of values each within errs[j] is within their mean.
        return mean_bound(errs)

    def start(self, size: int) -> np.ndarray:
        return np.zeros(size)

    def add_blocks(self, x: np.ndarray, directions: np.ndarray, valid: np.ndarray,
                   running: np.ndarray, blocks: Any) -> np.ndarray:
        out = running.copy()
        for b in blocks:
            b.score_into(x, np.ascontiguousarray(directions[b.j0:b.j1]), valid, out)
        return out

    def combine(self, *parts: np.ndarray) -> np.ndarray:
        out = parts[0].copy()
        for p in parts[1:]:
            out += p
        return out

    def finish(self, summary: Any, part: np.ndarray, expand: Any) -> np.ndarray:
        return expand(summary.depth_of_totals(part))

    def exact_in_any_order(self, m: int, n: int) -> bool:
        return sums_are_exact(m, n)


class Minimum(Statistic):
    """The minimum over directions of ``min(L_j, G_j) / n`` (random halfspace depth)."""

    name = "min_depth"

    def score(self, summary: Any, x: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        return summary.min_depth(x, valid)

    def bound(self, errs: np.ndarray) -> float:
        # |min a - min b| <= max |a - b|
        return float(errs.max()) if errs.size else 0.0

    def start(self, size: int) -> np.ndarray:
        return np.full(size, np.inf)

    def add_blocks(self, x: np.ndarray, directions: np.ndarray, valid: np.ndarray,
                   running: np.ndarray, blocks: Any) -> np.ndarray:
        out = running.copy()
        for b in blocks:
            b.score_min_into(x, np.ascontiguousarray(directions[b.j0:b.j1]), valid, out)
        return out

    def combine(self, *parts: np.ndarray) -> np.ndarray:
        out = parts[0].copy()
        for p in parts[1:]:
            np.minimum(out, p, out=out)
        return out

    def finish(self, summary: Any, part: np.ndarray, expand: Any) -> np.ndarray:
        return expand(summary.min_depth_of_totals(part))


class MeanWithStd(Mean):
    """The mean and its Monte Carlo standard error: ``(rows, 2)`` per chunk."""

    name = "std"

    def score(self, summary: Any, x: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        return np.column_stack(summary.depth_and_std(x, valid))

    def start(self, size: int) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        return np.zeros(size), np.zeros(size)

    def add_blocks(self, x: np.ndarray, directions: np.ndarray, valid: np.ndarray,
                   running: Any, blocks: Any) -> tuple[np.ndarray, np.ndarray]:
        total, squares = running[0].copy(), running[1].copy()
        for b in blocks:
            b.score_squares_into(x, np.ascontiguousarray(directions[b.j0:b.j1]), valid, total,
                                 squares)
        return total, squares

    def combine(self, *parts: Any) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        total, squares = parts[0][0].copy(), parts[0][1].copy()
        for t, s in parts[1:]:
            total += t
            squares += s
        return total, squares

    def finish(self, summary: Any, part: Any, expand: Any) -> np.ndarray:
        depth, std = summary.depth_and_std_of_totals(*part)
        return np.column_stack([expand(depth), expand(std)])

    def exact_in_any_order(self, m: int, n: int) -> bool:
        return sums_are_exact(m, n) and squares_are_exact(m, n)


#: :func:`depth_interval` takes the effective number of directions as at most this
#: many times ``m``.  Measured (600 Gaussian or Student-3 rows, d = 2 to 10, m = 200 to
#: 500, 20 draws of the directions against 20,000; see docs/accuracy.md): coverage of
#: the 95% interval 0.91 to 0.97 from the centre to depths near 0.002, where
#: ``depth +- 1.96 std`` covers 0.67 to 0.83; a cap of 3 over-covers central points (up
#: to 0.985), 6 under-covers far ones (0.85 to 0.88).
EFFECTIVE_CAP = 4.0


def depth_interval(depth: Any, std: Any, n_directions: int,
                   level: float = 0.95) -> tuple[Any, Any]:
    """An interval for the depth with infinitely many directions, valid near depth 0 too.

    ``depth`` and ``std`` are what ``score_samples(X, return_std=True)`` returns
    (the mean of ``m = n_directions`` per-direction depths ``c_j`` in
    ``[0, 1/2]``, and its standard error ``s / sqrt(m)``).  ``depth +- z std`` is
    symmetric, but a depth is bounded below by 0, and for points far outside
    the data most ``c_j`` are 0 or tiny while a few are not: the interval then
    misses the depth for infinitely many directions more often than ``level``
    says (the rare large ``c_j`` are missing from both the mean and ``s``).

    This interval is Wilson's score interval for the proportion ``p = 2 depth``
    (``2 c_j`` lies in ``[0, 1]``) with the effective number of directions
    ``m_eff = m p (1 - p) / (2 s)^2``, kept between ``m`` (a variable in
    ``[0, 1]`` with mean ``p`` has variance at most ``p (1 - p)``) and
    :data:`EFFECTIVE_CAP` ``m`` (its variance is taken as at least a quarter
    of that: far out, the sample of ``m`` directions misses the rare large
    ``c_j``, and ``s`` underestimates the spread), mapped back to depth units.
    It lies within ``[0, 1/2]``, is close to ``depth +- z std`` for depths away
    from 0, and near 0 it reaches further up than down, as the skewed ``c_j``
    do; where every ``c_j`` is 0 (``std`` 0) it is ``[0, z^2 / (2 (m + z^2))]``
    rather than a single point.

    Element-wise arithmetic only: NumPy arrays, pandas Series, dask arrays and
    DataArrays come back as such (NaN depths give NaN bounds).

    Parameters
    ----------
    depth, std : array-like
        From ``model.score_samples(X, return_std=True)``.
    n_directions : int
        The model's ``n_directions_``.
    level : float, default=0.95
        Two-sided confidence level, in (0, 1).

    Returns
    -------
    low, high : same kind as ``depth``

    Examples
    --------
    >>> import numpy as np
    >>> low, high = depth_interval(np.array([0.25, 0.0]), np.array([0.005, 0.0]), 400)
    >>> np.round(low, 4), np.round(high, 4)
    (array([0.2378, 0.    ]), array([0.2622, 0.0048]))
    """
    if not (isinstance(n_directions, (int, np.integer)) and n_directions >= 1):
        raise ValueError(f"n_directions must be a positive integer (the model's "
                         f"n_directions_), got {n_directions!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), e.g. 0.95; got {level!r}")
    z = NormalDist().inv_cdf((1 + level) / 2)
    m = float(n_directions)
    tiny = np.finfo(np.float64).tiny
    p = np.clip(2 * depth, 0.0, 1.0)
    spread = p * (1 - p)
    var1 = 4 * m * std * std  # variance of one direction's 2 c_j
    n_eff = np.clip(m * np.maximum(spread, tiny) / np.maximum(var1, tiny), m,
                    EFFECTIVE_CAP * m)
    zz = z * z / n_eff
    centre = (p + zz / 2) / (1 + zz)
    half = z / (1 + zz) * np.sqrt(spread / n_eff + zz / (4 * n_eff))
    return np.clip(centre - half, 0.0, 1.0) / 2, np.clip(centre + half, 0.0, 1.0) / 2


#: The statistics of the estimators: the mean over directions (IRW, AI-IRW), the
#: minimum (halfspace depth), the mean with its standard error, and a summary's
#: own scoring (half-space mass, projection depth).
MEAN = Mean()
MIN = Minimum()
MEAN_STD = MeanWithStd()
WHOLE = Statistic()
