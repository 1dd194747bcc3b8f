"""The fitted half-space mass: centring, half-spaces and their masses (NumPy only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.mass import mass_scores
from .rows import prepare_rows


@dataclass
class MassSummary:
    """Everything needed to score points with the half-space mass of Chen et al. (2015).

    Half-space ``j`` splits direction ``directions[j]`` at ``splits[j]`` (on
    projections centred on ``location``); ``left[j]`` is the share of its
    subsample strictly below the split, so a point below gets mass ``left[j]``
    and any other point ``1 - left[j]``.  ``n`` is the number of reference rows
    the subsamples were drawn from.
    """

    location: np.ndarray
    directions: np.ndarray
    splits: np.ndarray
    left: np.ndarray
    n: int

    @property
    def nbytes(self) -> int:
        return self.directions.nbytes + self.splits.nbytes + self.left.nbytes

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Half-space mass of the rows of ``x`` (NaN where ``valid`` is False).

        Duplicate rows are scored once (:func:`daskdepth.summary.rows.prepare_rows`).
        """
        rows = prepare_rows(x, self.location, valid, order=False)
        out = np.empty(rows.x.shape[0])
        mass_scores(rows.x, np.ascontiguousarray(self.directions), self.splits, self.left,
                    rows.valid, out)
        return rows.expand(out)
