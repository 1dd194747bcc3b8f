"""The fitted projection depth: centring, directions and each direction's median and MAD."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.projection import projection_depth, projection_top
from ..kernels.top import empty_top
from .perdirection import PerDirection
from .rows import Rows, prepare_rows


@dataclass(repr=False)
class ProjectionSummary(PerDirection):
    """Everything needed to score points with the projection depth: two numbers per direction.

    ``medians[j]`` is the median of the reference rows' projections
    ``<row - location, directions[j]>`` (the mean of the two middle ones for an
    even count, as NumPy's) and ``mads[j]`` the median of their absolute
    deviations from it (unscaled).  ``n`` is the number of reference rows.

    Examples
    --------
    >>> import numpy as np
    >>> ProjectionSummary(np.zeros(2), np.ones((3, 2)), np.zeros(3), np.ones(3), 100)
    <ProjectionSummary: n=100 rows, d=2, 3 directions, 96 bytes>
    """

    location: np.ndarray
    directions: np.ndarray
    medians: np.ndarray
    mads: np.ndarray
    n: int

    per_direction = ("medians", "mads")
    noun = "direction"

    def validate(self) -> None:
        """Refuse a summary this package could not have built (e.g. loaded from a file).

        ``n`` a positive integer; ``location`` (d,), ``directions`` (m, d),
        ``medians`` (m,) finite float64 arrays; ``mads`` (m,) finite and not
        negative.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        self._check_shapes()
        if not all(np.isfinite(a).all() for a in (self.location, self.directions, self.medians,
                                                  self.mads)):
            raise ValueError("location, directions, medians or mads hold values that are not "
                             "finite")
        if not (self.mads >= 0).all():
            raise ValueError("mads holds negative values")

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Projection depth of the rows of ``x`` (NaN where ``valid`` is False), in [0, 1].

        Duplicate rows are scored once (:func:`daskdepth.summary.rows.prepare_rows`).

        Examples
        --------
        >>> import numpy as np
        >>> s = ProjectionSummary(np.zeros(1), np.ones((1, 1)), np.zeros(1), np.ones(1), 3)
        >>> s.depth(np.array([[0.0], [1.0], [3.0]])).tolist()
        [1.0, 0.5, 0.25]
        """
        rows = prepare_rows(x, self.location, valid, order=False)
        out = np.empty(rows.x.shape[0])
        projection_depth(rows.x, np.ascontiguousarray(self.directions), self.medians,
                         self.mads, rows.valid, out)
        return rows.expand(out)

    def direction_errors(self) -> np.ndarray:
        """Bound on each direction's univariate depth: 0, the medians and MADs are exact."""
        return np.zeros(self.directions.shape[0])

    def top_slots(self, rows: Rows, inv_scale: np.ndarray,
                  k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each row of ``rows.x``'s ``k`` directions of smallest univariate depth, as slots.

        The univariate depth along ``v_j`` is ``1 / (1 + |p_j - med_j| / mad_j)``
        (``p_j`` the row's centred projection, the ratio with the zero-MAD
        convention of :meth:`depth`); the smallest is the row's projection
        depth.  Slots of :func:`daskdepth.kernels.top.empty_top` (values are
        depths, sides the sign of ``p_j - med_j``), ordered by outlyingness
        ``|p_j - med_j| / mad_j``, largest first (so by depth too), then as
        :func:`daskdepth.summary.explain.least_deep` breaks ties, with
        ``inv_scale[j]`` the inverse spread of the reference projections on
        ``v_j`` (0 where unknown).

        Examples
        --------
        >>> import numpy as np
        >>> s = ProjectionSummary(np.zeros(2), np.eye(2), np.zeros(2), np.ones(2), 3)
        >>> rows = prepare_rows(np.array([[0.5, -3.0]]), s.location, order=False)
        >>> value, _, direction, side = s.top_slots(rows, np.ones(2), 2)
        >>> value.tolist(), direction.tolist(), side.tolist()
        ([[0.25, 0.6666666666666666]], [[1, 0]], [[-1, 1]])
        """
        slots = empty_top(rows.x.shape[0], min(int(k), self.directions.shape[0]))
        projection_top(rows.x, np.ascontiguousarray(self.directions), self.medians, self.mads,
                       np.ascontiguousarray(inv_scale, dtype=np.float64), rows.valid, *slots)
        value = slots[0]
        filled = value < np.inf  # -outlyingness: at most 0 where filled
        value[filled] = 1.0 / (1.0 - value[filled])
        return slots
