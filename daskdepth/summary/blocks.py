"""Direction blocks whose arrays live elsewhere, and what a client keeps of them (NumPy only).

A summary of many directions is too large to copy to every worker or to hold
on the client.  Each of its direction blocks then lives in one place (the
memory of one worker, or a saved model's store), and the client keeps a
:class:`BlockHandle`: the block's directions, its size and its directions'
error bounds, and a way to load the block itself.

Every block kind (:class:`daskdepth.summary.leaves.BlockLeaves` and the
others) offers the same methods (``j0``, ``j1``, ``mb``, ``nbytes``,
``direction_errors``, ``score_into``, ``score_squares_into``,
``score_min_into``, ``top_into``); a handle offers them too, loading its block for the
scoring methods, so a :class:`daskdepth.summary.depth.DepthSummary` of handles
scores like one of blocks, one block in memory at a time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np


class BlockMeta(NamedTuple):
    """What the client keeps of a block: its directions, size and error bounds.

    ``errors`` holds each direction's certified error bound for ``n`` reference
    rows (``block.direction_errors(n)``; None for blocks whose leaves are not
    counted yet); ``values`` the number of projections the block's leaf counts
    add up to (``n * mb``), or -1 when the block holds no leaf counts (a
    fitted block: they are only kept while the fit may still split leaves).
    """

    j0: int
    j1: int
    nbytes: int
    n: int
    errors: np.ndarray | None
    values: int


def block_meta(block: Any, n: int, finished: bool = True) -> BlockMeta:
    """The :class:`BlockMeta` of a block (run where the block is); ``finished``: with errors.

    Examples
    --------
    >>> from daskdepth.summary.leaves import BlockLeaves, LeafCounts
    >>> b = BlockLeaves.build(0, 1, np.array([0, 1]), np.array([0.5]))
    >>> b = b.finished(LeafCounts(np.array([3.0, 1.0]), np.array([[0.0, 1.0]])))
    >>> meta = block_meta(b, 4)
    >>> meta.j0, meta.j1, meta.values, meta.errors.tolist()
    (0, 1, 4, [0.375])
    """
    counts = getattr(block, "counts", None) if finished else None
    values = int(counts.sum(dtype=np.float64)) if counts is not None else -1
    errors = np.asarray(block.direction_errors(n), dtype=np.float64) if finished else None
    return BlockMeta(int(block.j0), int(block.j1), int(block.nbytes), int(n), errors, values)


class BlockHandle:
    """Stand-in for a direction block whose arrays live elsewhere.

    Subclasses say where the block is by implementing :meth:`load`.  The
    handle answers ``j0``, ``j1``, ``mb`` and ``nbytes`` from what it was given,
    ``direction_errors(n)`` from its :class:`BlockMeta` when it has one for the
    same ``n`` (otherwise by loading the block), and the scoring methods by
    loading the block and delegating to it: the same arithmetic, so the same
    bits.

    Parameters
    ----------
    j0, j1 : int
        The block's directions ``j0 .. j1 - 1``.
    nbytes : int
        Bytes of the block's arrays.
    meta : BlockMeta, optional
        What the block's own process computed about it (:func:`block_meta`).
    """

    def __init__(self, j0: int, j1: int, nbytes: int, meta: BlockMeta | None = None) -> None:
        self.j0 = int(j0)
        self.j1 = int(j1)
        self.nbytes = int(nbytes)
        self.meta = meta

    @property
    def mb(self) -> int:
        return self.j1 - self.j0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(j0={self.j0}, j1={self.j1}, nbytes={self.nbytes})"

    def load(self) -> Any:
        """The block itself (an object with the scoring methods)."""
        raise NotImplementedError

    def direction_errors(self, n: int) -> np.ndarray:
        """Each direction's certified error bound (see the block kinds' method)."""
        if self.meta is not None and self.meta.n == n and self.meta.errors is not None:
            return self.meta.errors.copy()
        return self.load().direction_errors(n)

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   out: np.ndarray) -> None:
        self.load().score_into(xc, v, valid, out)

    def score_squares_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                           out: np.ndarray, out_sq: np.ndarray) -> None:
        self.load().score_squares_into(xc, v, valid, out, out_sq)

    def score_min_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                       out: np.ndarray) -> None:
        self.load().score_min_into(xc, v, valid, out)

    def top_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, top: tuple,
                 inv_scale: np.ndarray) -> None:
        self.load().top_into(xc, v, valid, top, inv_scale)


def is_handle(block: Any) -> bool:
    """Whether ``block`` is a :class:`BlockHandle` (its arrays are elsewhere)."""
    return isinstance(block, BlockHandle)


def is_block(obj: Any) -> bool:
    """Whether ``obj`` is a direction block of a summary (any kind) or a handle of one."""
    return is_handle(obj) or (dataclasses.is_dataclass(obj) and not isinstance(obj, type)
                              and callable(getattr(obj, "score_into", None)))


#: Sums of tabulated scores stay exact in float64 up to this many half rows:
#: every tabulated ``min(L, G)`` is a multiple of 1/2 of at most ``n``.
EXACT_HALVES = 2**53


def sums_are_exact(m: int, n: int) -> bool:
    """Whether adding ``m`` directions' tabulated scores of ``n`` rows is exact in float64.

    Each score is a multiple of 1/2 between 0 and ``n``, so every partial sum
    over any subset of directions is a multiple of 1/2 below ``m * n``: exact
    when ``2 m n <= 2**53``, and then partial sums over direction blocks add up
    to the same bits in any order.

    Examples
    --------
    >>> sums_are_exact(4000, 10**6), sums_are_exact(10**6, 10**10)
    (True, False)
    """
    return 2 * int(m) * int(n) <= EXACT_HALVES


def squares_are_exact(m: int, n: int) -> bool:
    """Whether adding ``m`` directions' squared tabulated scores of ``n`` rows is exact.

    Each square is a multiple of 1/4 between 0 and ``n**2 / 4`` (the standard
    error's sums, :meth:`DepthSummary.depth_and_std
    <daskdepth.summary.depth.DepthSummary.depth_and_std>`), so every partial sum
    is a multiple of 1/4 below ``m n**2 / 4``: exact when ``m n**2 <= 2**53``.

    Examples
    --------
    >>> squares_are_exact(4000, 10**6), squares_are_exact(4000, 10**7)
    (True, False)
    """
    return int(m) * int(n) ** 2 <= EXACT_HALVES
