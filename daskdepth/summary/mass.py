"""The fitted half-space mass: centring, half-spaces and their masses (NumPy only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.mass import mass_scores
from .perdirection import PerDirection
from .rows import prepare_rows


@dataclass(repr=False)
class MassSummary(PerDirection):
    """Everything needed to score points with the half-space mass of Chen et al. (2015).

    Half-space ``j`` splits direction ``directions[j]`` at ``splits[j]`` (on
    projections centred on ``location``); ``left[j]`` is the share of its
    subsample strictly below the split, so a point below gets mass ``left[j]``
    and any other point ``1 - left[j]``.  ``n`` is the number of reference rows
    the subsamples were drawn from.

    Examples
    --------
    >>> import numpy as np
    >>> MassSummary(np.zeros(2), np.ones((3, 2)), np.zeros(3), np.ones(3) / 2, 100)
    <MassSummary: n=100 rows, d=2, 3 half-spaces, 96 bytes>
    """

    location: np.ndarray
    directions: np.ndarray
    splits: np.ndarray
    left: np.ndarray
    n: int

    per_direction = ("splits", "left")
    noun = "half-space"

    def validate(self) -> None:
        """Refuse a summary this package could not have built (e.g. loaded from a file).

        ``n`` a positive integer; ``location`` (d,), ``directions`` (m, d) and
        ``splits`` (m,) finite float64 arrays; ``left`` (m,) shares in [0, 1].
        Run before :func:`~daskdepth.kernels.mass.mass_scores` reads them.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        self._check_shapes()
        if not all(np.isfinite(a).all() for a in (self.location, self.directions, self.splits)):
            raise ValueError("location, directions or splits hold values that are not finite")
        if not ((self.left >= 0) & (self.left <= 1)).all():
            raise ValueError("left holds shares outside [0, 1]")

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Half-space mass of the rows of ``x`` (NaN where ``valid`` is False).

        Duplicate rows are scored once (:func:`daskdepth.summary.rows.prepare_rows`).
        """
        rows = prepare_rows(x, self.location, valid, order=False)
        out = np.empty(rows.x.shape[0])
        mass_scores(rows.x, np.ascontiguousarray(self.directions), self.splits, self.left,
                    rows.valid, out)
        return rows.expand(out)
