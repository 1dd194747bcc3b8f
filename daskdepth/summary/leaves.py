"""Mergeable leaf summaries of one block of directions (NumPy only).

A :class:`BlockLeaves` summarises the projections of the reference rows on a
block of consecutive directions as sorted leaf keys with the exact number of
rows in each leaf.  A leaf ``[a, nextafter(a))`` holds the single value ``a``
(an atom) and is exact; any other leaf of ``c`` rows puts a point inside it at
most ``c / 2`` rows away from its exact rank.  Each direction's smallest and
largest value become keys too, so points beyond the data are exact.  Counts
from different row chunks merge by sum (and the extremes by min / max), so
they can be computed chunk by chunk and reduced in any order with
bit-identical results.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..kernels.leaves import finish_leaves, plan_cuts
from ..kernels.routing import (
    PAD,
    PROJECT_MAX_D,
    Projection,
    Router,
    collect_block,
    count_block,
    guide_table,
    leaf_atoms,
    pad_keys,
    project,
    score_block,
    score_block_min,
    score_block_squares,
    unpad_keys,
)
from .rows import Rows

#: Guide grid cells per direction: at most four per key (measured: fewer leave
#: several keys per cell on clustered data and the search runs longer), within
#: limits; one or two per key when that leaves no cell with more than
#: :data:`GUIDE_CELL_KEYS` keys (evenly spread keys: the same speed for a half or
#: a quarter of the table's memory, which matters for large summaries).
GUIDE_PER_KEY = 4


GUIDE_TRY_PER_KEY = (1, 2)


#: Keys a guide cell may hold for the routing search to stay in its branch-free
#: window of eight keys (:func:`daskdepth.kernels.routing.route_tile`).
GUIDE_CELL_KEYS = 7


GUIDE_MIN = 256


GUIDE_MAX = 1 << 18


#: Up to this many reference rows, leaf counts and tabulated scores (multiples
#: of 1/2 up to n / 2) are exact in float32, which halves the bytes scoring
#: reads per leaf.
LUT32_MAX_ROWS = 2**23


#: The guide grid spans the keys between these ranks (as fractions), widened by
#: :data:`GUIDE_MARGIN` on each side; keys outside share the two end cells.
GUIDE_QUANTILE = 0.001


GUIDE_MARGIN = 0.05


@dataclass
class LeafCounts:
    """Rows per leaf (``counts``) and each direction's extreme values (``ext``).

    ``ext[jj]`` is ``(min, max)`` of direction ``jj``'s projections.  Counts are
    float64 (exact integers up to 2**53) because rows carry multiplicities.
    """

    counts: np.ndarray
    ext: np.ndarray

    @classmethod
    def empty(cls, n_leaves: int, mb: int) -> LeafCounts:
        ext = np.empty((mb, 2))
        ext[:, 0] = np.inf
        ext[:, 1] = -np.inf
        return cls(np.zeros(n_leaves), ext)

    @classmethod
    def merged(cls, parts: list[LeafCounts]) -> LeafCounts:
        """Statistics of the union of the parts' rows."""
        counts = parts[0].counts.copy()
        ext = parts[0].ext.copy()
        for p in parts[1:]:
            counts += p.counts
            np.minimum(ext[:, 0], p.ext[:, 0], out=ext[:, 0])
            np.maximum(ext[:, 1], p.ext[:, 1], out=ext[:, 1])
        return cls(counts, ext)


def _guide(cptr: np.ndarray, kptr: np.ndarray, keys: np.ndarray,
           per_key: int = GUIDE_PER_KEY) -> tuple[int, np.ndarray, np.ndarray]:
    """Guide grid size, origin and scale of each direction, from its (padded) keys."""
    nk = np.diff(cptr)
    mb = nk.size
    g = int(min(GUIDE_MAX, max(GUIDE_MIN, per_key * int(nk.max(initial=0)))))
    lo = np.zeros(mb)
    scale = np.ones(mb)
    has = np.flatnonzero(nk)
    if has.size == 0:
        return g, lo, scale
    first, top = kptr[has], nk[has] - 1
    a = keys[first + np.floor(GUIDE_QUANTILE * top).astype(np.int64)]
    b = keys[first + np.ceil((1 - GUIDE_QUANTILE) * top).astype(np.int64)]
    spread = np.where(b > a, b - a, keys[first + top] - keys[first])
    spread = np.where(spread > 0, spread, np.maximum(np.abs(a), 1.0))
    lo[has] = a - GUIDE_MARGIN * spread
    width = (1 + 2 * GUIDE_MARGIN) * spread
    with np.errstate(over="ignore"):  # no overflow for tiny spreads
        scale[has] = np.where(width > g * 1e-300, g / width, 1e300)
    return g, lo, scale


@dataclass
class BlockLeaves:
    """Leaf keys and, once fitted, leaf counts for the directions ``j0 .. j1 - 1``.

    Direction ``jj`` (local index) has the sorted cut points (interior leaf
    keys) ``cuts[cptr[jj]:cptr[jj + 1]]`` and the leaves ``lptr[jj]:lptr[jj + 1]``
    (one more than cuts); they are stored padded, as ``keys``, with ``PAD``
    sentinels after each direction (:func:`daskdepth.kernels.routing.pad_keys`).
    ``keys``, ``g``, ``g_lo``, ``g_scale`` and ``table`` are the routing structure
    of :func:`daskdepth.kernels.routing.route_tile`.  Once finished, ``ext`` holds
    each direction's smallest and largest value, ``lut`` the estimated ``min(L, G)``
    of any point in each leaf (:meth:`finished`), which is all that scoring reads,
    ``worst`` each direction's largest leaf that is not an atom, and ``counts`` the
    rows of each leaf while the fit may still split leaves; a fitted summary drops
    them (:meth:`without_counts`: a sixth of its memory, and nothing reads them).
    """

    j0: int
    j1: int
    cptr: np.ndarray
    g: int
    g_lo: np.ndarray
    g_scale: np.ndarray
    keys: np.ndarray = field(repr=False)
    table: np.ndarray = field(repr=False)
    counts: np.ndarray | None = field(default=None, repr=False)
    ext: np.ndarray | None = field(default=None, repr=False)
    lut: np.ndarray | None = field(default=None, repr=False)
    worst: np.ndarray | None = field(default=None, repr=False)

    @property
    def mb(self) -> int:
        return self.j1 - self.j0

    @property
    def lptr(self) -> np.ndarray:
        return self.cptr + np.arange(self.mb + 1)

    @property
    def leaf_dir(self) -> np.ndarray:
        """Local direction of every leaf."""
        return np.repeat(np.arange(self.mb), np.diff(self.lptr))

    @property
    def kptr(self) -> np.ndarray:
        return self.cptr + PAD * np.arange(self.mb + 1)

    @property
    def cuts(self) -> np.ndarray:
        """The cut points of all directions, without the padding (a new array)."""
        return unpad_keys(self.cptr, self.keys)

    @property
    def n_leaves(self) -> int:
        return int(self.cptr[-1]) + self.mb

    @property
    def atoms(self) -> np.ndarray:
        """Leaves ``[a, nextafter(a))``, which hold the single value ``a``."""
        return leaf_atoms(self.cptr, self.cuts)

    @property
    def nbytes(self) -> int:
        arrays = [self.g_lo, self.g_scale, self.cptr, self.keys, self.table, self.counts,
                  self.ext, self.lut, self.worst]
        return sum(a.nbytes for a in arrays if a is not None)

    # ---------------------------------------------------------------- construction

    @classmethod
    def build(cls, j0: int, j1: int, cptr: np.ndarray, cuts: np.ndarray) -> BlockLeaves:
        """Summary with the given keys and the routing structure sized to them."""
        cptr = np.ascontiguousarray(cptr, dtype=np.int64)
        keys = pad_keys(cptr, np.ascontiguousarray(cuts, dtype=np.float64))
        return cls.from_keys(j0, j1, cptr, keys)

    @classmethod
    def from_keys(cls, j0: int, j1: int, cptr: np.ndarray, keys: np.ndarray) -> BlockLeaves:
        """Summary with the given padded keys (:func:`daskdepth.kernels.routing.pad_keys`)."""
        mb = j1 - j0
        kptr = cptr + PAD * np.arange(mb + 1)
        # uint16 when every direction has fewer than 65536 keys: half the cache
        # footprint of int32.
        small = cptr[-1] == 0 or np.diff(cptr).max() < 2**16
        for per_key in (*GUIDE_TRY_PER_KEY, GUIDE_PER_KEY):
            g, lo, scale = _guide(cptr, kptr, keys, per_key)
            table = np.empty((mb, g + 2), dtype=np.uint16 if small else np.int32)
            guide_table(lo, scale, g, kptr, keys, table)
            if per_key == GUIDE_PER_KEY or int(np.diff(table, axis=1).max(
                    initial=0)) <= GUIDE_CELL_KEYS:
                break
        return cls(j0, j1, cptr, g, lo, scale, keys, table)

    @classmethod
    def planned(cls, j0: int, j1: int, cptr: np.ndarray, cuts: np.ndarray) -> BlockLeaves:
        """Keys without a routing structure: only to be :meth:`finished`, which builds one."""
        cptr = np.ascontiguousarray(cptr, dtype=np.int64)
        keys = pad_keys(cptr, np.ascontiguousarray(cuts, dtype=np.float64))
        empty = np.zeros(0)
        return cls(j0, j1, cptr, 0, empty, empty, keys, np.zeros((0, 0), dtype=np.uint16))

    @property
    def router(self) -> Router:
        """The routing structure the block kernels read."""
        return Router(self.g_lo, self.g_scale, self.g, self.kptr, self.keys, self.table,
                      self.lptr)

    # ---------------------------------------------------------------- passes

    def accumulate(self, rows: Rows, v: np.ndarray, into: LeafCounts) -> LeafCounts:
        """Add the (weighted) rows to ``into`` (in place) and return it."""
        count_block(_projection(rows.x, v), rows.valid, rows.weight, self.router, into.counts,
                    into.ext)
        return into

    def collect(self, rows: Rows, v: np.ndarray, wanted: np.ndarray,
                expected: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(leaf, projection, weight) of every row and direction in a wanted leaf."""
        dirs = np.logical_or.reduceat(wanted, self.lptr[:-1])  # every direction has a leaf
        return collect_block(_projection(rows.x, v), rows.valid, rows.weight, self.router,
                             wanted, dirs, int(expected))

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   out: np.ndarray) -> None:
        """Add this block's directions' ``min(L, G)`` (tabulated, in rows) to ``out``."""
        assert self.lut is not None
        score_block(_projection(xc, v), valid, self.router, self.lut, out)

    def score_squares_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                           out: np.ndarray, out_sq: np.ndarray) -> None:
        """:meth:`score_into`, also adding the squares to ``out_sq`` (for standard errors)."""
        assert self.lut is not None
        score_block_squares(_projection(xc, v), valid, self.router, self.lut, out, out_sq)

    def score_min_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                       out: np.ndarray) -> None:
        """Lower ``out`` to the smallest tabulated ``min(L, G)`` over this block's directions."""
        assert self.lut is not None
        score_block_min(_projection(xc, v), valid, self.router, self.lut, out)

    # ---------------------------------------------------------------- edits

    def finished(self, leaf_counts: LeafCounts, cap: float | None = None) -> BlockLeaves:
        """Finish with exact leaf statistics: the summary that scores points.

        With ``cap``, runs of adjacent leaves holding at most ``cap`` rows
        together are merged first (leaves are planned with head room for
        sampling noise; merging the light ones roughly halves the summary
        without changing the error bound's guarantee).  Then each direction's
        smallest value and the float above its largest become keys, so points
        beyond the data get their exact (zero) count, and ``lut[k]`` tabulates
        the estimate of ``min(L, G)`` for any point in leaf ``k``, ``L`` and
        ``G`` counting the reference values ``<=`` and ``>=`` the point: exact
        for atoms and empty leaves, the leaf's midpoint otherwise (off by at
        most half its rows).  The routing structure is built once, at the end.
        """
        # float32 counts and scores are exact up to LUT32_MAX_ROWS rows (halves of
        # integers below 2**24), and halve the summary's largest arrays.
        rows = leaf_counts.counts
        n = rows[:self.lptr[1]].sum(dtype=np.float64) if rows.size else 0
        like = np.empty(0, dtype=np.float32 if n <= LUT32_MAX_ROWS else np.float64)
        cptr, keys, counts, lut, worst = finish_leaves(
            self.cptr, self.keys, rows, leaf_counts.ext, -1.0 if cap is None else float(cap), like)
        out = BlockLeaves.from_keys(self.j0, self.j1, cptr, keys)
        return replace(out, counts=counts, ext=leaf_counts.ext, lut=lut, worst=worst)

    def without_counts(self) -> BlockLeaves:
        """This finished block without its leaf counts (what scoring and the bound need)."""
        return replace(self, counts=None)

    def heavy(self, cap: float) -> bool:
        """Whether a direction has a leaf of more than ``cap`` rows that is not an atom."""
        assert self.worst is not None
        return bool((self.worst > cap).any())

    @property
    def leaf_counts(self) -> LeafCounts:
        """The leaf counts and extremes of finished leaves."""
        assert self.counts is not None and self.ext is not None
        return LeafCounts(self.counts, self.ext)

    def loose_leaves(self, cap: float) -> np.ndarray:
        """Leaves of a finished summary holding more than ``cap`` rows, atoms apart."""
        assert self.counts is not None
        return (self.counts > cap) & ~self.atoms

    def split(self, leaves: np.ndarray, values: np.ndarray, *, target: float,
              weights: np.ndarray | None = None, scale: float = 1.0,
              leaf_counts: LeafCounts | None = None,
              presorted: bool = False) -> tuple[BlockLeaves, LeafCounts | None]:
        """Split leaves at keys chosen from the values that fall in them.

        ``leaves``/``values`` list the values of each leaf to split
        (``presorted``: already ordered by leaf, then value), each standing for
        ``weights`` rows (default one) of ``scale`` rows of the data each;
        children hold at most ``target`` such rows unless they are atoms.  New
        keys fall strictly inside their leaf, so other leaves keep their rows.
        With ``leaf_counts`` (all the leaves' values, ``scale == 1``) the new leaves'
        statistics are exact and returned with the others'.
        """
        if weights is None:
            weights = np.zeros(0)
        if not presorted:
            order = np.lexsort((values, leaves))
            leaves, values = leaves[order], values[order]
            if weights.size:
                weights = weights[order]
        mb = self.mb
        lptr = self.lptr
        old_cuts = self.cuts
        n_old = int(lptr[-1])
        leaf_dir = self.leaf_dir
        # Leaf k of direction jj spans [bound k-1, bound k), -inf / +inf at the ends.
        lower = np.full(n_old, -np.inf)
        upper = np.full(n_old, np.inf)
        inner = np.arange(n_old) - lptr[leaf_dir]  # local leaf index
        has_lo = inner > 0
        has_hi = inner < np.diff(lptr)[leaf_dir] - 1
        bidx = self.cptr[leaf_dir] + inner
        lower[has_lo] = old_cuts[bidx[has_lo] - 1]
        upper[has_hi] = old_cuts[bidx[has_hi]]
        sl, nch, new_cuts, ch_count = plan_cuts(
            leaves, values, np.ascontiguousarray(weights, dtype=np.float64), float(scale),
            float(target), lower, upper)
        new_dirs = np.repeat(leaf_dir[sl], nch - 1)
        if old_cuts.size == 0:
            # Planned from scratch: the keys come out ordered by direction, then value.
            cuts = new_cuts
            all_dirs = new_dirs
        else:
            all_cuts = np.concatenate([old_cuts, new_cuts])
            all_dirs = np.concatenate([np.repeat(np.arange(mb), np.diff(self.cptr)), new_dirs])
            order = np.lexsort((all_cuts, all_dirs))
            cuts = all_cuts[order]
        cptr = np.concatenate([[0], np.cumsum(np.bincount(all_dirs, minlength=mb))])
        out = BlockLeaves.build(self.j0, self.j1, cptr, cuts)
        if leaf_counts is None:
            return out, None
        # Old leaf k moves right by the children added before it in its direction.
        added = np.zeros(n_old, dtype=np.int64)
        added[sl] = nch - 1
        before = np.cumsum(added) - added
        before -= np.concatenate([[0], np.cumsum(added)])[lptr[:-1]][leaf_dir]
        new_pos = np.arange(n_old) + before + (out.lptr[:-1] - lptr[:-1])[leaf_dir]
        counts = np.zeros(out.n_leaves)
        keep = np.ones(n_old, dtype=bool)
        keep[sl] = False
        counts[new_pos[keep]] = leaf_counts.counts[keep]
        child_pos = (np.repeat(new_pos[sl], nch)
                     + np.arange(int(nch.sum())) - np.repeat(np.cumsum(nch) - nch, nch))
        counts[child_pos] = ch_count
        return out, LeafCounts(counts, leaf_counts.ext)

    def direction_errors(self, n: int) -> np.ndarray:
        """Certified bound, per direction, on |estimated - exact| depth contribution.

        A leaf that is not an atom misplaces at most ``count / 2`` of its rows;
        the bound of a direction is the worst of its leaves, over ``n``.
        """
        assert self.worst is not None
        return self.worst / (2.0 * n)


def _projection(xc: np.ndarray, v: np.ndarray) -> Projection:
    """What the kernels project: inline, or precomputed when the rows are wide.

    Wide rows are projected beforehand by :func:`daskdepth.kernels.routing.project`
    (SIMD over rows) rather than inline, one dependent sum per value.  Not by
    BLAS: its last bits depend on the shapes (so a row's projection could
    differ from the key planned from it), and its threads would compete with
    the scheduler's.
    """
    if xc.shape[1] <= PROJECT_MAX_D:
        return Projection(xc, v, np.empty((0, 0)), False)
    return Projection(xc, v, project(xc, v), True)
