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
    """Split trees for the directions ``j0 .. j1 - 1``.

    Node ``jj * (k1 + 2) + b`` is root bin ``b`` of the block's direction
    ``jj``.  ``route[node] = (first child or -1, number of edges, first edge)``:
    a split node's children are consecutive nodes separated by sorted
    ``edges`` (child ``k`` holds ``edges[k - 1] <= p < edges[k]``).
    """

    j0: int
    j1: int
    k1: int
    root_lo: np.ndarray
    root_scale: np.ndarray
    route: np.ndarray
    edges: np.ndarray
    stats: LeafStats | None = None
    packed: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_nodes(self) -> int:
        return int(self.route.shape[0])

    @property
    def is_leaf(self) -> np.ndarray:
        return self.route[:, 0] < 0

    @property
    def n_leaves(self) -> int:
        return int(self.is_leaf.sum())

    @property
    def nbytes(self) -> int:
        arrays = [self.root_lo, self.root_scale, self.route, self.edges]
        total = sum(a.nbytes for a in arrays)
        if self.stats is not None:
            total += self.stats.nbytes
        if self.packed is not None:
            total += self.packed.nbytes
        return total

    # ---------------------------------------------------------------- construction

    @classmethod
    def roots(cls, j0: int, j1: int, k1: int, root_lo: np.ndarray,
              root_scale: np.ndarray) -> BlockTree:
        route = np.zeros(((j1 - j0) * (k1 + 2), 3), dtype=np.int64)
        route[:, 0] = -1
        return cls(
            j0=j0, j1=j1, k1=k1,
            root_lo=np.ascontiguousarray(root_lo, dtype=np.float64),
            root_scale=np.ascontiguousarray(root_scale, dtype=np.float64),
            route=route,
            edges=np.zeros(0),
        )

    # ---------------------------------------------------------------- passes

    def leaves(self, xc: np.ndarray, v: np.ndarray,
               valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Projections of centred rows ``xc`` on ``v`` and the leaf of each."""
        p = _projections(xc, v)
        return p, K.route_block(p, valid, self.root_lo, self.root_scale, self.k1, self.route,
                                self.edges)

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

    def with_stats(self, stats: LeafStats) -> BlockTree:
        """Attach final leaf statistics and the packed records used for scoring."""
        cum = K.leaf_cumulative(self.j1 - self.j0, self.k1, self.route, stats.counts)
        packed = K.pack_leaves(cum, stats.counts, stats.vmin, stats.vmax)
        return replace(self, stats=stats, packed=packed)

    # ---------------------------------------------------------------- refinement

    def loose_leaves(self, stats: LeafStats, cap: float) -> np.ndarray:
        """Leaves holding more than ``cap`` rows of distinct values."""
        return self.is_leaf & (stats.counts > cap) & (stats.vmin < stats.vmax)

    def split(self, nodes: np.ndarray, values: np.ndarray, *, weight: float, cap: float,
              stats: LeafStats | None = None,
              presorted: bool = False) -> tuple[BlockTree, LeafStats | None]:
        """Split the leaves in ``nodes`` at edges chosen from their ``values``.

        ``nodes``/``values`` list the (weighted) values that fall in each leaf to
        split (``presorted``: already ordered by node, then value).  With
        ``stats`` (exact values, ``weight == 1``) the statistics of the new
        children are exact and returned merged into a copy of ``stats``.
        """
        if not presorted:
            # Values first (comparison sort), then a stable radix sort of the ints.
            order = np.argsort(values, kind="stable")
            order = order[np.argsort(nodes[order], kind="stable")]
            nodes, values = nodes[order], values[order]
        sn, nch, new_edges, ch_count, ch_min, ch_max = K.plan_edges(
            nodes, values, float(weight), float(cap))
        n_old = self.n_nodes
        first = n_old + np.concatenate([[0], np.cumsum(nch)[:-1]]).astype(np.int64)
        estart = self.edges.size + np.concatenate([[0], np.cumsum(nch - 1)[:-1]]).astype(
            np.int64)
        new = np.zeros((int(nch.sum()), 3), dtype=np.int64)
        new[:, 0] = -1
        route = np.concatenate([self.route, new])
        route[sn, 0] = first
        route[sn, 1] = nch - 1
        route[sn, 2] = estart
        tree = replace(self, route=route, edges=np.concatenate([self.edges, new_edges]),
                       stats=None, packed=None)
        if stats is None:
            return tree, None
        merged = LeafStats(
            np.concatenate([stats.counts, ch_count]),
            np.concatenate([stats.vmin, ch_min]),
            np.concatenate([stats.vmax, ch_max]),
        )
        merged.counts[sn] = 0
        return tree, merged

    def error_bound(self, n: int) -> float:
        """Certified bound on |estimated - exact| depth over this block."""
        assert self.stats is not None
        s = self.stats
        loose = self.is_leaf & (s.counts >= 2) & (s.vmin < s.vmax)
        if not loose.any():
            return 0.0
        return float((s.counts[loose].max() - 1) / n)


def _projections(xc: np.ndarray, v: np.ndarray) -> np.ndarray:
    if xc.shape[1] <= K.FUSED_MAX_D:
        return K.project(xc, v)
    return np.ascontiguousarray(v @ xc.T)


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
