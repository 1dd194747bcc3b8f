"""Mergeable per-direction summaries of reference projections (NumPy only).

A :class:`BlockSummary` summarises the projections of the reference rows on a
block of consecutive directions as sorted leaf bounds with the exact count,
minimum and maximum of the rows in each leaf.  Leaf statistics from different
row chunks merge by sum / min / max, so they can be computed chunk by chunk and
reduced in any order with bit-identical results.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import _kernels as K

#: Guide grid cells per direction: four per leaf bound (measured: fewer cells
#: leave several bounds per cell and the search loop mispredicts), within limits.
GUIDE_MIN = 256
GUIDE_MAX = 1 << 18
#: Reference grid size in which the guide scale is stored independently of ``g``.
GUIDE_UNIT = 1024


@dataclass
class LeafStats:
    """Count, minimum and maximum of the rows routed to each node."""

    counts: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray

    @classmethod
    def empty(cls, n_leaves: int) -> LeafStats:
        return cls(
            np.zeros(n_leaves, dtype=np.int64),
            np.full(n_leaves, np.inf),
            np.full(n_leaves, -np.inf),
        )

    def merge(self, other: LeafStats) -> LeafStats:
        return LeafStats(
            self.counts + other.counts,
            np.minimum(self.vmin, other.vmin),
            np.maximum(self.vmax, other.vmax),
        )

    @property
    def nbytes(self) -> int:
        return self.counts.nbytes + self.vmin.nbytes + self.vmax.nbytes


@dataclass
class BlockSummary:
    """Leaf bounds and leaf statistics for the directions ``j0 .. j1 - 1``.

    Direction ``jj`` (local index) has the sorted interior bounds
    ``bounds[bptr[jj]:bptr[jj + 1]]`` and the leaves ``lptr[jj]:lptr[jj + 1]``
    (one more than bounds).  ``g_lo``, ``g_scale`` and ``table`` form the guide
    grid that speeds up routing (see :func:`daskdepth._kernels.route_block`).
    """

    j0: int
    j1: int
    g: int
    g_lo: np.ndarray
    g_scale: np.ndarray
    bptr: np.ndarray
    bounds: np.ndarray
    table: np.ndarray
    stats: LeafStats | None = None
    packed: np.ndarray | None = field(default=None, repr=False)
    padded: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.padded is None:
            # Bounds with a trailing +inf sentinel, as the routing kernel reads them.
            self.padded = np.append(self.bounds, np.inf)

    @property
    def mb(self) -> int:
        return self.j1 - self.j0

    @property
    def lptr(self) -> np.ndarray:
        return self.bptr + np.arange(self.mb + 1)

    @property
    def n_leaves(self) -> int:
        return int(self.bounds.size + self.mb)

    @property
    def nbytes(self) -> int:
        arrays = [self.g_lo, self.g_scale, self.bptr, self.padded, self.table]
        total = sum(a.nbytes for a in arrays)
        if self.stats is not None:
            total += self.stats.nbytes
        if self.packed is not None:
            total += self.packed.nbytes
        return total

    # ---------------------------------------------------------------- construction

    @classmethod
    def build(cls, j0: int, j1: int, g_lo: np.ndarray, g_scale: np.ndarray,
              bptr: np.ndarray, bounds: np.ndarray) -> BlockSummary:
        """Summary with the given bounds and a guide grid sized to them."""
        per_dir = int(np.diff(bptr).max(initial=0))
        g = int(min(GUIDE_MAX, max(GUIDE_MIN, 4 * per_dir)))
        g_lo = np.ascontiguousarray(g_lo, dtype=np.float64)
        g_scale = np.ascontiguousarray(g_scale * (g / GUIDE_UNIT), dtype=np.float64)
        table = K.guide_table(g_lo, g_scale, g, bptr, bounds)
        return cls(j0, j1, g, g_lo, g_scale, bptr, bounds,
                   table.astype(np.int32 if bounds.size < 2**31 else np.int64))

    @property
    def unit_scale(self) -> np.ndarray:
        """Guide scale for a grid of ``GUIDE_UNIT`` cells (independent of ``g``)."""
        return self.g_scale * (GUIDE_UNIT / self.g)

    # ---------------------------------------------------------------- passes

    def leaves(self, xc: np.ndarray, v: np.ndarray,
               valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Projections of centred rows ``xc`` on ``v`` and the leaf of each."""
        p = _projections(xc, v)
        return p, K.route_block(p, valid, self.g_lo, self.g_scale, self.g, self.bptr,
                                self.padded, self.table, self.lptr)

    def accumulate(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   stats: LeafStats) -> LeafStats:
        """Add centred rows ``xc`` to ``stats`` (in place) and return it."""
        p, leaves = self.leaves(xc, v, valid)
        K.count_leaves(p, leaves, stats.counts, stats.vmin, stats.vmax)
        return stats

    def collect(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(leaf, projection) of every row and direction that lands in a wanted leaf."""
        p, leaves = self.leaves(xc, v, valid)
        return K.collect_leaves(p, leaves, wanted)

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, n: int,
                   out: np.ndarray) -> None:
        """Add ``n * depth`` contributions of this block's directions to ``out``."""
        assert self.packed is not None
        p, leaves = self.leaves(xc, v, valid)
        K.score_leaves(p, leaves, self.packed, n, out)

    def coalesced(self, stats: LeafStats, cap: float) -> tuple[BlockSummary, LeafStats]:
        """Merge adjacent leaves while they hold at most ``cap`` rows together.

        Leaves are planned with head room for sampling noise; once the counts
        are exact, merging the light ones roughly halves the summary (memory and
        lookup cost) without changing the error bound's guarantee.
        """
        _, bptr, bounds, counts, vmin, vmax = K.coalesce_leaves(
            self.lptr, self.bptr, self.bounds, stats.counts, stats.vmin, stats.vmax,
            float(cap))
        out = BlockSummary.build(self.j0, self.j1, self.g_lo, self.unit_scale, bptr, bounds)
        return out, LeafStats(counts, vmin, vmax)

    def with_stats(self, stats: LeafStats) -> BlockSummary:
        """Finish with the leaf statistics packed as ``(cum, count, min, max)`` records."""
        lptr = self.lptr
        cs = np.cumsum(stats.counts)
        start = np.concatenate([[0], cs])[lptr[:-1]]
        cum = cs - stats.counts - np.repeat(start, np.diff(lptr))
        packed = K.pack_leaves(cum, stats.counts, stats.vmin, stats.vmax)
        # The packed records hold everything; dropping the separate arrays halves memory.
        return replace(self, stats=None, packed=packed)

    @property
    def counts(self) -> np.ndarray:
        """Rows per leaf of a finished summary."""
        assert self.packed is not None
        return self.packed[:, 1].astype(np.int64)

    # ---------------------------------------------------------------- refinement

    def loose_leaves(self, stats: LeafStats, cap: float) -> np.ndarray:
        """Leaves holding more than ``cap`` rows of distinct values."""
        return (stats.counts > cap) & (stats.vmin < stats.vmax)

    def split(self, leaves: np.ndarray, values: np.ndarray, *, weight: float, cap: float,
              stats: LeafStats | None = None,
              presorted: bool = False) -> tuple[BlockSummary, LeafStats | None]:
        """Split leaves at bounds chosen from the values that fall in them.

        ``leaves``/``values`` list the (weighted) values of each leaf to split
        (``presorted``: already ordered by leaf, then value).  New bounds are
        values of the leaf, so they fall strictly inside it and other leaves keep
        their rows.  With ``stats`` (exact values, ``weight == 1``) the new
        leaves' statistics are exact and returned with the others'.
        """
        if not presorted:
            # Values first (comparison sort), then a stable radix sort of the ints.
            order = np.argsort(values, kind="stable")
            order = order[np.argsort(leaves[order], kind="stable")]
            leaves, values = leaves[order], values[order]
        sl, nch, new_bounds, ch_count, ch_min, ch_max = K.plan_edges(
            leaves, values, float(weight), float(cap))
        mb = self.mb
        lptr = self.lptr
        n_old = int(lptr[-1])
        leaf_dir = np.repeat(np.arange(mb), np.diff(lptr))
        bound_dir = np.repeat(np.arange(mb), np.diff(self.bptr))
        all_bounds = np.concatenate([self.bounds, new_bounds])
        all_dirs = np.concatenate([bound_dir, np.repeat(leaf_dir[sl], nch - 1)])
        order = np.lexsort((all_bounds, all_dirs))
        bounds = all_bounds[order]
        bptr = np.concatenate([[0], np.cumsum(np.bincount(all_dirs, minlength=mb))])
        out = BlockSummary.build(self.j0, self.j1, self.g_lo, self.unit_scale, bptr, bounds)
        if stats is None:
            return out, None
        # Old leaf k moves right by the children added before it in its direction.
        added = np.zeros(n_old, dtype=np.int64)
        added[sl] = nch - 1
        before = np.cumsum(added) - added
        before -= np.concatenate([[0], np.cumsum(added)])[lptr[:-1]][leaf_dir]
        new_pos = np.arange(n_old) + before + (out.lptr[:-1] - lptr[:-1])[leaf_dir]
        total = out.n_leaves
        counts = np.zeros(total, dtype=np.int64)
        vmin = np.full(total, np.inf)
        vmax = np.full(total, -np.inf)
        keep = np.ones(n_old, dtype=bool)
        keep[sl] = False
        counts[new_pos[keep]] = stats.counts[keep]
        vmin[new_pos[keep]] = stats.vmin[keep]
        vmax[new_pos[keep]] = stats.vmax[keep]
        child_pos = (np.repeat(new_pos[sl], nch)
                     + np.arange(int(nch.sum())) - np.repeat(np.cumsum(nch) - nch, nch))
        counts[child_pos] = ch_count
        vmin[child_pos] = ch_min
        vmax[child_pos] = ch_max
        return out, LeafStats(counts, vmin, vmax)

    def error_bound(self, n: int) -> float:
        """Certified bound on |estimated - exact| depth over this block."""
        assert self.packed is not None
        counts, vmin, vmax = self.packed[:, 1], self.packed[:, 2], self.packed[:, 3]
        loose = (counts >= 2) & (vmin < vmax)
        if not loose.any():
            return 0.0
        return float((counts[loose].max() - 1) / n)


def _projections(xc: np.ndarray, v: np.ndarray) -> np.ndarray:
    if xc.shape[1] <= K.PROJECT_MAX_D:
        return K.project(xc, v)
    return np.ascontiguousarray(v @ xc.T)


@dataclass
class DepthSummary:
    """Everything needed to score points: centring, directions and block trees."""

    location: np.ndarray
    directions: np.ndarray
    blocks: list[BlockSummary]
    n: int

    @property
    def nbytes(self) -> int:
        return self.directions.nbytes + sum(b.nbytes for b in self.blocks)

    def error_bound(self) -> float:
        return max((b.error_bound(self.n) for b in self.blocks), default=0.0)

    def depth(self, x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Depth of the rows of ``x`` (NaN where ``valid`` is False)."""
        x = np.asarray(x, dtype=np.float64)
        if valid is None:
            valid = np.isfinite(x).all(axis=1)
        xc = np.ascontiguousarray(x - self.location)
        out = np.zeros(x.shape[0])
        for b in self.blocks:
            b.score_into(xc, np.ascontiguousarray(self.directions[b.j0:b.j1]), valid, self.n,
                         out)
        out /= self.n * self.directions.shape[0]
        out[~valid] = np.nan
        return out
