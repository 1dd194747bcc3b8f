"""Row chunks prepared for the kernels: centred, finite, duplicate rows merged.

Real anomaly-detection data repeat rows a lot (a row chunk of the Http set
holds about half as many distinct rows as rows).  Equal rows have equal
projections on every direction, so each distinct row is routed once and
counted with its multiplicity, and its depth is copied to its duplicates:
the results are the same bits, for a fraction of the work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.routing import PROJECT_MAX_D
from ..kernels.rows import distinct_rows, morton_codes
from .nbytes import ArrayRecord

#: Duplicates are merged only when that removes at least this fraction of a
#: chunk's finite rows; otherwise gathering the distinct rows costs more than
#: it saves.  Finding them costs far less per row than routing the row along
#: every direction.
MERGE_MIN_GAIN = 0.1


#: Rows are put in Z-order (:func:`daskdepth.kernels.rows.morton_codes`) when each
#: feature gets at least 4 bits of the 63-bit code and the chunk is big enough
#: to matter: neighbouring rows then share the routing tables' cache lines.
ORDER_MAX_D = 15


ORDER_MIN_ROWS = 4096


@dataclass
class Rows(ArrayRecord):
    """Centred rows for the kernels and how they map back to the chunk's rows.

    ``x`` holds the rows the kernels see (in column order for wide rows);
    ``valid`` marks those to use and ``weight`` how many rows of the chunk each
    one stands for.  ``inverse`` gives, for each row of the chunk, its row of
    ``x`` (``-1`` when not finite); it is ``None`` when ``x`` is the chunk
    itself, or when the caller did not ask for it.
    """

    x: np.ndarray
    valid: np.ndarray
    weight: np.ndarray
    inverse: np.ndarray | None
    n_rows: int

    def expand(self, values: np.ndarray) -> np.ndarray:
        """Per-row ``values`` of ``x`` back to the chunk's rows (NaN where not finite)."""
        if self.inverse is None:
            if values.shape[0] != self.n_rows:
                raise ValueError("rows were merged but the inverse map was not kept")
            out = values.copy()
            out[~self.valid] = np.nan
            return out
        out = np.full(self.n_rows, np.nan)
        keep = self.inverse >= 0
        out[keep] = values[self.inverse[keep]]
        return out


def prepare_rows(x: np.ndarray, location: np.ndarray, valid: np.ndarray | None = None, *,
                 keep_inverse: bool = True, merge: bool = True, order: bool = True) -> Rows:
    """Centre the rows of ``x`` on ``location``, merge duplicate finite rows, sort them.

    With ``merge``, duplicate rows become one row weighted by its multiplicity
    (when that saves enough); with ``order``, the rows are put in Z-order (for
    narrow data).  Either way the kernels see each row's exact values, so
    counts and depths are the same bits as without.

    Examples
    --------
    >>> import numpy as np
    >>> rows = prepare_rows(np.array([[1.0, 2.0], [1.0, 2.0], [3.0, np.nan], [1.0, 2.0],
    ...                               [0.0, 0.0]]), np.zeros(2))
    >>> rows.x.tolist(), rows.weight.tolist()
    ([[1.0, 2.0], [0.0, 0.0]], [3.0, 1.0])
    >>> rows.expand(np.array([0.25, 0.0])).tolist()
    [0.25, 0.25, nan, 0.25, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    if valid is None:
        valid = np.isfinite(x).all(axis=1)
    n_rows, d = x.shape
    # Wide rows are projected beforehand, feature by feature
    # (:func:`daskdepth.kernels.tiles.project`): in column order they are
    # transposed once per chunk, not once per direction block.  Centred straight
    # into that order: one copy of the chunk, not two.
    wide = d > PROJECT_MAX_D
    xc = np.subtract(x, location, order="F" if wide else "C")
    n_valid = int(np.count_nonzero(valid))
    pick = weight = inverse = None
    if merge and n_valid > 1:
        first, inv, counts = distinct_rows(xc.view(np.uint64), valid)
        if first.size <= (1.0 - MERGE_MIN_GAIN) * n_valid:
            pick, weight, inverse = first, counts, inv
    if order and d <= ORDER_MAX_D and n_valid >= ORDER_MIN_ROWS:
        if pick is None:
            pick = np.flatnonzero(valid)
            weight = np.ones(pick.size)
            inverse = np.full(n_rows, -1, dtype=np.int64)
            inverse[pick] = np.arange(pick.size)
        codes = morton_codes(xc[pick], np.ones(pick.size, dtype=bool), 63 // d)
        perm = np.argsort(codes)
        rank = np.empty_like(perm)
        rank[perm] = np.arange(perm.size)
        pick, weight = pick[perm], weight[perm]
        inverse = np.where(inverse >= 0, rank[np.maximum(inverse, 0)], -1)
    layout = np.asfortranarray if wide else np.ascontiguousarray
    if pick is None:
        return Rows(layout(xc), valid, valid.astype(np.float64), None, n_rows)
    return Rows(layout(xc[pick]), np.ones(pick.size, dtype=bool), weight,
                inverse if keep_inverse else None, n_rows)
