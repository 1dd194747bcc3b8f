"""Mergeable per-direction summaries of reference projections (NumPy only).

A :class:`BlockTree` summarises the projections of the reference rows on a
block of consecutive directions (see :mod:`daskdepth._kernels` for the tree
layout).  Leaf statistics from different row chunks merge by sum / min / max,
so they can be computed chunk by chunk and reduced in any order with
bit-identical results.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import _kernels as K

#: Most children a single split may create.
MAX_SPLIT = 1 << 16


@dataclass
class LeafStats:
    """Count, minimum and maximum of the rows routed to each node."""

    counts: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray

    @classmethod
    def empty(cls, n_nodes: int) -> LeafStats:
        return cls(
            np.zeros(n_nodes, dtype=np.int64),
            np.full(n_nodes, np.inf),
            np.full(n_nodes, -np.inf),
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
class BlockTree:
    """Uniform split trees for the directions ``j0 .. j1 - 1``."""

    j0: int
    j1: int
    k1: int
    root_lo: np.ndarray
    root_scale: np.ndarray
    dir_ptr: np.ndarray
    child: np.ndarray
    nchild: np.ndarray
    lo: np.ndarray
    scale: np.ndarray
    stats: LeafStats | None = None
    cum: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_nodes(self) -> int:
        return int(self.child.size)

    @property
    def nbytes(self) -> int:
        arrays = [self.root_lo, self.root_scale, self.dir_ptr, self.child, self.nchild, self.lo,
                  self.scale]
        total = sum(a.nbytes for a in arrays)
        if self.stats is not None:
            total += self.stats.nbytes
        if self.cum is not None:
            total += self.cum.nbytes
        return total

    # ---------------------------------------------------------------- construction

    @classmethod
    def roots(cls, j0: int, j1: int, k1: int, root_lo: np.ndarray,
              root_scale: np.ndarray) -> BlockTree:
        mb = j1 - j0
        n = mb * (k1 + 2)
        return cls(
            j0=j0, j1=j1, k1=k1,
            root_lo=np.ascontiguousarray(root_lo, dtype=np.float64),
            root_scale=np.ascontiguousarray(root_scale, dtype=np.float64),
            dir_ptr=np.arange(mb + 1, dtype=np.int64) * (k1 + 2),
            child=np.full(n, -1, dtype=np.int64),
            nchild=np.zeros(n, dtype=np.int64),
            lo=np.zeros(n),
            scale=np.zeros(n),
        )

    # ---------------------------------------------------------------- passes

    def accumulate(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray,
                   stats: LeafStats) -> LeafStats:
        """Add centred rows ``xc`` to ``stats`` (in place) and return it."""
        fused, p = _projections(xc, v)
        K.count_block(xc, p, fused, v, valid, self.root_lo, self.root_scale, self.k1,
                      self.dir_ptr, self.child, self.nchild, self.lo, self.scale,
                      stats.counts, stats.vmin, stats.vmax)
        return stats

    def score_into(self, xc: np.ndarray, v: np.ndarray, valid: np.ndarray, n: int,
                   out: np.ndarray) -> None:
        """Add ``n * depth`` contributions of this block's directions to ``out``."""
        assert self.stats is not None and self.cum is not None
        fused, p = _projections(xc, v)
        K.score_block(xc, p, fused, v, valid, self.root_lo, self.root_scale, self.k1,
                      self.dir_ptr, self.child, self.nchild, self.lo, self.scale, self.cum,
                      self.stats.counts, self.stats.vmin, self.stats.vmax, n, out)

    def with_stats(self, stats: LeafStats) -> BlockTree:
        """Attach final leaf statistics and the cumulative counts used for scoring."""
        cum = K.leaf_cumulative(self.dir_ptr, self.k1, self.child, self.nchild, stats.counts)
        return replace(self, stats=stats, cum=cum)

    # ---------------------------------------------------------------- refinement

    def plan_splits(self, stats: LeafStats, *, weight: float, n: int, tol: float,
                    guard: float) -> np.ndarray:
        """Number of children for each leaf whose error bound exceeds ``tol``.

        ``weight`` scales counts measured on a sample up to the full data and
        ``guard`` > 1 asks for leaves that much smaller than the limit, to absorb
        sampling noise.  A leaf of ``c`` rows with ``min < max`` is split when
        ``c * weight - 1 > tol * n / guard``, into about ``2 c weight / (tol n + 1)``
        children.
        """
        est = stats.counts * weight
        leaf = self.child < 0
        heavy = leaf & (stats.counts >= 2) & (stats.vmin < stats.vmax)
        heavy &= (est - 1.0) > (tol * n) / guard
        nsplit = np.zeros(self.n_nodes, dtype=np.int64)
        if heavy.any():
            want = np.ceil(2.0 * guard * est[heavy] / (tol * n + 1.0))
            nsplit[heavy] = np.clip(want, 2, MAX_SPLIT).astype(np.int64)
        return nsplit

    def split(self, stats: LeafStats, nsplit: np.ndarray) -> BlockTree:
        ptr, child, nchild, lo, scale, _ = K.split_nodes(
            self.dir_ptr, self.child, self.nchild, self.lo, self.scale, stats.vmin,
            stats.vmax, nsplit)
        return replace(self, dir_ptr=ptr, child=child, nchild=nchild, lo=lo, scale=scale,
                       stats=None, cum=None)

    def error_bound(self, n: int) -> float:
        """Certified bound on |estimated - exact| depth over this block."""
        assert self.stats is not None
        s = self.stats
        loose = (self.child < 0) & (s.counts >= 2) & (s.vmin < s.vmax)
        if not loose.any():
            return 0.0
        return float((s.counts[loose].max() - 1) / n)


def _projections(xc: np.ndarray, v: np.ndarray) -> tuple[bool, np.ndarray]:
    if xc.shape[1] <= K.FUSED_MAX_D:
        return True, _EMPTY
    return False, np.ascontiguousarray(v @ xc.T)


_EMPTY = np.empty((0, 0))


@dataclass
class DepthSummary:
    """Everything needed to score points: centring, directions and block trees."""

    location: np.ndarray
    directions: np.ndarray
    blocks: list[BlockTree]
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
