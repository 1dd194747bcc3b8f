"""The fitted depth summary: centring, directions and the leaf summaries of every block."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .leaves import BlockLeaves
from .rows import prepare_rows


def mean_bound(errs: np.ndarray) -> float:
    """Mean of per-direction bounds; it never exceeds the largest, so ``min`` drops rounding."""
    return float(min(math.fsum(errs) / errs.size, errs.max())) if errs.size else 0.0


@dataclass
class DepthSummary:
    """Everything needed to score points: centring, directions and block summaries."""

    location: np.ndarray
    directions: np.ndarray
    blocks: list[BlockLeaves]
    n: int

    @property
    def nbytes(self) -> int:
        return self.directions.nbytes + sum(b.nbytes for b in self.blocks)

    def error_bound(self) -> float:
        """Certified bound on |estimated - exact| depth, for every point.

        The depth averages the directions' contributions, so the bound is the
        mean over directions of each direction's worst leaf.
        """
        return mean_bound(np.concatenate([b.direction_errors(self.n) for b in self.blocks]
                                         or [np.zeros(0)]))

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Depth of the rows of ``x`` (NaN where ``valid`` is False).

        Duplicate rows are scored once (:func:`daskdepth.summary.rows.prepare_rows`).
        """
        rows = prepare_rows(x, self.location, valid)
        out = np.zeros(rows.x.shape[0])
        for b in self.blocks:
            b.score_into(rows.x, np.ascontiguousarray(self.directions[b.j0:b.j1]), rows.valid,
                         out)
        out /= self.n * self.directions.shape[0]
        return rows.expand(out)
