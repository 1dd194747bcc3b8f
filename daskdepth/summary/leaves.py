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

from ..kernels.blocks import (
    collect_block,
    count_block,
    score_block,
    score_block_min,
    score_block_squares,
)
from ..kernels.leaves import finish_leaves, plan_cuts, recover_counts, tabulate_leaves
from ..kernels.routing import (
    PAD,
    PROJECT_MAX_D,
    Router,
    leaf_atoms,
    pad_keys,
    route_groups,
    unpad_keys,
)
from ..kernels.tiles import Projection, project
from ..kernels.top import top_block
from .guide import Guide, build_guide, check_guide
from .nbytes import ArrayRecord
from .rows import Rows

#: Wide rows are projected beforehand when ``d`` exceeds this many times the mean
#: number of directions per routing group (see :func:`_tiled`).
TILE_PROJECT_MAX_RATIO = 2

#: Up to this many reference rows, leaf counts and tabulated scores (multiples
#: of 1/2 up to n / 2) are exact in float32, which halves the bytes scoring
#: reads per leaf.
LUT32_MAX_ROWS = 2**23


@dataclass
class LeafCounts(ArrayRecord):
    """Rows per leaf (``counts``) and each direction's extreme values (``ext``).

    ``ext[jj]`` is ``(min, max)`` of direction ``jj``'s projections.  Counts are
    float64 (exact integers up to 2**53) because rows carry multiplicities.
    """

    counts: np.ndarray
    ext: np.ndarray
    #: The last row chunk added in place by a chained pass (-1: none), so that a
    #: link run again on the same counts does not add its chunk twice.
    upto: int = -1

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


@dataclass
class BlockLeaves:
    """Leaf keys and, once fitted, leaf counts for the directions ``j0 .. j1 - 1``.

    Direction ``jj`` (local index) has the sorted cut points (interior leaf
    keys) ``cuts[cptr[jj]:cptr[jj + 1]]`` and the leaves ``lptr[jj]:lptr[jj + 1]``
    (one more than cuts); they are stored padded, as ``keys``, with ``PAD``
    sentinels after each direction (:func:`daskdepth.kernels.routing.pad_keys`).
    ``keys``, ``g``, ``g_lo``, ``g_scale``, ``g_log`` and ``table`` are the routing
    structure of :func:`daskdepth.kernels.routing.route_tile`.  Once finished, ``ext``
    holds each direction's smallest and largest value, ``lut`` the estimated
    ``min(L, G)`` of any point in each leaf (:meth:`finished`), which is all that
    scoring reads, ``worst`` each direction's largest leaf that is not an atom, and
    ``counts`` the rows of each leaf while the fit may still split leaves; a fitted
    summary drops them (:meth:`without_counts`: a sixth of its memory, and nothing
    reads them; :meth:`validate` recovers them from ``lut``).
    """

    j0: int
    j1: int
    cptr: np.ndarray
    g: int
    g_lo: np.ndarray
    g_scale: np.ndarray
    g_log: np.ndarray
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
        arrays = [self.g_lo, self.g_scale, self.g_log, self.cptr, self.keys, self.table,
                  self.counts, self.ext, self.lut, self.worst]
        return sum(a.nbytes for a in arrays if a is not None)

    def __sizeof__(self) -> int:
        # What dask's sizeof reports: the scheduler then counts a block's real size when
        # it places and steals tasks (a block held by one worker stays there).
        return object.__sizeof__(self) + self.nbytes

    # ---------------------------------------------------------------- construction

    @classmethod
    def build(cls, j0: int, j1: int, cptr: np.ndarray, cuts: np.ndarray) -> BlockLeaves:
        """Summary with the given keys and the routing structure sized to them."""
        cptr = np.ascontiguousarray(cptr, dtype=np.int64)
        keys = pad_keys(cptr, np.ascontiguousarray(cuts, dtype=np.float64))
        return cls.from_keys(j0, j1, cptr, keys)

    @classmethod
    def from_keys(cls, j0: int, j1: int, cptr: np.ndarray, keys: np.ndarray,
                  scored: bool = False) -> BlockLeaves:
        """Summary with the given padded keys (:func:`daskdepth.kernels.routing.pad_keys`).

        ``scored``: the keys are final (:meth:`finished`), so the guide grid may
        take more cells on clustered keys (:func:`~daskdepth.summary.guide.build_guide`).
        """
        mb = j1 - j0
        guide = build_guide(cptr, cptr + PAD * np.arange(mb + 1), keys, scored)
        return cls(j0, j1, cptr, guide.g, guide.lo, guide.scale, guide.log, keys, guide.table)

    @classmethod
    def planned(cls, j0: int, j1: int, cptr: np.ndarray, cuts: np.ndarray) -> BlockLeaves:
        """Keys without a routing structure: only to be :meth:`finished`, which builds one."""
        cptr = np.ascontiguousarray(cptr, dtype=np.int64)
        keys = pad_keys(cptr, np.ascontiguousarray(cuts, dtype=np.float64))
        empty = np.zeros(0)
        return cls(j0, j1, cptr, 0, empty, empty, np.zeros((0, 2)), keys,
                   np.zeros((0, 0), dtype=np.uint16))

    # ---------------------------------------------------------------- checks

    def validate(self, n: int) -> None:
        """Refuse a finished block that this package could not have built (e.g. loaded from a file).

        Checked before any kernel reads it, as the kernels index memory with
        these arrays: the types and shapes of every field; the key pointers
        (``cptr`` from 0, non-decreasing, so every direction's keys and leaves
        lie in ``keys`` and ``counts``); each direction's keys finite and
        increasing, followed by the ``+inf`` padding that ends every search;
        the routing structure (``g``, ``g_lo``, ``g_scale``, ``g_log``, ``table``) a guide
        grid that routes the keys exactly (:func:`~daskdepth.summary.guide.check_guide`:
        whichever rule built it, so models saved by earlier versions load); the leaf counts finite,
        non-negative and adding up to ``n`` in every direction; and ``lut`` and
        ``worst`` equal to what the counts give (so scores lie in ``[0, 1]`` and
        the error bound is the one the counts certify).  A fitted block holds no
        counts: they are recovered from ``lut``
        (:func:`daskdepth.kernels.leaves.recover_counts`), and refused when no
        counts give ``lut``; then checked as stored ones.

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        _check_range(self.j0, self.j1)
        mb = self.mb
        cptr = _check_array(self.cptr, "cptr", (np.int64,), (mb + 1,))
        steps = np.diff(cptr)
        if cptr[0] != 0 or (steps < 0).any():
            raise ValueError("cptr must start at 0 and never decrease")
        n_keys = int(cptr[-1])
        keys = _check_array(self.keys, "keys", (np.float64,), (n_keys + PAD * mb,))
        kptr = self.kptr
        pads = (kptr[:-1] + steps)[:, None] + np.arange(PAD)
        if not np.isposinf(keys[pads]).all():
            raise ValueError("keys lack the +inf padding after a direction's keys")
        cuts = unpad_keys(cptr, keys)
        if not np.isfinite(cuts).all():
            raise ValueError("keys hold a value that is not finite")
        ascending = np.diff(cuts) > 0
        starts = cptr[1:-1] - 1  # from a direction's last key to the next one's first
        ascending[starts[(starts >= 0) & (starts < ascending.size)]] = True
        if not ascending.all():
            raise ValueError("a direction's keys are not increasing")
        check_guide(Guide(self.g, self.g_lo, self.g_scale, self.g_log, self.table), cptr, keys)
        n_leaves = n_keys + mb
        if self.counts is None:  # a fitted block: its counts follow from lut
            lut = _check_array(self.lut, "lut", (np.float32, np.float64), (n_leaves,))
            counts = np.empty(n_leaves)
            if not recover_counts(cptr, keys, lut, n, counts):
                raise ValueError("the tabulated scores (lut) are not those of any leaf counts "
                                 f"adding up to the {n} rows the summary was fitted on")
        else:
            counts = _check_array(self.counts, "counts", (np.float32, np.float64), (n_leaves,))
            lut = _check_array(self.lut, "lut", (counts.dtype.type,), (n_leaves,))
        if not (np.isfinite(counts).all() and (counts >= 0).all()):
            raise ValueError("leaf counts must be finite and non-negative")
        totals = np.add.reduceat(counts.astype(np.float64), self.lptr[:-1])
        if not (totals == n).all():
            raise ValueError(f"a direction's leaf counts add up to {totals[totals != n][0]:g} "
                             f"rows, not the {n} the summary was fitted on")
        _check_array(self.ext, "ext", (np.float64,), (mb, 2))
        worst = _check_array(self.worst, "worst", (np.float64,), (mb,))
        want_lut, want_worst = np.empty_like(lut), np.zeros(mb)
        tabulate_leaves(cptr, keys, counts, want_lut, want_worst)
        if not (_same(lut, want_lut) and _same(worst, want_worst)):
            raise ValueError("the tabulated scores (lut, worst) do not match the leaf counts")

    @property
    def router(self) -> Router:
        """The routing structure the block kernels read."""
        kptr = self.kptr
        return Router(self.g_lo, self.g_scale, self.g, kptr, self.keys, self.table,
                      self.lptr, self.g_log, route_groups(kptr, self.table))

    # ---------------------------------------------------------------- passes

    def accumulate(self, rows: Rows, v: np.ndarray, into: LeafCounts) -> LeafCounts:
        """Add the (weighted) rows to ``into`` (in place) and return it."""
        router = self.router
        count_block(_tiled(rows.x, v, router), rows.valid, rows.weight, router, into.counts,
                    into.ext)
        return into

    def collect(self, rows: Rows, v: np.ndarray, wanted: np.ndarray,
                expected: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(leaf, projection, weight) of every row and direction in a wanted leaf."""
        dirs = np.logical_or.reduceat(wanted, self.lptr[:-1])  # every direction has a leaf
        router = self.router
        return collect_block(_tiled(rows.x, v, router), rows.valid, rows.weight, router,
                             wanted, dirs, int(expected))

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   out: np.ndarray) -> None:
        """Add this block's directions' ``min(L, G)`` (tabulated, in rows) to ``out``."""
        assert self.lut is not None
        router = self.router
        score_block(_tiled(xc, v, router), valid, router, self.lut, out)

    def score_squares_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                           out: np.ndarray, out_sq: np.ndarray) -> None:
        """:meth:`score_into`, also adding the squares to ``out_sq`` (for standard errors)."""
        assert self.lut is not None
        router = self.router
        score_block_squares(_tiled(xc, v, router), valid, router, self.lut, out, out_sq)

    def score_min_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                       out: np.ndarray) -> None:
        """Lower ``out`` to the smallest tabulated ``min(L, G)`` over this block's directions."""
        assert self.lut is not None
        router = self.router
        score_block_min(_tiled(xc, v, router), valid, router, self.lut, out)

    def top_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, top: tuple,
                 inv_scale: np.ndarray) -> None:
        """Push each row's tabulated ``min(L, G)`` on every direction into ``top``'s slots.

        ``top`` is :func:`daskdepth.kernels.top.empty_top`'s, ``inv_scale`` the inverse
        spreads of the block's directions: the same values :meth:`score_into` adds up,
        see :func:`daskdepth.kernels.top.top_block`.
        """
        assert self.lut is not None
        top_block(_projection(xc, v), valid, self.router, self.lut, self.j0, inv_scale, *top)

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
        out = BlockLeaves.from_keys(self.j0, self.j1, cptr, keys, scored=True)
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


def _check_int(value: object, name: str, low: int) -> None:
    """Refuse a field that is not an int (bool apart) of at least ``low``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} is a {type(value).__name__}, not an integer")
    if value < low:
        raise ValueError(f"{name} is {value}, less than {low}")


def _check_range(j0: int, j1: int) -> None:
    """Refuse a block's directions ``j0 .. j1 - 1`` unless ``j0 >= 0`` and ``j1 > j0`` are ints."""
    _check_int(j0, "j0", 0)
    _check_int(j1, "j1", j0 + 1)


def _check_array(value: object, name: str, dtypes: tuple[type, ...],
                 shape: tuple[int, ...]) -> np.ndarray:
    """``value`` if it is a C-contiguous array of one of ``dtypes`` and of ``shape``."""
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{name} is a {type(value).__name__}, not an array")
    if value.dtype.type not in dtypes or value.dtype.byteorder not in "=|<" \
            or not value.flags.c_contiguous:
        raise ValueError(f"{name} has dtype {value.dtype}, expected "
                         f"{' or '.join(np.dtype(t).name for t in dtypes)}")
    if value.shape != shape:
        raise ValueError(f"{name} has shape {value.shape}, expected {shape}")
    return value


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and values (``a`` may be anything)."""
    return (isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            and bool(np.array_equal(a, b)))


def _tiled(xc: np.ndarray, v: np.ndarray, router: Router) -> Projection:
    """What the block kernels project: the rows, a tile at a time, unless wide.

    :func:`daskdepth.kernels.blocks.count_block` and the other block kernels
    read each row tile once per direction group and project it on four
    directions at a time (rows in SIMD lanes): ``8 d / group`` bytes of the
    chunk per row-direction.  Wide rows in small groups (many keys per
    direction) are projected beforehand instead (:func:`_projection`), which
    reads the chunk once and the projections once per direction: 16 bytes per
    row-direction, fewer when ``d`` is above :data:`TILE_PROJECT_MAX_RATIO`
    times the mean group size.  Measured at ``d = 40``, ``tol = 1e-4`` (groups
    of 8): tiles 0.67x the speed of the projections made beforehand; at
    ``tol = 1e-3`` (groups of 32) 1.03-1.08x.
    """
    groups = np.diff(router.groups)
    if xc.shape[1] > PROJECT_MAX_D and xc.shape[1] > TILE_PROJECT_MAX_RATIO * groups.mean():
        return _projection(xc, v)
    return Projection(xc, v, np.empty((0, 0)), False)


def _projection(xc: np.ndarray, v: np.ndarray) -> Projection:
    """What :func:`daskdepth.kernels.top.top_block` projects: inline, or precomputed when wide.

    Wide rows are projected beforehand by :func:`daskdepth.kernels.tiles.project`
    (SIMD over rows) rather than inline, one dependent sum per value.  Not by
    BLAS: its last bits depend on the shapes (so a row's projection could
    differ from the key planned from it), and its threads would compete with
    the scheduler's.
    """
    if xc.shape[1] <= PROJECT_MAX_D:
        return Projection(xc, v, np.empty((0, 0)), False)
    return Projection(xc, v, project(xc, v), True)
