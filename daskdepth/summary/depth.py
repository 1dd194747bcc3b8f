"""The fitted depth summary: centring, directions and the leaf summaries of every block."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .blocks import BlockHandle, is_handle
from .leaves import BlockLeaves, _check_array, _check_int
from .nbytes import describe_bytes
from .rows import prepare_rows
from .sorted import BlockSorted
from .statistics import MEAN, Statistic


@dataclass
class DepthSummary:
    """Everything needed to score points: centring, directions and block summaries.

    A block is a :class:`~daskdepth.summary.leaves.BlockLeaves` (leaf summaries)
    or a :class:`~daskdepth.summary.sorted.BlockSorted` (sorted projections, exact),
    or a :class:`~daskdepth.summary.blocks.BlockHandle` of one whose arrays live
    elsewhere (a worker's memory, a saved model's store), which scores alike.

    ``rows`` is ``None``, or, for a summary of sorted projections fitted on
    fewer features than directions (``d < m``), the ``n`` reference rows (n, d)
    the blocks were fitted on (:func:`~daskdepth.summary.sorted.centred_columns`
    of them and ``location``): a saved model stores them (``8 d n`` bytes)
    instead of the sorted projections (``8 m n``) and rebuilds the blocks
    from them when read (:func:`~daskdepth.summary.sorted.rebuild_sorted`,
    the same bits).  Scoring never reads them.
    """

    location: np.ndarray
    directions: np.ndarray
    blocks: list[Any]
    n: int
    rows: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of what scoring reads: the directions and the blocks (not ``rows``)."""
        return self.directions.nbytes + sum(b.nbytes for b in self.blocks)

    def __sizeof__(self) -> int:
        """Bytes held here (what dask's ``sizeof`` reports): blocks held elsewhere count little.

        Without it dask counts a summary copied to the workers as a few dozen
        bytes: neither their memory managers nor the transfer logs see it.
        """
        rows = 0 if self.rows is None else self.rows.nbytes
        return (object.__sizeof__(self) + self.location.nbytes + self.directions.nbytes + rows
                + sum(sys.getsizeof(b) for b in self.blocks))

    def __repr__(self) -> str:
        """A one-line description, from what is known without loading any block.

        The dataclass's own repr printed every array and block: notebooks cut it
        to an unreadable tail (``...], n=1000000)``).

        Examples
        --------
        >>> import numpy as np
        >>> rows = np.array([[0.0], [1.0], [1.0], [3.0]])
        >>> block, _ = BlockSorted.fit(np.ascontiguousarray(rows.T), np.array([[1.0]]), 0, 1)
        >>> DepthSummary(np.zeros(1), np.ones((1, 1)), [block], 4)
        <DepthSummary: n=4 rows, d=1, 1 direction in 1 block (1 sorted), 40 bytes>
        """
        m, d = (int(v) for v in self.directions.shape)
        kinds: dict[str, int] = {}
        for block in self.blocks:
            kind = ("stored" if is_handle(block) else "sorted" if isinstance(block, BlockSorted)
                    else "leaves" if isinstance(block, BlockLeaves) else type(block).__name__)
            kinds[kind] = kinds.get(kind, 0) + 1
        listed = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
        return (f"<DepthSummary: n={self.n:,} rows, d={d}, {m:,} direction{'s' * (m != 1)} in "
                f"{len(self.blocks):,} block{'s' * (len(self.blocks) != 1)} ({listed}), "
                f"{describe_bytes(self.nbytes)}>")

    def validate(self) -> None:
        """Refuse a summary this package could not have built (e.g. loaded from a file).

        ``n`` a positive integer, ``location`` and ``directions`` finite float64
        arrays of matching widths, and blocks that cover the directions in
        order, each checked by its ``validate`` (:meth:`BlockLeaves.validate
        <daskdepth.summary.leaves.BlockLeaves.validate>`, :meth:`BlockSorted.validate
        <daskdepth.summary.sorted.BlockSorted.validate>`).  Run before any kernel
        reads the summary.  A block read lazily (a
        :class:`~daskdepth.summary.blocks.BlockHandle`, e.g. of a saved model) is
        checked here from what is known of it (its directions, and its error
        bounds for ``n`` rows), and validated by its ``load`` before it is used.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        self.validate_frame()
        m = self.directions.shape[0]
        if not isinstance(self.blocks, list) or not self.blocks:
            raise ValueError("blocks is not a non-empty list")
        start = 0
        for i, block in enumerate(self.blocks):
            if is_handle(block):  # validated by its load, before any kernel reads it
                _check_handle(block, i, start, self.n)
                start = block.j1
                continue
            if type(block) not in (BlockLeaves, BlockSorted):
                raise ValueError(f"block {i} is a {type(block).__name__}, not a BlockLeaves "
                                 "or a BlockSorted")
            if self.rows is not None and type(block) is not BlockSorted:
                raise ValueError(f"block {i} is a {type(block).__name__}, but a summary "
                                 "holding its reference rows holds sorted blocks only")
            if block.j0 != start:
                raise ValueError(f"block {i} starts at direction {block.j0}, not {start}")
            try:
                block.validate(self.n)
            except ValueError as exc:
                raise ValueError(f"block {i}: {exc}") from None
            start = block.j1
        if start != m:
            raise ValueError(f"the blocks cover {start} directions, not {m}")

    def validate_frame(self) -> None:
        """:meth:`validate` less the blocks: ``n``, ``location``, ``directions`` and ``rows``.

        Enough to rebuild sorted blocks from ``rows``
        (:func:`~daskdepth.summary.sorted.rebuild_sorted`): ``rows``, when
        present, a C-contiguous float64 array of ``n`` finite rows of the width
        of ``location``.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        _check_int(self.n, "n", 1)
        if not isinstance(self.location, np.ndarray) or self.location.ndim != 1:
            raise ValueError("location is not a 1-D array")
        d = self.location.shape[0]
        _check_array(self.location, "location", (np.float64,), (max(d, 1),))
        if not isinstance(self.directions, np.ndarray) or self.directions.ndim != 2:
            raise ValueError("directions is not a 2-D array")
        m = self.directions.shape[0]
        _check_array(self.directions, "directions", (np.float64,), (max(m, 1), d))
        if not (np.isfinite(self.location).all() and np.isfinite(self.directions).all()):
            raise ValueError("location or directions hold values that are not finite")
        if self.rows is not None:
            if not isinstance(self.rows, np.ndarray) or self.rows.ndim != 2:
                raise ValueError("rows is not a 2-D array")
            _check_array(self.rows, "rows", (np.float64,), (self.n, max(d, 1)))
            if not np.isfinite(self.rows).all():
                raise ValueError("rows hold values that are not finite")

    def direction_errors(self) -> np.ndarray:
        """Certified bound of every direction's ``min(L, G) / n`` (its worst leaf)."""
        return np.concatenate([b.direction_errors(self.n) for b in self.blocks]
                              or [np.zeros(0)])

    def error_bound(self, statistic: Statistic = MEAN) -> float:
        """Certified bound on ``|estimated - exact|`` of the ``statistic``, for every point.

        The depth (:data:`~daskdepth.summary.statistics.MEAN`) averages the
        directions' contributions, so its bound is the mean over directions of
        each direction's worst leaf; the halfspace depth
        (:data:`~daskdepth.summary.statistics.MIN`) takes their minimum, so its
        bound is the worst leaf over all directions.
        """
        return statistic.bound(self.direction_errors())

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Depth of the rows of ``x`` (NaN where ``valid`` is False).

        Duplicate rows are scored once (:func:`daskdepth.summary.rows.prepare_rows`).
        """
        rows = prepare_rows(x, self.location, valid)
        out = np.zeros(rows.x.shape[0])
        for b in self.blocks:
            b.score_into(rows.x, np.ascontiguousarray(self.directions[b.j0:b.j1]), rows.valid,
                         out)
        return rows.expand(self.depth_of_totals(out))

    def depth_of_totals(self, total: np.ndarray) -> np.ndarray:
        """Depths from per-row sums over the directions of ``min(L, G)`` (in rows).

        The one division :meth:`depth` makes, so that in-sample depths counted
        while fitting are the same bits as scoring the rows afresh.
        """
        return total / (self.n * self.directions.shape[0])

    def depth_and_std(self, x: np.ndarray,
                      valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Depth and its Monte Carlo standard error over the directions, per row.

        The depth is the mean over ``m`` directions of ``c_j = min(L_j, G_j) / n``;
        the standard error is ``s / sqrt(m)`` with ``s`` the sample standard
        deviation (``ddof=1``) of the ``c_j``: it measures the spread that
        drawing other directions would give, not the covariance estimate's
        error nor the summary's (bounded by :meth:`error_bound`).
        """
        rows = prepare_rows(x, self.location, valid)
        total = np.zeros(rows.x.shape[0])
        squares = np.zeros(rows.x.shape[0])
        for b in self.blocks:
            b.score_squares_into(rows.x, np.ascontiguousarray(self.directions[b.j0:b.j1]),
                                 rows.valid, total, squares)
        depth, std = self.depth_and_std_of_totals(total, squares)
        return rows.expand(depth), rows.expand(std)

    def depth_and_std_of_totals(self, total: np.ndarray,
                                squares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Depths and standard errors from per-row sums of ``min(L, G)`` and of its squares.

        The arithmetic :meth:`depth_and_std` does after adding up the directions
        (also used by the sharded scoring, for the same bits).
        """
        m = self.directions.shape[0]
        var = np.maximum(squares - total * (total / m), 0.0) / max(m - 1, 1)  # in rows^2
        # The depth divided exactly as depth() does: the same bits.
        return total / (self.n * m), np.sqrt(var / m) / self.n

    def min_depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Smallest ``min(L_j, G_j) / n`` over the directions (random halfspace depth), per row."""
        rows = prepare_rows(x, self.location, valid)
        out = np.full(rows.x.shape[0], np.inf)
        for b in self.blocks:
            b.score_min_into(rows.x, np.ascontiguousarray(self.directions[b.j0:b.j1]),
                             rows.valid, out)
        return rows.expand(self.min_depth_of_totals(out))

    def min_depth_of_totals(self, smallest: np.ndarray) -> np.ndarray:
        """Halfspace depths from per-row minima over the directions of ``min(L, G)`` (in rows)."""
        return smallest / self.n


def _check_handle(block: BlockHandle, i: int, start: int, n: int) -> None:
    """A block read lazily: its directions follow ``start``, its error bounds are for ``n``."""
    if not (isinstance(block.j0, int) and isinstance(block.j1, int) and block.j0 == start
            and block.j1 > block.j0):
        raise ValueError(f"block {i} starts at direction {block.j0}, not {start}")
    meta = block.meta
    if meta is not None and meta.n != n:
        raise ValueError(f"block {i} was stored for {meta.n} rows, not the {n} the summary was "
                         "fitted on")
    errors = None if meta is None else meta.errors
    if (meta is None or not isinstance(errors, np.ndarray)
            or errors.dtype != np.float64 or errors.shape != (block.mb,)
            or not (np.isfinite(errors).all() and (errors >= 0).all() and (errors <= 1).all())):
        raise ValueError(f"block {i}: its error bounds are not {block.mb} values in [0, 1] for "
                         f"the {n} rows of the summary")
