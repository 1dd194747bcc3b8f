"""Exact summaries of one block of directions: the sorted projections (NumPy only).

When the reference rows are few (the in-memory fit), each direction's sorted
projections are smaller than a leaf summary of the same rows (8 bytes per
value against 24 or more per leaf, and at small ``n`` there is a leaf per
value) and answer every count exactly: :class:`BlockSorted` scores points by
binary search, with error bound 0.  It has the scoring interface of
:class:`daskdepth.summary.leaves.BlockLeaves`, so a
:class:`daskdepth.summary.depth.DepthSummary` may hold either.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..kernels.ranks import clamp_projections, in_sample_counts, score_sorted
from ..kernels.tiles import project, project_columns
from ..kernels.top import top_sorted
from .leaves import _check_array, _check_range


@dataclass
class BlockSorted:
    """Sorted reference projections on the directions ``j0 .. j1 - 1``.

    ``values[jj]`` holds the ``n`` projections of the centred reference rows on
    direction ``j0 + jj`` in ascending order (overflows clamped as the routing
    kernels do).  ``min(#{p <= q}, #{p >= q})`` of a point's projection ``q``
    follows from two binary searches: exact, ties included.

    Examples
    --------
    >>> import numpy as np
    >>> rows = np.array([[0.0], [1.0], [1.0], [3.0]])
    >>> block, in_sample = BlockSorted.fit(np.ascontiguousarray(rows.T), np.array([[1.0]]), 0, 1)
    >>> block.values.tolist(), in_sample.tolist()
    ([[0.0, 1.0, 1.0, 3.0]], [1.0, 3.0, 3.0, 1.0])
    >>> out = np.zeros(3)
    >>> block.score_into(np.array([[1.0], [2.0], [9.0]]), np.array([[1.0]]), np.ones(3, bool), out)
    >>> out.tolist()  # min(#<=, #>=): 1.0 ties with two rows
    [3.0, 1.0, 0.0]
    """

    j0: int
    j1: int
    values: np.ndarray = field(repr=False)

    @property
    def mb(self) -> int:
        return self.j1 - self.j0

    @property
    def n(self) -> int:
        return int(self.values.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)

    def __sizeof__(self) -> int:
        # What dask's sizeof reports (see BlockLeaves.__sizeof__).
        return object.__sizeof__(self) + self.nbytes

    @classmethod
    def fit(cls, columns: np.ndarray, v: np.ndarray, j0: int,
            j1: int) -> tuple[BlockSorted, np.ndarray]:
        """The block of the centred reference rows whose columns are ``columns`` (d, n).

        Returns the block and, for every reference row, its ``min(L, G)`` summed
        over the block's directions (its in-sample depth times ``n``, before the
        mean over directions): each projection is computed once and serves both.
        """
        proj = _projections(columns, v)
        values = np.sort(proj, axis=1)
        in_sample = np.zeros(proj.shape[1])
        in_sample_counts(proj, values, in_sample)
        return cls(int(j0), int(j1), values), in_sample

    @classmethod
    def rebuild(cls, columns: np.ndarray, v: np.ndarray, j0: int, j1: int) -> BlockSorted:
        """The block :meth:`fit` returns for the same arguments (the same bits), without the
        in-sample counts."""
        return cls(int(j0), int(j1), np.sort(_projections(columns, v), axis=1))

    def _score(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, mode: int,
               out: np.ndarray, out_sq: np.ndarray) -> None:
        proj = project(xc, v)
        clamp_projections(proj)
        score_sorted(proj, valid, self.values, mode, out, out_sq)

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   out: np.ndarray) -> None:
        """Add this block's directions' exact ``min(L, G)`` (in rows) to ``out``."""
        self._score(xc, v, valid, 0, out, out)

    def score_squares_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                           out: np.ndarray, out_sq: np.ndarray) -> None:
        """:meth:`score_into`, also adding the squares to ``out_sq`` (for standard errors)."""
        self._score(xc, v, valid, 1, out, out_sq)

    def score_min_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                       out: np.ndarray) -> None:
        """Lower ``out`` to the smallest exact ``min(L, G)`` over this block's directions."""
        self._score(xc, v, valid, 2, out, out)

    def top_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, top: tuple,
                 inv_scale: np.ndarray) -> None:
        """Push each row's exact ``min(L, G)`` on every direction into ``top``'s slots.

        ``top`` is :func:`daskdepth.kernels.top.empty_top`'s, ``inv_scale`` the inverse
        spreads of the block's directions, see :func:`daskdepth.kernels.top.top_sorted`.
        """
        proj = project(xc, v)
        clamp_projections(proj)
        top_sorted(proj, valid, self.values, self.j0, inv_scale, *top)

    def direction_errors(self, n: int) -> np.ndarray:
        """Per direction, the bound on |estimated - exact| depth contribution: 0 (exact)."""
        return np.zeros(self.mb)

    def validate(self, n: int) -> None:
        """Refuse a block this package could not have built (e.g. loaded from a file).

        ``j0 < j1`` integers and ``values`` a C-contiguous float64 array of
        ``n`` sorted projections per direction, none NaN (as
        :func:`~daskdepth.kernels.ranks.clamp_projections` leaves them): the
        searches of :func:`~daskdepth.kernels.ranks.score_sorted` then stay in
        the array and count exactly.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        _check_range(self.j0, self.j1)
        values = _check_array(self.values, "values", (np.float64,), (self.mb, n))
        if np.isnan(values).any():
            raise ValueError("values hold NaN")
        if (np.diff(values, axis=1) < 0).any():
            raise ValueError("a direction's values are not sorted")


def _projections(columns: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The projections (clamped) of the rows whose columns are ``columns`` on the rows of ``v``."""
    proj = np.empty((v.shape[0], columns.shape[1]))
    project_columns(columns, np.ascontiguousarray(v), proj)
    clamp_projections(proj)
    return proj


def centred_columns(rows: np.ndarray, location: np.ndarray) -> np.ndarray:
    """The columns ``(d, n)`` of ``rows`` (n, d) minus ``location`` (what the fit reads).

    The one expression the fit uses (:func:`daskdepth.passes.moments._centred_columns`
    and :func:`daskdepth.fitting.summaries.build_summary`), so that blocks rebuilt
    from the same rows are the same bits.

    Examples
    --------
    >>> centred_columns(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0])).tolist()
    [[0.0, 2.0], [1.0, 3.0]]
    """
    return np.ascontiguousarray((rows - location).T)


def rebuild_sorted(rows: np.ndarray, location: np.ndarray, directions: np.ndarray,
                   ranges: list[tuple[int, int]]) -> list[BlockSorted]:
    """The sorted blocks on the directions ``ranges`` of the reference ``rows`` (n, d).

    What the exact fit built (:func:`daskdepth.fitting.summaries.exact_phase`),
    by the same kernels from the same centred columns and direction rows
    (:meth:`BlockSorted.rebuild`), so the same bits: a saved model whose rows
    take less room than the sorted projections (``d < m``) stores the rows and
    rebuilds its blocks when read (:mod:`daskdepth.storage.blockstore`); the
    blocks are built on the cores at once.
    The caller checks the shapes first
    (:meth:`daskdepth.summary.depth.DepthSummary.validate_frame`).

    Examples
    --------
    >>> rows = np.array([[0.0], [1.0], [1.0], [3.0]])
    >>> fitted, _ = BlockSorted.fit(centred_columns(rows, np.zeros(1)), np.ones((1, 1)), 0, 1)
    >>> [b.values.tolist() for b in rebuild_sorted(rows, np.zeros(1), np.ones((1, 1)), [(0, 1)])]
    [[[0.0, 1.0, 1.0, 3.0]]]
    >>> bool((rebuild_sorted(rows, np.zeros(1), np.ones((1, 1)), [(0, 1)])[0].values
    ...       == fitted.values).all())
    True
    """
    columns = centred_columns(rows, location)

    def one(r: tuple[int, int]) -> BlockSorted:
        return BlockSorted.rebuild(columns, np.ascontiguousarray(directions[r[0]:r[1]]), *r)

    # The kernels release the GIL: blocks on the cores at once (each block's bits are its own).
    with ThreadPoolExecutor(max_workers=max(1, min(len(ranges), os.cpu_count() or 1))) as pool:
        return list(pool.map(one, ranges))
