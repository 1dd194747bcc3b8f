"""The routing search (a guide cell, then a window of independent key compares) against NumPy.

:func:`daskdepth.kernels.routing.route_values` starts at the first key of a
value's guide cell and counts the keys ``<= p`` among the next
:data:`~daskdepth.kernels.routing.CELL_WINDOW` with independent compares,
continuing linearly only when all of them are ``<= p``.  Here guide grids are
crafted so that cells hold 0, 1, 2, 3, 4, 5, 8 and 40 keys, keys fall below
and above the grid (its first and last cells), and a degenerate grid puts
every key in one cell; logarithmic grids come from heavy-tailed keys.  Values
lie exactly on keys, one float64 and one float32 ulp either side, on cell
boundaries, and at the clamps ``+-MAXF`` (where the block kernels put
``+-inf`` and NaN).  The leaf of a value is the number of its direction's keys
``<= p``: ``np.searchsorted(keys, p, side="right")``, whatever the grid.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskdepth.kernels.blocks import count_block, score_block, score_block_min
from daskdepth.kernels.routing import (
    CELL_WINDOW,
    PAD,
    Grid,
    Router,
    guide_table,
    pad_keys,
    route_groups,
    route_values,
)
from daskdepth.kernels.tiles import MAXF, Projection
from daskdepth.summary.leaves import BlockLeaves

#: Keys per cell of the crafted linear grid (cells 1, 2, ...): around and far
#: beyond the window of four.
PER_CELL = [0, 1, 2, 3, 4, 5, 0, 8, 1, 40, 2, 3, 0, 0, 4, 1]


def crafted_keys() -> np.ndarray:
    """Sorted keys on the grid ``lo = 0``, ``scale = 1``: cell ``c`` is ``[c - 1, c)``.

    Cell 0 (below the grid) gets three keys, cells ``1 ..`` hold
    :data:`PER_CELL` keys each, one key sits exactly on a cell boundary, and
    the last cell (above the grid) gets eleven.
    """
    keys = [-7.5, -3.0, -1.25]
    for c, n in enumerate(PER_CELL, start=1):
        keys.extend(c - 1 + (i + 1) / (n + 1) for i in range(n))
    keys.append(float(len(PER_CELL) + 2))  # a boundary of the grid's cells
    keys.extend(100.0 + 7.0 * i for i in range(11))
    return np.unique(np.array(keys))


def router_of(keys: list[np.ndarray], g: int, lo: np.ndarray, scale: np.ndarray,
              log: np.ndarray | None = None, dtype: type = np.uint16) -> Router:
    """A block's router on the given keys and guide grids (the table filled by ``guide_table``)."""
    mb = len(keys)
    cptr = np.concatenate([[0], np.cumsum([k.size for k in keys])]).astype(np.int64)
    padded = pad_keys(cptr, np.concatenate(keys))
    kptr = cptr + PAD * np.arange(mb + 1)
    log = np.zeros((mb, 2)) if log is None else log
    table = np.empty((mb, g + 2), dtype=dtype)
    guide_table(lo, scale, log, g, kptr, padded, table, np.ones(mb, dtype=np.bool_))
    lptr = cptr + np.arange(mb + 1)
    return Router(lo, scale, g, kptr, padded, table, lptr, log, route_groups(kptr, table))


def probes(keys: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Values on every key, one float64 and one float32 ulp either side, and ``extra``."""
    k32 = keys[np.abs(keys) < 3e38].astype(np.float32)
    vals = [keys, np.nextafter(keys, np.inf), np.nextafter(keys, -np.inf),
            np.nextafter(k32, np.float32(np.inf)).astype(np.float64),
            np.nextafter(k32, np.float32(-np.inf)).astype(np.float64),
            extra, [-MAXF, MAXF, 0.0, -0.0, np.nextafter(-MAXF, 0.0), np.nextafter(MAXF, 0.0)]]
    return np.concatenate([np.asarray(v, dtype=np.float64) for v in vals])


def route(router: Router, jj: int, p: np.ndarray) -> np.ndarray:
    """Local leaves of the values ``p`` on direction ``jj``, by ``route_values``."""
    grid = Grid(router.g_lo[jj], router.g_scale[jj], router.g_log[jj, 0], router.g_log[jj, 1],
                router.g + 0.5, np.uint64(router.kptr[jj]))
    out = np.empty(p.size, dtype=np.uint64)
    route_values(np.ascontiguousarray(p), p.size, grid, router.keys, router.table[jj], out)
    return out.astype(np.int64)


def cell_sizes(router: Router, jj: int) -> np.ndarray:
    """Keys per guide cell of direction ``jj`` (the last cell's from the key count)."""
    nk = router.kptr[jj + 1] - router.kptr[jj] - PAD
    row = router.table[jj].astype(np.int64)
    return np.diff(np.append(row, nk))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_cells_of_every_size_route_as_searchsorted(dtype):
    keys = crafted_keys()
    g = len(PER_CELL) + 4
    router = router_of([keys], g, np.zeros(1), np.ones(1), dtype=dtype)
    sizes = cell_sizes(router, 0)
    # The grid is as meant: cells of 0 to 5, 8 and 40 keys, keys below and above it.
    assert {0, 1, 2, 3, 4, 5, 8, 40} <= set(sizes.tolist())
    assert sizes[0] == 3 and sizes[-1] == 11
    assert sizes.max() > CELL_WINDOW
    edges = np.arange(-2.0, g + 3.0)
    extra = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf),
                            np.linspace(-10, 200, 4001), [1e300, -1e300, 5e-324, -5e-324]])
    p = probes(keys, extra)
    np.testing.assert_array_equal(route(router, 0, p), np.searchsorted(keys, p, side="right"))


def test_every_key_in_one_cell_is_counted_linearly():
    """A degenerate grid (NaN scale: every value in cell 0) still counts every key."""
    keys = np.unique(np.random.default_rng(0).normal(size=300))
    router = router_of([keys], 256, np.zeros(1), np.array([np.nan]))
    assert cell_sizes(router, 0)[0] == keys.size
    p = probes(keys, np.linspace(-5, 5, 1001))
    np.testing.assert_array_equal(route(router, 0, p), np.searchsorted(keys, p, side="right"))


def test_logarithmic_grids_of_heavy_tails_route_as_searchsorted():
    rng = np.random.default_rng(1)
    keys = []
    for _ in range(6):
        c = rng.standard_cauchy(size=3000)
        keys.append(np.unique(np.sign(c) * np.abs(c) ** 4))
    cptr = np.concatenate([[0], np.cumsum([k.size for k in keys])])
    block = BlockLeaves.build(0, len(keys), cptr, np.concatenate(keys))
    router = block.router
    assert (router.g_log[:, 0] > 0).all()  # every direction got a logarithmic grid
    for jj, k in enumerate(keys):
        c = rng.standard_cauchy(size=20_000)
        p = probes(k, np.sign(c) * np.abs(c) ** 4)
        np.testing.assert_array_equal(route(router, jj, p), np.searchsorted(k, p, side="right"))


def test_block_kernels_on_crafted_cells_equal_numpy():
    """Counts, extremes and scores through the tiled kernels, +-inf and NaN rows clamped."""
    k0 = crafted_keys()
    k1 = np.unique(np.random.default_rng(2).normal(size=500) * 3)
    g = len(PER_CELL) + 4
    router = router_of([k0, k1, k0], g, np.zeros(3), np.array([1.0, 2.0, 1.0]))
    x = probes(np.union1d(k0, k1), np.linspace(-10, 200, 3001))
    x = np.concatenate([x, [np.inf, -np.inf, np.nan]])
    n = x.size
    valid = np.ones(n, dtype=bool)
    valid[::97] = False
    v = np.array([[1.0], [1.0], [1.0]])  # 0.0 + x * 1.0 is x (clamped): the rows' values
    p = np.where(np.isnan(x), MAXF, np.clip(x, -MAXF, MAXF))
    p[~valid] = 0.0
    leaves = np.stack([np.searchsorted(k, p, side="right") for k in (k0, k1, k0)])
    leaves += router.lptr[:-1, None]
    n_leaves = int(router.lptr[-1])
    counts = np.zeros(n_leaves)
    ext = np.tile([np.inf, -np.inf], (3, 1))
    proj = Projection(x[:, None], v, np.empty((0, 0)), False)
    count_block(proj, valid, np.ones(n), router, counts, ext)
    want = np.bincount(leaves[:, valid].ravel(), minlength=n_leaves).astype(np.float64)
    np.testing.assert_array_equal(counts, want)
    np.testing.assert_array_equal(ext, np.stack([p[valid].min() * np.ones(3),
                                                 p[valid].max() * np.ones(3)], axis=1))
    lut = np.random.default_rng(3).integers(0, 99, size=n_leaves).astype(np.float32) / 2
    out = np.zeros(n)
    score_block(proj, valid, router, lut, out)
    want_out = np.zeros(n)
    for j in range(3):
        want_out += lut[leaves[j]].astype(np.float64)
    np.testing.assert_array_equal(out, want_out)
    low = np.full(n, np.inf)
    score_block_min(proj, valid, router, lut, low)
    np.testing.assert_array_equal(low, lut[leaves].astype(np.float64).min(axis=0))
