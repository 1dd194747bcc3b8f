"""Guide grids of a block's leaf keys: where the routing search starts (NumPy only).

A direction's guide grid maps a projection to a cell, and the cell to the
first of the direction's keys that could be ``<=`` it; the routing kernel
(:func:`daskdepth.kernels.routing.route_values`) then counts the keys ``<=`` the
projection among the next four, compared at once (one vector compare; a cell
whose four are all ``<=`` it is scanned on, key by key).  The grid is linear over the
bulk of the keys, or logarithmic around their median where heavy tails would
crowd a linear grid's cells (:func:`daskdepth.kernels.routing.log_cell`).  A
grid only chooses where the search starts: leaves are the same whichever grid
is used.  :func:`build_guide` picks the smallest grid whose cells hold few
enough keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..kernels.routing import PAD, cell_stats, guide_table

#: Guide grid cells per key (of the direction with the most keys), within
#: :data:`GUIDE_MIN` and :data:`GUIDE_MAX`: fewer leave several keys per cell on
#: clustered data, and the search runs longer.
GUIDE_PER_KEY = 4
#: Smaller grids tried first, kept when no cell holds more than
#: :data:`GUIDE_CELL_KEYS` keys (evenly spread keys: the same speed for a half or
#: a quarter of the table's memory, which matters for large summaries).
GUIDE_TRY_PER_KEY = (1, 2)
#: Cells per key of the grid tried last, when :data:`GUIDE_PER_KEY` still sends more
#: than :data:`GUIDE_SCAN_SHARE` of the lookups past the vector compare: clustered
#: keys, as on Http (6 % of the lookups at four cells per key on the fitted summary,
#: 0.9 % at eight); kept when it scans at most half as much (twice the table's memory
#: does not pay for a cluster that stays in one cell at any size).  Fitted blocks only
#: (:func:`build_guide`'s ``scored``).  Measured on Http's fitted blocks (same leaves,
#: one process, alternated): scoring 1.3x faster, for twice the guide table's memory
#: (2 bytes per cell; Http's summary 35.5 -> 49.8 MiB).
GUIDE_CLUSTERED_PER_KEY = 8
#: Keys a guide cell may hold for the routing search to stay short: it compares
#: the first :data:`~daskdepth.kernels.routing.CELL_WINDOW` at once and scans on
#: past them only in the cells that hold more (:func:`daskdepth.kernels.routing.route_values`).
GUIDE_CELL_KEYS = 7
#: Share of lookups that may land past the first ``CELL_WINDOW - 1`` keys of their
#: cell (:func:`scan_share`), where the routing search's vector compare of four
#: keys is followed by a scan key by key (a mispredicted branch and a dependent
#: load): a smaller grid with more is not kept.  On Gaussian rows one cell per
#: key gives 10 % at ``tol = 1e-3`` (630 keys per direction, whose grid spans
#: the extreme keys), 0.2-0.3 % at ``5e-4`` to ``1e-4`` and 0.9 % on a fit's pilot
#: leaves (13,000 keys); at ``1e-3`` two cells per key gave none, and counting
#: and scoring 1.07-1.17x faster (``d = 3, 10, 40``, docs/performance.md).
GUIDE_SCAN_SHARE = 0.02


#: Fewest and most cells of a grid.
GUIDE_MIN = 256
GUIDE_MAX = 1 << 18
#: The guide grid spans the keys between these ranks (as fractions), widened by
#: :data:`GUIDE_MARGIN` of that span on each side; keys outside share the two end cells.
GUIDE_QUANTILE = 0.001
GUIDE_MARGIN = 0.05
#: Above this many keys scanned per lookup (expected, for a point distributed
#: like the keys) a direction's linear guide grid is replaced by a logarithmic one
#: (:func:`daskdepth.kernels.routing.log_cell`) where that scans fewer.  A linear
#: grid on Gaussian-like keys scans one or two; heavy tails (``sign(c) |c|^4``,
#: ``c`` Cauchy) put thousands of keys in one cell.
GUIDE_SCAN_MAX = 8.0
#: The logarithmic grid is linear over the central ``GUIDE_LOG_CORE`` of the keys
#: (by rank) and geometric beyond, so that the bulk of the keys spans several
#: octaves of cells even when their density is singular at the centre.
GUIDE_LOG_CORE = 1 / 64


class Guide(NamedTuple):
    """A block's guide grid: cells ``g``, per-direction parameters and the table."""

    g: int
    lo: np.ndarray
    scale: np.ndarray
    log: np.ndarray
    table: np.ndarray


def build_guide(cptr: np.ndarray, kptr: np.ndarray, keys: np.ndarray,
                scored: bool = False) -> Guide:
    """The guide grid of a block's (padded) keys: the smallest that keeps its cells light.

    One or two cells per key (:data:`GUIDE_TRY_PER_KEY`) when that leaves no cell
    with more than :data:`GUIDE_CELL_KEYS` keys and few lookups that scan
    (:func:`light`), otherwise :data:`GUIDE_PER_KEY`.  With ``scored`` (a fitted
    block, which scores every row routed to it), :data:`GUIDE_CLUSTERED_PER_KEY`
    where four cells per key still leave more than :data:`GUIDE_SCAN_SHARE` of
    the lookups scanning and the finer grid at most half as many; pilot and
    refined keys, counted once, keep at most four cells per key, as a wave's
    memory plan assumes (:data:`daskdepth.runtime.memory.BYTES_PER_PILOT_LEAF`).
    """
    for per_key in GUIDE_TRY_PER_KEY:
        guide = guide_grid(cptr, kptr, keys, per_key, tried=True)
        if guide is not None and light(guide.table):
            return guide
    guide = guide_grid(cptr, kptr, keys, GUIDE_PER_KEY)
    assert guide is not None
    share = scan_share(guide.table) if scored else 0.0
    if share > GUIDE_SCAN_SHARE:
        finer = guide_grid(cptr, kptr, keys, GUIDE_CLUSTERED_PER_KEY)
        assert finer is not None
        if finer.g > guide.g and scan_share(finer.table) <= share / 2:  # g may hit GUIDE_MAX
            return finer
    return guide


def scan_share(table: np.ndarray) -> float:
    """Share of lookups whose search scans past its vector compare, for points like the keys.

    A point between two keys lands past the first ``CELL_WINDOW - 1`` keys of
    its cell in ``max(0, n - CELL_WINDOW + 1)`` of a cell's ``n`` key intervals;
    counted over every cell of every direction, as a share of the keys.

    Examples
    --------
    >>> scan_share(np.array([[0, 1, 3, 9, 9]]))  # cells of 1, 2, 6 and 0 keys
    0.3333333333333333
    """
    _, over, total = cell_stats(table)
    return float(over / max(1, total))


def light(table: np.ndarray) -> bool:
    """Whether a tried smaller grid is kept: no cell over :data:`GUIDE_CELL_KEYS` keys, few scans.

    See :data:`GUIDE_CELL_KEYS` and :data:`GUIDE_SCAN_SHARE`.
    """
    most, over, total = cell_stats(table)
    return most <= GUIDE_CELL_KEYS and over / max(1, total) <= GUIDE_SCAN_SHARE


def guide_grid(cptr: np.ndarray, kptr: np.ndarray, keys: np.ndarray,
               per_key: int = GUIDE_PER_KEY, tried: bool = False) -> Guide | None:
    """Guide grid of each direction, from its (padded) keys, and its table.

    ``g``: ``per_key`` cells per key of the direction with the most keys, within limits.
    ``tried``: the grid is only wanted if no cell holds more than
    :data:`GUIDE_CELL_KEYS` keys; None as soon as a direction's cell does and no
    logarithmic grid would replace its linear one (its expected scan is small).

    Linear over the keys between the :data:`GUIDE_QUANTILE` ranks; where that
    leaves more than :data:`GUIDE_SCAN_MAX` keys to scan per lookup (heavy tails,
    far clusters), logarithmic around the median key if that scans fewer.  The
    guide only chooses where the search among the keys starts: leaves are the
    same whichever grid is used.
    """
    nk = np.diff(cptr)
    mb = nk.size
    g = int(min(GUIDE_MAX, max(GUIDE_MIN, per_key * int(nk.max(initial=0)))))
    lo = np.zeros(mb)
    scale = np.ones(mb)
    log = np.zeros((mb, 2))
    table = np.empty((mb, g + 2), dtype=table_dtype(cptr))
    has = np.flatnonzero(nk)
    if has.size:
        first, top = kptr[has], nk[has] - 1
        a = keys[first + np.floor(GUIDE_QUANTILE * top).astype(np.int64)]
        b = keys[first + np.ceil((1 - GUIDE_QUANTILE) * top).astype(np.int64)]
        with np.errstate(over="ignore"):  # keys near +-1e308: an infinite spread, scale 0
            spread = np.where(b > a, b - a, keys[first + top] - keys[first])
            spread = np.where(spread > 0, spread, np.maximum(np.abs(a), 1.0))
            lo[has] = a - GUIDE_MARGIN * spread
            width = (1 + 2 * GUIDE_MARGIN) * spread
            scale[has] = np.where(width > g * 1e-300, g / width, 1e300)
    every = np.ones(mb, dtype=np.bool_)
    cost = guide_table(lo, scale, log, g, kptr, keys, table, every,
                       GUIDE_CELL_KEYS if tried else 0, GUIDE_SCAN_MAX)
    if cost.size < mb:  # a crowded cell that stays: this grid is not kept
        return None
    heavy = np.flatnonzero((cost > GUIDE_SCAN_MAX) & (nk > 0))
    if heavy.size:
        _log_guide(heavy, g, cptr, kptr, keys, lo, scale, log, table, cost)
    return Guide(g, lo, scale, log, table)


def _log_guide(heavy: np.ndarray, g: int, cptr: np.ndarray, kptr: np.ndarray,
               keys: np.ndarray, lo: np.ndarray, scale: np.ndarray, log: np.ndarray,
               table: np.ndarray, cost: np.ndarray) -> None:
    """Switch the ``heavy`` directions to logarithmic grids where they scan fewer keys.

    Centre ``c``: the median key; linear scale ``s``: the half-width of the
    central :data:`GUIDE_LOG_CORE` of the keys; the :data:`GUIDE_QUANTILE` ranks of
    the keys farthest from ``c`` map to the ends of the grid.  Edits in place.
    """
    nk = np.diff(cptr)[heavy]
    first, top = kptr[heavy], nk - 1

    def at(q: float) -> np.ndarray:
        return keys[first + np.round(q * top).astype(np.int64)]

    c = at(0.5)
    core = (at(0.5 + GUIDE_LOG_CORE / 2) - at(0.5 - GUIDE_LOG_CORE / 2)) / 2
    reach = np.maximum(np.abs(at(1 - GUIDE_QUANTILE) - c), np.abs(c - at(GUIDE_QUANTILE)))
    s = np.maximum(np.maximum(core, reach * 1e-15), np.finfo(np.float64).tiny)
    with np.errstate(over="ignore"):
        mant, expo = np.frexp(reach / s + 1.0)
    span = expo - 2 + 2.0 * mant  # log_cell's piecewise-linear log2(1 + reach / s)
    ok = np.isfinite(span) & (span > 0)
    if not ok.any():
        return
    heavy, c, s, span = heavy[ok], c[ok], s[ok], span[ok]
    old_lo, old_log = lo[heavy].copy(), log[heavy].copy()
    old_table = table[heavy].copy()
    lo[heavy] = c
    log[heavy, 0] = 1.0 / s
    log[heavy, 1] = (g / 2) / span
    only = np.zeros(lo.size, dtype=np.bool_)
    only[heavy] = True
    new_cost = guide_table(lo, scale, log, g, kptr, keys, table, only)
    worse = new_cost[heavy] >= cost[heavy]
    if worse.any():  # keep the linear grid where the logarithmic one is no better
        back = heavy[worse]
        lo[back], log[back] = old_lo[worse], old_log[worse]
        table[back] = old_table[worse]


def table_dtype(cptr: np.ndarray) -> type:
    """The guide table's dtype: uint16 when every direction has fewer than 65,536 keys.

    Half the cache footprint of int32.

    Examples
    --------
    >>> table_dtype(np.array([0, 10, 70_000])).__name__
    'int32'
    """
    nk = np.diff(cptr)
    return np.uint16 if cptr[-1] == 0 or nk.max() < 2**16 else np.int32


def check_guide(guide: Guide, cptr: np.ndarray, keys: np.ndarray) -> None:
    """Refuse a guide grid that does not route the (padded) ``keys`` safely and exactly.

    Any grid does, whichever rule chose it, when its parameters are finite
    (a logarithmic grid's scales positive), it has at most :data:`GUIDE_MAX`
    cells and its table is the one :func:`~daskdepth.kernels.routing.guide_table`
    fills from those parameters and the keys: the cells are then monotone,
    and the table never starts a search past a key ``<=`` the point, so the
    leaves are the same as with any other grid.  Grids built by earlier
    rules (models saved by earlier versions) are so accepted, with the same
    scores; a table that does not follow from its parameters is refused.

    Raises
    ------
    ValueError
        Naming what is wrong.
    """
    def refuse(why: str) -> ValueError:
        return ValueError(f"the guide grid (g, g_lo, g_scale, g_log, table) does not match "
                          f"the keys: {why}")

    mb = cptr.size - 1
    g = guide.g
    if not isinstance(g, (int, np.integer)) or isinstance(g, (bool, np.bool_)):
        raise refuse(f"g is a {type(g).__name__}, not an integer")
    if not 1 <= g <= GUIDE_MAX:
        raise refuse(f"g is {g}, outside 1 .. {GUIDE_MAX}")
    for name, value, shape in (("g_lo", guide.lo, (mb,)), ("g_scale", guide.scale, (mb,)),
                               ("g_log", guide.log, (mb, 2))):
        if not (isinstance(value, np.ndarray) and value.dtype == np.float64
                and value.shape == shape and value.flags.c_contiguous):
            raise refuse(f"{name} is not a float64 array of shape {shape}")
        if not np.isfinite(value).all():
            raise refuse(f"{name} holds a value that is not finite")
    logarithmic = guide.log[:, 0] > 0
    if (guide.log[logarithmic, 1] <= 0).any():
        raise refuse("g_log gives a logarithmic grid no positive cells per octave")
    table, dtype = guide.table, table_dtype(cptr)
    if not (isinstance(table, np.ndarray) and table.dtype == dtype
            and table.shape == (mb, g + 2) and table.flags.c_contiguous):
        raise refuse(f"table is not a {np.dtype(dtype).name} array of shape {(mb, g + 2)}")
    want = np.empty_like(table)
    guide_table(guide.lo, guide.scale, guide.log, g, cptr + PAD * np.arange(mb + 1), keys,
                want, np.ones(mb, dtype=np.bool_))
    if not np.array_equal(table, want):
        raise refuse("its table does not count the keys of its cells")
